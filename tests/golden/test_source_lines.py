"""Source-line attribution end to end on tinyproj, on an AMD and an NVIDIA target: a moved line changes neither
the fingerprint nor the verdict nor a golden; an edit at a known line is reported at exactly that line; every
table adds up to its cell's instructions; lines of a called @triton.jit helper are the helper's; goldens
without a table still check, and `bless --record-stages` adds it to unchanged cells only."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from support import copy_tinyproj, git, write_files
from xisa.analyze.lines import NO_LINE, split_loc
from xisa.golden.store import golden_paths, list_goldens
from xisa.yamlio import dump_yaml

ARCHS = ("gfx942", "sm_90")           # one target per vendor keeps the compiles short
SELECT = ("--arch", ARCHS[0], "--arch", ARCHS[1], "--kernel", "scale:small")
EDITED = "        y = x * factor\n"   # line 13 of kernels/scale.py: the path both targets compile


def _cells(out) -> dict[str, dict]:
    cells = {f"{c['kernel']}:{c['case']}@{c['target']}": c for c in json.loads(out.out)["cells"]}
    for cell in cells.values():   # every cell compiled in these tests: its table adds up to its instructions
        rows = cell.get("lines")
        if rows is not None and cell.get("instructions") is not None:
            assert sum(r["count"] for r in rows) == cell["instructions"], cell
            assert all(sum(r["histogram"].values()) == r["count"] for r in rows)
    return cells


def _goldens(project: Path) -> dict[Path, bytes]:
    folder = project / "golden"
    return {path: path.read_bytes() for key in list_goldens(folder)
            for path in golden_paths(folder, *key) if path.exists()}


def _insert_above(project: Path, text: str = "\n# a comment and a blank line moved every line below\n") -> None:
    source = project / "kernels" / "scale.py"
    body = source.read_text()
    source.write_text(body.replace("\n\n@triton.jit\ndef scale_kernel", f"\n{text}\n@triton.jit\ndef scale_kernel", 1))


def _line_of(project: Path, text: str) -> int:
    lines = (project / "kernels" / "scale.py").read_text().splitlines()
    return lines.index(text.rstrip("\n")) + 1


@pytest.fixture
def project(run_xisa, tmp_path) -> Path:
    tinyproj = copy_tinyproj(tmp_path / "tinyproj")
    spec = tinyproj / "kernels" / "scale.yaml"
    spec.write_text(spec.read_text().replace("targets: [gfx1100, gfx1201, gfx942]",
                                             "targets: [gfx1100, gfx1201, gfx942, sm_90]"))
    out = run_xisa("bless", *SELECT, cwd=tinyproj)
    assert out.code == 0, out.err
    return tinyproj


def test_goldens_keep_the_table_with_project_relative_paths_and_line_texts(project):
    assert _line_of(project, EDITED) == 13
    for arch in ARCHS:
        yaml_path, _ = golden_paths(project / "golden", "scale", "small", arch)
        text = yaml_path.read_text()
        assert str(project) not in text and "/tmp" not in text
        golden = yaml.safe_load(text)
        rows = {r["loc"]: r for r in golden["lines"]}
        assert sum(r["count"] for r in golden["lines"]) == golden["instructions"]
        assert rows["kernels/scale.py:13"]["text"] == EDITED.strip()
        assert all(loc == NO_LINE or loc.startswith("kernels/scale.py:") for loc in rows)


def test_a_moved_line_keeps_fingerprint_verdict_and_golden_bytes(run_xisa, project):
    before = _goldens(project)
    base = _cells(run_xisa("compile", *SELECT, "--json", cwd=project))
    _insert_above(project)
    check = run_xisa("check", *SELECT, "--format", "json", cwd=project)
    assert check.code == 0, check.out
    cells = _cells(check)
    assert {c["verdict"] for c in cells.values()} == {"same"}
    head = _cells(run_xisa("compile", *SELECT, "--json", cwd=project))
    for cell_id, cell in head.items():
        assert cell["sha256"] == base[cell_id]["sha256"]
        assert [r["text"] for r in cell["lines"]] == [r["text"] for r in base[cell_id]["lines"]]
        assert [r["loc"] for r in cell["lines"]] != [r["loc"] for r in base[cell_id]["lines"]]   # the table moved
    blessed = run_xisa("bless", *SELECT, cwd=project)
    assert blessed.code == 0 and "0 written" in blessed.out
    assert _goldens(project) == before


def test_an_edit_at_a_known_line_is_attributed_to_that_line_on_amd_and_nvidia(run_xisa, project):
    _insert_above(project)                  # the edit also moves: matched by its text, not by its number
    source = project / "kernels" / "scale.py"
    source.write_text(source.read_text().replace(EDITED, "        y = x * factor - 1.0\n"))
    edited_at = _line_of(project, "        y = x * factor - 1.0")
    assert edited_at == 15          # two lines inserted above line 13
    check = run_xisa("check", *SELECT, "--format", "json", cwd=project)
    assert check.code == 1
    cells = _cells(check)
    for arch in ARCHS:
        cell = cells[f"scale:small@{arch}"]
        assert cell["verdict"] == "changed"
        first, *rest = cell["line_changes"]
        assert (first["head_loc"], first["base_loc"]) == (f"kernels/scale.py:{edited_at}", "kernels/scale.py:13")
        assert first["text"] == "y = x * factor - 1.0" and first["histogram"]
        # every other line that still has instructions is paired with itself: none shows as -N/+N
        assert all(c["base_loc"] and c["head_loc"] for c in rest), rest
    text = run_xisa("check", *SELECT, cwd=project)
    for arch in ARCHS:
        assert f"scale:small@{arch}: by source line:" in text.out
    assert f"kernels/scale.py:{edited_at} (was :13) `y = x * factor - 1.0`: " in text.out
    markdown = run_xisa("check", *SELECT, "--format", "markdown", cwd=project)
    assert f"| `scale:small` | `kernels/scale.py:{edited_at}` `y = x * factor - 1.0` |" in markdown.out
    page = project / "report.html"
    assert run_xisa("report", "--html", str(page), *SELECT, cwd=project).code == 1
    blobs = {b["id"]: b for b in (json.loads(x) for x in re.findall(r'class="cell-data">(.*?)</script>',
                                                                     page.read_text()))}
    for arch in ARCHS:   # the kernel's lines with their counts on both targets, the edited one marked
        source = blobs[f"scale:small@{arch}"]["source"]
        assert source["targets"] == list(ARCHS) and source["this"] == arch and blobs[f"scale:small@{arch}"]["diff"]
        rows = {row[0]: row for row in source["rows"]}
        edited = rows[f"kernels/scale.py:{edited_at}"]
        assert edited[1] == "y = x * factor - 1.0" and all(n for n in edited[2]) and edited[4]
        assert sum(row[2][ARCHS.index(arch)] or 0 for row in source["rows"]) == cells[f"scale:small@{arch}"][
            "head_instructions"]


def test_lines_of_a_called_jit_helper_are_the_helpers(run_xisa, project):
    write_files(project / "kernels", {
        "calls.py": "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef twice_plus_one(x):\n"
                    "    return x * 2.0 + 1.0\n\n\n@triton.jit\ndef calls_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):\n"
                    "    offsets = tl.arange(0, BLOCK)\n    x = tl.load(x_ptr + offsets)\n"
                    "    tl.store(y_ptr + offsets, twice_plus_one(x))\n",
        "calls.yaml": "name: calls\nsource: calls.py\nfunction: calls_kernel\ntargets: [gfx942, sm_90]\n"
                      "cases:\n  - name: c\n    args: {x_ptr: '*fp32', y_ptr: '*fp32'}\n"
                      "    constexprs: {BLOCK: 256}\n",
    })
    cells = _cells(run_xisa("compile", "--arch", ARCHS[0], "--arch", ARCHS[1], "--kernel", "calls", "--json",
                            cwd=project))
    for arch in ARCHS:
        rows = {r["loc"]: r for r in cells[f"calls:c@{arch}"]["lines"]}
        assert rows["kernels/calls.py:7"]["text"] == "return x * 2.0 + 1.0"
        assert rows["kernels/calls.py:7"]["count"] > 0


def test_a_golden_without_the_table_checks_is_not_rewritten_and_record_stages_adds_it(run_xisa, project):
    for key in list_goldens(project / "golden"):
        yaml_path, _ = golden_paths(project / "golden", *key)
        data = yaml.safe_load(yaml_path.read_text())
        del data["lines"]
        yaml_path.write_text(dump_yaml(data))
    without = _goldens(project)
    check = run_xisa("check", *SELECT, cwd=project)
    assert check.code == 0, check.out + check.err
    blessed = run_xisa("bless", *SELECT, cwd=project)
    assert blessed.code == 0 and "0 written" in blessed.out and _goldens(project) == without
    source = project / "kernels" / "scale.py"
    source.write_text(source.read_text().replace(EDITED, "        y = x * factor - 1.0\n"))
    changed = run_xisa("check", *SELECT, "--format", "json", cwd=project)
    assert changed.code == 1 and not changed.err.strip()
    assert {c["line_changes"] is None for c in _cells(changed).values()} == {True}
    text = run_xisa("check", *SELECT, cwd=project)
    assert "scale:small@gfx942: source lines unknown (a side has no source-line table; record it with " \
           "`xisa bless --record-stages`)" in text.out
    source.write_text(source.read_text().replace("        y = x * factor - 1.0\n", EDITED))
    recorded = run_xisa("bless", "--record-stages", *SELECT, cwd=project)
    assert recorded.code == 0, recorded.err
    for key in list_goldens(project / "golden"):
        yaml_path, _ = golden_paths(project / "golden", *key)
        assert yaml.safe_load(yaml_path.read_text())["lines"]


def test_a_broken_table_is_never_read_for_an_unchanged_cell_unknown_for_a_changed_one_and_repaired_by_bless(
        run_xisa, project):
    yaml_path, _ = golden_paths(project / "golden", "scale", "small", "gfx942")
    sm90_path, _ = golden_paths(project / "golden", "scale", "small", "sm_90")
    data = yaml.safe_load(yaml_path.read_text())
    data["lines"][0]["count"] += 1                       # its histogram no longer adds up to it: malformed
    yaml_path.write_text(dump_yaml(data))
    sm90 = yaml.safe_load(sm90_path.read_text())
    sm90["lines"][0]["count"] += 1                       # a consistent row, but the table no longer adds up
    sm90["lines"][0]["histogram"][next(iter(sm90["lines"][0]["histogram"]))] += 1
    sm90_path.write_text(dump_yaml(sm90))
    # A byte-identical check reads no source-line table (a warm check costs what it did without them).
    unchanged = run_xisa("check", *SELECT, cwd=project)
    assert unchanged.code == 0, unchanged.out + unchanged.err
    source = project / "kernels" / "scale.py"
    source.write_text(source.read_text().replace(EDITED, "        y = x * factor - 1.0\n"))
    changed = run_xisa("check", *SELECT, "--format", "json", cwd=project)
    assert changed.code == 1, changed.err
    cells = _cells(changed)
    assert cells["scale:small@gfx942"]["line_changes"] is None      # malformed: attribution unknown, no error
    assert cells["scale:small@sm_90"]["line_changes"] is None       # no longer describes the golden
    source.write_text(source.read_text().replace("        y = x * factor - 1.0\n", EDITED))
    blessed = run_xisa("bless", *SELECT, cwd=project)      # the malformed golden is rewritten, the stale kept
    assert blessed.code == 0 and "1 written, 1 unchanged" in blessed.out, blessed.out + blessed.err
    assert yaml.safe_load(sm90_path.read_text()) == sm90
    recorded = run_xisa("bless", "--record-stages", *SELECT, cwd=project)   # which refreshes the stale table
    assert recorded.code == 0, recorded.out + recorded.err
    for path in (yaml_path, sm90_path):
        rows = yaml.safe_load(path.read_text())["lines"]
        assert sum(r["count"] for r in rows) == yaml.safe_load(path.read_text())["instructions"]
        assert all(sum(r["histogram"].values()) == r["count"] for r in rows)


def test_a_second_lines_block_is_a_golden_error(run_xisa, project):
    yaml_path, _ = golden_paths(project / "golden", "scale", "small", "gfx942")
    yaml_path.write_text(yaml_path.read_text() + "lines: []\n")   # a second top-level `lines:`
    broken = run_xisa("check", *SELECT, cwd=project)
    assert broken.code == 2 and "lines" in broken.out + broken.err


def test_moving_the_checkout_changes_no_golden(run_xisa, project, tmp_path):
    moved = tmp_path / "elsewhere" / "deeper"
    shutil.copytree(project, moved)
    before = _goldens(moved)
    assert run_xisa("check", *SELECT, cwd=moved).code == 0
    blessed = run_xisa("bless", *SELECT, cwd=moved)
    assert blessed.code == 0 and "0 written" in blessed.out and _goldens(moved) == before


def test_ab_reports_by_source_line(run_xisa, project):
    source = project / "kernels" / "scale.py"
    source.write_text(source.read_text().replace(EDITED, "        y = x * factor - 1.0\n"))
    ab = run_xisa("ab", "--a-golden", "--b-env", "TRITON_DEFAULT_FP_FUSION=0", *SELECT, "--format", "json",
                  cwd=project)
    assert ab.code == 1, ab.err
    for arch in ARCHS:
        cell = _cells(ab)[f"scale:small@{arch}"]
        assert cell["verdict"] == "changed"
        assert cell["line_changes"][0]["loc"] == "kernels/scale.py:13"
        assert cell["line_changes"][0]["text"] == "y = x * factor - 1.0"


def test_the_pr_gate_comment_names_the_edited_line(run_xisa, project):
    # the gate judges every cell: keep only the two this file blesses
    (project / "kernels" / "dot.yaml").unlink()
    spec = project / "kernels" / "scale.yaml"
    spec.write_text(spec.read_text().replace("targets: [gfx1100, gfx1201, gfx942, sm_90]", "targets: [gfx942, sm_90]")
                    .split("  - name: big")[0])
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "kernel and goldens")
    _insert_above(project)
    source = project / "kernels" / "scale.py"
    source.write_text(source.read_text().replace(EDITED, "        y = x * factor - 1.0\n"))
    gate = run_xisa("diff", "--base", "main", "--scope", "sm_90", cwd=project)
    assert gate.code == 1, gate.out + gate.err           # gfx942 changed outside the scope
    assert "| `scale:small` | `kernels/scale.py:15` `y = x * factor - 1.0` |" in gate.out
    assert gate.out.count("| cell | where | change |") == 2   # one short table per changed target


def test_a_loop_is_named_by_its_project_relative_source_line(run_xisa, project):
    """The loop report reads each instruction's location (`Analysis.locs`): shown like the table's paths."""
    write_files(project / "kernels", {
        "acc.py": "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
                  "def acc_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    offsets = tl.arange(0, BLOCK)\n"
                  "    acc = tl.zeros([BLOCK], dtype=tl.float32)\n    for start in range(0, n, BLOCK):\n"
                  "        acc += tl.exp(tl.load(x_ptr + start + offsets))\n    tl.store(y_ptr + offsets, acc)\n",
        "acc.yaml": "name: acc\nsource: acc.py\nfunction: acc_kernel\ntargets: [gfx942, sm_90]\ncases:\n  - name: c\n"
                    "    args: {x_ptr: '*fp32', y_ptr: '*fp32', n: 4096}\n    constexprs: {BLOCK: 256}\n",
    })
    cells = _cells(run_xisa("compile", "--arch", ARCHS[0], "--arch", ARCHS[1], "--kernel", "acc", "--loops", "--json",
                            cwd=project))
    for arch in ARCHS:
        loops = cells[f"acc:c@{arch}"]["loops"]
        assert loops and all(loop["loc"] in ("kernels/acc.py:9", "kernels/acc.py:10") for loop in loops), loops


def _emitted_cubin(run_xisa, project: Path, folder: Path) -> bytes:
    """The sm_90 cubin of lib:c, compiled afresh (line information and the DWARF naming its files included)."""
    out = run_xisa("compile", "--arch", "sm_90", "--no-cache", "--emit", str(folder), "-q", cwd=project)
    assert out.code == 0, out.err
    (cubin,) = folder.rglob("*.cubin")
    return cubin.read_bytes()


LIBRARY_KERNEL = """import triton
import triton.language as tl


