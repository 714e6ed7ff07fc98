"""The bundled corpus: the README's main job passes, and a gfx11-only change stays on gfx11."""

from __future__ import annotations

import json

import pytest

from support import copy_corpus, needs_golden_toolchain


@needs_golden_toolchain
def test_check_passes_on_the_whole_corpus(corpus_check):
    out = corpus_check
    report = json.loads(out.out)
    assert out.code == 0, [c for c in report["cells"] if c["verdict"] != "same"][:3]
    cells = report["cells"]
    amd = [c for c in cells if c["target"].startswith("gfx")]
    assert len({c["kernel"] for c in cells}) >= 6 and len(amd) >= 40
    assert {c["target"] for c in amd} == {"gfx1100", "gfx1151", "gfx1200", "gfx1201", "gfx90a", "gfx942", "gfx950"}
    assert {c["target"] for c in cells} - {c["target"] for c in amd} == {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100",
                                                                         "sm_120"}
    assert all(c["verdict"] == "same" for c in cells)


@pytest.mark.slow
@needs_golden_toolchain
def test_flipping_the_gfx11_reader_changes_only_gfx11_cells(run_xisa, tmp_path):
    project = copy_corpus(tmp_path / "corpus")
    formats = project / "kernels" / "kv_formats.py"
    text = formats.read_text()
    flipped = text.replace("return (((c16 & 0x80) << 8) | ((c16 & 0x7F) << 7)).to(tl.float16, bitcast=True)",
                           "return (((c16 & 0x80) << 8) | ((c16 & 0x7F) << 6)).to(tl.float16, bitcast=True)")
    assert flipped != text
    formats.write_text(flipped)
    # The kernels whose module reads kv_formats, directly or through a shared module (the others cannot see
    # the edit; their cells are checked unchanged by test_check_passes_on_the_whole_corpus).
    readers = {p.name for p in (project / "kernels").glob("*.py") if "kv_formats" in p.read_text()} - {"kv_formats.py"}
    kernels = [spec.stem for spec in (project / "kernels").glob("*.yaml")
               if any(f"source: {name}" in spec.read_text() for name in readers)]
    assert len(kernels) >= 3
    selection = [arg for name in kernels for arg in ("--kernel", name)]
    out = run_xisa("check", "--format", "json", "--arch", "gfx*", *selection, cwd=project)
    report = json.loads(out.out)
    assert {c["kernel"] for c in report["cells"]} == set(kernels)
    changed = [c for c in report["cells"] if c["verdict"] == "changed"]
    assert out.code == 1 and changed
    # The reader is gfx11's (kv_formats picks it for RDNA3 and RDNA3.5): gfx1100 and gfx1151 change.
    gfx11 = {c["target"] for c in report["cells"] if c["target"].startswith("gfx11")}
    assert {c["target"] for c in changed} == gfx11 and "gfx1100" in gfx11
    assert all(c["verdict"] == "same" for c in report["cells"] if c["target"] not in gfx11)
    scoped = run_xisa("check", "--arch", "gfx*", *selection, "--scope", "gfx11*", cwd=project)
    assert scoped.code == 0
