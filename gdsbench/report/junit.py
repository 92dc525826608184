"""Check outcomes as JUnit XML, the shape Jenkins, GitLab and GitHub test reporters read.

<testsuites> holds one <testsuite> (the qualify config) whose tests/failures/errors/skipped/time
attributes are the counts of its <testcase> children (one per check). A failed check carries
<failure message type>, a check whose rows were all skipped carries <skipped message>; an inconclusive one
(its rows flagged: the measurement not to be trusted) is <skipped message="inconclusive: ...">, or with `strict` a
<failure type="Inconclusive">; details go in the element text and the case's <system-out>.
"""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

PASS, FAIL, SKIP, INCONCLUSIVE = "pass", "fail", "skip", "inconclusive"


@dataclass(frozen=True)
class Outcome:
    """The result of one check: status (pass/fail/skip/inconclusive), a one-line message, details, seconds
    measured."""

    name: str
    status: str
    message: str
    details: str = ""
    seconds: float = 0.0
    failure: str = (
        "ThresholdNotMet"  # the JUnit failure type: ThresholdNotMet, Inconclusive, CaseFailed, NoMatchingRows
    )


def to_xml(
    outcomes: Iterable[Outcome],
    suite: str,
    hostname: str,
    timestamp: dt.datetime | None = None,
    properties: dict[str, str] | None = None,
    strict: bool = False,
) -> str:
    """JUnit XML for one suite of check outcomes (`strict`: an inconclusive check is a failure)."""
    outcomes = [failed(o) if strict and o.status == INCONCLUSIVE else o for o in outcomes]
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
        "skipped": str(sum(o.status in (SKIP, INCONCLUSIVE) for o in outcomes)),
        "time": f"{sum(o.seconds for o in outcomes):.3f}",
    }


def _testcase(outcome: Outcome, suite: str) -> ET.Element:
    """One <testcase>, with <failure> or <skipped> when it did not pass."""
    case = ET.Element("testcase", name=outcome.name, classname=f"qualify.{suite}", time=f"{outcome.seconds:.3f}")
    if outcome.status == FAIL:
        ET.SubElement(case, "failure", message=outcome.message, type=outcome.failure).text = outcome.details
    elif outcome.status in (SKIP, INCONCLUSIVE):
        ET.SubElement(case, "skipped", message=outcome.message)
    out = ET.SubElement(case, "system-out")
    out.text = "\n".join(filter(None, [outcome.message, outcome.details]))
    return case


def failed(outcome: Outcome) -> Outcome:
    """An inconclusive outcome as a failure of type Inconclusive (qualify --strict)."""
    return Outcome(outcome.name, FAIL, outcome.message, outcome.details, outcome.seconds, "Inconclusive")


def exit_status(outcomes: list[Outcome], strict: bool) -> int:
    """qualify's exit status: 1 when a check failed; 3 when one was inconclusive and `strict`, or when none passed
    and one was inconclusive (a gate never passes having judged nothing); else 0."""
    statuses = {o.status for o in outcomes}
    if FAIL in statuses:
        return 1
    if INCONCLUSIVE in statuses and (strict or PASS not in statuses):
        return 3
    return 0
