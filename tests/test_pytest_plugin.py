"""`pytest --xisa`: one test per cell of the bundled corpus; a hand-edited golden fails readably."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import copy_corpus, needs_golden_toolchain


@pytest.mark.slow
@needs_golden_toolchain
def test_pytest_xisa_passes_then_fails_with_a_readable_diff(tmp_path, pytest_here):
    # One architecture of the corpus: the plugin's verdicts and texts are the same on each; the whole corpus
    # is checked by tests/test_corpus.py through the same application layer.
    project = copy_corpus(tmp_path / "corpus")
    cells = len(list((project / "golden").glob("*/*/gfx942.yaml")))
    assert cells >= 10
    def pytest_xisa(*args: str) -> Session:
        return pytest_here(project, "--xisa", "--xisa-arch", "gfx942", "--strict-markers", *args, "kernels")

    ok = pytest_xisa()
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-2000:]
    assert f"{cells} passed" in ok.stdout
    golden = project / "golden" / "gemm" / "bf16_4k" / "gfx942.yaml"
    import yaml

    # A hand edit that keeps the golden self-consistent, so it reads as a changed cell, not a corrupt one.
    data = yaml.safe_load(golden.read_text())
    name = next(m for m in data["histogram"] if m.startswith("v_mfma"))
    value = data["histogram"][name]
    data["histogram"][name] = value + 3
    data["instructions"] = sum(data["histogram"].values())
    data["sha256"], data["stream"] = "0" * 64, None
    golden.write_text(yaml.safe_dump(data, sort_keys=True))
    bad = pytest_xisa()
    assert bad.returncode == 1
    assert "1 failed" in bad.stdout
    assert "gemm:bf16_4k@gfx942: changed: changed outside the declared scope" in bad.stdout
    assert f"{name}: {value + 3} -> {value} (-3)" in bad.stdout
    assert "accept with: xisa bless --arch gfx942 --kernel gemm:bf16_4k" in bad.stdout
    scoped = pytest_xisa("--xisa-scope", "gfx942:gemm")
    assert scoped.returncode == 0, scoped.stdout[-2000:]


@pytest.mark.slow
def test_xisa_update_blesses_is_refused_in_ci_and_combines_under_xdist(tinyproj, pytest_here):
    def run(*args: str, ci: bool = False) -> Session:
        return pytest_here(tinyproj, "--xisa", "--strict-markers", *args, "kernels", ci=ci)

    refused = run("--xisa-update", ci=True)
    assert refused.returncode == 4 and "CI" in refused.stderr
    assert not (tinyproj / "golden").exists()
    blessed = run("--xisa-update")
    assert blessed.returncode == 0 and "8 passed" in blessed.stdout
    assert len(list((tinyproj / "golden").glob("*/*/*.yaml"))) == 8
    parallel = run("-n", "2")
    assert parallel.returncode == 0 and "8 passed" in parallel.stdout, parallel.stdout[-2000:]
    source = tinyproj / "kernels" / "scale.py"
    source.write_text(source.read_text().replace("y = x * factor + 1.0", "y = x * factor + 3.0"))
    failing = run("-n", "2")
    assert failing.returncode == 1 and "2 failed, 6 passed" in failing.stdout


def _pytest(cwd: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["XISA_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=900)


@dataclass
class Session:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def warm_imports():
    """Torch, Triton and xisa imported before pytester snapshots `sys.modules`: it drops the modules imported
    after the snapshot, and Triton's and torch's C extensions cannot be imported a second time."""
    import xisa.api  # noqa: F401
    from xisa.compile.launch.warm import import_compile_modules

    import_compile_modules()


@pytest.fixture
def pytest_here(warm_imports, pytester, monkeypatch, shared_cache):
    """A user's `pytest ARGS` in `cwd`, run in this test's process (pytester's in-process run: the plugin's
    hooks, collection, compile pool and exit codes as in a process of its own, without starting Python,
    torch and Triton again for each of the dozen sessions a test runs)."""
    def run(cwd: Path, *args: str, ci: bool = False) -> Session:
        monkeypatch.chdir(cwd)
        if ci:
            monkeypatch.setenv("CI", "true")
        else:
            monkeypatch.delenv("CI", raising=False)
        monkeypatch.setenv("XISA_CACHE_DIR", str(shared_cache))
        result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-rfE", *args)
        return Session(int(result.ret), result.stdout.str(), result.stderr.str())

    return run


@pytest.mark.slow
def test_xisa_runs_the_cells_alone_and_a_printed_node_id_reruns_one_cell(tinyproj, pytest_here, run_xisa):
    """In a repository with its own tests, `pytest --xisa` runs the cells only; a failure's node id,
    passed back, runs that one cell."""
    (tinyproj / "tests").mkdir()
    (tinyproj / "tests" / "test_unit.py").write_text("def test_unit():\n    pass\n")
    with (tinyproj / "pyproject.toml").open("a") as handle:
        handle.write('\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    assert run_xisa("bless", "-q", cwd=tinyproj).code == 0
    assert "1 passed" in pytest_here(tinyproj).stdout                       # without --xisa: the suite
    cells = pytest_here(tinyproj, "--xisa")
    assert cells.returncode == 0 and "8 passed" in cells.stdout, cells.stdout[-2000:]   # the cells, not test_unit
    both = pytest_here(tinyproj, "--xisa", "tests")
    assert both.returncode == 0 and "9 passed" in both.stdout                          # named paths run as well
    listed = pytest_here(tinyproj, "--xisa", "--collect-only")
    assert "xisa::scale:big@gfx1100" in listed.stdout and "test_unit" not in listed.stdout

    source = tinyproj / "kernels" / "scale.py"
    source.write_text(source.read_text().replace("y = x * factor + 1.0", "y = x * factor + 3.0"))
    failing = pytest_here(tinyproj, "--xisa")
    assert failing.returncode == 1 and "2 failed, 6 passed" in failing.stdout
    assert "FAILED xisa::scale:big@gfx1100" in failing.stdout
    assert "re-run: pytest --xisa xisa::scale:big@gfx1100" in failing.stdout
    assert "accept with: xisa bless --arch gfx1100 --kernel scale:big" in failing.stdout
    node_id = "xisa::scale:big@gfx1100"
    for args in ([node_id], ["--xisa", node_id]):                       # --xisa is implied by a cell's node id
        one = pytest_here(tinyproj, *args)
        assert one.returncode == 1 and "1 failed" in one.stdout and "passed" not in one.stdout, one.stdout[-2000:]
    by_glob = pytest_here(tinyproj, "xisa::scale:*@gfx942")
    assert by_glob.returncode == 0 and "2 passed" in by_glob.stdout
    by_keyword = pytest_here(tinyproj, "--xisa", "-k", "scale and gfx942")
    assert by_keyword.returncode == 0 and "2 passed, 6 deselected" in by_keyword.stdout
    typo = pytest_here(tinyproj, "xisa::scale:bigg@gfx1100")
    assert typo.returncode == 4 and "no cell matches xisa::scale:bigg@gfx1100 (did you mean xisa::scale:big@gfx1100?)" \
        in typo.stderr
    scope = pytest_here(tinyproj, "--xisa", "--xisa-scope", "gfx110")
    assert scope.returncode == 4 and "did you mean 'gfx1100'" in scope.stderr


def test_a_stray_golden_fails_the_session_as_xisa_check_does(tinyproj, pytest_here, run_xisa):
    """A golden with no cell: `xisa check` rejects it (unused, exit 1), so `pytest --xisa` must too: every
    cell passes, the terminal summary names the golden, and the session fails (with and without xdist)."""
    assert run_xisa("bless", "-q", cwd=tinyproj).code == 0
    stray = tinyproj / "golden" / "scale" / "ghost" / "gfx942.yaml"
    stray.parent.mkdir()
    shutil.copy(tinyproj / "golden" / "scale" / "small" / "gfx942.yaml", stray)
    check = run_xisa("check", cwd=tinyproj)
    assert check.code == 1 and "unused: scale:ghost@gfx942" in check.out
    for extra in ((), ("-n", "2")):
        session = pytest_here(tinyproj, "--xisa", *extra)
        assert session.returncode == 1 and "8 passed" in session.stdout and "failed" not in session.stdout, \
            session.stdout[-2000:]
        assert "unused golden: scale:ghost@gfx942" in session.stdout and "golden/scale/ghost/gfx942.yaml" \
            in session.stdout, session.stdout[-2000:]
    # Outside the selection, the golden is not judged, as by `xisa check --arch gfx1100`.
    narrow = pytest_here(tinyproj, "--xisa", "--xisa-arch", "gfx1100")
    assert narrow.returncode == 0 and "unused" not in narrow.stdout, narrow.stdout[-2000:]
    # Cells deselected by -k still exist: their goldens are not unused.
    stray.unlink()
    keyword = pytest_here(tinyproj, "--xisa", "-k", "gfx942")
    assert keyword.returncode == 0 and "unused" not in keyword.stdout, keyword.stdout[-2000:]


KNOB_PROBE = '''
import json, os
from pathlib import Path

def _knobs():
    from triton import knobs
    return {f"{name}.{knob}": repr(getattr(getattr(knobs, name), knob))
            for name in ("cache", "compilation", "language", "amd", "runtime")
            for knob in getattr(knobs, name).knob_descriptors}

def pytest_configure(config):
    config.stash_before = (dict(os.environ), _knobs())

def pytest_unconfigure(config):
    env, knobs = config.stash_before
    after_env, after_knobs = dict(os.environ), _knobs()
    for state in (env, after_env):   # pytest's own: inherited from the outer test, popped by this pytest
        state.pop("PYTEST_CURRENT_TEST", None)
    Path("probe.json").write_text(json.dumps({
        "env": sorted(k for k in set(env) | set(after_env) if env.get(k) != after_env.get(k)),
        "knobs": sorted(k for k in knobs if knobs[k] != after_knobs[k])}))
'''


def test_the_session_gives_the_environment_and_triton_knobs_back(tinyproj, tmp_path):
    """A cold compile pins Triton's codegen variables and points its cache at xisa's: after the xisa
    session, the user's process has its own environment and Triton knobs again."""
    (tinyproj / "conftest.py").write_text(KNOB_PROBE)
    cold = tmp_path / "cold-cache"
    session = _pytest(tinyproj, cold, "--xisa", "--xisa-update", "--xisa-arch", "gfx942", "--xisa-kernel",
                      "scale:small")
    assert session.returncode == 0 and "1 passed" in session.stdout, session.stdout[-2000:] + session.stderr[-2000:]
    assert any(cold.iterdir())                                   # it compiled, cold
    import json

    probe = json.loads((tinyproj / "probe.json").read_text())
    assert probe == {"env": [], "knobs": []}


@pytest.mark.slow
def test_a_session_ends_with_its_cache_within_the_limit(tinyproj, tmp_path):
    """The cells' review material (streams, source lines, parsed goldens) is written after the compile's trim: the
    session trims again as it finishes, as every xisa command does."""
    from xisa.compile.incremental.cache_limit import cache_info

    with (tinyproj / "pyproject.toml").open("a") as handle:
        handle.write('cache_size = "4KB"\n')
    cache = tmp_path / "cache"
    for args in (("--xisa-update",), ()):
        session = _pytest(tinyproj, cache, "--xisa", *args, "kernels")
        assert session.returncode == 0 and "8 passed" in session.stdout, session.stdout[-2000:] + session.stderr
        assert (cache / "review").is_dir()
        assert cache_info(cache, 4 * 1024).size <= 4 * 1024, args
