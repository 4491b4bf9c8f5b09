"""The main job end to end: ``railab demo [INTENT]``.

Pipeline (docs/architecture.md), each step timed and shown on screen with rich:

1. plan      production plan of the intent's design (topologies.planner) + the lab scale-down
2. generate  lab directory (topologies.generator)
3. up        netns runtime (testbed.runtime): namespaces, veths, FRR; convergence wait
             (checks.deploy.bring_up)
4. traffic   RoCEv2 flows of every path class with and without PXN, ECMP spread over the
             spines, traceroutes (traffic.engine / traffic.traceroute)
5. checks    every check family (checks.runner)
6. report    report.json, report.xml (JUnit), fabric.svg, report.html (railab.report)
7. down      unless ``keep``; always on a failed step and on Ctrl-C

``measure(spec, executor)`` (steps 4-5) is shared with ``railab report LAB`` on a running lab.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from railab.checks.controlplane import observe_control_plane, summary_only
from railab.checks.deploy import bring_up
from railab.checks.runner import run_checks
from railab.errors import RailabError
from railab.planview import show_plan
from railab.progress import ConvergeBar
from railab.report import (
    CheckItem,
    EcmpSpread,
    LabSummary,
    PathResult,
    Report,
    ReportFiles,
    StepTiming,
    Trace,
    TraceHop,
    write_report,
)
from railab.testbed.executor import Executor
from railab.testbed.runtime.deploy import get_deployer
from railab.topologies import planner
from railab.topologies.generator import generate
from railab.topologies.intent import load_intent
from railab.topologies.labspec import LabSpec
from railab.topologies.pathclasses import path_classes
from railab.traffic.engine import Engine, spread
from railab.traffic.patterns import Flow, PatternError, flows_for, report_class, route
from railab.traffic.traceroute import switch_path, trace, unreachable_text

DEFAULT_INTENT = "rail-optimized-1024"
STEPS = ("plan", "generate", "up", "traffic", "checks", "report", "down")


@dataclass
class DemoResult:
    """Outcome of ``run_demo``: the report (None if the pipeline stopped before it), the files
    written, the lab directory and the process exit code (0 = every check passed)."""

    report: Report | None
    files: ReportFiles | None
    labdir: Path | None
    exit_code: int
    timings: list[StepTiming] = field(default_factory=list)


class _Steps:
    """Step headers and timings on a rich console."""

    def __init__(self, console: Console, steps: tuple[str, ...] = STEPS) -> None:
        self.console = console
        self.steps = steps
        self.timings: list[StepTiming] = []

    @contextmanager
    def step(self, name: str, what: str) -> Iterator[StepTiming]:
        i = self.steps.index(name) + 1 if name in self.steps else 0
        self.console.rule(f"[bold cyan][{i}/{len(self.steps)}] {name}[/]: {what}", align="left")
        t = StepTiming(step=name, seconds=0.0)
        t0 = time.monotonic()
        interrupted = False
        try:
            yield t
        except KeyboardInterrupt:  # Ctrl-C (and SIGTERM/SIGHUP, which the runtime maps to it)
            interrupted = True
            t.ok = False
            t.detail = "interrupted"
            raise
        except BaseException as exc:
            t.ok = False
            t.detail = t.detail or (str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            raise
        finally:
            t.seconds = round(time.monotonic() - t0, 3)
            self.timings.append(t)
            mark = ("[yellow]interrupted[/]" if interrupted else
                    "[green]done[/]" if t.ok else "[red]failed[/]")
            # A failure's message is printed once, by the caller (CLI `error:` line or summary).
            extra = f" ({t.detail})" if t.detail and t.ok else ""
            self.console.print(f"  {mark} {name} in {t.seconds:.1f} s{extra}", highlight=False)


# ---- plan --------------------------------------------------------------------------------------
DESIGN_KEYS = ("architecture", "gpus", "gpus_per_server", "leaf", "spine", "port_speed_gbps",
               "oversubscription")


def production_plan(intent: Any) -> Any:
    """The planner's ``Plan`` for ``intent.design`` (topologies.planner); raises PlanError."""
    d = intent.design
    return planner.plan(planner.Design(**{k: getattr(d, k) for k in DESIGN_KEYS}))