@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r)
    y = x * 2.0
    tl.store(y_ptr + r, y)
"""


def test_a_library_moved_from_site_packages_to_vendor_keeps_its_lines_and_the_edit_first(run_xisa, tmp_path):
    """Issue 26, item 3: base goldens made with the library installed (a site-packages folder outside the
    project), head with it vendored (`vendor/`, `[tool.xisa] pythonpath`) and one line edited: the gate pairs
    every line with itself (no phantom removed/added lines) and the edited line comes first, on both vendors."""
    library = {"fakelib/__init__.py": "", "fakelib/ops.py": LIBRARY_KERNEL}
    site = write_files(tmp_path / "venv" / "lib" / "python3.11" / "site-packages", library)
    project = write_files(tmp_path / "proj", {   # the full layout: the goldens' own line tables are compared
        "pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\ngolden_layout = "full"\n',
        "kernels/lib.yaml": "name: lib\nmodule: fakelib.ops\nfunction: kern\ntargets: [gfx942, sm_90]\ncases:\n"
                            "  - name: c\n    args: {x_ptr: '*fp32', y_ptr: '*fp32'}\n    constexprs: {BLOCK: 256}\n"})
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(site))                   # installed: importable from site-packages
        assert run_xisa("bless", cwd=project).code == 0
        installed_cubin = _emitted_cubin(run_xisa, project, tmp_path / "emit-installed")
    goldens = {}
    for arch in ARCHS:
        goldens[arch] = yaml.safe_load(golden_paths(project / "golden", "lib", "c", arch)[0].read_text())
        assert {split_loc(r["loc"])[0] for r in goldens[arch]["lines"]} - {NO_LINE} == {"fakelib/ops.py"}
        assert all(r["text"] for r in goldens[arch]["lines"] if r["loc"] != NO_LINE)   # read on NVIDIA too
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "goldens with fakelib installed")
    write_files(project / "vendor", library)               # vendored as it is: nothing changes, DWARF included
    (project / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["kernels"]\ngolden_layout = "full"\n'
                                            'pythonpath = ["vendor"]\n')
    moved = _cells(run_xisa("compile", "--json", cwd=project))
    for arch in ARCHS:
        assert moved[f"lib:c@{arch}"]["lines"] == goldens[arch]["lines"]
    assert _emitted_cubin(run_xisa, project, tmp_path / "emit-vendored") == installed_cubin
    (project / "vendor" / "fakelib" / "ops.py").write_text(LIBRARY_KERNEL.replace("y = x * 2.0", "y = x * 2.0 + 1.0"))
    gate = run_xisa("check", "--base", "main", "--format", "json", cwd=project)
    assert gate.code == 1, gate.out + gate.err             # changed, and no scope declared
    cells = _cells(gate)
    for arch in ARCHS:
        first, *rest = cells[f"lib:c@{arch}"]["line_changes"]
        assert first["edited"] and first["loc"] == "fakelib/ops.py:9" and first["text"] == "y = x * 2.0 + 1.0"
        assert first["base_loc"] == first["head_loc"]
        assert all(c["base_loc"] and c["head_loc"] for c in rest if c["loc"] != NO_LINE), rest
    markdown = run_xisa("diff", "--base", "main", cwd=project)
    assert "vendor/" not in markdown.out and "| `lib:c` | `fakelib/ops.py:9` `y = x * 2.0 + 1.0` |" in markdown.out
