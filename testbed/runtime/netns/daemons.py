"""One node's FRR daemons (faults, restart, config push) and the configs' startup rejections."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

from railab.errors import UsageError
from railab.testbed import state as st
from railab.testbed import vty
from railab.testbed.clabfile import ClabFile, load_clab
from railab.testbed.runtime.netns.frrmem import daemon_env
from railab.testbed.runtime.netns.procs import _alive, _cmdline


class DaemonsMixin:
    """NetnsRuntime's daemons methods (mixed into railab.testbed.runtime.netns.NetnsRuntime)."""

    def startup_problems(self, lab: str) -> list[str]:
        """The lines of the split configs (railab.topologies.frr.split_frr_conf) that ``lab``'s
        daemons refused at start, once each answers on its vty socket (up to 60 s in all, checked
        in parallel; it runs beside the convergence wait, not before it):
        ``"NODE DAEMON: frr.conf line N: MESSAGE: LINE"`` (see _config_rejections).
        RailabError when the lab is not up."""
        record = self.record(lab)
        clab = load_clab(record.clab_file or record.labdir)
        parts: dict[str, dict[str, Path]] = {}
        for n in clab.routers:
            files = {d: st.node_dir(lab, n.name) / f"{d}.conf" for d in n.daemons}
            files = {d: f for d, f in files.items() if f.exists()}
            if files:  # a node pushed with vtysh -f has none: vtysh reported its errors
                parts[n.name] = files
        return self._config_rejections(clab, lab, parts, timeout=60.0)


    @staticmethod
    def _config_rejections(clab: ClabFile, lab: str, parts: dict[str, dict[str, Path]],
                           timeout: float = 10.0) -> list[str]:
        """The lines of the split configs that their daemons refused at start, one text each
        (``"NODE DAEMON: frr.conf line N: MESSAGE: LINE"``; empty: every line was taken).

        A daemon started with ``-f FILE`` reads it in the first event of its main loop and does
        not stop on a refused line: it logs ``<message> on config line N: <line>`` (FRR 8.4
        ``lib/vty.c`` ``vty_read_file``, EC 100663304) and runs without it, and its stderr is
        closed, so nothing else shows it. ``vtysh -C`` before up only parses: it cannot see a
        line a running daemon refuses (e.g. a second ``router bgp`` with another ASN). So once
        each daemon answers on its vty socket (its config is read), its log is read for those
        lines; N is mapped back to the node's frr.conf by the line's text."""
        found: list[str] = []
        pat = re.compile(r"\] (?P<msg>.*?) on config line \d+: (?P<line>.*)$")
        # every daemon at once (288 on the 4096-GPU fabric, each busy converging)
        vty.wait_answering([st.node_dir(lab, n.name) / f"{d}.vty" for n in clab.routers
                            if n.name in parts for d in parts[n.name]], timeout=timeout)
        for n in clab.routers:
            if n.name not in parts:
                continue
            d = st.node_dir(lab, n.name)
            conf_lines = None
            for daemon in parts[n.name]:
                try:
                    log = (d / f"{daemon}.log").read_text(errors="replace")
                except OSError:
                    continue
                for m in filter(None, map(pat.search, log.splitlines())):
                    if conf_lines is None:
                        conf_lines = [x.rstrip() for x in Path(n.frr_conf).read_text().splitlines()]
                    text = m.group("line").rstrip()
                    where = next((f"frr.conf line {i}" for i, x in enumerate(conf_lines, 1) if x == text),
                                 f"{daemon}.conf")
                    found.append(f"{n.name} {daemon}: {where}: {m.group('msg')}: {text.strip()}")
        return found


    # -- one node's daemons (faults, restart) -------------------------------------------------
    def node_daemons(self, lab: str, node: str) -> dict[str, bool]:
        """``{daemon: alive}`` for the FRR daemons ``node`` runs (its recorded start order; empty
        for a server). Alive means the recorded PID exists and names the lab's run directory.
        RailabError when the lab is not up; UsageError when ``node`` is not one of its FRR nodes."""
        r = self._router(lab, node)
        return {d: (d in r.pids and _alive(r.pids[d]) and str(st.lab_dir(lab)) in _cmdline(r.pids[d]))
                for d in r.daemons}

    def _router(self, lab: str, node: str) -> st.RouterState:
        record = self.record(lab)
        r = record.routers.get(node)
        if r is None:
            raise UsageError(f"lab {lab}: {node!r} runs no FRR daemons (FRR nodes: "
                             f"{', '.join(sorted(record.routers)) or 'none'})")
        return r

    def kill_daemons(self, lab: str, node: str, daemons: list[str] | None = None) -> list[str]:
        """SIGKILL ``daemons`` of ``node`` (default all it runs) and wait until they are gone
        (at most 5 s). A killed daemon cleans up nothing: the kernel routes zebra installed stay
        (a dead bgpd's routes are withdrawn by zebra, which sees its client go). Returns the
        daemons that were alive and were killed. UsageError for an unknown node or daemon."""
        r = self._router(lab, node)
        names = list(r.daemons) if daemons is None else list(daemons)
        bad = [d for d in names if d not in r.daemons]
        if bad:
            raise UsageError(f"{node} runs {', '.join(r.daemons)}, not {', '.join(bad)}")
        alive = self.node_daemons(lab, node)
        killed = [d for d in names if alive.get(d)]
        for d in killed:
            try:
                os.kill(r.pids[d], signal.SIGKILL)
            except ProcessLookupError:
                pass
        end = time.monotonic() + 5
        while time.monotonic() < end and any(_alive(r.pids[d]) for d in killed):
            time.sleep(0.01)
        return killed

    def start_daemons(self, lab: str, node: str, daemons: list[str] | None = None) -> list[str]:
        """Start the FRR ``daemons`` of ``node`` that are not running (default: every daemon it
        runs, in its start order), record their PIDs, then push the node's frr.conf with
        ``vtysh -f`` (each daemon takes its part; re-applying to running daemons is harmless).
        Returns the daemons started. RailabError when a daemon or vtysh fails (its last lines)."""
        record = self.record(lab)
        r = self._router(lab, node)
        clab = load_clab(record.clab_file or record.labdir)
        cnode = clab.nodes[node]
        alive = self.node_daemons(lab, node)
        want = list(r.daemons) if daemons is None else [d for d in r.daemons if d in daemons]
        todo = [d for d in want if not alive.get(d)]
        self._children = []
        ns = record.namespaces[node]
        # one UTS namespace per node (hostname = node name), as up makes it: a restarted daemon
        # joins the one its running siblings are in, or the first one started makes a new one
        uts = None
        for d, ok in alive.items():
            if ok and d in r.pids:
                try:
                    uts = os.open(f"/proc/{r.pids[d]}/ns/uts", os.O_RDONLY)
                    break
                except OSError:
                    continue
        env = daemon_env()  # the memory settings up starts the daemons with (frrmem)
        try:
            # zebra first, the others after its zserv socket exists (as in up)
            for daemon in todo:
                pidfile = st.node_dir(lab, node) / f"{daemon}.pid"
                pidfile.unlink(missing_ok=True)
                if daemon == "zebra":
                    (st.node_dir(lab, node) / "zserv.api").unlink(missing_ok=True)
                p, held = self._spawn(self._daemon_argv(lab, node, daemon, cnode.daemon_options.get(daemon)),
                                      ns=ns, uts=uts, hostname=None if uts is not None else node,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, env=env)
                if uts is None:
                    uts = held  # the node's new UTS namespace: the next daemons join it
                elif held is not None:
                    os.close(held)
                self._reap({node: p}, daemon, lab)
                if daemon == "zebra":
                    self._wait_files([st.node_dir(lab, node) / "zserv.api"], "zebra's zserv socket")
                r.pids[daemon] = int(pidfile.read_text().split()[0])
                record.routers[node] = r
                # this node's router entry only: the record may have changed meanwhile
                st.modify(lab, lambda rec, node=node, r=r: rec.routers.__setitem__(node, r))
        finally:
            if uts is not None:
                os.close(uts)
        self.push_config(lab, node)
        return todo

    def push_config(self, lab: str, node: str) -> None:
        """Apply ``node``'s integrated frr.conf again (``vtysh -f``, as ``up`` does).
        RailabError with vtysh's last lines when it fails."""
        r = self._router(lab, node)
        self._children = getattr(self, "_children", [])
        p, _ = self._spawn(["vtysh", "--vty_socket", str(st.node_dir(lab, node)), "-f", r.config],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._reap({node: p}, "vtysh -f frr.conf", lab)

