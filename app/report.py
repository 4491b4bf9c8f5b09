"""The lab report: one JSON document with every measurement and check, a JUnit XML for CI, and
an HTML page a person reads (plan, checks table, path-class x hop-count matrix, ECMP spread per
spine as an inline-SVG bar chart, fabric diagram with the traced paths).

The data model (``Report``) holds only plain results, so the report, the JUnit file and the page
can be rebuilt from ``lab.json`` plus ``report.json`` alone (``railab report LAB`` on a lab that is
down), and unit-tested without root.

Files written by ``write_report(report, spec, outdir)``::

    outdir/report.json   Report (pydantic) as JSON, sorted keys
    outdir/report.xml    JUnit XML (railab.checks.junit): suites railab.paths (one case per
                         flow), railab.ecmp, railab.checks
    outdir/report.html   self-contained page (no JavaScript, no network fetches)
    outdir/fabric.svg    the fabric diagram with traced paths (also inlined in the page)
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import jinja2
from markupsafe import Markup, escape
from pydantic import BaseModel, Field, computed_field

from railab.checks.base import Cause, CheckResult, SessionRef
from railab.checks.junit import JUnitCase, check_case
from railab.checks.junit import render_junit as write_junit_suites
from railab.checks.runner import (
    CHECKS,  # the registry, with the built-in families registered
    group_failures,
)
from railab.graph import RAIL_COLOURS, FabricMarks, TracedPath, rail_colour, render_svg
from railab.topologies.labspec import LabSpec
from railab.topologies.pathclasses import path_classes

REPORT_SCHEMA_VERSION = 1

CheckStatus = Literal["pass", "fail", "skip", "error"]

# Display order and wording of the path classes: the registry (railab.topologies.pathclasses).
PATH_CLASS_ORDER = tuple(path_classes())
PATH_CLASS_TEXT = {n: c.description for n, c in path_classes().items()}


def _check_order(family: str) -> int:
    """Run-order position of a check family (the registry, checks.base.CHECKS); unknown last.
    Failures are listed first, then this order."""
    return CHECKS.index(family) if family in CHECKS else len(CHECKS)


# ---- data model --------------------------------------------------------------------------------
class PathResult(BaseModel):
    """One measured flow of a path class: RoCEv2 packets from ``src`` to ``dst`` (``srvN:gpuK``).

    ``expected_hops`` / ``observed_hops`` count routed switch hops NIC to NIC; ``None`` means
    unreachable (expected: by design, e.g. inter-rail without PXN on Rail-only).
    """

    path_class: str
    pxn: bool = False
    src: str
    dst: str
    expected_hops: int | None
    observed_hops: int | None
    sent: int = 0
    received: int = 0
    ok: bool
    detail: str = ""
    path: list[str] = Field(default_factory=list, description="hops, source NIC first")

    @property
    def label(self) -> str:
        return f"{self.path_class}: {self.src} -> {self.dst}"


class EcmpSpread(BaseModel):
    """How ``flows`` RoCEv2 flows (distinct UDP source ports) from ``src`` to ``dst`` spread over
    the spines. ``per_spine`` maps spine name -> flows seen through it."""

    src: str
    dst: str
    flows: int
    per_spine: dict[str, int]
    ok: bool
    detail: str = ""

    @property
    def spines_used(self) -> int:
        return sum(1 for v in self.per_spine.values() if v > 0)


class TraceHop(BaseModel):
    """One traceroute reply: TTL, the replying address and its node (``None`` if silent)."""

    ttl: int
    address: str | None = None
    node: str | None = None
    rtt_ms: float | None = None
    kind: str = Field("", description="time-exceeded, destination, unreachable, timeout or nic-down")
    code: int | None = Field(None, description="ICMP unreachable code (RFC 792) for kind "
                             "unreachable")


class Trace(BaseModel):
    """A traceroute between two GPU NICs; ``path`` is the node list drawn on the diagram."""

    path_class: str
    src: str
    dst: str
    hops: list[TraceHop] = Field(default_factory=list)
    path: list[str] = Field(default_factory=list, description="e.g. srv1:eth1, g1-leaf1, ...")
    outcome: str = Field("", description="'' when the destination answered, else e.g. "
                                         "'unreachable at leaf1'")

    @property
    def label(self) -> str:
        text = f"{self.path_class}: {self.src} -> {self.dst}"
        return f"{text} ({self.outcome})" if self.outcome else text


class CheckItem(BaseModel):
    """One check outcome; the fields of ``checks.base.CheckResult`` (family ``check``, ``name``,
    ``status``, ``node``, ``subject``, ``expected``, ``observed``, ``reason``) plus its time."""

    check: str
    name: str
    status: CheckStatus
    node: str | None = None
    subject: str | None = None
    expected: str | None = None
    observed: str | None = None
    reason: str | None = None
    duration_s: float = 0.0
    port: str | None = None
    link: str | None = None
    prefix: str | None = None
    session: dict[str, str] | None = Field(None, description="checks.base.SessionRef fields")
    cause: dict[str, str] | None = Field(None, description="checks.base.Cause fields: the "
                                                           "structured root-cause key")
    joint: list[dict[str, str]] | None = Field(None, description="checks.base.Cause fields of "
                                               "the causes that explain the row together "
                                               "with cause (CheckResult.joint)")

    @property
    def ok(self) -> bool:
        """True unless failed or errored (a skip is not a failure)."""
        return self.status in ("pass", "skip")

    @property
    def message(self) -> str:
        """``expected X, observed Y -- reason`` (what a person needs to find the fault)."""
        parts = []
        if self.expected is not None or self.observed is not None:
            parts.append(f"expected {self.expected}, observed {self.observed}")
        if self.reason:
            parts.append(self.reason)
        return " -- ".join(parts)

    @classmethod
    def from_result(cls, result: Any, duration_s: float = 0.0) -> CheckItem:
        """Convert a ``checks.base.CheckResult`` (or any object with its fields), keeping its
        structured references and cause so the report groups failures by root cause."""
        def plain(v: Any) -> Any:
            return v.model_dump(exclude_none=True) if hasattr(v, "model_dump") else v

        return cls(
            **{k: getattr(result, k, None) for k in
               ("check", "name", "status", "node", "subject", "expected", "observed", "reason",
                "port", "link", "prefix")},
            session=plain(getattr(result, "session", None)),
            cause=plain(getattr(result, "cause", None)),
            joint=[plain(c) for c in getattr(result, "joint", None) or ()] or None,
            duration_s=duration_s,
        )

    def to_result(self) -> CheckResult:
        """Back to a ``checks.base.CheckResult`` (an ``error`` status reads as ``fail``)."""
        return CheckResult(
            check=self.check, name=self.name,
            status="fail" if self.status == "error" else self.status,
            node=self.node, subject=self.subject, expected=self.expected, observed=self.observed,
            reason=self.reason, port=self.port, link=self.link, prefix=self.prefix,
            session=SessionRef(**self.session) if self.session else None,
            cause=Cause(**self.cause) if self.cause else None,
            joint=tuple(Cause(**c) for c in self.joint) if self.joint else None)


class StepTiming(BaseModel):
    """Wall-clock duration of one pipeline step, in seconds."""

    step: str
    seconds: float
    ok: bool = True
    detail: str = ""


class LabSummary(BaseModel):
    """Headline figures of the lab (from ``lab.json``)."""

    name: str
    architecture: str
    kind: str
    groups: int
    rails: int
    gpus_per_server: int
    servers_per_group: int
    servers: int
    leaves: int
    spines: int
    links: int
    nics: int
    bgp_sessions: int
    links_per_leaf_spine_pair: int
    port_speed_gbps: int
    oversubscription: str
    mtu: int
    expected_hops: dict[str, int | None]
    superspines: int = 0
    warnings: list[str] = Field(default_factory=list,
                                description="lab.json warnings (production plan and lab)")

    @classmethod
    def from_spec(cls, spec: LabSpec) -> LabSummary:
        return cls(
            name=spec.name,
            architecture=spec.architecture,
            kind=spec.kind,
            groups=spec.groups,
            rails=spec.rails,
            gpus_per_server=spec.gpus_per_server,
            servers_per_group=spec.servers_per_group,
            servers=len(spec.by_role("server")),
            leaves=len(spec.by_role("leaf")),
            spines=len(spec.by_role("spine")),
            links=len(spec.links),
            nics=len(spec.nics),
            bgp_sessions=len(spec.bgp_sessions),
            links_per_leaf_spine_pair=spec.links_per_leaf_spine_pair,
            port_speed_gbps=spec.port_speed_gbps,
            oversubscription=spec.oversubscription,
            mtu=spec.mtu,
            expected_hops=dict(spec.expected_hops),
            superspines=len(spec.by_role("superspine")),
            warnings=list(spec.warnings),
        )


class LoadRun(BaseModel):
    """One measurement added to the report from a JSON file (``railab report --add``): a
    ``label`` (what ran: pattern, congestion control, PFC, or the collective and its options)
    and the ``data`` as the command printed it (the ``congestion`` object of ``railab traffic
    --json``, or the whole ``railab collective --json`` document)."""

    label: str
    data: dict[str, Any]


class Report(BaseModel):
    """Everything one demo / report run measured on a lab."""

    schema_version: int = REPORT_SCHEMA_VERSION
    railab_version: str = Field(default_factory=lambda: _version())
    created: str = Field(
        default_factory=lambda: _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    )
    intent: str | None = None
    runtime: str = "netns"
    lab: LabSummary
    design: dict[str, Any] = Field(default_factory=dict, description="lab.json design section")
    plan: dict[str, Any] | None = Field(None, description="production Plan (topologies.planner)")
    paths: list[PathResult] = Field(default_factory=list)
    ecmp: list[EcmpSpread] = Field(default_factory=list)
    traces: list[Trace] = Field(default_factory=list)
    checks: list[CheckItem] = Field(default_factory=list)
    faults: list[dict[str, Any]] = Field(
        default_factory=list, description="faults injected when the report was made "
        "(LabState.faults records as dicts: id, kind, node, port, peer_node, peer_port, note)")
    exercise: str | None = Field(None, description="the training exercise's score line "
                                 "(railab.checks.exercise.report_line; names no fault while it runs)")
    timings: list[StepTiming] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list, description="steps that raised, with message")
    congestion: list[LoadRun] = Field(
        default_factory=list, description="load runs added to the report (railab traffic --json "
        "of a load pattern: its congestion object), plotted: per-flow rate, queue depth, CE, CNP")
    collectives: list[LoadRun] = Field(
        default_factory=list, description="railab collective --json results added to the report")
    load_balancing: list[LoadRun] = Field(
        default_factory=list, description="railab lb compare --json results added to the report")
    control_plane: dict[str, Any] | None = Field(
        None, description="the control plane per role, measured on the running lab "
        "(railab.checks.controlplane.summary_only of observe_control_plane: measured_at, took_s, "
        "sources, convergence {converge_s, brought_up_at}, roles {role: {routers, routes, bgp_routes, "
        "ecmp_width, memory_mib, sessions, unread}}); {\"error\": ...} when it could not be read; "
        "None for a report made before it existed")

    @property
    def passed(self) -> bool:
        """True when every flow, spread and check passed and no step raised."""
        return (
            not self.errors
            and all(p.ok for p in self.paths)
            and all(e.ok for e in self.ecmp)
            and all(c.ok for c in self.checks)
        )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def check_counts(self) -> dict[str, int]:
        """Checks by outcome: ``{"passed", "failed", "skipped", "total"}`` (an ``error`` status
        counts as failed; a skip is neither passed nor failed). Written to report.json."""
        skipped = sum(1 for c in self.checks if c.status == "skip")
        passed = sum(1 for c in self.checks if c.status == "pass")
        total = len(self.checks)
        return {"passed": passed, "failed": total - passed - skipped, "skipped": skipped,
                "total": total}

    def checks_text(self) -> str:
        """The check outcome in words, e.g. ``"52 passed, 5 skipped"`` or
        ``"50 passed, 2 failed, 5 skipped"`` (zero failed / skipped are left out)."""
        n = self.check_counts
        parts = [f"{n['passed']} passed"]
        if n["failed"]:
            parts.append(f"{n['failed']} failed")
        if n["skipped"]:
            parts.append(f"{n['skipped']} skipped")
        return ", ".join(parts)

    def failures(self) -> list[str]:
        """One line per failed item (every failed check too; the console summary groups the
        checks under their root causes: :meth:`failure_lines`)."""
        out = [f"step error: {e}" for e in self.errors]
        out += [f"path {p.label}: {p.detail or 'failed'}" for p in self.paths if not p.ok]
        out += [f"ecmp {e.src} -> {e.dst}: {e.detail or 'failed'}" for e in self.ecmp if not e.ok]
        out += [f"check {c.check} {c.name}: {c.message}" for c in self.checks if not c.ok]
        return out

    def failure_lines(self) -> list[str]:
        """The console summary's failures, grouped as the HTML page groups them: step errors,
        failed paths and ECMP spreads one per line, then one line per check root cause
        (:func:`root_cause_groups`, as ``railab check`` groups rows) ending with how many
        failures follow from it, e.g. ``root cause: check cabling srv1 NIC 1: ... (+5 more
        failures follow from it: routes 4, hops 1)``."""
        out = [ln for ln in self.failures() if not ln.startswith("check ")]
        for root, cons in root_cause_groups(self):
            line = f"root cause: check {root.check} {root.name}: {root.message}"
            if cons:
                fams: dict[str, int] = {}
                for c in cons:
                    fams[c.check] = fams.get(c.check, 0) + 1
                line += (f" (+{len(cons)} more failure{'' if len(cons) == 1 else 's'} "
                         f"follow{'s' if len(cons) == 1 else ''} from it: "
                         + ", ".join(f"{k} {v}" for k, v in fams.items()) + ")")
            out.append(line)
        return out

    def dump(self) -> str:
        """JSON text (sorted keys, 2-space indent, trailing newline)."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"

    @classmethod
    def load(cls, path: str | Path) -> Report:
        """Read ``report.json`` (a file or a directory holding one); FileNotFoundError if absent."""
        p = Path(path)
        if p.is_dir():
            p = p / "report.json"
        if not p.exists():
            raise FileNotFoundError(f"{p} not found: run `railab demo` or `railab report LAB` first")
        return cls.model_validate(json.loads(p.read_text()))


