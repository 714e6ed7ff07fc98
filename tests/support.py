"""What tests share that is not a fixture: the repository's paths, running the real `xisa` command (in a
process of its own or in this one), copies of the bundled corpus and of tinyproj, files and git. Imported
as `from support import ...` (pytest puts tests/ on sys.path for its conftest); fixtures are conftest.py's."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from xisa.analyze.model import Analysis
from xisa.compile.worker.result import CellResult


def _golden_toolchain_skip():
    """The repo's goldens are made with one Triton; under another one they are a toolchain difference."""
    from importlib.metadata import PackageNotFoundError, version

    from xisa.compile.worker.toolchain import GOLDEN_TRITON

    try:
        installed = version("triton")
    except PackageNotFoundError:   # the unit tier's environment: its tests compile nothing
        installed = None
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
    from xisa.compile.incremental import reads

    environment = reads.environment_roots()
    monkeypatch.setattr(reads, "environment_roots", lambda: (*environment, os.path.join(str(folder), "")))
    reads.in_environment.cache_clear()
    monkeypatch.syspath_prepend(str(folder))


def forget_installed() -> None:
    from xisa.compile.incremental import reads

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


def compile_here(root: Path, cache: Path, *, use_cache: bool = True, jobs: int = 1) -> dict:
    """Each cell's result (`cell.id` -> CellResult), compiled in this process through the calls `xisa check` makes
    (one worker by default: the loads share it, as a long-lived worker's do)."""
    from xisa.api import Selection, open_workspace
    from xisa.compile.runner import RunOptions, run_cells

    ws = open_workspace(cwd=root)
    _, cells = Selection().cells(ws)
    results = run_cells(cells, roots=list(ws.project.kernel_roots), cache_dir=cache,
                        options=RunOptions(jobs=jobs, use_cache=use_cache))
    assert all(r.ok for r in results), [r.error for r in results]
    return {cell.id: result for cell, result in zip(cells, results)}


# --- one cell's compile result and each way its record can change (golden/test_record_judgement.py,
# golden/test_compact_layout.py) ---------------------------------------------------------------------

RECORD_TOOLCHAIN = {"triton": "3.8.0"}


def record_result() -> CellResult:
    stream = "bb0:\n  s_endpgm\n"
    analysis = Analysis(
        isa="amdgcn", sha256=hashlib.sha256(stream.encode()).hexdigest(), instructions=1, blocks=1, histogram={"s_endpgm": 1},
        base_histogram={"s_endpgm": 1}, classes={"program": 1}, resources={"vgprs": 4, "lds_bytes": 0},
        stream_text=stream, code_sha256="c" * 64,
        code_sections={"(header)": "1" * 16, ".text": "2" * 16, ".note": "3" * 16},
        metadata={"shared": 0, "global_scratch_size": 0, "name": "k_kernel"},
        stages={"ttir": "e" * 64}, lines=[{"loc": "k.py:3", "text": "x", "count": 1, "histogram": {"s_endpgm": 1}}])
    return CellResult(kernel="k", case="c", target="gfx942", status="ok", analysis=analysis,
                      binding={"signature": {"x_ptr": "*fp32"}, "constexprs": {}, "attrs": {}},
                      options={"num_warps": 4, "debug": False})


def with_analysis(result: CellResult, **analysis_fields) -> CellResult:
    changed = copy.deepcopy(result)
    changed.analysis = replace(changed.analysis, **analysis_fields)
    return changed


def with_fields(result: CellResult, **fields) -> CellResult:
    changed = copy.deepcopy(result)
    for name, value in fields.items():
        setattr(changed, name, value)
    return changed


RECORD_BASE = record_result()
RECORD_MUTATIONS = {
    "options.num_warps": with_fields(RECORD_BASE, options={"num_warps": 8, "debug": False}),
    "options.debug": with_fields(RECORD_BASE, options={"num_warps": 4, "debug": True}),
    "binding.signature": with_fields(RECORD_BASE, binding={"signature": {"x_ptr": "*fp16"}, "constexprs": {}, "attrs": {}}),
    "binding.attrs": with_fields(RECORD_BASE, binding={"signature": {"x_ptr": "*fp32"}, "constexprs": {},
                                          "attrs": {"x_ptr": ["tt.divisibility=16"]}}),
    "code_sha256 alone": with_analysis(RECORD_BASE, code_sha256="d" * 64),
    "a code section": with_analysis(RECORD_BASE, code_sha256="d" * 64,
                               code_sections={"(header)": "1" * 16, ".text": "2" * 16, ".note": "4" * 16}),
    "launch metadata (dynamic shared memory)": with_analysis(RECORD_BASE, metadata={"shared": 1024, "global_scratch_size": 0,
                                                                        "name": "k_kernel"}),
    "a resource not compared before (wavefront_size)": with_analysis(RECORD_BASE, resources={"vgprs": 4, "lds_bytes": 0,
                                                                                 "wavefront_size": 64}),
}

