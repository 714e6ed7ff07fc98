"""Goldens, `check`, scopes, `bless` and `diff` on a small project of our own kernels."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from support import git, gfx11_branch_change
from xisa.golden.store import golden_paths, read_golden


@pytest.fixture
def blessed(run_xisa, tinyproj) -> Path:
    out = run_xisa("bless", cwd=tinyproj)
    assert out.code == 0, out.err
    assert "8 written" in out.out
    return tinyproj


def test_golden_files_are_canonical(blessed):
    yaml_path, stream_path = golden_paths(blessed / "golden", "scale", "big", "gfx942")
    text = yaml_path.read_text()
    data = yaml.safe_load(text)
    assert data["format"] == "xisa-golden/1" and data["toolchain"]["triton"]
    assert "generated_by" not in data       # a golden is a function of its cell's result, not of the command
    assert data["binding"]["attrs"]["x_ptr"] == ["tt.divisibility=16", "tt.pointer_range=32"]
    assert list(data) == sorted(data) and text.endswith("\n") and "\r" not in text and "&id" not in text
    assert str(blessed) not in text and "/tmp" not in text
    assert stream_path.read_text().startswith("bb0:\n")


def test_check_passes_on_fresh_goldens(run_xisa, blessed):
    out = run_xisa("check", cwd=blessed)
    assert out.code == 0, out.out + out.err
    assert "byte-identical: gfx1100, gfx1201, gfx942 (8 cells)" in out.out


def test_gfx11_only_change_fails_isolation_listing_only_gfx1100(run_xisa, blessed):
    gfx11_branch_change(blessed)
    out = run_xisa("check", "--format", "json", cwd=blessed)
    assert out.code == 1
    report = json.loads(out.out)
    changed = sorted(c["kernel"] + ":" + c["case"] + "@" + c["target"] for c in report["cells"]
                     if c["verdict"] == "changed")
    assert changed == ["scale:big@gfx1100", "scale:small@gfx1100"]
    assert report["isolation_violated"] == changed
    delta = next(c for c in report["cells"] if c["verdict"] == "changed")["delta"]
    assert delta["instructions"][0] > 0 and "binding_changed" in delta
    text = run_xisa("check", cwd=blessed)
    assert text.code == 1 and "isolation violated: scale:big@gfx1100, scale:small@gfx1100" in text.out

    scoped = run_xisa("check", "--scope", "gfx1100", cwd=blessed)
    assert scoped.code == 0, scoped.out
    assert "changed (in scope)" in scoped.out
    narrower = run_xisa("check", "--scope", "gfx1100:scale:small", cwd=blessed)
    assert narrower.code == 1 and "isolation violated: scale:big@gfx1100" in narrower.out


@pytest.mark.parametrize("damage", ["truncate", "conflict", "stream", "format"])
def test_damaged_golden_exits_2_naming_the_file(run_xisa, blessed, damage):
    yaml_path, stream_path = golden_paths(blessed / "golden", "scale", "small", "gfx942")
    text = yaml_path.read_text()
    if damage == "truncate":
        yaml_path.write_text(text[: len(text) // 3])
    elif damage == "conflict":
        yaml_path.write_text("<<<<<<< HEAD\n" + text + "=======\n" + text + ">>>>>>> branch\n")
    elif damage == "stream":
        stream_path.write_text(stream_path.read_text().replace("bb0:", "bb0:\n  s_nop 0", 1))
    else:
        yaml_path.write_text(text.replace("xisa-golden/1", "xisa-golden/0"))
    before = (yaml_path.read_bytes(), stream_path.read_bytes())
    out = run_xisa("check", cwd=blessed)
    assert out.code == 2
    assert "golden/scale/small/gfx942." in out.out
    assert (yaml_path.read_bytes(), stream_path.read_bytes()) == before   # check never rewrites


def test_other_toolchain_goldens_exit_2_naming_both_versions(run_xisa, blessed):
    import triton

    other = "3.9.0" if triton.__version__.startswith("3.6") else "3.6.0"
    for path in (blessed / "golden").rglob("*.yaml"):
        path.write_text(path.read_text().replace(f"triton: {triton.__version__}", f"triton: {other}"))
    out = run_xisa("check", cwd=blessed)
    assert out.code == 2 and out.out == ""
    [line] = out.err.splitlines()
    assert f"Triton {other} but {triton.__version__} is installed" in line and "golden/" in line


def test_missing_and_unused_goldens_are_regressions(run_xisa, blessed):
    yaml_path, stream_path = golden_paths(blessed / "golden", "dot", "f16_32", "gfx942")
    yaml_path.unlink()
    stream_path.unlink()
    spec = blessed / "kernels" / "scale.yaml"
    spec.write_text(spec.read_text().replace("name: big", "name: large"))
    out = run_xisa("check", "--format", "json", cwd=blessed)
    assert out.code == 1
    verdicts = {(c["kernel"], c["case"], c["target"]): c["verdict"] for c in json.loads(out.out)["cells"]}
    assert verdicts[("dot", "f16_32", "gfx942")] == "new"
    assert verdicts[("scale", "big", "gfx942")] == "unused"
    assert verdicts[("scale", "large", "gfx942")] == "new"
    # bless with a filter touches only that selection
    partial = run_xisa("bless", "--arch", "gfx942", "--kernel", "dot", cwd=blessed)
    assert partial.code == 0 and "1 written" in partial.out and "0 removed" in partial.out
    full = run_xisa("bless", cwd=blessed)
    assert full.code == 0 and "3 removed" in full.out
    assert run_xisa("check", cwd=blessed).code == 0


def test_expectation_failure_exits_1(run_xisa, blessed):
    spec = blessed / "kernels" / "dot.yaml"
    spec.write_text(spec.read_text().replace("'gfx9*': {'v_mfma*': '>0'}", "'gfx9*': {'v_mfma*': 0}"))
    out = run_xisa("check", "--format", "json", cwd=blessed)
    assert out.code == 1
    cell = next(c for c in json.loads(out.out)["cells"] if c["kernel"] == "dot" and c["target"] == "gfx942")
    assert cell["verdict"] == "expectation-failed" and "v_mfma* == 0 expected" in cell["expectations"][0]


@pytest.mark.unit
def test_bless_is_refused_in_ci(run_xisa, tinyproj):
    out = run_xisa("bless", cwd=tinyproj, env={"CI": "true"})
    assert out.code == 2 and "CI" in out.err
    assert not (tinyproj / "golden").exists()


def test_markdown_and_junit_reports(run_xisa, blessed, tmp_path):
    gfx11_branch_change(blessed)
    md = run_xisa("check", "--format", "markdown", "--count", "v_cvt*", cwd=blessed)
    assert md.code == 1
    assert "gfx1100: 2 changed, 1 byte-identical; byte-identical: gfx1201, gfx942 (5 cells)" in md.out
    junit_path = tmp_path / "junit.xml"
    out = run_xisa("check", "--format", "junit", "--output", str(junit_path), cwd=blessed)
    assert out.code == 1
    import xml.etree.ElementTree as ET

    suite = ET.parse(junit_path).getroot()
    assert suite.get("tests") == "8" and suite.get("failures") == "2"


def test_diff_against_a_git_revision(run_xisa, blessed):
    git(blessed, "init", "-q")
    git(blessed, "add", "-A")
    git(blessed, "commit", "-qm", "base")
    gfx11_branch_change(blessed)
    assert run_xisa("bless", "--arch", "gfx1100", cwd=blessed).code == 0
    git(blessed, "commit", "-qam", "gfx11 change")
    out = run_xisa("diff", "--base", "HEAD~1", "--scope", "gfx1100", "--format", "markdown", "--count", "v_add*",
                   cwd=blessed)
    assert out.code == 0, out.err
    assert "gfx1100: 2 changed, 1 byte-identical; byte-identical: gfx1201, gfx942 (5 cells)" in out.out
    assert "judged against `HEAD~1` (`" in out.out and "its goldens), scope `gfx1100`" in out.out
    assert "#### gfx1100" in out.out and "| `scale:small` |" in out.out and "`v_add*`" in out.out
    assert "<summary>gfx942: byte-identical (3 cells)</summary>" in out.out
    # The same comparison by compiling the base revision in a temporary worktree (no goldens needed there).
    compiled = run_xisa("diff", "--base", "HEAD~1", "--compile-base", "--format", "json", cwd=blessed)
    assert compiled.code == 1, compiled.err          # no scope declared: the gfx1100 change is a violation
    assert json.loads(compiled.out)["isolation_violated"] == ["scale:big@gfx1100", "scale:small@gfx1100"]
    verdicts = {(c["case"], c["target"]): c["verdict"] for c in json.loads(compiled.out)["cells"]
                if c["kernel"] == "scale"}
    assert verdicts[("small", "gfx1100")] == "changed" and verdicts[("small", "gfx942")] == "same"


def test_bless_killed_midway_leaves_every_golden_old_or_new(run_xisa, blessed, shared_cache):
    old = {p: p.read_bytes() for p in (blessed / "golden").rglob("*") if p.is_file() and p.suffix in (".yaml", ".isa")}
    # Make every cell change (a code edit that all targets compile), then warm the cache so bless goes
    # straight to writing, then kill it at different moments of the write phase.
    source = blessed / "kernels" / "scale.py"
    source.write_text(source.read_text().replace("mask = offsets < n", "mask = offsets < n - 1"))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["XISA_CACHE_DIR"] = str(shared_cache)
    assert run_xisa("compile", cwd=blessed).code == 0
    for delay in (0.05, 0.2, 0.4, 0.8):
        proc = subprocess.Popen([sys.executable, "-m", "xisa", "bless"], cwd=blessed, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for key in [("scale", "small", t) for t in ("gfx1100", "gfx1201", "gfx942")] + \
                   [("scale", "big", t) for t in ("gfx1100", "gfx1201", "gfx942")]:
            yaml_path, stream_path = golden_paths(blessed / "golden", *key)
            golden = read_golden(yaml_path, stream_path, display=str(yaml_path))  # never partial
            assert golden.stream_text is not None
    out = run_xisa("bless", cwd=blessed)
    assert out.code == 0
    new = {p: p.read_bytes() for p in (blessed / "golden").rglob("*") if p.is_file() and p.suffix in (".yaml", ".isa")}
    assert set(new) == set(old) and any(new[p] != old[p] for p in new)
    assert not list((blessed / "golden").rglob("*.pending")) and not list((blessed / "golden").rglob(".*.tmp"))


@pytest.mark.unit
def test_the_one_atomic_write_keeps_the_old_file_on_failure_and_sets_the_mode_asked(tmp_path, monkeypatch):
    """xisa.fsio.write_atomic: golden writes, the result cache, --emit and the HTML page all go through it."""
    from xisa.fsio import write_atomic

    shared, private = tmp_path / "page.html", tmp_path / "entry.json"
    write_atomic(shared, "<p>one</p>\n", mode=0o666)
    write_atomic(private, b"{}")
    umask = os.umask(0)
    os.umask(umask)
    assert shared.stat().st_mode & 0o777 == 0o666 & ~umask and private.stat().st_mode & 0o777 == 0o600
    assert shared.read_bytes() == b"<p>one</p>\n"

    def interrupted(src, dst, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(shared, "<p>two</p>\n", mode=0o666, fsync=True)
    assert shared.read_bytes() == b"<p>one</p>\n" and sorted(p.name for p in tmp_path.iterdir()) == ["entry.json",
                                                                                                       "page.html"]
