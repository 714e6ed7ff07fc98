"""Shared fixtures: a small project of our own kernels, and a way to run the real `xisa` command. What tests
share that is not a fixture is tests/support.py's. The unit tier's rules are here too (`pytest -m unit`, below)."""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
from pathlib import Path

import pytest

from support import REPO, Outcome, copy_tinyproj, xisa_in_process, xisa_process

pytest_plugins = ["pytester"]


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


def pytest_collection_modifyitems(config, items):
    """Tests marked `slow` (each compiles a corpus-sized selection: tens of cells, minutes on 2 cores) are
    started first, as xisa's own pool starts the slowest cells first: at the end of the queue one of them
    would run alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)   # stable: the rest keep their order


# --- the unit tier: `python -m pytest -m unit`, the tests marked `unit` (pyproject.toml's markers). They need no
# compile, and neither Triton nor torch: this file, tests/support.py and what they import import neither. A module is in
# the tier by naming the mark (`pytestmark = pytest.mark.unit`, or `@pytest.mark.unit` on some of its tests), never by
# its folder: a run of the tier does not import the other modules (some import torch at the top), and it hides Triton
# and torch from its tests and from every process they start (tests/without_triton), so that a unit test that reaches
# for either fails ("No module named 'triton'") where both are installed too. tests/test_unit_tier.py runs the tier
# that way as part of the whole suite.

UNIT_MARK = "pytest.mark.unit"
WITHOUT_TRITON = Path(__file__).parent / "without_triton"


def _unit_tier_only(config) -> bool:
    return " ".join((config.getoption("markexpr") or "").split()) == "unit"


def _hide_triton_and_torch() -> None:
    spec = importlib.util.spec_from_file_location("without_triton", WITHOUT_TRITON / "sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.hide()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(WITHOUT_TRITON), os.environ.get("PYTHONPATH")]))


def pytest_configure(config):
    if _unit_tier_only(config):
        _hide_triton_and_torch()


def pytest_ignore_collect(collection_path, config):
    if (_unit_tier_only(config) and collection_path.suffix == ".py" and collection_path.name.startswith("test_")
            and UNIT_MARK not in collection_path.read_text()):
        return True
    return None