def _version() -> str:
    try:
        return metadata.version("railab")
    except metadata.PackageNotFoundError:  # pragma: no cover - source checkout without install
        return "0+unknown"


# ---- derived views -----------------------------------------------------------------------------
def _class_key(path_class: str) -> tuple[int, str]:
    try:
        return (PATH_CLASS_ORDER.index(path_class), path_class)
    except ValueError:
        return (len(PATH_CLASS_ORDER), path_class)


def hop_matrix(report: Report) -> dict[str, Any]:
    """The path class x hop-count matrix.

    Returns ``{"columns": [0, 1, 2, 3, None], "rows": [{"path_class", "text", "expected",
    "cells": {col: count}, "ok"}]}``; column ``None`` is "unreachable". Rows follow
    PATH_CLASS_ORDER; classes with no flow still show their expected hop count from lab.json.
    """
    classes = {p.path_class for p in report.paths} | set(report.lab.expected_hops)
    max_hops = max(
        [3]
        + [p.observed_hops for p in report.paths if p.observed_hops is not None]
        + [h for h in report.lab.expected_hops.values() if h is not None]
    )
    columns: list[int | None] = list(range(0, max_hops + 1)) + [None]
    rows = []
    for cls in sorted(classes, key=_class_key):
        flows = [p for p in report.paths if p.path_class == cls]
        cells: dict[int | None, int] = {c: 0 for c in columns}
        for p in flows:
            cells[p.observed_hops] = cells.get(p.observed_hops, 0) + 1
        expected = report.lab.expected_hops.get(cls, flows[0].expected_hops if flows else None)
        rows.append(
            {
                "path_class": cls,
                "text": PATH_CLASS_TEXT.get(cls, cls),
                "expected": expected,
                "cells": cells,
                "flows": len(flows),
                "ok": all(p.ok for p in flows) if flows else None,
            }
        )
    return {"columns": columns, "rows": rows}




