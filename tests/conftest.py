"""Shared fixtures: a small project of our own kernels, and a way to run the real `xisa` command."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


def _golden_toolchain_skip():
    """The repo's goldens are made with one Triton; under another one they are a toolchain difference."""
    from importlib.metadata import version

    from xisa.compile.toolchain import GOLDEN_TRITON

    installed = version("triton")
    return pytest.mark.skipif(installed != GOLDEN_TRITON, reason=f"the repo's goldens are made with Triton "
                              f"{GOLDEN_TRITON}; {installed} is installed (xisa check reports that, exit 2)")


needs_golden_toolchain = _golden_toolchain_skip()

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parent.parent


@dataclass
class Outcome:
    code: int
    out: str
    err: str


def _xisa_env(cache: Path | None, env: dict[str, str] | None) -> dict[str, str]:
    """The caller's environment as a user's shell would hand it over: no CI or NO_COLOR, wide lines."""
    full = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR")}
    if cache is not None:
        full["XISA_CACHE_DIR"] = str(cache)
    full["COLUMNS"] = "250"
    full.update(env or {})
    return full


def xisa_process(*args: str, cwd: Path, cache: Path | None = None, env: dict[str, str] | None = None,
                 timeout: float = 900, entry_point: bool = False) -> Outcome:
    """Run xisa in a process of its own: `python -m xisa`, or with `entry_point` the installed `xisa` script,
    as a user and .ci/run call it (its sys.path, part of the cache key, is then theirs: its results warm
    the `xisa check` that .ci/run runs after the tests)."""
    script = Path(sys.executable).with_name("xisa")
    command = [str(script)] if entry_point and script.exists() else [sys.executable, "-m", "xisa"]
    proc = subprocess.run([*command, *args], cwd=cwd, env=_xisa_env(cache, env), capture_output=True, text=True,
                          timeout=timeout)
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def xisa_in_process(*args: str, cwd: Path, cache: Path | None = None, env: dict[str, str] | None = None) -> Outcome:
    """`xisa.cli.main(args)` in this process, for input refused before anything compiles: the same error
    boundary and exit codes as the command, without a process start per case. The working directory,
    environment and signal handlers are restored after it."""
    import xisa.cli

    saved_env, saved_cwd, saved_path = dict(os.environ), os.getcwd(), list(sys.path)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        os.environ.clear()
        os.environ.update(_xisa_env(cache, env))
        os.chdir(cwd)
        sys.path.insert(0, str(Path(cwd).resolve()))   # as `python -m xisa` has it
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                xisa.cli.main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.path[:] = saved_path
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return Outcome(code, out.getvalue(), err.getvalue())


def copy_corpus(dest: Path) -> Path:
    """A copy of the bundled corpus (kernels, goldens, targets, pyproject.toml) at `dest`, to edit freely."""
    for name in ("kernels", "golden", "targets"):
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", ".xisa.lock"))
    shutil.copy(REPO / "pyproject.toml", dest / "pyproject.toml")
    return dest


def write_files(root: Path, files: dict[str, str]) -> Path:
    """Each `relative path: text` of `files` written under `root` (folders made); returns `root`."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


_ONE_CASE_SPEC = """name: {name}
{where}
function: kern
targets: [{targets}]
cases:
  - name: c
    args: {{x_ptr: '*fp32', y_ptr: '*fp32'}}
    constexprs: {{BLOCK: 64}}
