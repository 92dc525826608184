"""Check outcomes as JUnit XML, the shape Jenkins, GitLab and GitHub test reporters read.

<testsuites> holds one <testsuite> (the qualify config) whose tests/failures/errors/skipped/time
attributes are the counts of its <testcase> children (one per check). A failed check carries
<failure message type>, a check whose rows were all skipped carries <skipped message>; details go
in the element text and the case's <system-out>.
"""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass(frozen=True)
class Outcome:
    """The result of one check: status (pass/fail/skip), a one-line message, details, seconds measured."""

    name: str
    status: str
    message: str
    details: str = ""
    seconds: float = 0.0
    failure: str = "ThresholdNotMet"  # the JUnit failure type: ThresholdNotMet, Flagged, CaseFailed, NoMatchingRows


def to_xml(
    outcomes: Iterable[Outcome],
    suite: str,
    hostname: str,
    timestamp: dt.datetime | None = None,
    properties: dict[str, str] | None = None,
) -> str:
    """JUnit XML for one suite of check outcomes."""
    outcomes = list(outcomes)
    counts = _counts(outcomes)
    stamp = (timestamp or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%S")
    root = ET.Element("testsuites", name="gdsbench qualify", **counts)
    node = ET.SubElement(root, "testsuite", name=suite, hostname=hostname, timestamp=stamp, **counts)
    props = ET.SubElement(node, "properties")
    for key, value in (properties or {}).items():
        ET.SubElement(props, "property", name=key, value=str(value))
    for outcome in outcomes:
        node.append(_testcase(outcome, suite))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _counts(outcomes: list[Outcome]) -> dict[str, Any]:
    """The tests/failures/errors/skipped/time attributes, as strings."""
    return {
        "tests": str(len(outcomes)),
        "failures": str(sum(o.status == FAIL for o in outcomes)),
        "errors": "0",
        "skipped": str(sum(o.status == SKIP for o in outcomes)),
        "time": f"{sum(o.seconds for o in outcomes):.3f}",
    }


def _testcase(outcome: Outcome, suite: str) -> ET.Element:
    """One <testcase>, with <failure> or <skipped> when it did not pass."""
    case = ET.Element("testcase", name=outcome.name, classname=f"qualify.{suite}", time=f"{outcome.seconds:.3f}")
    if outcome.status == FAIL:
        ET.SubElement(case, "failure", message=outcome.message, type=outcome.failure).text = outcome.details
    elif outcome.status == SKIP:
        ET.SubElement(case, "skipped", message=outcome.message)
    out = ET.SubElement(case, "system-out")
    out.text = "\n".join(filter(None, [outcome.message, outcome.details]))
    return case