def check_families(report: Report) -> list[dict[str, Any]]:
    """Per check family: counts of pass / fail / skip and what the family compares."""
    fams: dict[str, dict[str, Any]] = {}
    for c in report.checks:
        f = fams.setdefault(c.check, {"check": c.check, "pass": 0, "fail": 0, "skip": 0,
                                      "text": CHECKS.get(c.check).description
                                      if c.check in CHECKS else ""})
        f["fail" if not c.ok else c.status] += 1
    return sorted(fams.values(), key=lambda f: _check_order(f["check"]))


def ecmp_bar_chart(spread: EcmpSpread, *, width: int = 520, bar_h: int = 22) -> Markup:
    """An inline SVG horizontal bar chart of ``spread.per_spine`` (flows per spine).

    A dashed line marks the even share (flows / spines). Self-contained: no script, no fonts
    fetched.
    """
    items = sorted(spread.per_spine.items(), key=lambda kv: _natural(kv[0]))
    n = max(1, len(items))
    label_w, pad, right = 70, 6, 60
    plot_w = width - label_w - right
    top = 8
    height = top + n * (bar_h + pad) + 24
    vmax = max([v for _, v in items] + [1])
    even = spread.flows / n if n else 0
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="bars" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="ECMP spread {escape(spread.src)} to {escape(spread.dst)}">'
    ]
    for i, (spine, v) in enumerate(items):
        y = top + i * (bar_h + pad)
        w = plot_w * v / vmax
        parts.append(
            f'<text x="{label_w - 6}" y="{y + bar_h * 0.7:.1f}" text-anchor="end" '
            f'class="bl">{escape(spine)}</text>'
            f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" rx="3" '
            f'fill="{"#4a7ab5" if v else "#d33"}"><title>{escape(spine)}: {v} flows</title></rect>'
            f'<text x="{label_w + w + 5:.1f}" y="{y + bar_h * 0.7:.1f}" class="bv">{v}</text>'
        )
    if even and vmax:
        x = label_w + plot_w * even / vmax
        y2 = top + n * (bar_h + pad)
        parts.append(
            f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{y2}" stroke="#333" '
            f'stroke-dasharray="4 3"/>'
            f'<text x="{x:.1f}" y="{y2 + 14}" text-anchor="middle" class="bl">'
            f"even share {even:.1f}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def _natural(name: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def traced_paths(report: Report) -> list[TracedPath]:
    """The paths to draw on the diagram: every trace with a node list, else one flow per class."""
    out = [TracedPath(label=t.label, hops=t.path) for t in report.traces if len(t.path) >= 2]
    if not out:
        seen: set[str] = set()
        for p in report.paths:
            if p.path_class not in seen and len(p.path) >= 2:
                seen.add(p.path_class)
                out.append(TracedPath(label=p.label, hops=p.path))
    return out


def _mmm(v: dict[str, Any] | None, fmt: str = "{:g}") -> str:
    """``min/median/max`` of a spread (one figure when all three agree; ``-`` for None)."""
    if not v:
        return "-"
    vals = [fmt.format(v[k]) for k in ("min", "median", "max")]
    return vals[0] if len(set(vals)) == 1 else " / ".join(vals)


def control_plane_rows(report: Report) -> list[dict[str, str]]:
    """The report's "Control plane" table, one row per role (:attr:`Report.control_plane`
    ``roles``): ``role``, ``routers``, ``routes``, ``bgp_routes``, ``ecmp_width``, ``memory_mib``
    (``min / median / max`` per router, one figure when they agree) and ``sessions``
    (``up/expected`` planned session ends); [] without figures."""
    cp = report.control_plane or {}
    rows = []
    for role, r in (cp.get("roles") or {}).items():
        ses = r.get("sessions")
        rows.append({
            "role": role,
            "routers": str(r.get("routers", 0)) + (f" ({r['unread']} unread)" if r.get("unread") else ""),
            "routes": _mmm(r.get("routes")), "bgp_routes": _mmm(r.get("bgp_routes")),
            "ecmp_width": _mmm(r.get("ecmp_width")), "memory_mib": _mmm(r.get("memory_mib"), "{:.1f}"),
            "sessions": f"{ses['up']}/{ses['expected']}" if ses else "-",
        })
    return rows


def faults_of(record: Any) -> list[dict[str, Any]]:
    """The injected faults of a lab's state record (``LabState.faults``, railab.testbed.faults)
    as plain dicts for :attr:`Report.faults`; [] for a record without them."""
    out = []
    for f in getattr(record, "faults", None) or []:
        out.append(f.model_dump(mode="json") if hasattr(f, "model_dump") else dict(f))
    return out


def root_cause_groups(report: Report) -> list[tuple[CheckItem, list[CheckItem]]]:
    """Failed checks grouped under their root cause, as ``railab check`` groups them
    (:func:`railab.checks.runner.group_failures` on the rows' structured causes):
    ``[(root item, [items that follow from it]), ...]`` in run order."""
    fails = [c for c in report.checks if not c.ok]
    rows = [c.to_result() for c in fails]
    index = {id(r): c for r, c in zip(rows, fails, strict=True)}
    return [(index[id(root)], [index[id(x)] for x in cons]) for root, cons in group_failures(rows)]


def fabric_marks(report: Report) -> FabricMarks:
    """What the diagram draws as broken, from the report alone: the links of failed rows whose
    cause is ``link-down`` (or cabling rows about a down link), the links of ``session-down`` and
    ``session-shut`` causes whose link is not down, and :attr:`Report.faults`."""
    down: dict[str, str] = {}
    sessions: list[str] = []
    for c in report.checks:
        if c.ok or not c.cause:
            continue
        link = c.cause.get("link") or c.link
        if not link:
            continue
        if c.cause.get("kind") == "link-down":
            down.setdefault(link, c.observed or "link down")
        elif c.cause.get("kind") in ("session-down", "session-shut") and link not in sessions:
            sessions.append(link)
    return FabricMarks(down_links=down, down_sessions=[s for s in sessions if s not in down],
                       faults=report.faults)


# ---- renderers ---------------------------------------------------------------------------------
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("railab", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["hops"] = lambda h: "unreachable" if h is None else str(h)
    env.filters["rail_colour"] = rail_colour
    return env


def render_html(report: Report, spec: LabSpec, *, diagram_svg: str | None = None) -> str:
    """The report page (UTF-8 HTML, self-contained). ``diagram_svg`` defaults to
    ``render_svg(spec, traced_paths(report))``."""
    if diagram_svg is None:
        diagram_svg = render_svg(spec, traced_paths(report), fabric_marks(report))
    plan_rows = _plan_rows(report.plan) if report.plan else []
    template = _env().get_template("report.html.j2")
    return template.render(
        r=report,
        spec=spec,
        summary=report.lab,
        matrix=hop_matrix(report),
        charts=[(e, ecmp_bar_chart(e)) for e in report.ecmp],
        diagram=Markup(diagram_svg),
        plan_rows=plan_rows,
        scale=_scale_rows(report),
        rails=[(r, rail_colour(r)) for r in range(1, spec.rails + 1)],
        palette=RAIL_COLOURS,
        checks=sorted(report.checks, key=lambda c: (c.ok, _check_order(c.check))),
        roots=root_cause_groups(report),
        n_fail=sum(1 for c in report.checks if not c.ok),
        families=check_families(report),
        paths=sorted(report.paths, key=lambda p: (_class_key(p.path_class), p.src, p.dst)),
        load=(load_charts(report, spec)
              if (report.congestion or report.collectives or report.load_balancing) else None),
        collective_rows=collective_rows(report),
        transport_rows=transport_rows(report),
        not_modelled=NOT_MODELLED,
        cp_rows=control_plane_rows(report),
    )


def _plan_rows(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """Flatten the production plan for a key/value table (one nesting level, lists joined)."""
    rows: list[tuple[str, str]] = []

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:g}"
        if isinstance(v, (list, tuple)):
            if all(not isinstance(x, (dict, list)) for x in v):
                return ", ".join(fmt(x) for x in v)
            return f"{len(v)} item(s)"
        if isinstance(v, dict):
            return ", ".join(f"{k}={fmt(x)}" for k, x in v.items())
        return "—" if v is None else str(v)

    for k, v in plan.items():
        if isinstance(v, dict) and v and all(not isinstance(x, (dict, list)) for x in v.values()):
            for k2, v2 in v.items():
                rows.append((f"{k}.{k2}", fmt(v2)))
        else:
            rows.append((k, fmt(v)))
    return rows


def _scale_rows(report: Report) -> list[tuple[str, str, str]]:
    """Production vs lab for the headline counts (production from the plan or design)."""
    src: dict[str, Any] = {}
    for d in (report.design, report.design.get("plan") or {}, report.plan or {}):
        src.update({k: v for k, v in d.items() if not isinstance(v, (dict, list))})
    lab = report.lab

    def prod(*keys: str) -> str:
        for k in keys:
            if k in src and src[k] is not None:
                return str(src[k])
        return "—"

    pair = prod("links_per_leaf_spine_pair")
    hi = prod("links_per_leaf_spine_pair_max")
    if hi not in ("—", pair):  # uneven split: some pairs get one more link (plan warning)
        pair = f"{pair}-{hi}"

    return [
        ("architecture", prod("architecture"), lab.architecture),
        ("GPUs", prod("gpus", "total_gpus"), str(lab.servers * lab.gpus_per_server)),
        ("servers", prod("servers"), str(lab.servers)),
        ("groups", prod("groups"), str(lab.groups)),
        ("rails", prod("rails"), str(lab.rails)),
        ("leaf switches", prod("leaf_switches", "leaves"), str(lab.leaves)),
        ("spine switches", prod("spine_switches", "spines"), str(lab.spines)),
        ("links per leaf-spine pair", pair, str(lab.links_per_leaf_spine_pair)),
        ("oversubscription", prod("oversubscription"), lab.oversubscription),
    ] + ([("super-spine switches", prod("superspine_switches"), str(lab.superspines))]
         if lab.superspines or prod("superspine_switches") not in ("—", "0") else [])


def render_junit(report: Report) -> str:
    """JUnit XML (the de-facto Ant/Jenkins schema, written by :mod:`railab.checks.junit`) with
    three suites: ``railab.paths`` (one case per flow, classname ``railab.<lab>.paths.<class>``),
    ``railab.ecmp`` (one per spread) and ``railab.checks`` (one per check result, classname
    ``railab.<lab>.<family>`` as in ``railab check --junit``), plus ``railab.pipeline`` errors."""
    lab = report.lab.name
    paths = [
        JUnitCase(f"railab.{lab}.paths.{p.path_class}", f"{p.src} -> {p.dst}",
                  "pass" if p.ok else "fail",
                  msg := (f"expected {_h(p.expected_hops)} hop(s), observed {_h(p.observed_hops)}; "
                          f"{p.received}/{p.sent} packets; {p.detail}".rstrip("; ")), msg)
        for p in report.paths
    ]
    ecmp = [
        JUnitCase(f"railab.{lab}.ecmp", f"{e.src} -> {e.dst}", "pass" if e.ok else "fail",
                  msg := (f"{e.flows} flows over {e.spines_used}/{len(e.per_spine)} spines: "
                          + ", ".join(f"{k}={v}" for k, v in sorted(e.per_spine.items(),
                                                                   key=lambda kv: _natural(kv[0])))
                          + (f"; {e.detail}" if e.detail else "")), msg)
        for e in report.ecmp
    ]
    checks = [check_case(c, lab, c.duration_s) for c in report.checks]
    suites = [("railab.paths", paths), ("railab.ecmp", ecmp), ("railab.checks", checks)]
    if report.errors:
        suites.append(("railab.pipeline", [JUnitCase(f"railab.{lab}.pipeline", e.split(":", 1)[0],
                                                     "error", e, e) for e in report.errors]))
    return write_junit_suites(suites, f"railab {lab}")


def _h(h: int | None) -> str:
    return "unreachable" if h is None else str(h)


class ReportFiles(BaseModel):
    """Paths of the files ``write_report`` wrote."""

    json_path: Path
    junit: Path
    html: Path
    diagram: Path


def write_report(report: Report, spec: LabSpec, outdir: str | Path) -> ReportFiles:
    """Write report.json, report.xml, fabric.svg and report.html into ``outdir`` (created).

    Raises ValueError if a traced path names a node not in ``spec``; RailabError if Graphviz's
    ``dot`` is missing.
    """
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    svg = render_svg(spec, traced_paths(report), fabric_marks(report))
    files = ReportFiles(
        json_path=out / "report.json",
        junit=out / "report.xml",
        html=out / "report.html",
        diagram=out / "fabric.svg",
    )
    files.json_path.write_text(report.dump())
    files.junit.write_text(render_junit(report))
    files.diagram.write_text(svg)
    files.html.write_text(render_html(report, spec, diagram_svg=svg))
    return files


# ---- load runs: plots (matplotlib, SVG) ----------------------------------------------------------
#: What an FRR lab under load does not model, shown in a box beside the load plots (and in
#: docs/congestion.md): read every figure of those plots with these in mind.
NOT_MODELLED = (
    "Port rates are the lab's (qos.capacity.port_rate_mbps) with time scaled by the same factor: "
    "byte thresholds keep their production values, every time is lab time unless it says fabric.",
    "NVLink: intra-server legs of collectives (and PXN's hand-over) take no time.",
    "Switch buffers: one tail-drop byte limit per egress port (tbf/htb); with "
    "lab.capacity.shared_buffer the lossless queues' limit follows a dynamic threshold over the "
    "switch's pool, rewritten once per agent cycle; PFC pauses at a static threshold; no "
    "cut-through.",
    "PFC is an emulation: a control loop holds the upstream port's lossless class while the "
    "queue is above xOFF (no 802.1Qbb frames on the wire; its reaction time is the loop's).",
    "RDMA transport: with --nic none (the default) lost packets are counted, never "
    "retransmitted; --nic gbn and --nic ooo run an RC transport (ACKs, NAK on a PSN sequence "
    "error, go-back-N or selective repeat, a retransmission timeout) but no RNR NAK, no "
    "read/atomic operations; the engine's NICs are host processes, not NIC pipelines (no "
    "hardware timestamps).",
    "The load engine's packets are sent by the host's CPU: it bounds the aggregate rate (the "
    "run says when it could not keep its rate).",
)


def added_run(doc: dict[str, Any], source: str = "") -> tuple[str, LoadRun]:
    """Classify one JSON document for :attr:`Report.congestion` / :attr:`Report.collectives`:
    ``railab traffic --json`` of a load run (it has a ``congestion`` object) -> ``("congestion",
    run)``; ``railab collective --json`` (it has ``busbw_gbps``) -> ``("collective", run)``.
    Raises ValueError naming ``source`` for anything else."""
    if isinstance(doc, dict) and isinstance(doc.get("congestion"), dict):
        c = doc["congestion"]
        parts = [str(doc.get("pattern") or "load"), f"cc={c.get('cc', doc.get('cc', '?'))}"]
        pfc = doc.get("pfc", c.get("pfc"))
        if pfc is not None:
            parts.append(f"pfc={'on' if pfc in (True, 'on') else 'off'}")
        if c.get("sport_mode") not in (None, "per-qp"):
            parts.append(f"sport={c['sport_mode']}")
        if c.get("nic") not in (None, "none"):
            parts.append(f"nic={c['nic']}")
        return "congestion", LoadRun(label=" ".join(parts), data=c)
    if isinstance(doc, dict) and "busbw_gbps" in doc and "op" in doc:
        parts = [doc["op"], f"{doc.get('bytes')} B"]
        if doc.get("pxn"):
            parts.append("PXN")
        if doc.get("sport_mode") not in (None, "per-qp"):
            parts.append(f"sport={doc['sport_mode']}")
        return "collective", LoadRun(label=" ".join(parts), data=doc)
    if isinstance(doc, dict) and "workload" in doc and isinstance(doc.get("modes"), list):
        if not [m for m in doc["modes"] if "error" not in m]:
            raise ValueError(f"{source or 'document'}: an lb compare with no mode measured")
        label = f"lb compare {doc['workload']}: {doc.get('flows')} flows x {doc.get('flow_bytes')} B"
        if doc.get("nic") not in (None, "none"):
            label += f", nic={doc['nic']}"
        return "lb", LoadRun(label=label, data=doc)
    raise ValueError(f"{source or 'document'}: not the JSON of `railab traffic --pattern incast "
                     "--json` (a congestion object), of `railab collective --json` nor of "
                     "`railab lb compare --json`")


def read_runs(paths: list[Path]) -> list[tuple[str, LoadRun]]:
    """Read and classify each JSON file (:func:`added_run`), before anything is measured.
    ValueError for a file that is not JSON or neither kind; FileNotFoundError for a missing one."""
    out = []
    for p in paths:
        try:
            doc = json.loads(Path(p).read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p}: not JSON ({exc})") from None
        out.append(added_run(doc, str(p)))
    return out


def add_runs(report: Report, paths: list[Path] | list[tuple[str, LoadRun]]) -> None:
    """Append JSON files (or :func:`read_runs` results) to the report's congestion or collective
    runs. ValueError (exit 2 in the CLI) for a file that is neither; FileNotFoundError for a
    missing one."""
    runs = [p for p in paths if isinstance(p, tuple)]
    runs += read_runs([p for p in paths if not isinstance(p, tuple)])
    for kind, run in runs:
        {"congestion": report.congestion, "collective": report.collectives,
         "lb": report.load_balancing}[kind].append(run)


def _figure(w: float, h: float, rows: int = 1, **kw):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), layout="constrained")
    axes = fig.subplots(rows, 1, squeeze=False, **kw)[:, 0]
    return fig, axes