def plan_from_spec(spec: LabSpec) -> Any:
    """The production ``Plan`` from the ``design`` section of lab.json, or None when the
    section lacks the planner inputs or the planner rejects them (a hand-written lab.json)."""
    d = spec.design
    if not all(k in d for k in ("architecture", "gpus", "leaf")):
        return None
    try:
        return planner.plan(planner.Design(**{k: d[k] for k in DESIGN_KEYS if k in d}))
    except ValueError:
        return None


def show_scale_down(console: Console, plan: Any, spec: LabSpec) -> None:
    """Print production vs lab for the counts that shape every path (rails, groups, spines)."""
    t = Table(title="Lab scale-down", title_justify="left")
    t.add_column("")
    t.add_column("production", justify="right")
    t.add_column("lab", justify="right")
    lab = LabSummary.from_spec(spec)
    rows = [
        ("GPUs", plan.gpus, lab.servers * lab.gpus_per_server),
        ("servers", plan.servers, lab.servers),
        ("groups", plan.groups, lab.groups),
        ("rails", plan.rails, lab.rails),
        ("servers per group", plan.servers_per_group, lab.servers_per_group),
        ("leaf switches", plan.leaf_switches, lab.leaves),
        ("spine switches", plan.spine_switches, lab.spines),
        ("links per leaf-spine pair", plan.links_per_leaf_spine_pair if plan.spine_switches else "-",
         lab.links_per_leaf_spine_pair if lab.spines else "-"),
        ("server-leaf + leaf-spine links", plan.total_links, lab.links),
    ]
    for name, prod, labv in rows:
        t.add_row(name, f"{prod:,}" if isinstance(prod, int) else str(prod),
                  f"{labv:,}" if isinstance(labv, int) else str(labv))
    console.print(t)
    hops = Table(title="Expected switch hops in the lab (lab.json)", title_justify="left")
    hops.add_column("path class")
    hops.add_column("hops", justify="right")
    for cls, h in spec.expected_hops.items():
        hops.add_row(cls, "unreachable, as designed" if h is None else str(h))
    console.print(hops)


# ---- traffic + checks --------------------------------------------------------------------------
def _gpu(ep: tuple[str, int]) -> str:
    return f"{ep[0]}:gpu{ep[1]}"


def _report_class(spec: LabSpec, flow: Any) -> str:
    """Path class for the report (:func:`railab.traffic.patterns.report_class`)."""
    return report_class(spec, flow)


def _drawn_path(flow: Any, switches: list[str], reached: bool = True) -> list[str]:
    """Hops to draw: the source GPU's NIC, for PXN the NVLink hop to the NIC that sends, the
    switches (``node`` or ``node:port``), and the destination NIC when ``reached``."""
    src, dst = flow.src[0], flow.dst[0]
    out = [f"{src}:eth{flow.src[1] + 1}"]
    if flow.path_class == "intra-server":
        return out + [f"{dst}:eth{flow.dst[1] + 1}"]
    if flow.nvlink and flow.src_nic != flow.src[1] + 1:
        out.append(f"{src}:eth{flow.src_nic}")
    out += [n.split(":")[0] for n in switches]
    if reached:
        out.append(f"{dst}:eth{flow.dst_nic}")
    return out


def _path_result(spec: LabSpec, r: Any) -> PathResult:
    f = r.flow
    detail = "" if r.ok and f.expected_hops is not None else r.verdict
    if r.ok and f.expected_hops is None:
        detail = "unreachable, as designed" + (f" ({r.unreachable_at} has no route)"
                                               if r.unreachable_at else "")
    return PathResult(
        path_class=_report_class(spec, f),
        pxn=f.pxn,
        src=_gpu(f.src),
        dst=_gpu(f.dst),
        expected_hops=f.expected_hops,
        observed_hops=r.observed_hops,
        sent=r.sent,
        received=r.delivered,
        ok=r.ok,
        detail=detail,
        path=_drawn_path(f, r.path) if r.delivered else [],
    )


