"""JUnit XML for check results (one ``<testsuite>`` per check family), via ``xml.etree``.

Shape (the common JUnit schema CI servers read): ``<testsuites>`` > ``<testsuite name tests
failures errors skipped>`` > ``<testcase classname name>`` with ``<failure message type>`` or
``<skipped message>`` children.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from railab.checks.base import CheckResult
from railab.checks.runner import summary


def to_junit(results: list[CheckResult], lab: str = "lab") -> str:
    """Return the JUnit XML document (text, UTF-8 declaration) for ``results``."""
    root = ET.Element("testsuites", name=f"railab check {lab}",
                      tests=str(len(results)),
                      failures=str(sum(r.status == "fail" for r in results)),
                      errors="0", skipped=str(sum(r.status == "skip" for r in results)))
    for fam, counts in summary(results).items():
        suite = ET.SubElement(root, "testsuite", name=f"railab.{fam}",
                              tests=str(sum(counts.values())), failures=str(counts["fail"]),
                              errors="0", skipped=str(counts["skip"]))
        for r in (r for r in results if r.check == fam):
            case = ET.SubElement(suite, "testcase", classname=f"railab.{lab}.{fam}", name=r.name)
            if r.status == "fail":
                el = ET.SubElement(case, "failure", type="CheckFailed",
                                   message=f"expected {r.expected}, observed {r.observed}")
                el.text = r.message()
            elif r.status == "skip":
                ET.SubElement(case, "skipped", message=r.reason or "skipped")
            elif r.observed:
                ET.SubElement(case, "system-out").text = r.observed
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(results: list[CheckResult], path: str | Path, lab: str = "lab") -> Path:
    """Write :func:`to_junit` to ``path`` (parents created); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(to_junit(results, lab), encoding="utf-8")
    return p
