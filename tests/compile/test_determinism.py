"""Fingerprints must not move across runs, checkouts, hash seeds, job counts, or comment edits."""

from __future__ import annotations

import json
import shutil


def fingerprints(out) -> dict[str, str]:
    assert out.code == 0, out.err
    return {f"{c['kernel']}:{c['case']}@{c['target']}": c["sha256"] for c in json.loads(out.out)["cells"]}


def test_fingerprints_are_stable(run_xisa, tinyproj, tmp_path):
    first = fingerprints(run_xisa("compile", "--json", "--no-cache", "--jobs", "2", cwd=tinyproj,
                                  env={"PYTHONHASHSEED": "1"}))
    assert len(first) == 8
    # again, serially, another hash seed, and a cold Triton cache of our own
    second = fingerprints(run_xisa("compile", "--json", "--no-cache", "--jobs", "1", cwd=tinyproj,
                                   env={"PYTHONHASHSEED": "2", "XISA_CACHE_DIR": str(tmp_path / "cold")}))
    assert second == first
    # a copy of the checkout in another folder
    moved = tmp_path / "elsewhere" / "checkout"
    shutil.copytree(tinyproj, moved)
    assert fingerprints(run_xisa("compile", "--json", "--no-cache", cwd=moved)) == first
    # blank lines and a comment added above the kernel move every line number, not the code
    source = moved / "kernels" / "scale.py"
    source.write_text("# a comment\n\n\n\n" + source.read_text())
    assert fingerprints(run_xisa("compile", "--json", "--no-cache", cwd=moved)) == first
    # a warm result cache answers the same
    assert fingerprints(run_xisa("compile", "--json", cwd=moved)) == first


def test_a_real_code_change_moves_the_fingerprint(run_xisa, tinyproj):
    before = fingerprints(run_xisa("compile", "--json", "--arch", "gfx942", cwd=tinyproj))
    source = tinyproj / "kernels" / "scale.py"
    source.write_text(source.read_text().replace("y = x * factor\n", "y = x * factor * factor\n"))
    after = fingerprints(run_xisa("compile", "--json", "--arch", "gfx942", cwd=tinyproj))
    assert after["scale:small@gfx942"] != before["scale:small@gfx942"]
    assert after["dot:f16_32@gfx942"] == before["dot:f16_32@gfx942"]


def test_line_info_does_not_leak_into_nvidia_or_amd_fingerprints(run_xisa, tinyproj):
    """Line info stays on (as in a launch): .loc lines move with the source, fingerprints must not."""
    for name in ("scale.yaml", "dot.yaml"):
        spec = tinyproj / "kernels" / name
        spec.write_text(spec.read_text().replace("targets: [gfx1100", "targets: [sm_90, sm_100, gfx1100"))
    args = ("compile", "--json", "--no-cache", "--arch", "sm_90", "--arch", "sm_100", "--arch", "gfx1100")
    before = fingerprints(run_xisa(*args, cwd=tinyproj))
    assert len(before) == 9
    source = tinyproj / "kernels" / "scale.py"
    source.write_text("\n" * 37 + source.read_text().replace("import triton\n", "import triton  # moved\n"))
    assert fingerprints(run_xisa(*args, cwd=tinyproj)) == before