# Messages per measured flow (4 KiB each at RoCE MTU 1024 = 4 packets): 64 packets per flow.
# The engine attributes a switch to a flow when a port's counters move by half the flow's
# packets; BFD (300 ms) and BGP keepalives also move them, so a longer flow keeps that background
# far below the threshold even when a loaded machine stretches the measuring window.
MEASURE_MESSAGES = 16


def traffic_flows(spec: LabSpec) -> list[Any]:
    """Flows of every path class the lab holds (railab.topologies.pathclasses, in registry order):
    for each registered class that ``lab.json`` lists and that names a ``pattern``, that
    pattern's flows (with the class's ``pxn``; railab.traffic.patterns).

    Shipped: intra-server, intra-rail, inter-rail (no PXN), inter-rail with PXN, and cross-group
    when the lab has two groups (a class the lab cannot hold, such as intra-server and
    inter-rail with one GPU per server, is left out), each covering every server NIC (servers paired per rail,
    railab.traffic.patterns.flows_for). PXN changes nothing for intra-server, intra-rail or cross-group flows
    between same-numbered GPUs, so those run once. A class refining another one (e.g.
    inter-rail-same-leaf) shows up through its parent's flows (``report_class``).
    """
    kw = {"messages": MEASURE_MESSAGES}
    flows = []
    for pc in path_classes().values():
        if pc.pattern is not None and pc.name in spec.expected_hops:
            try:
                flows += flows_for(spec, pc.pattern, pxn=pc.pxn, **kw)
            except PatternError:  # a class this lab cannot hold (intra-server with 1 GPU per server)
                continue
    return flows


def ecmp_flows(spec: LabSpec) -> list[tuple[str, list[Any]]]:
    """For each spine-crossing class (inter-rail no PXN, cross-group): ``n`` flows between one
    GPU pair that differ only in QP, hence UDP source port (RoCEv2 entropy, IBTA Annex A17),
    ``n = max(32, 16 x spines)`` so an even hash leaves no spine empty by chance
    (P < 1e-6 for 8 spines)."""
    spines = len(spec.by_role("spine"))
    if not spines:
        return []
    n = max(32, 16 * spines)
    servers = [s.name for s in spec.by_role("server")]
    g1 = [s.name for s in spec.by_role("server") if s.group == 1]
    pairs = []
    if len(g1) >= 2 and spec.gpus_per_server >= 2:
        pairs.append(("inter-rail", (g1[0], 0), (g1[1], 1)))
    g2 = [s for s in spec.by_role("server") if s.group == 2]
    if g2:
        pairs.append(("cross-group", (servers[0], 0), (g2[0].name, 0)))
    return [(cls, [route(spec, Flow(src, dst, qp=q, messages=MEASURE_MESSAGES)) for q in range(n)])
            for cls, src, dst in pairs]


def trace_flows(spec: LabSpec) -> list[Any]:
    """Flows to traceroute: inter-rail without and with PXN, and cross-group if present."""
    g1 = [s.name for s in spec.by_role("server") if s.group == 1]
    g2 = [s.name for s in spec.by_role("server") if s.group == 2]
    out = []
    if len(g1) >= 2 and spec.gpus_per_server >= 2:
        last = spec.gpus_per_server - 1  # on Rail-only this pair sits on different leaves
        out.append(route(spec, Flow((g1[0], 0), (g1[1], last))))
        out.append(route(spec, Flow((g1[0], 0), (g1[1], last), pxn=True)))
    if g2:
        out.append(route(spec, Flow((g1[0], 0), (g2[0], 0))))
    return out


def traceroute(engine: Any, spec: LabSpec, flow: Any) -> Trace:
    """RoCE traceroute of ``flow`` (traffic.traceroute.trace): the hop list, and the node path
    to draw (as far as it went when the destination did not answer)."""
    raw = trace(engine, flow)
    hops = [TraceHop(ttl=h.ttl, address=h.address, node=h.node, rtt_ms=h.rtt_ms, kind=h.kind,
                     code=h.code)
            for h in raw]
    switches = switch_path(raw)
    last = raw[-1] if raw else None
    outcome = ""
    if flow.path_class == "intra-server" or (last is not None and last.kind == "destination"):
        path = _drawn_path(flow, switches, reached=True)
    else:
        if last is not None and last.kind == "unreachable" and last.node:
            switches.append(last.node)
            outcome = f"unreachable at {last.node}"
        else:
            outcome = "no answer"
        if flow.expected_hops is None:
            outcome += ", as designed"
        # Drawn as far as it went: source NIC (and NVLink hop), the switches that answered.
        path = _drawn_path(flow, switches, reached=False) if switches else []
    return Trace(path_class=_report_class(spec, flow), src=_gpu(flow.src), dst=_gpu(flow.dst),
                 hops=hops, path=path, outcome=outcome)


