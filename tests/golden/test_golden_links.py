"""Links in golden/: git stores symlinks, so a pull request can plant one. xisa never reads, writes or
deletes through a link there: `bless` and `check` refuse it with one line naming the link (exit 2),
and the folder the link points to is byte-identical afterwards.

In-process (no compile): sample results blessed into a golden folder, then a link planted where a
kernel folder, a case folder, a golden's YAML, stream or pending file, the lock, or the golden folder
itself would be. End to end: the real CLI on a small project, with a kernel folder and a stream file
linked outside.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from test_reliability import _bless, _new_results, _old_goldens, _sample_result, assert_one_line_error, snapshot
from xisa.errors import GoldenError
from xisa.golden.store import GoldenSet
from xisa.golden.verdict import build_report


def _outside(tmp_path: Path) -> Path:
    """A folder outside the project holding what a bless would delete or overwrite through a link."""
    outside = tmp_path / "outside"
    (outside / "small").mkdir(parents=True)
    (outside / "small" / "gfx942.yaml").write_text("precious: yaml\n")   # golden-shaped: listed as unused
    (outside / "small" / "gfx942.isa").write_text("precious stream\n")
    (outside / "notes.txt").write_text("keep me\n")
    return outside


def _plant(how: str, golden_dir: Path, outside: Path) -> Path:
    """Plant a link that leaves the golden folder; returns the link."""
    if how == "kernel-folder":           # golden/oldkernel -> outside: its small/gfx942.yaml is an "unused golden"
        link = golden_dir / "oldkernel"
        link.symlink_to(outside)
    elif how == "case-folder":           # golden/scale/small -> outside/small: the cell's goldens are written there
        link = golden_dir / "scale" / "small"
        for path in link.iterdir():
            path.unlink()
        link.rmdir()
        link.symlink_to(outside / "small")
    elif how in ("yaml-file", "stream-file"):  # a golden file that is a link to a file outside
        link = golden_dir / "scale" / "small" / ("gfx942.yaml" if how == "yaml-file" else "gfx942.isa")
        shutil.copy(link, outside / link.name)
        link.unlink()
        link.symlink_to(outside / link.name)
    elif how == "pending-file":          # recovery would rename the link into place as the golden
        link = golden_dir / "scale" / "small" / "gfx942.yaml.pending"
        link.symlink_to(outside / "small" / "gfx942.yaml")
    elif how == "lock-file":             # the old lock file's name: opening or removing it would reach outside
        link = golden_dir / ".xisa.lock"
        link.unlink(missing_ok=True)
        link.symlink_to(outside / "created-by-xisa.lock")
    elif how == "golden-folder":         # the golden folder itself
        shutil.move(golden_dir, outside / "golden")
        golden_dir.symlink_to(outside / "golden")
        link = golden_dir
    else:
        raise AssertionError(how)
    return link


PLANTS = ["kernel-folder", "case-folder", "yaml-file", "stream-file", "pending-file", "lock-file", "golden-folder"]


@pytest.mark.parametrize("how", PLANTS)
def test_bless_and_check_refuse_a_link_in_the_golden_folder(tmp_path, monkeypatch, how):
    golden_dir, _ = _old_goldens(tmp_path, monkeypatch)
    outside = _outside(tmp_path)
    link = _plant(how, golden_dir, outside)
    monkeypatch.chdir(tmp_path)            # errors show paths relative to the working folder
    before_outside, before_golden = snapshot(outside), snapshot(golden_dir)
    shown = str(link.relative_to(tmp_path))
    results = _new_results()               # every cell changed: bless would write each one
    with pytest.raises(GoldenError) as info:
        _bless(results, golden_dir)
    message = str(info.value)
    assert message.startswith(f"{shown}: is a link") and "\n" not in message, message
    assert "never reads, writes or deletes goldens through a link" in message and info.value.exit_code == 2
    with pytest.raises(GoldenError) as info:
        build_report(results, {}, goldens=GoldenSet.for_results(golden_dir, results, display_root=tmp_path),
                     selected_targets={"gfx942", "gfx1100"},
                     kernel_filters=None, scopes=[], toolchain={"triton": "3.8.0"})
    assert str(info.value).startswith(f"{shown}: is a link")
    assert snapshot(outside) == before_outside
    assert not (outside / "created-by-xisa.lock").exists()
    assert snapshot(golden_dir) == before_golden and os.path.islink(link)


@pytest.mark.unit
def test_a_link_inside_the_golden_folder_is_refused_too(tmp_path, monkeypatch):
    """A link from one kernel folder to another would make bless rewrite the other kernel's goldens."""
    golden_dir, old = _old_goldens(tmp_path, monkeypatch)
    (golden_dir / "alias").symlink_to(golden_dir / "scale")
    with pytest.raises(GoldenError, match="is a link"):
        _bless([_sample_result(kernel="alias", case="small", target="gfx942", asm="dot_gfx1100.amdgcn")], golden_dir)
    assert snapshot(golden_dir) == old


# --- end to end: the repro of the issue, through the real CLI ----------------------------------------

@pytest.mark.parametrize("how", ["kernel-folder", "stream-file"])
def test_cli_refuses_a_golden_linked_outside_the_project(run_xisa, tinyproj, tmp_path, how):
    assert run_xisa("bless", "--arch", "gfx942", cwd=tinyproj).code == 0
    golden_dir = tinyproj / "golden"
    outside = _outside(tmp_path)
    link = _plant(how, golden_dir, outside)
    before = snapshot(outside)
    shown = str(link.relative_to(tinyproj))
    source = tinyproj / "kernels" / "scale.py"            # a change, so bless has goldens to write
    source.write_text(source.read_text().replace("y = x * factor\n", "y = x * factor * factor\n"))
    for command in ("bless", "check"):
        out = run_xisa(command, "--arch", "gfx942", cwd=tinyproj)
        assert_one_line_error(out, f"{shown}: is a link (to {outside}", "fix: replace the link")
        assert snapshot(outside) == before, command


@pytest.mark.unit
@pytest.mark.parametrize("command", ["bless", "check"])
def test_a_link_on_the_way_to_the_golden_folder_is_refused(run_xisa, tinyproj, tmp_path, command):
    """`[tool.xisa] golden = "data/golden"` with `data` a committed link leading out of the project: bless
    wrote its goldens there and deleted the golden-shaped files it found as unused."""
    outside = tmp_path / "outside"
    shutil.copytree(_outside(tmp_path), outside / "golden" / "oldkernel")
    (tinyproj / "data").symlink_to(outside)
    config = tinyproj / "pyproject.toml"
    config.write_text(config.read_text().replace('golden = "golden"', 'golden = "data/golden"'))
    before = snapshot(outside)
    out = run_xisa(command, "--arch", "gfx942", cwd=tinyproj)
    assert_one_line_error(out, f"data: is a link (to {outside}", "fix: replace the link")
    assert snapshot(outside) == before
