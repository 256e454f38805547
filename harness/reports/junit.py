"""JUnit XML of a gate verdict: one testsuite, one testcase per condition (returns text)."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from ..sequential import REASON_BUDGET as REASON_UNDECIDED

CLASSNAME = "dflash-qualify.gate"


def _case_name(condition: dict) -> str:
    group = condition.get("group")
    return condition["name"] + (f"[{group}]" if group is not None else "")


def render_junit(suite_name: str, conditions: list[dict]) -> str:
    """JUnit XML text: `<testsuites><testsuite>` with a `<testcase>` per condition.

    Args:
        suite_name: e.g. "dflash-qualify gate: exact-bands-aba".
        conditions: [{"name", "group", "passed", "reason", "message"}] as produced by
            analysis.verdict (gate adds an "evidence_valid" condition for invalid evidence).
    Returns:
        UTF-8 XML text with a declaration; failures carry type=<reason> and message. A condition
        the budget left undecided (INCONCLUSIVE: reason budget_exhausted) is `<skipped>`, not a
        failure: the change was neither shown good nor bad (the gate still exits 4).
    """
    undecided = [c for c in conditions if not c["passed"] and c["reason"] == REASON_UNDECIDED]
    failures = sum(1 for c in conditions if not c["passed"]) - len(undecided)
    suites = ET.Element("testsuites", name="dflash-qualify", tests=str(len(conditions)),
                        failures=str(failures), errors="0", skipped=str(len(undecided)))
    suite = ET.SubElement(suites, "testsuite", name=suite_name, tests=str(len(conditions)),
                          failures=str(failures), errors="0", skipped=str(len(undecided)))
    for c in conditions:
        case = ET.SubElement(suite, "testcase", classname=CLASSNAME, name=_case_name(c))
        if c["passed"]:
            ET.SubElement(case, "system-out").text = c["message"]
        elif c["reason"] == REASON_UNDECIDED:
            skipped = ET.SubElement(case, "skipped", type=REASON_UNDECIDED,
                                    message=f"INCONCLUSIVE: {c['message']}")
            skipped.text = f"{REASON_UNDECIDED}: {c['message']}"
        else:
            failure = ET.SubElement(case, "failure", type=str(c["reason"]), message=c["message"])
            failure.text = f"{c['reason']}: {c['message']}"
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