def measure_traffic(spec: LabSpec, executor: Executor, console: Console
                    ) -> tuple[list[PathResult], list[EcmpSpread], list[Trace]]:
    """Run every path class (with and without PXN), the ECMP spread and traceroutes on a
    running lab through the traffic engine (traffic.engine.Engine, docs/traffic.md).

    Path-class flows run with ``measure=True``: one at a time with switch port counters, so the
    hop count is checked twice (received TTL and counters) and the exact path is known.
    Raises RailabError when a namespace or NIC is missing (lab not fully up).
    """
    flows = traffic_flows(spec)
    ecmp_sets = ecmp_flows(spec)
    traces_for = trace_flows(spec)
    paths: list[PathResult] = []
    spreads: list[EcmpSpread] = []
    traces: list[Trace] = []
    with Engine(spec) as eng:
        with console.status(f"{len(flows)} RoCEv2 flows, one at a time with port counters ..."):
            paths = [_path_result(spec, r) for r in eng.run(flows, measure=True, timeout=0.3)]
        for _cls, fl in ecmp_sets:
            with console.status(f"ECMP: {len(fl)} flows {_gpu(fl[0].src)} -> {_gpu(fl[0].dst)}"):
                res = eng.run(fl, measure=True, timeout=0.3)
            st = spread(spec, res)
            per = dict(sorted(st.per_spine.items()))
            empty = [k for k, v in per.items() if v == 0]
            bad = [r for r in res if not r.ok]
            detail = f"max/mean {st.imbalance(per):.2f}"
            if empty:
                detail += f"; no flow on {', '.join(empty)}"
            if bad:
                detail += f"; {len(bad)} flows failed ({bad[0].verdict})"
            spreads.append(EcmpSpread(src=_gpu(fl[0].src), dst=_gpu(fl[0].dst), flows=len(fl),
                                      per_spine=per, ok=not empty and not bad, detail=detail))
        with console.status("traceroute ..."):
            traces = [traceroute(eng, spec, f) for f in traces_for]
    return paths, spreads, traces


def run_all_checks(spec: LabSpec, executor: Executor, console: Console) -> list[CheckItem]:
    """Every check family (checks.runner.run_checks) as report rows; while a training exercise
    runs on the lab, at its check detail (railab.checks.exercise.disclose: no repair command)."""
    from railab.checks.exercise import disclose

    t0 = time.monotonic()
    with console.status("running checks ..."):
        results = disclose(spec.name, run_checks(spec, executor))
    per = (time.monotonic() - t0) / max(1, len(results))
    return [CheckItem.from_result(r, duration_s=round(per, 4)) for r in results]


