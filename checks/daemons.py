"""FRR daemons: every switch runs the daemons its node kind lists (lab.json ``node_kinds``).

``vtysh -c 'show daemons'`` names the daemons vtysh reached through their vty sockets; a daemon
the node kind lists but vtysh cannot reach is dead (killed, crashed, node powered off). The row
carries ``Cause(kind="daemon-dead", node, daemon)``, so the bgp and routes rows that fail because
of it group under it (railab.checks.runner.group_failures). Runs over any executor (netns,
Docker, SSH). A dead bfdd is visible only here: BGP stays up and forwarding goes on, but link
failures are detected by the BGP hold timer instead of BFD.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from railab.checks.base import Cause, CheckResult, Observer, failed, passed, register_check, skipped
from railab.errors import RailabError

CHECK = "daemons"
CMD = "show daemons"


def _expected(obs: Observer, node) -> list[str]:
    kind = obs.spec.node_kinds.get(node.kind, {})
    return list(kind.get("daemons") or [])


def check_daemons(obs: Observer) -> list[CheckResult]:
    """One row per switch: the daemons its node kind lists all answer vtysh."""
    nodes = [n for n in obs.spec.nodes if n.role != "server" and _expected(obs, n)]
    if not nodes:
        return [skipped(CHECK, "switches", "no node runs FRR daemons")]
    if obs.executor is None:
        return [skipped(CHECK, f"{n.name} daemons", "no executor to run vtysh", node=n.name) for n in nodes]

    def ask(node: str):
        obs.check_stop()
        try:
            return obs.executor.vtysh(node, CMD, timeout=15)
        except TimeoutError as exc:  # a slow answer is not a dead daemon (a loaded host)
            return LookupError(str(exc))
        except (RailabError, OSError) as exc:
            return exc
        except Exception as exc:  # an executor that cannot run this command at all: skip
            return LookupError(f"the executor cannot run `{CMD}` ({type(exc).__name__}: {exc})")

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = dict(zip([n.name for n in nodes], pool.map(ask, [n.name for n in nodes]), strict=True))
    out: list[CheckResult] = []
    for n in nodes:
        want = _expected(obs, n)
        name = f"{n.name} daemons"
        res = answers[n.name]
        expected = " ".join(want)
        if isinstance(res, LookupError):
            out.append(skipped(CHECK, name, str(res), node=n.name, expected=expected))
            continue
        if isinstance(res, Exception):
            out.append(failed(CHECK, name, node=n.name, expected=expected, observed="vtysh failed",
                              reason=f"cannot run vtysh on {n.name}: {res}",
                              cause=Cause(kind="daemon-dead", node=n.name, daemon=want[0])))
            continue
        running = set(res.stdout.split()) & set(want)
        text = (res.stdout + res.stderr).strip()
        if not res.ok and not running and "failed to connect" not in text and "not running" not in text:
            out.append(skipped(CHECK, name, f"`{CMD}` failed on {n.name}: {text[:200] or res.rc}",
                               node=n.name, expected=expected))
            continue
        dead = [d for d in want if d not in running]
        observed = " ".join(d for d in want if d in running) or "none"
        if not dead:
            out.append(passed(CHECK, name, node=n.name, expected=expected, observed=observed))
            continue
        every = len(dead) == len(want)
        reason = (f"{n.name} runs no FRR daemon at all (powered off or crashed)" if every else
                  f"{', '.join(dead)} not running on {n.name}") + (
            f": bring it back (railab restart {obs.spec.name} {n.name})")
        out.append(failed(CHECK, name, node=n.name, subject=", ".join(dead), expected=expected,
                          observed=observed, reason=reason,
                          cause=Cause(kind="daemon-dead", node=n.name, daemon=dead[0])))
    return out


register_check(CHECK, check_daemons, order=5,
               description="every switch runs the FRR daemons of its node kind (vtysh show daemons)")
