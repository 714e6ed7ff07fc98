"""`check` calls a cell the same exactly when `bless` would leave its golden as it is (issue 22, class 3).

A golden records the cell's binding, options, code-object fingerprint and sections, launch metadata, counts and
resources; whichever one differs, bless rewrites the golden, so check must say `changed`, and where none
differs (only a side table: stage fingerprints, source lines), both leave the cell alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from xisa.compile.worker.result import CellResult
from xisa.golden.bless import bless
from xisa.golden.store import GoldenSet
from xisa.golden.verdict import build_report

from support import RECORD_BASE, RECORD_MUTATIONS, RECORD_TOOLCHAIN, with_analysis

TOOLCHAIN = RECORD_TOOLCHAIN
BASE = RECORD_BASE
MUTATIONS = RECORD_MUTATIONS
_changed = with_analysis


def _judge(tmp_path: Path, head: CellResult):
    golden = tmp_path / "golden"
    common = dict(selected_targets={"gfx942"}, kernel_filters=None)
    bless([BASE], golden_dir=golden, display_root=tmp_path, toolchains={"gfx942": TOOLCHAIN}, stream_files=True,
          **common)
    goldens = GoldenSet.for_results(golden, [head], display_root=tmp_path)
    report = build_report([head], {}, goldens=goldens, scopes=[], toolchain=TOOLCHAIN, **common)
    outcome = bless([head], golden_dir=golden, display_root=tmp_path, toolchains={"gfx942": TOOLCHAIN},
                    stream_files=True, **common)
    return report.verdicts[0], outcome


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_whatever_bless_would_rewrite_check_calls_changed(tmp_path, monkeypatch, name):
    monkeypatch.delenv("CI", raising=False)
    verdict, outcome = _judge(tmp_path, MUTATIONS[name])
    assert outcome.written, name            # bless rewrote the golden ...
    assert verdict.verdict == "changed", (name, verdict.message)   # ... so check may not call it the same
    assert verdict.delta is not None and verdict.delta.fields


@pytest.mark.unit
def test_a_side_table_alone_changes_neither_verdict_nor_golden(tmp_path, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    moved = _changed(BASE, stages={"ttir": "f" * 64},
                     lines=[{"loc": "k.py:9", "text": "x", "count": 1, "histogram": {"s_endpgm": 1}}])
    verdict, outcome = _judge(tmp_path, moved)
    assert verdict.verdict == "same" and not outcome.written and outcome.unchanged


@pytest.mark.unit
def test_an_unchanged_stream_with_another_code_object_names_the_section(tmp_path, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    verdict, _ = _judge(tmp_path, MUTATIONS["a code section"])
    assert "the printed stream is the same, the code bytes are not (.note)" in verdict.message
    options_only, _ = _judge(tmp_path / "o", MUTATIONS["options.num_warps"])
    assert "options.num_warps: 4 -> 8" in options_only.message
