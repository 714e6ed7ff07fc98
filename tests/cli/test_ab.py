"""`xisa ab`: one selection under two sides (a codegen knob, another Python, the goldens), cell by cell.

The knob that changes code here is AMDGCN_USE_BUFFER_OPS=0: tinyproj's `scale:big` on gfx942 loads through
`buffer_load` by default (its spec expects it) and through `global_load` without buffer ops.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest

from support import REPO, gfx11_branch_change

CELL = ("--arch", "gfx942", "--kernel", "scale:big")
NO_BUFFER_OPS = ("--b-env", "AMDGCN_USE_BUFFER_OPS=0")


def _cells(out) -> dict[str, dict]:
    payload = json.loads(out.out)
    assert payload["kind"] == "ab" and payload["schema"] == 1
    return {f"{c['kernel']}:{c['case']}@{c['target']}": c for c in payload["cells"]}


def test_a_codegen_knob_reaches_the_compile_and_changes_the_cell(run_xisa, tinyproj):
    out = run_xisa("ab", *CELL, *NO_BUFFER_OPS, "--format", "json", cwd=tinyproj)
    assert out.code == 1, out.err
    payload = json.loads(out.out)
    cell = _cells(out)["scale:big@gfx942"]
    assert cell["verdict"] == "changed" and cell["base_sha256"] != cell["head_sha256"]
    moved = {row["mnemonic"]: (row["base"], row["head"]) for row in cell["delta"]["histogram"]}
    assert any(m.startswith("buffer_load") and a > 0 and b == 0 for m, (a, b) in moved.items())
    assert any(m.startswith("global_load") and a == 0 and b > 0 for m, (a, b) in moved.items())
    assert payload["sides"]["a"]["knobs"] == {} and payload["sides"]["b"]["knobs"] == {"AMDGCN_USE_BUFFER_OPS": "0"}
    assert payload["sides"]["a"]["toolchain"]["triton"] == payload["sides"]["b"]["toolchain"]["triton"]
    assert payload["targets"] == [{"target": "gfx942", "cells": 1, "counts": {"changed": 1},
                                   "instructions": [cell["base_instructions"], cell["head_instructions"]],
                                   "resources": payload["targets"][0]["resources"]}]
    # Run again: both sides come from the cache, each its own entry (a key without the knob would answer B
    # with A's result, and the cell would read `same`).
    again = run_xisa("ab", *CELL, *NO_BUFFER_OPS, "--format", "json", cwd=tinyproj)
    cell_again = _cells(again)["scale:big@gfx942"]
    assert again.code == 1 and cell_again["cached"] is True
    assert (cell_again["base_sha256"], cell_again["head_sha256"]) == (cell["base_sha256"], cell["head_sha256"])


def test_a_knob_s_result_never_answers_the_default_compile(run_xisa, tinyproj):
    cell = _cells(run_xisa("ab", *CELL, *NO_BUFFER_OPS, "--format", "json", cwd=tinyproj))["scale:big@gfx942"]
    after = json.loads(run_xisa("compile", *CELL, "--json", cwd=tinyproj).out)["cells"][0]
    assert after["cached"] is True and after["sha256"] == cell["base_sha256"] != cell["head_sha256"]


def test_a_knob_on_side_a_is_the_mirror_image(run_xisa, tinyproj):
    forward = _cells(run_xisa("ab", *CELL, *NO_BUFFER_OPS, "--format", "json", cwd=tinyproj))["scale:big@gfx942"]
    out = run_xisa("ab", *CELL, "--a-env", "AMDGCN_USE_BUFFER_OPS=0", "--format", "json", cwd=tinyproj)
    mirrored = _cells(out)["scale:big@gfx942"]
    assert out.code == 1
    assert (mirrored["base_sha256"], mirrored["head_sha256"]) == (forward["head_sha256"], forward["base_sha256"])


def test_a_knob_that_changes_nothing_here_gives_same_and_exit_0(run_xisa, tinyproj):
    # scale has no dot and no atomics: buffer atomics cannot change it. Equal sides exit 0.
    out = run_xisa("ab", *CELL, "--b-env", "AMDGCN_USE_BUFFER_ATOMICS=0", cwd=tinyproj)
    assert out.code == 0, out.err
    assert "gfx942: 1 same (1 cell)" in out.out


def test_text_shows_the_sides_the_delta_and_a_line_per_target(run_xisa, tinyproj):
    out = run_xisa("ab", "--arch", "gfx942", "--arch", "gfx1100", "--kernel", "scale", *NO_BUFFER_OPS, cwd=tinyproj)
    assert out.code == 1, out.err
    assert re.search(r"A = this Python \(triton [^)]*\) vs B = this Python \(triton [^)]*\) with "
                     r"AMDGCN_USE_BUFFER_OPS=0", out.out)
    assert re.search(r"scale:big@gfx942: instructions \d+.*global_load", out.out)
    for target in ("gfx942", "gfx1100"):
        assert re.search(rf"^{target}: .*\(2 cells\)", out.out, re.M)
    assert "isolation" not in out.out       # an A/B has no scope to violate


def test_markdown_has_the_per_target_table_and_html_names_the_sides(run_xisa, tinyproj, tmp_path):
    page = tmp_path / "ab.html"
    out = run_xisa("ab", *CELL, *NO_BUFFER_OPS, "--format", "markdown", "--html", str(page), cwd=tinyproj)
    assert out.code == 1
    assert "| target | cells | same | changed | error | instructions A → B |" in out.out
    assert re.search(r"^\| gfx942 \| 1 \| 0 \| 1 \| 0 \| \d+", out.out, re.M)
    html = page.read_text()
    assert 'id="side-a"' in html and "B = this Python" in html and "AMDGCN_USE_BUFFER_OPS=0" in html
    assert '<p class="outcome exit-1" id="outcome">fail: 1 cell differs between the sides</p>' in html


def test_goldens_as_side_a(run_xisa, tinyproj):
    assert run_xisa("bless", *CELL, cwd=tinyproj).code == 0
    same = run_xisa("ab", "--a-golden", *CELL, cwd=tinyproj)
    assert same.code == 0, same.err
    out = run_xisa("ab", "--a-golden", *CELL, *NO_BUFFER_OPS, "--format", "json", cwd=tinyproj)
    assert out.code == 1
    payload = json.loads(out.out)
    assert payload["sides"]["a"]["kind"] == "golden" and payload["sides"]["a"]["golden"] == "golden/"
    assert _cells(out)["scale:big@gfx942"]["golden"] == "golden/scale/big/gfx942.yaml"
    missing = run_xisa("ab", "--a-golden", "--arch", "gfx942", "--kernel", "scale:small", "--format", "json",
                       cwd=tinyproj)
    assert missing.code == 1 and _cells(missing)["scale:small@gfx942"]["verdict"] == "new"


def test_a_cell_no_side_compiles_is_an_error_and_exit_2(run_xisa, tinyproj):
    path = tinyproj / "kernels" / "scale.yaml"
    path.write_text(path.read_text() + "  - name: broken\n    constexprs: {BLOCK: 1000}\n")
    out = run_xisa("ab", "--arch", "gfx942", "--kernel", "scale:broken", *NO_BUFFER_OPS, "--format", "json",
                   cwd=tinyproj)
    assert out.code == 2
    cell = _cells(out)["scale:broken@gfx942"]
    assert cell["verdict"] == "error" and "both sides failed" in cell["message"] and "power of 2" in cell["message"]


@pytest.mark.parametrize("args, said", [
    ((), "both sides compile with the same Python and the same knobs"),
    (("--b-env", "AMDGCN_USE_BUFER_OPS=0", *CELL), "did you mean AMDGCN_USE_BUFFER_OPS"),
    (("--b-env", "TRITON_KERNEL_OVERRIDE=1"), "--b-env: TRITON_KERNEL_OVERRIDE replaces compiled kernels"),
    (("--b-env", "TRITON_CACHE_DIR=/tmp/x"), "changes nothing compiled"),
    (("--b-env", "TRITON_OVERRIDE_ARCH=gfx90a"), "compiles for another architecture than the cell's target"),
    (("--b-env", "HOME=/tmp"), "HOME is not a Triton, LLVM or compiler variable"),
    (("--b-env", "AMDGCN_USE_BUFFER_OPS"), "is not NAME=VALUE"),
    (("--a-golden", "--a-env", "AMDGCN_USE_BUFFER_OPS=0"), "--a-golden: the goldens as they are compile nothing"),
])
def test_sides_that_cannot_be_compared_are_refused_with_one_line(run_xisa_in_process, tinyproj, args, said):
    out = run_xisa_in_process("ab", *args, cwd=tinyproj)
    assert out.code == 2
    assert said in out.err and "Traceback" not in out.err and len(out.err.strip().splitlines()) == 1


def test_a_side_in_another_python_compiles_there(run_xisa, tinyproj):
    # The same interpreter as another Python: the side runs `python -m xisa ab-side` in a process of its
    # own (the path a second virtual environment takes), its knob given on its command line.
    out = run_xisa("ab", *CELL, "--b-python", sys.executable, *NO_BUFFER_OPS, "--format", "json", cwd=tinyproj)
    assert out.code == 1, out.err
    payload = json.loads(out.out)
    assert payload["sides"]["b"]["kind"] == "python" and payload["sides"]["b"]["python"] == sys.executable
    local = _cells(run_xisa("ab", *CELL, *NO_BUFFER_OPS, "--format", "json", cwd=tinyproj))["scale:big@gfx942"]
    assert _cells(out)["scale:big@gfx942"]["head_sha256"] == local["head_sha256"]


def _fake_python(folder: Path, facts: dict) -> Path:
    script = folder / "python"
    script.write_text(f"#!/bin/sh\necho '{json.dumps(facts)}'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.mark.parametrize("facts, said", [
    ({"triton": "3.5.0", "missing": []}, "has Triton 3.5.0, outside the range xisa supports (3.6 to 3.9)"),
    ({"triton": None, "missing": []}, "has no Triton installed"),
    ({"triton": "3.8.0", "missing": ["typer"]}, "cannot import typer"),
])
def test_another_python_that_cannot_compile_is_refused_before_anything_compiles(run_xisa_in_process, tinyproj,
                                                                                tmp_path, facts, said):
    python = _fake_python(tmp_path, {"python": [3, 12], "prefix": "/x", "xisa": None, **facts})
    out = run_xisa_in_process("ab", *CELL, "--b-python", str(python), cwd=tinyproj)
    assert out.code == 2 and f"--b-python: {python} {said}" in out.err, out.err
    gone = run_xisa_in_process("ab", *CELL, "--b-python", str(tmp_path / "nothing"), cwd=tinyproj)
    assert gone.code == 2 and "cannot run" in gone.err


def test_a_python_that_cannot_run_is_never_given_itself_as_the_fix(run_xisa_in_process, tinyproj, tmp_path):
    """`--b-python ../venv-3.9/bin/python` of a folder not made yet was told to name, e.g., ../venv-3.9/bin/python."""
    def fix_of(python: Path) -> str:
        out = run_xisa_in_process("ab", *CELL, "--b-python", str(python), cwd=tinyproj)
        assert out.code == 2 and "cannot run" in out.err, out.err
        return " ".join(out.err.split())    # unwrapped

    missing = tmp_path / "venv-3.9" / "bin" / "python"
    said = fix_of(missing)
    assert f"python3 -m venv {tmp_path / 'venv-3.9'} && {tmp_path / 'venv-3.9'}/bin/pip install 'triton>=3.6,<3.10'" \
        in said and str(missing) not in said.split("(fix: ", 1)[1]     # the path that failed is not the fix
    venv = tmp_path / "env"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    assert f"name the environment's interpreter: --b-python {venv / 'bin' / 'python'}" in fix_of(venv)
    elsewhere = fix_of(tmp_path / "nothing")
    assert f"then --b-python {tmp_path / 'venv-b' / 'bin' / 'python'}" in elsewhere
    text = tmp_path / "notes.txt"
    text.write_text("not a program\n")
    assert f"(fix: name an interpreter that runs, a virtual environment's VENV/bin/python ({text} is not one))" \
        in fix_of(text)


# A virtual environment with Triton 3.9 beside the checkout (docs/ab.md makes it: ../venv-t39), or one named by
# XISA_TEST_B_PYTHON.
B_PYTHON = Path(os.environ.get("XISA_TEST_B_PYTHON") or REPO.parent / "venv-t39" / "bin" / "python")


@pytest.mark.skipif(not B_PYTHON.exists(), reason="no second virtual environment with Triton 3.9 (../venv-t39 beside "
                                                  "the checkout, or XISA_TEST_B_PYTHON)")
def test_another_triton_is_described_and_compared(run_xisa, tinyproj):
    out = run_xisa("ab", *CELL, "--b-python", str(B_PYTHON), "--format", "json", cwd=tinyproj)
    assert out.code in (0, 1), out.err
    sides = json.loads(out.out)["sides"]
    assert sides["b"]["toolchain"]["triton"].startswith("3.9") and sides["a"]["toolchain"]["triton"] != \
        sides["b"]["toolchain"]["triton"]


# ------------------------------------------------------------------ the upgrade path: check and bless

def _golden_made_with(golden: Path, version: str) -> None:
    text = golden.read_text()
    installed = re.search(r"^  triton: (.+)$", text, re.M).group(1)
    golden.write_text(text.replace(f"  triton: {installed}\n", f"  triton: {version}\n"))


def test_check_under_another_toolchain_points_at_the_exact_ab_command(run_xisa, tinyproj):
    assert run_xisa("bless", *CELL, cwd=tinyproj).code == 0
    _golden_made_with(tinyproj / "golden" / "scale" / "big" / "gfx942.yaml", "3.7.0")
    out = run_xisa("check", *CELL, cwd=tinyproj)
    assert out.code == 2
    command = re.search(r"`(xisa ab [^`]+)`", out.err).group(1)
    assert command == "xisa ab --a-golden --arch gfx942 --kernel scale:big"
    followed = run_xisa(*command.split()[1:], cwd=tinyproj)          # the command as the message gives it
    assert followed.code == 0, followed.err                            # same code, another recorded Triton
    assert "A = the goldens in golden/ (triton 3.7.0)" in followed.out


def test_bless_under_a_new_toolchain_suggests_a_commit_message_of_what_changed(run_xisa, tinyproj):
    selection = ("--arch", "gfx1100", "--arch", "gfx942", "--kernel", "scale:small")
    assert run_xisa("bless", *selection, cwd=tinyproj).code == 0
    plain = run_xisa("bless", *selection, cwd=tinyproj)
    assert "suggested commit message" not in plain.out              # same toolchain: nothing to explain
    for target in ("gfx1100", "gfx942"):
        _golden_made_with(tinyproj / "golden" / "scale" / "small" / f"{target}.yaml", "3.7.0")
    gfx11_branch_change(tinyproj)                                      # the gfx1100 cell changes too
    out = run_xisa("bless", *selection, cwd=tinyproj)
    assert out.code == 0, out.err
    message = out.out.split("suggested commit message:", 1)[1]
    assert re.search(r"goldens: Triton 3\.7\.0 -> \d", message)
    assert re.search(r"^- gfx1100: 1 changed \(1 cell\); instructions \d+", message, re.M)
    assert re.search(r"^- gfx942: 1 same \(1 cell\)", message, re.M)
    assert "Changed cells (1): scale:small@gfx1100" in message


@pytest.mark.parametrize("extra, said", [
    ({"managed": True}, "is externally managed (PEP 668: its pip refuses to install); make a virtual environment"),
    ({"pip": False}, "has no pip; make a virtual environment"),
    ({"pip": False, "venv": False}, "has no pip; install its venv module (Debian: apt-get install python3-venv), "
                                    "make a virtual environment"),
])
def test_a_python_whose_pip_cannot_install_is_told_to_make_a_virtual_environment(run_xisa_in_process, tinyproj,
                                                                                  tmp_path, extra, said):
    """Debian's /usr/bin/python3 refuses `python3 -m pip install` (EXTERNALLY-MANAGED): the fix must not be it."""
    for facts in ({"triton": None, "missing": []}, {"triton": "3.8.0", "missing": ["yaml"]}):
        python = _fake_python(tmp_path, {"python": [3, 11], "prefix": "/usr", "xisa": None, **facts, **extra})
        out = run_xisa_in_process("ab", *CELL, "--b-python", str(python), cwd=tinyproj)
        fix = " ".join(out.err.split()).split("(fix: ", 1)[1]
        venv = tinyproj / "venv-b"
        assert out.code == 2 and fix.startswith(f"{python} {said}") and "-m pip install" not in fix, fix
        assert f"{python} -m venv {venv} && {venv}/bin/pip install 'triton>=3.6,<3.10' torch pyyaml typer rich, " \
               f"then --b-python {venv}/bin/python" in fix
    plain = _fake_python(tmp_path, {"python": [3, 11], "prefix": "/v", "xisa": None, "triton": "3.8.0",
                                    "missing": ["yaml"], "pip": True, "managed": False})
    out = run_xisa_in_process("ab", *CELL, "--b-python", str(plain), cwd=tinyproj)
    assert f"(fix: {plain} -m pip install pyyaml)" in " ".join(out.err.split())