def _svg(fig) -> Markup:
    """``fig`` as inline SVG text (text kept as text, no date metadata, no XML prologue)."""
    import io

    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "railab",
                                "font.family": "DejaVu Sans", "font.size": 9}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "railab"})
    text = buf.getvalue()
    start = text.find("<svg")
    return Markup(text[start:] if start >= 0 else text)


def _series_col(series: dict, *names: str) -> list[float] | None:
    for n in names:
        if series.get(n):
            return series[n]
    return None


def congestion_chart(run: LoadRun, qos: Any = None, *, max_flows: int = 16,
                     max_ports: int = 3) -> Markup:
    """Per-flow rate over time with CE marks (x) and CNPs (v) on each flow's line, and below it
    the queue depth of the deepest ports with ECN Kmin/Kmax and the PFC pause threshold drawn
    (``qos``: the lab's :class:`~railab.topologies.qos.QosProfile`), PAUSE events as markers.
    Input: the ``congestion`` object (docs/congestion.md: ``flows[].series`` columns ``t``,
    ``tx_mbps``/``rx_mbps``/``cc_mbps``, ``ce``, ``cnp`` per sample; ``ports["node:port"]``
    columns ``t``, ``backlog_bytes``, ``pause_events``). Fabric time (ms) on the x axis when the
    run has a time scale, lab seconds otherwise. With ``reference`` (an incast's DCQCN fluid
    model, railab.traffic.fluid, computed) the model's per-flow rate and queue depth are drawn
    dashed in black over the measured ones."""
    c = run.data
    scale = c.get("time_scale")

    def fx(ts: list[float]) -> list[float]:
        return [t * 1000 / scale for t in ts] if scale else list(ts)

    flows = [f for f in c.get("flows", []) if f.get("series", {}).get("t")][:max_flows]
    ports = {k: v for k, v in (c.get("ports") or {}).items() if v.get("backlog_bytes")}
    deepest = sorted(ports, key=lambda k: max(ports[k]["backlog_bytes"]), reverse=True)[:max_ports]
    fig, axes = _figure(7.8, 5.2 if deepest else 3.2, 2 if deepest else 1, sharex=True)
    ax = axes[0]
    for f in flows:
        s = f["series"]
        t = fx(s["t"])
        y = _series_col(s, "rx_mbps", "tx_mbps") or [0.0] * len(t)
        (line,) = ax.plot(t, y, lw=1.2, label=f.get("name", "?"))
        ce = [(ti, yi) for ti, yi, n in zip(t, y, s.get("ce") or [0] * len(t), strict=False) if n]
        cnp = [(ti, yi) for ti, yi, n in zip(t, y, s.get("cnp") or [0] * len(t), strict=False) if n]
        if ce:
            ax.plot(*zip(*ce, strict=True), "x", ms=4, color=line.get_color(), alpha=0.7)
        if cnp:
            ax.plot(*zip(*cnp, strict=True), "v", ms=3, color=line.get_color(), alpha=0.7)
    ref = c.get("reference") or {}
    rser = ref.get("series") or {}
    if rser.get("t") and rser.get("rate_mbps"):
        ax.plot(fx(rser["t"]), rser["rate_mbps"][0], color="black", ls="--", lw=1.4,
                label="model, each flow (computed)")
    rate = c.get("port_rate_mbps")
    if rate:
        ax.axhline(rate, color="#444", ls="--", lw=0.8)
        ax.annotate(f"port rate {rate:g} Mb/s", (0, rate), xycoords=("axes fraction", "data"),
                    fontsize=7, va="bottom")
        if len(c.get("flows", [])) > 1:
            share = rate / len(c["flows"])
            ax.axhline(share, color="#888", ls=":", lw=0.8)
            ax.annotate(f"fair share {share:.3g}", (0, share), xycoords=("axes fraction", "data"),
                        fontsize=7, va="bottom", color="#555")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("per-flow rate (Mb/s, lab)")
    ax.set_title(f"{run.label}: x = CE-marked packets received, v = CNPs received", fontsize=9)
    if len(flows) <= 8:
        ax.legend(fontsize=7, loc="upper right", ncols=2)
    ax.grid(alpha=0.3)
    if deepest:
        qa = axes[1]
        for k in deepest:
            s = ports[k]
            (line,) = qa.plot(fx(s["t"]), [b / 1024 for b in s["backlog_bytes"]], lw=1.2, label=k)
            pe = [(t, b / 1024) for t, b, n in zip(fx(s["t"]), s["backlog_bytes"],
                                                   s.get("pause_events") or [0] * len(s["t"]),
                                                   strict=False) if n]
            if pe:
                qa.plot(*zip(*pe, strict=True), "s", ms=3, color=line.get_color())
        if qos is not None:
            marks = [("ECN Kmin", qos.ecn.kmin_bytes, "#e69f00"),
                     ("ECN Kmax", qos.ecn.kmax_bytes, "#d55e00")]
            try:
                marks.append(("PFC xOFF (pause)", qos.pfc_pause_bytes, "#0072b2"))
            except ValueError:
                pass
            for name, b, col in marks:
                qa.axhline(b / 1024, color=col, ls="--", lw=0.8)
                qa.annotate(name, (1, b / 1024), xycoords=("axes fraction", "data"), fontsize=7,
                            ha="right", va="bottom", color=col)
        if rser.get("t") and rser.get("queue_bytes"):
            qa.plot(fx(rser["t"]), [b / 1024 for b in rser["queue_bytes"]], color="black",
                    ls="--", lw=1.2, label="model queue (computed)")
        qa.set_ylabel("queue depth (KiB)")
        qa.set_title("egress queues (squares: PFC PAUSE sent)", fontsize=9)
        qa.legend(fontsize=7, loc="upper left")
        qa.grid(alpha=0.3)
    axes[-1].set_xlabel(f"fabric time (ms) = lab s x 1000 / {scale:g} (time scale)" if scale
                        else "lab time (s)")
    return _svg(fig)


