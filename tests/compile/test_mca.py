"""llvm-mca's loop estimate: the parse of its output and the doctor line are pure and tested without it;
running it is tested where it is installed (skipped with the reason elsewhere)."""

from __future__ import annotations

import pytest

from xisa.analyze.backends import AMD
from xisa.analyze.loops import find_loops
from xisa.compile.tools import mca
from xisa.render.doctor import render_doctor_text

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)

# llvm-mca 22's summary view, as it prints it (the figures are this sample's own).
SAMPLE = """Iterations:        10
Instructions:      720
Total Cycles:      2230
Total uOps:        720

Dispatch Width:    1
uOps Per Cycle:    0.32
IPC:               0.32
Block RThroughput: 128.0


Resources:
[0]   - HWBranch
[1]   - HWExport
[2]   - HWLGKM
[3]   - HWSALU
[4]   - HWVALU
[5]   - HWVMEM
[6]   - HWXDL


Resource pressure per iteration:
[0]    [1]    [2]    [3]    [4]    [5]    [6]    
3.00    -     26.00  7.00   16.00  4.00   128.00 
"""


def test_pressure_per_iteration_is_read_per_named_pipe():
    pressure, rthroughput = mca.parse_pressure(SAMPLE)
    assert pressure == {"HWBranch": 3.0, "HWExport": 0.0, "HWLGKM": 26.0, "HWSALU": 7.0, "HWVALU": 16.0,
                        "HWVMEM": 4.0, "HWXDL": 128.0}
    assert rthroughput == 128.0
    assert mca.parse_pressure("") == ({}, None)


def test_estimate_text_is_labelled_a_model_and_says_what_was_dropped():
    pressure, rthroughput = mca.parse_pressure(SAMPLE)
    estimate = mca.Estimate(tool=mca.McaTool("/x/llvm-mca", "22.1.8"), cpu="gfx942", pressure=pressure,
                            block_rthroughput=rthroughput, instructions=72, dropped=2)
    text = estimate.text()
    assert text.startswith("model estimate (llvm-mca 22.1.8 -mcpu=gfx942, not a measurement)")
    assert text.index("HWXDL 128") < text.index("HWLGKM 26") and "HWExport" not in text
    assert "2 of 72 instructions dropped" in text


def test_without_llvm_mca_the_estimate_is_one_line_and_doctor_says_so(monkeypatch):
    monkeypatch.setattr(mca, "find_llvm_mca", lambda: None)
    (loop,) = find_loops(AMD.stream_from_text("bb0:\n  s_nop 0\nbb1:\n  v_mov_b32 v0, 0\n  s_cbranch_scc1 bb1\n"
                                              "bb2:\n  s_endpgm\n"), AMD)
    said = mca.estimate_loop(loop, triple=AMD.mca_triple, cpu="gfx942")
    assert isinstance(said, str) and "llvm-mca not found" in said and "\n" not in said
    assert mca.estimate_loop(loop, triple=None, cpu="sm_90") == "no llvm-mca model for this ISA"
    facts = mca.doctor_facts({"gfx942": AMD.mca_triple}, {"gfx942": "gfx942"})
    assert facts["found"] is False and facts["no_model"] == ["gfx942"]


def test_doctor_line_names_the_modelled_targets_and_the_others():
    info = {"triton": {"version": "3.8.0", "supported": True, "supported_range": "3.6-3.9",
                       "amd_codegen_revision": None}, "backends": [], "tools": {}, "pinned": {}, "overridden": {},
            "refused": {}, "refused_known": [], "unclassified": [], "harmless": {}, "devices": [],
            "goldens": {"dir": None}, "warnings": [], "verdict": "ok",
            "llvm_mca": {"found": True, "path": "/usr/bin/llvm-mca-22", "version": "22.1.8",
                         "models": ["gfx942"], "no_model": ["gfx1250"]}}
    line = next(x for x in render_doctor_text(info).splitlines() if x.startswith("llvm-mca"))
    assert "LLVM 22.1.8" in line and "for gfx942" in line and "does not know gfx1250" in line
    info["llvm_mca"] = {"found": False}
    assert "not found" in next(x for x in render_doctor_text(info).splitlines() if x.startswith("llvm-mca"))


@pytest.mark.skipif(mca.find_llvm_mca() is None, reason="llvm-mca is not installed (Debian's llvm-20 or newer)")
def test_real_llvm_mca_counts_a_refused_line_and_still_estimates():
    tool = mca.find_llvm_mca()
    if "gfx942" not in mca.known_cpus(tool, AMD.mca_triple):
        pytest.skip(f"llvm-mca {tool.version} does not know gfx942")
    lines = ["v_add_f32_e32 v0, v1, v2", "not_an_instruction v0", "v_mfma_f32_32x32x8_bf16 v[0:15], v[16:17], "
             "v[18:19], v[0:15]", "s_cbranch_scc1 bb1"]
    estimate = mca.estimate_body(tool, AMD.mca_triple, "gfx942", lines)
    assert estimate.dropped == 1 and estimate.instructions == len(lines)
    assert estimate.pressure and max(estimate.pressure.values()) > 0
