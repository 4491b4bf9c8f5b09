"""`railab demo`, `railab report` and `railab graph` (registered by railab.cli)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from railab.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, RailabError, report_interrupted
from railab.testbed import state as st


def _resolve_lab(lab: str) -> tuple[Path, str, bool]:
    """``LAB`` (a lab directory / lab.json path, or a running lab's name) -> (lab directory, lab
    name, running?) via railab.testbed.labref.resolve. Raises RailabError saying what to pass."""
    from railab.testbed.labref import resolve

    ref = resolve(lab)
    ref.spec()  # RailabError when there is no lab directory / lab.json
    return ref.labdir, ref.name, ref.running


def register(app: typer.Typer) -> None:
    """Attach ``demo``, ``report`` and ``graph`` to ``app``."""

    @app.command("demo")
    def demo_cmd(
        intent: str = typer.Argument(
            "rail-optimized-1024",
            help="shipped intent name (mini, rail-only-512, rail-optimized-1024, ...) or a YAML path",
        ),
        keep: bool = typer.Option(False, "--keep", help="leave the lab running after the report"),
        out: Path | None = typer.Option(
            None, "--out", "-o", help="directory for lab/ and report/ (default ./railab-<lab>)"
        ),
        name: str | None = typer.Option(None, "--name", help="lab name (default: the intent's)"),
        timeout: float | None = typer.Option(
            None, "--timeout", help="convergence budget in s (default scales with the lab)"
        ),
    ) -> None:
        """Plan -> generate -> up -> traffic -> checks -> report -> down, on a real netns lab.

        Exits 1 if any flow, ECMP spread or check fails; writes report.html, report.json,
        report.xml (JUnit) and fabric.svg under OUT/report.
        """
        from railab.demo import run_demo

        try:
            result = run_demo(intent, out=out, keep=keep, name=name, timeout=timeout)
        except KeyboardInterrupt:  # the lab is already down (run_demo's finally / up's rollback)
            report_interrupted()
            raise typer.Exit(EXIT_INTERRUPTED) from None
        raise typer.Exit(result.exit_code)

    @app.command("report")
    def report_cmd(
        lab: str = typer.Argument(..., help="running lab name, or a lab directory"),
        out: Path | None = typer.Option(
            None, "--out", "-o",
            help="report directory (default: <labdir>/report, or <out>/report for a demo's lab)"
        ),
        add: list[Path] = typer.Option(
            [], "--add", metavar="FILE.json",
            help="add a load run to the report and plot it: the JSON of `railab traffic "
                 "--pattern incast --json`, `railab collective --json` or `railab lb compare "
                 "--json` (repeatable)"),
    ) -> None:
        """Write the HTML/JSON/JUnit report of a lab (measures it if it is running).

        On a running lab: traffic (every path class, ECMP, traceroute) and every check. On a lab
        that is down: re-render the page from the report.json in OUT. Exits 1 if anything failed.
        """
        from railab.demo import _Steps, measure, plan_from_spec, print_failures
        from railab.report import Report, write_report
        from railab.topologies.labspec import LabSpec

        con = Console()
        try:  # read the added runs first: a bad file costs nothing
            from railab.report import read_runs

            added = read_runs(add)
        except (ValueError, FileNotFoundError) as exc:
            typer.echo(f"error: --add {exc}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
        labdir, name, running = _resolve_lab(lab)
        spec = LabSpec.load(labdir)
        # Default: next to the lab in the demo's layout (<out>/lab, <out>/report), else inside
        # the lab directory.
        outdir = out or (labdir.parent / "report" if labdir.name == "lab" else labdir / "report")
        if running:
            rt_name = (st.load(name) or {}).get("runtime", "netns")
            from railab.testbed.runtime import get_runtime

            rt = get_runtime(rt_name)
            steps = _Steps(con, ("traffic", "checks"))
            rep = measure(spec, rt.executor(name), con, steps, runtime=rt_name,
                          intent=spec.design.get("intent"), plan=plan_from_spec(spec))
            rep.timings = list(steps.timings)
            from railab.report import faults_of

            rep.faults = faults_of(st.load(name))  # injected faults (railab fault), drawn red
            from railab.checks.exercise import report_line

            rep.exercise = report_line(name)  # a running training exercise's score (no fault named)
        elif (outdir / "report.json").exists():
            rep = Report.load(outdir)
            con.print(f"lab {name} is not running: re-rendering {outdir / 'report.json'}",
                      highlight=False)
        else:
            raise RailabError(
                f"lab {name} is not running and {outdir / 'report.json'} does not exist: "
                f"`railab up {labdir}` first, or pass -o to the directory of an earlier report"
            )
        if added:
            from railab.report import add_runs

            add_runs(rep, added)
        files = write_report(rep, spec, outdir)
        print_failures(con, rep)
        con.print(f"{'[green]PASS[/]' if rep.passed else '[red]FAIL[/]'} report: {files.html}",
                  highlight=False)
        raise typer.Exit(EXIT_OK if rep.passed else EXIT_FAILED)

    @app.command("graph")
    def graph_cmd(
        lab: str = typer.Argument(..., help="lab directory (or a running lab's name)"),
        out: Path = typer.Option(Path("fabric.svg"), "--out", "-o",
                                 help="output file: .svg, .png, .pdf or .dot"),
        trace: Path | None = typer.Option(
            None, "--report", help="report.json whose traced paths to draw"
        ),
    ) -> None:
        """Draw the fabric from lab.json: groups as clusters, rails coloured, spines on top."""
        from railab.graph import write_diagram
        from railab.report import Report, traced_paths
        from railab.topologies.labspec import LabSpec

        labdir, _, _ = _resolve_lab(lab)
        spec = LabSpec.load(labdir)
        paths = traced_paths(Report.load(trace)) if trace else []
        written = write_diagram(spec, out, paths)
        typer.echo(f"wrote {written}")