def uplink_chart(load: dict[str, Any], title: str = "") -> Markup | None:
    """Per-uplink load bars (share of each leaf's uplink bytes, net of background) with the
    fair share 1/k dashed, from an ``uplink_load`` object (railab.traffic.ecmp.UplinkLoad.to_dict);
    None when no leaf sent anything up."""
    leaves = (load or {}).get("leaves") or {}
    if not leaves:
        return None
    rows = [(f"{u.split('>')[0]}>{u.split('>')[1].split(':')[0]}", share, ll["fair_share"])
            for ll in leaves.values() for u, share in ll["share"].items()]
    fig, (ax,) = _figure(6.4, 0.7 + 0.22 * len(rows))
    names = [r[0] for r in rows][::-1]
    shares = [r[1] for r in rows][::-1]
    fair = [r[2] for r in rows][::-1]
    cols = ["#c62828" if s >= 2 * f else "#4a7ab5" for s, f in zip(shares, fair, strict=True)]
    ax.barh(names, shares, color=cols)
    for i, f in enumerate(fair):
        ax.plot([f, f], [i - 0.45, i + 0.45], color="#333", ls="--", lw=0.9)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the leaf's uplink bytes (dashed: fair share 1/k; red: >= 2x fair)")
    ax.tick_params(axis="y", labelsize=7)
    w = max(leaves.values(), key=lambda x: x["imbalance"])
    ax.set_title(f"{title}{': ' if title else ''}max/mean imbalance {w['imbalance']:.2f} "
                 f"({w['leaf']}, {w['uplinks']} uplinks)", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig)


