"""`docs/json-schema.md` says what the JSON report holds; `xisa.golden.report_json` writes it. The page's
`check` and `ab` examples are parsed (their `//` annotations dropped) and their keys held to what the
writer writes for a report with every part present: the summary, the base, a cell, its delta, a side, a
target. An example object holding `"…": "…"` lists some of its keys only: those must be written."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import yaml

from xisa.analyze.model import Analysis
from xisa.compile.worker.result import CellResult
from xisa.golden.ab import AbReport, Side
from xisa.golden.report_json import ab_payload, check_payload, report_payload
from xisa.golden.record import Golden
from xisa.golden.store import render_golden
from xisa.golden.verdict import CHANGED, CellVerdict, CheckReport, compute_delta

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)

DOC = Path(__file__).resolve().parents[2] / "docs" / "json-schema.md"
MORE = "…"


def _strip_annotations(text: str) -> str:
    """The example without its `// ...` annotations (outside strings)."""
    out, in_string, i = [], False, 0
    while i < len(text):
        char = text[i]
        if in_string:
            out.append(char)
            if char == "\\":
                out.append(text[i + 1])
                i += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
            out.append(char)
        elif text.startswith("//", i):
            i = text.index("\n", i) if "\n" in text[i:] else len(text)
            continue
        else:
            out.append(char)
        i += 1
    return "".join(out)


def documented(kind: str) -> dict:
    for block in re.findall(r"```jsonc?\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL):
        data = json.loads(_strip_annotations(block))
        if data.get("kind") == kind:
            return data
    raise AssertionError(f"docs/json-schema.md has no `{kind}` example")


def assert_keys(doc: dict, written: dict, where: str) -> None:
    keys = set(doc) - {MORE}
    if MORE in doc:   # some keys shown: each is written
        assert keys <= set(written), f"{where}: documented, not written: {sorted(keys - set(written))}"
    else:
        assert keys == set(written), (f"{where}: documented, not written: {sorted(keys - set(written))}; "
                                      f"written, not documented: {sorted(set(written) - keys)}")


def _result(stream: str, vgprs: int) -> CellResult:
    lines = stream.splitlines()
    histogram = {line.split()[0]: lines.count(line) for line in lines}
    analysis = Analysis(isa="amdgcn", sha256=hashlib.sha256(stream.encode()).hexdigest(), instructions=len(lines),
                        blocks=1, histogram=histogram, base_histogram=dict(histogram), classes={},
                        resources={"vgprs": vgprs, "scratch_bytes": 0}, stream_text=stream)
    return CellResult(kernel="k", case="c", target="gfx942", status="ok", analysis=analysis,
                      binding={"signature": {}, "constexprs": {}, "attrs": {}}, options={"num_warps": 4})


def _changed_cell() -> CellVerdict:
    base, head = _result("v_add_f32 v0, v1, v2", 8), _result("v_add_f32 v0, v1, v2\nv_mov_b32 v3, 0", 12)
    yaml_text, stream = render_golden(base, toolchain={"triton": "3.8.0"}, stream_file=True)
    golden = Golden(path=Path("golden/k/c/gfx942.yaml"), data=yaml.safe_load(yaml_text), stream_text=stream)
    return CellVerdict(kernel="k", case="c", target="gfx942", verdict=CHANGED, head=head, base=golden,
                       delta=compute_delta(golden.data, head), golden_file="golden/k/c/gfx942.yaml")


def test_the_check_report_is_written_as_documented():
    doc = documented("check")
    cell = _changed_cell()
    report = CheckReport(verdicts=[cell], toolchain={"triton": "3.8.0"}, golden_toolchains={}, scopes=[],
                         base={"revision": "main", "commit": "0" * 40, "compared": "goldens"}, stale_goldens=[cell])
    written = report_payload(report, accept=[])
    assert_keys(doc, written, "check")
    assert_keys(doc["base"], written["base"], "check.base")
    assert_keys(doc["cells"][0], written["cells"][0], "check.cells[]")
    assert_keys(doc["cells"][0]["delta"], written["cells"][0]["delta"], "check.cells[].delta")
    assert_keys(doc["cells"][0]["delta"]["histogram"][0], written["cells"][0]["delta"]["histogram"][0],
                "check.cells[].delta.histogram[]")
    assert_keys(doc["cells"][0]["delta"]["binding"][0], {"field": 1, "base": 1, "head": 1}, "delta.binding[]")
    assert written["stale_goldens"] == written["cells"]
    without_base = check_payload(CheckReport(verdicts=[cell], toolchain={}, golden_toolchains={}, scopes=[]))
    assert set(written) - set(without_base) == {"base", "stale_goldens", "accept"}   # "only against a base"


def test_the_ab_report_is_written_as_documented():
    doc = documented("ab")
    sides = [Side("A", toolchain={"triton": "3.8.0"}), Side("B", python="/v/bin/python", toolchain={"triton": "3.9.0"})]
    report = AbReport(verdicts=[_changed_cell()], toolchain={}, golden_toolchains={}, scopes=[], sides=sides)
    written = ab_payload(report)
    assert written == report_payload(report)
    assert_keys(doc, written, "ab")
    for label in ("a", "b"):
        assert_keys(doc["sides"][label], written["sides"][label], f"ab.sides.{label}")
    assert_keys(doc["targets"][0], written["targets"][0], "ab.targets[]")
    assert_keys(doc["cells"][0], written["cells"][0], "ab.cells[]")
    assert set(written["cells"][0]) == set(check_payload(report)["cells"][0])   # each cell is a check cell
