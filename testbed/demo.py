"""The main job end to end: ``railab demo [INTENT]``.

Pipeline (docs/architecture.md), each step timed and shown on screen with rich:

1. plan      production plan of the intent's design (topologies.planner) + the lab scale-down
2. generate  lab directory (topologies.generator)
3. up        netns runtime (testbed.runtime): namespaces, veths, FRR, convergence wait
4. traffic   RoCEv2 flows of every path class with and without PXN, ECMP spread over the
             spines, traceroutes (traffic.engine / traffic.traceroute)
5. checks    every check family (checks.runner)
6. report    report.json, report.xml (JUnit), fabric.svg, report.html (testbed.report)
7. down      unless ``keep``; always on a failed step and on Ctrl-C

``measure(spec, executor)`` (steps 4-5) is shared with ``railab report LAB`` on a running lab.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from rich.console import Console
from rich.table import Table

from testbed.executor import Executor
from testbed.report import (
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
from testbed.runtime.base import RailabError
from topologies.labspec import LabSpec

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

    def __init__(self, console: Console) -> None:
        self.console = console
        self.timings: list[StepTiming] = []

    @contextmanager
    def step(self, name: str, what: str) -> Iterator[StepTiming]:
        i = STEPS.index(name) + 1 if name in STEPS else 0
        self.console.rule(f"[bold cyan][{i}/{len(STEPS)}] {name}[/]: {what}", align="left")
        t = StepTiming(step=name, seconds=0.0)
        t0 = time.monotonic()
        try:
            yield t
        except BaseException as exc:
            t.ok = False
            t.detail = t.detail or (str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            raise
        finally:
            t.seconds = round(time.monotonic() - t0, 3)
            self.timings.append(t)
            mark = "[green]done[/]" if t.ok else "[red]failed[/]"
            extra = f" ({t.detail})" if t.detail else ""
            self.console.print(f"  {mark} {name} in {t.seconds:.1f} s{extra}", highlight=False)


# ---- plan --------------------------------------------------------------------------------------
def production_plan(intent: Any) -> Any:
    """The planner's ``Plan`` for ``intent.design`` (topologies.planner); raises PlanError."""
    from topologies import planner

    d = intent.design
    return planner.plan(
        planner.Design(
            architecture=d.architecture,
            gpus=d.gpus,
            gpus_per_server=d.gpus_per_server,
            leaf=d.leaf,
            spine=d.spine,
            port_speed_gbps=d.port_speed_gbps,
            oversubscription=d.oversubscription,
        )
    )


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
def measure_traffic(spec: LabSpec, executor: Executor, console: Console
                    ) -> tuple[list[PathResult], list[EcmpSpread], list[Trace]]:
    """Run every path class (with and without PXN), the ECMP spread and traceroutes.

    Calls the traffic engine (traffic.engine, traffic.traceroute); see docs/traffic.md.
    """
    from traffic import engine  # noqa: F401  (raises ImportError until the engine lands)

    raise NotImplementedError("traffic engine adapter pending")


def run_all_checks(spec: LabSpec, executor: Executor, console: Console) -> list[CheckItem]:
    """Every check family (checks.runner.run_checks) as report rows."""
    from checks.runner import run_checks

    t0 = time.monotonic()
    with console.status("running checks ..."):
        results = run_checks(spec, executor)
    per = (time.monotonic() - t0) / max(1, len(results))
    return [CheckItem.from_result(r, duration_s=round(per, 4)) for r in results]


def measure(spec: LabSpec, executor: Executor, console: Console, steps: _Steps | None = None,
            *, intent: str | None = None, plan: Any = None, runtime: str = "netns") -> Report:
    """Steps 4-5 on a running lab: traffic then checks, gathered into a ``Report``.

    A step that raises is recorded in ``Report.errors`` (the report still gets written).
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
            bad = [c for c in rep.checks if not c.ok]
            t.detail = f"{len(rep.checks) - len(bad)}/{len(rep.checks)} passed"
            _show_checks(console, rep)
    except (RailabError, RuntimeError, OSError, ValueError, ImportError) as exc:
        rep.errors.append(f"checks: {exc}")
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
        hops = " -> ".join(h.node or h.address or "*" for h in tr.hops)
        console.print(f"  traceroute {tr.src} -> {tr.dst} ({tr.path_class}): {hops}",
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
    console: Console | None = None,
) -> DemoResult:
    """Run the whole pipeline on ``intent_name`` (a shipped intent or a YAML path).

    ``out``: directory for the lab (``<out>/lab``) and the report (``<out>/report``); default
    ``./railab-<lab name>``. ``name`` overrides the lab name (tests use unique names). ``keep``
    leaves the lab running after the report (it is still removed when a step fails before the
    report or on Ctrl-C). Returns a DemoResult with exit code 0 only when every flow, spread and
    check passed. Raises RailabError / IntentError / PlanError for bad input (nothing is left
    running); KeyboardInterrupt after taking the lab down.
    """
    from topologies.generator import generate
    from topologies.intent import load_intent
    from testbed.cli.plan import _show_plan
    from testbed.runtime import get_runtime

    con = console or Console()
    steps = _Steps(con)
    t_start = time.monotonic()

    with steps.step("plan", "production plan and lab scale-down") as t:
        intent = load_intent(intent_name)
        lab_name = name or intent.name
        plan = production_plan(intent)
        _show_plan(con, plan)
        t.detail = f"{plan.gpus:,} GPUs, {plan.leaf_switches} leaves, {plan.spine_switches} spines"

    outdir = Path(out) if out else Path.cwd() / f"railab-{lab_name}"
    with steps.step("generate", f"lab directory {outdir / 'lab'}") as t:
        labdir = generate(intent, outdir / "lab", name=lab_name)
        spec = LabSpec.load(labdir)
        show_scale_down(con, plan, spec)
        t.detail = (f"{len(spec.by_role('spine'))} spines, {len(spec.by_role('leaf'))} leaves, "
                    f"{len(spec.by_role('server'))} servers, {len(spec.links)} links")

    rt = get_runtime(runtime)
    report: Report | None = None
    files: ReportFiles | None = None
    up_done = False
    completed = False
    try:
        with steps.step("up", f"{runtime} runtime, FRR, convergence") as t:
            rt.up(labdir, progress=True)
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


def _summary(con: Console, report: Report, files: ReportFiles, total: float) -> None:
    con.rule("[bold]summary[/]", align="left")
    for line in report.failures():
        con.print(f"  [red]FAIL[/] {line}", highlight=False)
    verdict = "[bold green]PASS[/]" if report.passed else "[bold red]FAIL[/]"
    ok_checks = sum(1 for c in report.checks if c.ok)
    ok_paths = sum(1 for p in report.paths if p.ok)
    con.print(
        f"{verdict} {report.lab.name}: {ok_paths}/{len(report.paths)} flows as designed, "
        f"{ok_checks}/{len(report.checks)} checks passed, {total:.1f} s total",
        highlight=False,
    )
    con.print(f"  report: {files.html}\n  JSON:   {files.json_path}\n  JUnit:  {files.junit}\n"
              f"  fabric: {files.diagram}", highlight=False)
