"""JUnit XML from merged cells, for CI pages that only understand JUnit.

pytest's own --junitxml is per process and per shard; this one is written from results.json, so
the CI view and the Markdown reports always show the same night. Known-failure outcomes map onto
JUnit's vocabulary so that a fixed bug (xpassed) turns the CI page red, and a cell that never ran
is an error (with the reason), never a silent absence.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Mapping, Sequence

from harness.reporting.cell_schema import diagnosis_lines, outcome_message

# status -> JUnit child element of <testcase>; passed has none.
JUNIT_ELEMENT = {
    "failed": "failure",
    "crashed": "error",
    "skipped": "skipped",
    "xfailed": "skipped",
    "xpassed": "failure",
    "not_run": "error",
}


def _details(cell: Mapping) -> str:
    """Body text of a failure/error: the numbers and the command to reproduce it."""
    lines = [outcome_message(cell), *diagnosis_lines(cell)]
    if cell["max_abs_err"] is not None:
        lines.append(
            f"max_abs_err={cell['max_abs_err']} max_rel_err={cell['max_rel_err']} "
            f"mismatch_frac={cell['mismatch_frac']} tolerance={cell['tolerance']}"
        )
    lines.append(f"rerun: {cell['rerun']}")
    return "\n".join(lines)


def junit_tree(cells: Sequence[Mapping]) -> ET.ElementTree:
    counts = Counter(JUNIT_ELEMENT.get(cell["status"]) for cell in cells)
    suite = ET.Element(
        "testsuite",
        name="attn-harness",
        tests=str(len(cells)),
        failures=str(counts["failure"]),
        errors=str(counts["error"]),
        skipped=str(counts["skipped"]),
        time=f"{sum(cell['wall_s'] or 0 for cell in cells):.3f}",
    )
    for cell in cells:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"{cell['backend']}.{cell['mode']}.{cell['runner']}",
            name=cell["cell_id"],
            time=f"{cell['wall_s'] or 0:.3f}",
        )
        element = JUNIT_ELEMENT.get(cell["status"])
        if element:
            child = ET.SubElement(case, element, message=outcome_message(cell))
            if element != "skipped":
                child.text = _details(cell)
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(cells: Sequence[Mapping], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    junit_tree(cells).write(path, encoding="utf-8", xml_declaration=True)