"""


def one_case_spec(name: str, where: str, targets: str = "gfx942") -> str:
    """A spec of `kern(x_ptr, y_ptr, BLOCK)` with one case `c`; `where` is its `source:` or `module:` line."""
    return _ONE_CASE_SPEC.format(name=name, where=where, targets=targets)


def count_as_installed(monkeypatch, folder: Path) -> None:
    """Make `folder` a site folder, as site-packages is (its files installed, not the project's), on sys.path;
    undo with `monkeypatch.undo()` and `forget_installed()`."""
    from xisa.compile import reads

    environment = reads.environment_roots()
    monkeypatch.setattr(reads, "environment_roots", lambda: (*environment, os.path.join(str(folder), "")))
    reads.in_environment.cache_clear()
    monkeypatch.syspath_prepend(str(folder))


def forget_installed() -> None:
    from xisa.compile import reads

    reads.in_environment.cache_clear()


def copy_tinyproj(dest: Path) -> Path:
    """A copy of tests/fixtures/tinyproj at `dest`: two kernels, three targets, a gfx11-only branch."""
    shutil.copytree(FIXTURES / "tinyproj", dest)
    return dest


def git(repo: Path, *args: str) -> str:
    """`git ARGS` in `repo` as a fixed author; fails the test on a non-zero exit."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@a", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@a"}
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def gfx11_branch_change(project: Path) -> None:
    """Edit only the kernel branch of tinyproj that gfx11 targets compile (GFX11_PATH=True)."""
    source = project / "kernels" / "scale.py"
    source.write_text(source.read_text().replace("y = x * factor + 1.0", "y = x * factor + 3.0"))


def _session_root(tmp_path_factory) -> Path:
    """A folder all xdist workers of this session share (each worker's basetemp is one below it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def _session_lock(tmp_path_factory, name: str):
    """Held by one worker at a time: the first does a shared job, the others then find its results cached."""
    with open(_session_root(tmp_path_factory) / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """One result cache for the session and all its workers, so a cell compiled by one test is free for the
    next (`XISA_CACHE_DIR` set by the caller, as .ci/run does, shares it with later runs too)."""
    preset = os.environ.get("XISA_CACHE_DIR")
    if preset:
        return Path(preset)
    cache = _session_root(tmp_path_factory) / "xisa-cache"
    cache.mkdir(mode=0o700, exist_ok=True)
    return cache


@pytest.fixture(scope="session")
def corpus_check(shared_cache, tmp_path_factory) -> Outcome:
    """`xisa check --format json` on the bundled corpus, compiled once for the whole session: through the
    installed `xisa` script, so the `xisa check` that .ci/run runs next finds every cell cached."""
    with _session_lock(tmp_path_factory, "corpus"):
        return xisa_process("check", "--format", "json", cwd=REPO, cache=shared_cache, entry_point=True,
                            timeout=1500)


@pytest.fixture(scope="session")
def corpus_cells(corpus_check, shared_cache, tmp_path_factory) -> list[dict]:
    """`xisa compile --arch gfx* --json` on the bundled corpus: cached by `corpus_check`, so no cell compiles twice."""
    with _session_lock(tmp_path_factory, "corpus"):
        out = xisa_process("compile", "--arch", "gfx*", "--json", cwd=REPO, cache=shared_cache, entry_point=True,
                           timeout=1500)
    assert out.code in (0, 1), out.err[-2000:]
    return json.loads(out.out)["cells"]


# What a process started by a user's shell reads before xisa runs (or what only a new process honours):
# a run given one of these goes through a real process, every other run through `xisa.cli.main` here.
_PROCESS_ONLY_ENV = ("PYTHON", "LD_", "TRITON_", "LLVM_", "MLIR_", "AMD_", "CUDA_", "HIP_", "PATH", "HOME",
                     "TMPDIR")


def _needs_a_process(env: dict[str, str] | None) -> bool:
    return any(name.startswith(_PROCESS_ONLY_ENV) for name in env or {})


@pytest.fixture
def run_xisa(shared_cache):
    """Run xisa as the command line does: in this process through `xisa.cli.main` (its error boundary, exit
    codes, compile pool; torch and Triton are imported once per test worker instead of once per run), or in
    a process of its own when `process=True` or the environment given is one only a new process honours.
    Signals, the entry point and process boundaries are tested with `xisa_process` directly."""
    def run(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900,
            process: bool = False) -> Outcome:
        if process or _needs_a_process(env):
            return xisa_process(*args, cwd=cwd, cache=shared_cache, env=env, timeout=timeout)
        return xisa_in_process(*args, cwd=cwd, cache=shared_cache, env=env)

    return run


@pytest.fixture
def run_xisa_in_process(shared_cache):
    """Like run_xisa, in this process: for input that is refused before anything compiles."""
    def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Outcome:
        return xisa_in_process(*args, cwd=cwd, cache=shared_cache, env=env)

    return run


@pytest.fixture
def tinyproj(tmp_path) -> Path:
    """A copy of tests/fixtures/tinyproj: two kernels, three targets, a gfx11-only branch."""
    return copy_tinyproj(tmp_path / "tinyproj")


# Tests that each compile a corpus-sized selection (tens of cells, minutes on 2 cores). Started first, as
# xisa's own pool starts the slowest cells first: at the end of the queue one of them would run alone.
_LONGEST_FIRST = (
    "tests/analyze/test_occupancy.py::test_register_occupancy_equals_llvm_for_every_bundled_cell",
    "tests/test_corpus.py::test_flipping_the_gfx11_reader_changes_only_gfx1100_cells",
    "tests/test_pytest_plugin.py::test_xisa_runs_the_cells_alone_and_a_printed_node_id_reruns_one_cell",
    "tests/test_pytest_plugin.py::test_pytest_xisa_passes_then_fails_with_a_readable_diff",
    "tests/test_pytest_plugin.py::test_xisa_update_blesses_is_refused_in_ci_and_combines_under_xdist",
    "tests/kernels/test_kernels.py::test_gfx11_reader_is_bit_exact_on_every_finite_code",
)


def pytest_collection_modifyitems(config, items):
    rank = {node_id: i for i, node_id in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))   # stable: the rest keep their order
