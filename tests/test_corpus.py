"""The bundled corpus: the README's main job passes, and a gfx11-only change stays on gfx11."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import REPO, needs_golden_toolchain


def corpus_copy(dest: Path) -> Path:
    for name in ("kernels", "golden", "targets"):
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", ".xisa.lock"))
    shutil.copy(REPO / "pyproject.toml", dest / "pyproject.toml")
    return dest


@needs_golden_toolchain
def test_check_passes_on_the_whole_corpus(run_xisa):
    out = run_xisa("check", "--format", "json", cwd=REPO)
    report = json.loads(out.out)
    assert out.code == 0, [c for c in report["cells"] if c["verdict"] != "same"][:3]
    cells = report["cells"]
    amd = [c for c in cells if c["target"].startswith("gfx")]
    assert len({c["kernel"] for c in cells}) >= 6 and len(amd) >= 40
    assert {c["target"] for c in amd} == {"gfx1100", "gfx1151", "gfx1200", "gfx1201", "gfx90a", "gfx942", "gfx950"}
    assert {c["target"] for c in cells} - {c["target"] for c in amd} == {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100",
                                                                         "sm_120"}
    assert all(c["verdict"] == "same" for c in cells)


@needs_golden_toolchain
def test_flipping_the_gfx11_reader_changes_only_gfx1100_cells(run_xisa, tmp_path):
    project = corpus_copy(tmp_path / "corpus")
    formats = project / "kernels" / "kv_formats.py"
    text = formats.read_text()
    flipped = text.replace("return (((c16 & 0x80) << 8) | ((c16 & 0x7F) << 7)).to(tl.float16, bitcast=True)",
                           "return (((c16 & 0x80) << 8) | ((c16 & 0x7F) << 6)).to(tl.float16, bitcast=True)")
    assert flipped != text
    formats.write_text(flipped)
    out = run_xisa("check", "--format", "json", "--arch", "gfx*", cwd=project)
    report = json.loads(out.out)
    changed = [c for c in report["cells"] if c["verdict"] == "changed"]
    assert out.code == 1 and changed
    assert {c["target"] for c in changed} == {"gfx1100"}
    assert all(c["verdict"] == "same" for c in report["cells"] if c["target"] != "gfx1100")
    scoped = run_xisa("check", "--arch", "gfx*", "--scope", "gfx11*", cwd=project)
    assert scoped.code == 0
