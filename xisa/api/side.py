"""One side of `xisa ab` compiled by another Python: `PYTHON -m xisa ab-side`, with this checkout first on its
PYTHONPATH; the other Python is probed first, so what cannot compile for xisa is refused before anything compiles."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from xisa.api.selection import Selection
from xisa.compile.worker.result import CellResult
from xisa.compile.runner import RunOptions
from xisa.errors import ToolchainError

# What another Python needs to run xisa's compile from this checkout (xisa itself need not be installed).
_SIDE_MODULES = ("triton", "torch", "yaml", "typer", "rich")
_SIDE_PROBE = """
import importlib.metadata as m, importlib.util as u, json, os, sys, sysconfig
try:
    triton = m.version("triton")
except m.PackageNotFoundError:
    triton = None
spec = u.find_spec("xisa")
print(json.dumps({"python": list(sys.version_info[:2]), "prefix": sys.prefix, "triton": triton,
                  "missing": [n for n in %r if u.find_spec(n) is None],
                  "xisa": spec.origin if spec else None, "pip": u.find_spec("pip") is not None,
                  "venv": u.find_spec("ensurepip") is not None, "managed": sys.prefix == sys.base_prefix
                  and os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))}))
""" % (_SIDE_MODULES,)


def _xisa_parent() -> Path:
    """The folder holding the `xisa` package: a checkout, or a site-packages."""
    return Path(__file__).resolve().parent.parent.parent


def _side_pythonpath(cache_dir: Path) -> Path:
    """The folder another Python imports this xisa from: the checkout it lives in, or, when xisa is installed
    (its parent a site-packages, whose Triton and torch would shadow that Python's own), a folder in xisa's
    private cache holding only a link to the package. Stable, as the result cache key's sys.path must be."""
    parent = _xisa_parent()
    if parent.name not in ("site-packages", "dist-packages"):
        return parent
    from xisa.compile.incremental.cache import check_private

    folder = cache_dir / "ab-pythonpath"
    folder.mkdir(parents=True, mode=0o700, exist_ok=True)
    check_private(folder, folder.lstat(), "cache folder")
    link, package = folder / "xisa", parent / "xisa"
    if os.path.islink(link) and os.readlink(link) != str(package):
        link.unlink()
    if not os.path.lexists(link):
        link.symlink_to(package, target_is_directory=True)
    return folder


def _side_environment(cache_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_side_pythonpath(cache_dir)), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _triton_requirement() -> str:
    """The Tritons xisa supports, as pip spells a range: `triton>=3.6,<3.10`."""
    from xisa.compile.worker.toolchain import SUPPORTED_TRITON

    (low_major, low_minor), (high_major, high_minor) = SUPPORTED_TRITON
    return f"triton>={low_major}.{low_minor},<{high_major}.{high_minor + 1}"


def _install_fix(python: str, field: str, packages: str, facts: dict[str, Any]) -> str:
    """How to install `packages` for `python`: its own pip where that may install; else a virtual environment
    made with it, holding everything a side needs (a distribution's Python is externally managed, PEP 668: its
    pip refuses to install)."""
    if facts.get("pip", True) and not facts.get("managed", False):
        return f"{python} -m pip install {packages}"
    venv = Path.cwd() / "venv-b"
    why = "is externally managed (PEP 668: its pip refuses to install)" if facts.get("managed") else "has no pip"
    first = "" if facts.get("venv", True) else "install its venv module (Debian: apt-get install python3-venv), "
    return (f"{python} {why}; {first}make a virtual environment with it: {python} -m venv {venv} && {venv}/bin/pip "
            f"install '{_triton_requirement()}' torch pyyaml typer rich, then {field} {venv}/bin/python")


def _not_runnable_fix(python: str, field: str) -> str:
    """What to do about a Python that could not be run: never the path that just failed. A virtual
    environment's folder: its interpreter; a path that does not exist: how to make a virtual environment there
    (`VENV/bin/python`: that VENV) and name its interpreter; otherwise what to name instead."""
    path = Path(python)
    inside = next((path / "bin" / name for name in ("python3", "python") if (path / "bin" / name).is_file()), None)
    if path.is_dir() and inside is not None:
        return f"name the environment's interpreter: {field} {inside}"
    if not os.path.lexists(path):
        install = f"/bin/pip install '{_triton_requirement()}' torch pyyaml typer rich"
        if path.parent.name == "bin":
            venv = path.parent.parent
            return f"make that virtual environment first: python3 -m venv {venv} && {venv}{install}"
        venv = path.parent / "venv-b"
        return f"make a virtual environment: python3 -m venv {venv} && {venv}{install}, then {field} {venv}/bin/python"
    return f"name an interpreter that runs, a virtual environment's VENV/bin/python ({path} is not one)"


def probe_side_python(python: str, *, field: str, cache_dir: Path) -> dict[str, Any]:
    """Refuse, before anything compiles, another Python that cannot compile for xisa: not runnable, too old,
    no Triton or one outside xisa's range, a module missing, or this checkout's xisa not the one it imports."""
    import json
    import subprocess

    from xisa.compile.worker.toolchain import SUPPORTED_TRITON, check_supported

    try:
        proc = subprocess.run([python, "-c", _SIDE_PROBE], capture_output=True, text=True,
                              env=_side_environment(cache_dir), timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ToolchainError(f"cannot run {python}: {getattr(exc, 'strerror', None) or exc}", field=field,
                             fix=_not_runnable_fix(python, field)) from None
    try:
        facts = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ToolchainError(f"{python} is not a Python xisa can use: {last}", field=field,
                             fix="name a Python 3.11+ interpreter") from None
    if tuple(facts["python"]) < (3, 11):
        raise ToolchainError(f"{python} is Python {'.'.join(map(str, facts['python']))}; xisa needs 3.11+",
                             field=field, fix="make the virtual environment with Python 3.11 or later")
    if facts["triton"] is None:
        raise ToolchainError(f"{python} has no Triton installed", field=field,
                             fix=_install_fix(python, field, f"'{_triton_requirement()}' torch pyyaml typer rich",
                                              facts))
    try:
        check_supported(facts["triton"])
    except ToolchainError:
        (low_major, low_minor), (high_major, high_minor) = SUPPORTED_TRITON
        raise ToolchainError(f"{python} has Triton {facts['triton']}, outside the range xisa supports "
                             f"({low_major}.{low_minor} to {high_major}.{high_minor})", field=field,
                             fix=_install_fix(python, field, f"'{_triton_requirement()}'", facts)) from None
    if facts["missing"]:
        raise ToolchainError(f"{python} cannot import {', '.join(facts['missing'])}, which xisa's compile needs",
                             field=field, fix=_install_fix(python, field, " ".join(
                                 "pyyaml" if name == "yaml" else name for name in facts["missing"]), facts))
    ours = str(_xisa_parent() / "xisa" / "__init__.py")
    if facts["xisa"] is None or os.path.realpath(facts["xisa"]) != os.path.realpath(ours):
        raise ToolchainError(f"{python} imports xisa from {facts['xisa']}, not from this checkout ({ours})",
                             field=field, fix="run it without -I/-E, or uninstall the other xisa there")
    return facts


class SideProcess:
    """One side compiled by another Python: `PYTHON -m xisa ab-side`, with this checkout first on its
    PYTHONPATH, in this process's working folder and environment (so the same project and cache: the cache
    key holds the toolchain's identity, so each Triton keeps its own entries). Runs after this
    process compiled its side; its results come back whole through a file (a kernel's import may print)."""

    def __init__(self, side, selection: Selection, *, options: RunOptions, field: str, cache_dir: Path):
        import subprocess

        self.side, self.field = side, field
        probe_side_python(side.python, field=field, cache_dir=cache_dir)
        self.folder = Path(tempfile.mkdtemp(prefix="xisa-ab-side-"))
        self.output = self.folder / "side.json"
        self.errors = open(self.folder / "stderr.txt", "w+", encoding="utf-8")
        command = [side.python, "-m", "xisa", "ab-side", "--output", str(self.output), "--jobs", str(options.jobs),
                   "--timeout", repr(options.timeout)]
        command += ["--no-cache"] if not options.use_cache else []
        command += selection.side_args()
        command += [word for name, value in sorted(side.knobs.items()) for word in ("--knob", f"{name}={value}")]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=self.errors, env=_side_environment(cache_dir))

    def results(self) -> tuple[list[CellResult], dict[str, str], dict[str, dict[str, str]]]:
        import json

        from xisa.golden.ab import read_side_payload

        code = self.process.wait()
        self.errors.seek(0)
        lines = [line for line in self.errors.read().splitlines() if line.strip()]
        try:
            return read_side_payload(json.loads(self.output.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            said = next((line for line in reversed(lines) if line.startswith("xisa: error:")), None)
            said = said[len("xisa: error: "):] if said else (lines[-1] if lines else f"exit code {code}")
            raise ToolchainError(f"side {self.side.label} ({self.side.python}) could not compile: {said}",
                                 field=self.field, fix="run the same selection with `xisa compile` in that "
                                                       "environment to see why") from None

    def close(self) -> None:
        import shutil

        if self.process.poll() is None:   # interrupted: the other side's compile is not worth waiting for
            self.process.kill()
            self.process.wait()
        self.errors.close()
        shutil.rmtree(self.folder, ignore_errors=True)