def collective_rows(report: Report) -> list[dict[str, Any]]:
    """The collective results table: one row per run (label, ranks, time, algbw, busbw in lab
    and fabric units, lost, completed, unreachable by design, worst uplink imbalance)."""
    out = []
    for run in report.collectives:
        d = run.data
        fab = d.get("fabric") or {}
        ul = d.get("uplink_load") or {}
        out.append({"label": run.label, "ranks": d.get("ranks"), "time_s": d.get("time_s"),
                    "algbw": d.get("algbw_gbps"), "busbw": d.get("busbw_gbps"),
                    "f_time_us": fab.get("time_us"), "f_algbw": fab.get("algbw_gbps"),
                    "f_busbw": fab.get("busbw_gbps"), "lost": d.get("lost"),
                    "completed": d.get("completed"),
                    "unreachable": d.get("unreachable_by_design"),
                    "imbalance": ul.get("max_imbalance"),
                    "keeps_rate": d.get("keeps_rate", True),
                    "slowdown": (d.get("compare_sport") or {}).get("slowdown")})
    return out


def transport_rows(report: Report) -> list[dict[str, Any]]:
    """The RC transport table: one row per load run with ``--nic gbn|ooo`` (its ``transport``
    totals) and per mode of an ``lb compare`` run with one (``nic``): NIC profile, goodput (lab
    Mb/s, summed over flows), packets and bytes resent, NAKs received, retransmission timeouts,
    FCT p50 / p99 (lab s). Measured on packets (docs/congestion.md, the RC transport)."""
    keys = ("goodput_mbps", "retx_packets", "retx_bytes", "naks", "timeouts", "fct_p50_s", "fct_p99_s")
    out = []
    for run in report.congestion:
        t = run.data.get("transport")
        if t:
            out.append({"label": run.label, "nic": t.get("nic"), **{k: t.get(k) for k in keys}})
    for run in report.load_balancing:
        nic = run.data.get("nic")
        if nic in (None, "none"):
            continue
        for m in run.data.get("modes", []):
            if "error" not in m:
                out.append({"label": f"{run.label}: {m['mode']}", "nic": nic, **{k: m.get(k) for k in keys}})
    return out


