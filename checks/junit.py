"""The one JUnit XML writer (``railab check --junit`` and the lab report's ``report.xml``), via
``xml.etree``.

Shape (the common Ant/Jenkins JUnit schema CI servers read): ``<testsuites name tests failures
errors skipped>`` > ``<testsuite name tests failures errors skipped time>`` > ``<testcase
classname name time>`` with a ``<failure message type>``, ``<error message>`` or ``<skipped
message>`` child, or ``<system-out>`` for a passing case with details.

Names (the same in both files, so a CI server tracks one check across them):

* suites are ``railab.<group>``: ``railab.<family>`` per check family for ``railab check``
  (``railab.bgp``), and ``railab.paths`` / ``railab.ecmp`` / ``railab.checks`` /
  ``railab.pipeline`` in the report;
* a check row's testcase is ``classname="railab.<lab>.<family>"`` ``name="<row name>"`` in both;
  a path flow is ``railab.<lab>.paths.<path class>``, an ECMP spread ``railab.<lab>.ecmp``,
  a pipeline error ``railab.<lab>.pipeline``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from railab.checks.base import CHECKS, CheckResult

CaseStatus = Literal["pass", "fail", "skip", "error"]


@dataclass(frozen=True)
class JUnitCase:
    """One ``<testcase>``: ``status`` pass/fail/skip/error, ``message`` (one line, the
    failure/skip/error attribute), ``text`` (element body; for a pass, ``<system-out>``),
    ``time_s`` in seconds."""

    classname: str
    name: str
    status: CaseStatus
    message: str = ""
    text: str = ""
    time_s: float = 0.0


def check_case(result: Any, lab: str, time_s: float = 0.0) -> JUnitCase:
    """The testcase of one check row: a :class:`CheckResult` or any object with its fields
    (``check``, ``name``, ``status``, ``expected``, ``observed``, ``reason``), e.g. the report's
    ``CheckItem``. Classname ``railab.<lab>.<family>``; message ``expected X, observed Y --
    reason``."""
    parts = []
    if result.expected is not None or result.observed is not None:
        parts.append(f"expected {result.expected}, observed {result.observed}")
    if result.reason:
        parts.append(result.reason)
    detail = " -- ".join(parts)
    status = result.status if result.status in ("pass", "fail", "skip", "error") else "error"
    if status == "skip":
        message = result.reason or "skipped"
    elif status == "pass":
        message = result.observed or ""
    else:
        message = detail or "failed"
    text = f"[{result.status}] {result.check} {result.name}" + (f": {detail}" if detail else "")
    return JUnitCase(f"railab.{lab}.{result.check}", result.name, status, message,
                     text if status != "pass" else (result.observed or ""), time_s)


def render_junit(suites: Iterable[tuple[str, list[JUnitCase]]], name: str) -> str:
    """The JUnit XML document (text with a UTF-8 declaration) for ``suites``: pairs of suite
    name (``railab.bgp``) and its cases, in order. ``name`` names the ``<testsuites>`` root."""
    suites = [(s, list(cases)) for s, cases in suites]
    every = [c for _, cases in suites for c in cases]

    def counts(cases: list[JUnitCase]) -> dict[str, str]:
        return {"tests": str(len(cases)),
                "failures": str(sum(c.status == "fail" for c in cases)),
                "errors": str(sum(c.status == "error" for c in cases)),
                "skipped": str(sum(c.status == "skip" for c in cases))}

    root = ET.Element("testsuites", name=name, **counts(every))
    for suite_name, cases in suites:
        suite = ET.SubElement(root, "testsuite", name=suite_name, **counts(cases),
                              time=f"{sum(c.time_s for c in cases):.3f}")
        for c in cases:
            tc = ET.SubElement(suite, "testcase", classname=c.classname, name=c.name,
                               time=f"{c.time_s:.3f}")
            if c.status == "fail":
                el = ET.SubElement(tc, "failure", type="CheckFailed",
                                   message=c.message.splitlines()[0] if c.message else "failed")
                el.text = c.text or c.message
            elif c.status == "error":
                ET.SubElement(tc, "error", message=c.message or "error").text = c.text or c.message
            elif c.status == "skip":
                ET.SubElement(tc, "skipped", message=c.message or "skipped")
            elif c.text:
                ET.SubElement(tc, "system-out").text = c.text
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def to_junit(results: list[CheckResult], lab: str = "lab") -> str:
    """JUnit XML for one ``railab check`` run: one ``railab.<family>`` suite per family present,
    in run order (see :data:`railab.checks.base.CHECKS`), one case per row (:func:`check_case`)."""
    order = {c: i for i, c in enumerate(CHECKS)}
    fams = sorted({r.check for r in results}, key=lambda f: (order.get(f, len(order)), f))
    suites = [(f"railab.{fam}", [check_case(r, lab) for r in results if r.check == fam])
              for fam in fams]
    return render_junit(suites, f"railab check {lab}")


def write_junit(results: list[CheckResult], path: str | Path, lab: str = "lab") -> Path:
    """Write :func:`to_junit` to ``path`` (parents created); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(to_junit(results, lab), encoding="utf-8")
    return p