def measure(spec: LabSpec, executor: Executor, console: Console, steps: _Steps | None = None,
            *, intent: str | None = None, plan: Any = None, runtime: str = "netns") -> Report:
    """Steps 4-5 on a running lab: traffic then checks, gathered into a ``Report``, with the
    control plane per role (railab.checks.controlplane, ~0.1 s on the 1024-GPU full fabric).

    A step that raises is recorded in ``Report.errors`` (the report still gets written); a
    control plane that cannot be read is ``{"error": ...}`` in ``Report.control_plane``.
    """
    steps = steps or _Steps(console)
    rep = Report(
        intent=intent,
        runtime=runtime,
        lab=LabSummary.from_spec(spec),
        design=dict(spec.design),
        plan=plan.model_dump(mode="json") if plan is not None else None,
    )
    try:
        with steps.step("traffic", "RoCEv2 flows of every path class, ECMP spread, traceroute") as t:
            rep.paths, rep.ecmp, rep.traces = measure_traffic(spec, executor, console)
            bad = sum(1 for p in rep.paths if not p.ok)
            t.detail = f"{len(rep.paths)} flows, {bad} unexpected"
            _show_paths(console, rep)
    except (RailabError, RuntimeError, OSError, ValueError, ImportError) as exc:
        rep.errors.append(f"traffic: {exc}")
    try:
        with steps.step("checks", "cabling, BGP, routes, oversubscription, hops") as t:
            rep.checks = run_all_checks(spec, executor, console)
            n = {k: sum(1 for c in rep.checks if c.status == k) for k in ("pass", "fail", "skip")}
            t.detail = f"{n['pass']} passed, {n['fail']} failed, {n['skip']} skipped"
            _show_checks(console, rep)
    except (RailabError, RuntimeError, OSError, ValueError, ImportError) as exc:
        rep.errors.append(f"checks: {exc}")
    try:  # per role only: names no router, so a running exercise's faults stay hidden
        rep.control_plane = summary_only(observe_control_plane(spec, executor=executor))
    except (RailabError, RuntimeError, OSError, ValueError) as exc:
        rep.control_plane = {"error": f"control plane not read: {exc}"}
    return rep


def _show_paths(console: Console, rep: Report) -> None:
    t = Table(title="Path classes", title_justify="left")
    for col in ("path class", "flows", "expected hops", "observed hops", "result"):
        t.add_column(col, justify="left" if col in ("path class", "result") else "right")
    by: dict[str, list[PathResult]] = {}
    for p in rep.paths:
        by.setdefault(p.path_class, []).append(p)
    for cls, flows in by.items():
        obs = sorted({_h(p.observed_hops) for p in flows})
        ok = all(p.ok for p in flows)
        exp = _h(flows[0].expected_hops)
        t.add_row(cls, str(len(flows)), exp + (", as designed" if exp == "unreachable" else ""),
                  ", ".join(obs), "[green]ok[/]" if ok else "[red]MISMATCH[/]")
    console.print(t)
    for e in rep.ecmp:
        spread = ", ".join(f"{k} {v}" for k, v in sorted(e.per_spine.items()))
        console.print(f"  ECMP {e.src} -> {e.dst}: {e.flows} flows over "
                      f"{e.spines_used}/{len(e.per_spine)} spines ({spread})", highlight=False)
    for tr in rep.traces:
        hops = " -> ".join(unreachable_text(h.node or h.address, h.code)
                           if h.kind == "unreachable" else (h.node or h.address or "*")
                           for h in tr.hops)
        outcome = tr.outcome
        if tr.hops and tr.hops[-1].kind == "unreachable":  # the hop text already says where
            outcome = "as designed" if outcome.endswith("as designed") else ""
        note = f" ({outcome})" if outcome else ""
        console.print(f"  traceroute {tr.src} -> {tr.dst} ({tr.path_class}): {hops}{note}",
                      highlight=False)


def _show_checks(console: Console, rep: Report) -> None:
    fams: dict[str, list[int]] = {}
    for c in rep.checks:
        f = fams.setdefault(c.check, [0, 0, 0])
        f[0 if c.status == "pass" else 2 if c.status == "skip" else 1] += 1
    t = Table(title="Checks", title_justify="left")
    for col in ("check", "pass", "fail", "skip"):
        t.add_column(col, justify="left" if col == "check" else "right")
    for name, (p, f, s) in fams.items():
        t.add_row(name, str(p), f"[red]{f}[/]" if f else "0", str(s))
    console.print(t)
    for c in rep.checks:
        if not c.ok:
            console.print(f"  [red]fail[/] {c.check} {c.name}: {c.message}", highlight=False)


def _h(h: int | None) -> str:
    return "unreachable" if h is None else str(h)