def lb_chart(run: LoadRun) -> Markup:
    """One ``railab lb compare`` result as bars per mode: the uplink imbalance (max/mean of the
    uplink bytes, dashed at 1 = even), the packets received out of PSN order (%), and the
    collective's fabric busbw (Gb/s) or the flows' median completion (lab s). All measured."""
    d = {**run.data, "modes": [m for m in run.data["modes"] if "error" not in m]}
    failed = [m["mode"] for m in run.data["modes"] if "error" in m]
    modes = [m["mode"] for m in d["modes"]]
    coll = any(m.get("fabric_busbw_gbps") is not None for m in d["modes"])
    host_bound = any(m.get("engine_kept_rate") is False for m in d["modes"])
    fig, axes = _figure(6.4, 4.2, rows=3, sharex=True)
    cols = ["#888" if m == "ecmp" else "#4a7ab5" for m in modes]
    axes[0].bar(modes, [m["uplink_imbalance"] or 0 for m in d["modes"]], color=cols)
    axes[0].axhline(1.0, color="#333", ls="--", lw=0.9)
    axes[0].set_ylabel("uplink max/mean")
    axes[1].bar(modes, [m["reordered_pct"] for m in d["modes"]], color=cols)
    axes[1].set_ylabel("out of PSN order, %")
    if coll:
        axes[2].bar(modes, [m.get("fabric_busbw_gbps") or 0 for m in d["modes"]], color=cols)
        axes[2].set_ylabel("busbw, fabric Gb/s")
        if host_bound:
            axes[2].set_title("busbw host-bound: the engine fell short of its rate (compare "
                              "modes within this run only)", fontsize=8)
    else:
        axes[2].bar(modes, [m.get("fct_p50_s") or 0 for m in d["modes"]], color=cols)
        axes[2].set_ylabel("FCT p50, lab s")
    for ax in axes:
        ax.grid(axis="y", alpha=0.3)
    scale = d.get("time_scale")
    notes = [f"time scale {scale:g}"] if scale else []
    if failed:
        notes.append(f"not applied: {', '.join(failed)}")
    if d.get("down_uplinks"):
        notes.append(f"uplinks down: {', '.join(d['down_uplinks'])}")
    axes[0].set_title("measured" + ("; " + "; ".join(notes) if notes else ""), fontsize=8)
    axes[1].set_ylim(bottom=0)
    return _svg(fig)


def load_charts(report: Report, spec: LabSpec) -> dict[str, list[tuple[str, Markup]]]:
    """Every load plot of the report: ``{"congestion": [(label, svg)], "uplinks": [(label,
    svg)], "lb": [(label, svg)]}`` (uplink bars from each collective run, and its fixed-port
    comparison; one :func:`lb_chart` per load-balancing comparison)."""
    cong = [(r.label, congestion_chart(r, spec.qos)) for r in report.congestion]
    ups: list[tuple[str, Markup]] = []
    for r in report.collectives:
        svg = uplink_chart(r.data.get("uplink_load") or {}, r.label)
        if svg is not None:
            ups.append((r.label, svg))
        fixed = (r.data.get("compare_sport") or {}).get("fixed")
        if fixed:
            svg = uplink_chart(fixed.get("uplink_load") or {}, f"{r.label} sport=fixed")
            if svg is not None:
                ups.append((f"{r.label} sport=fixed", svg))
    return {"congestion": cong, "uplinks": ups,
            "lb": [(r.label, lb_chart(r)) for r in report.load_balancing]}