# ---- the pipeline ------------------------------------------------------------------------------
def run_demo(
    intent_name: str = DEFAULT_INTENT,
    *,
    out: str | Path | None = None,
    keep: bool = False,
    name: str | None = None,
    runtime: str = "netns",
    timeout: float | None = None,
    console: Console | None = None,
) -> DemoResult:
    """Run the whole pipeline on ``intent_name`` (a shipped intent or a YAML path).

    ``out``: directory for the lab (``<out>/lab``) and the report (``<out>/report``); default
    ``./railab-<lab name>``. ``name`` overrides the lab name (tests use unique names). ``keep``
    leaves the lab running after the report (it is still removed when a step fails before the
    report or on Ctrl-C). ``timeout``: convergence budget of ``up`` in seconds (None: the
    runtime's default, which scales with the lab). Returns a DemoResult with exit code 0 only
    when every flow, spread and check passed. Raises RailabError / IntentError / PlanError for
    bad input (nothing is left running); KeyboardInterrupt after taking the lab down.
    """
    con = console or Console()
    steps = _Steps(con)
    t_start = time.monotonic()

    with steps.step("plan", "production plan and lab scale-down") as t:
        intent = load_intent(intent_name)
        lab_name = name or intent.name
        plan = production_plan(intent)
        show_plan(con, plan)
        t.detail = f"{plan.gpus:,} GPUs, {plan.leaf_switches} leaves, {plan.spine_switches} spines"

    outdir = Path(out) if out else Path.cwd() / f"railab-{lab_name}"
    with steps.step("generate", f"lab directory {outdir / 'lab'}") as t:
        labdir = generate(intent, outdir / "lab", name=lab_name)
        spec = LabSpec.load(labdir)
        show_scale_down(con, plan, spec)
        t.detail = (f"{len(spec.by_role('spine'))} spines, {len(spec.by_role('leaf'))} leaves, "
                    f"{len(spec.by_role('server'))} servers, {len(spec.links)} links")

    rt = get_deployer(runtime)
    report: Report | None = None
    files: ReportFiles | None = None
    up_done = False
    completed = False
    try:
        with steps.step("up", f"{runtime} runtime, FRR, convergence") as t:
            with ConvergeBar(con) as bar:
                bring_up(rt, labdir, timeout=timeout, on_progress=bar)
            up_done = True
            t.detail = f"lab {lab_name} converged"
        report = measure(spec, rt.executor(lab_name), con, steps, intent=intent.name, plan=plan,
                         runtime=runtime)
        with steps.step("report", f"{outdir / 'report'}") as t:
            report.timings = list(steps.timings)
            files = write_report(report, spec, outdir / "report")
            t.detail = str(files.html)
        completed = True
    finally:
        if up_done and (not keep or not completed):
            with steps.step("down", f"remove lab {lab_name}"):
                rt.down(lab_name)
        elif up_done:
            con.print(f"[yellow]--keep[/]: lab {lab_name} is still up; `railab down {lab_name}` "
                      "removes it", highlight=False)

    # Final timings include the report and down steps: rewrite the JSON/JUnit/HTML with them.
    report.timings = list(steps.timings)
    files = write_report(report, spec, outdir / "report")
    total = time.monotonic() - t_start
    _summary(con, report, files, total)
    return DemoResult(report=report, files=files, labdir=labdir,
                      exit_code=0 if report.passed else 1, timings=report.timings)


def print_failures(con: Console, report: Report, limit: int = 12) -> None:
    """The first ``limit`` failure lines, failed checks grouped under their root causes as the
    HTML report groups them (:meth:`Report.failure_lines`: one line per root cause with how
    many failures follow from it), then how many more lines the report lists."""
    lines = report.failure_lines()
    for line in lines[:limit]:
        con.print(f"  [red]FAIL[/] {line}", highlight=False, soft_wrap=True)
    if len(lines) > limit:
        con.print(f"  ... and {len(lines) - limit} more (all in the report)", highlight=False)


def _summary(con: Console, report: Report, files: ReportFiles, total: float) -> None:
    con.rule("[bold]summary[/]", align="left")
    print_failures(con, report)
    verdict = "[bold green]PASS[/]" if report.passed else "[bold red]FAIL[/]"
    ok_paths = sum(1 for p in report.paths if p.ok)
    con.print(
        f"{verdict} {report.lab.name}: {ok_paths}/{len(report.paths)} flows as designed, "
        f"checks {report.checks_text()} (of {len(report.checks)}), {total:.1f} s total",
        highlight=False,
    )
    con.print(f"  report: {files.html}\n  JSON:   {files.json_path}\n  JUnit:  {files.junit}\n"
              f"  fabric: {files.diagram}", highlight=False)
