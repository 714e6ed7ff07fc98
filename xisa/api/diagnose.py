"""`xisa doctor`: is this machine able to give trustworthy results, and do the goldens fit its toolchain?

Pure apart from looking: reads the installed Triton, the environment, the GPUs torch sees and the
goldens' `toolchain` fields, and returns one dict (`xisa.api.diagnose`; rendered by `xisa.render.doctor`
or as JSON).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from xisa.analyze.backends import AMD, BACKENDS
from xisa.errors import EXIT_OK, EXIT_UNTRUSTED, XisaError
from xisa.compile.tools.mca import doctor_facts
from xisa.golden.store import scan_golden_toolchains
from xisa.compile.worker.toolchain import (GOLDEN_TRITON, HARMLESS_ENV, PINNED_ENV, REFUSED_ENV, SUPPORTED_TRITON,
                            amd_codegen_revision, parse_version, pinned_overrides, ptxas_version, refused_variables,
                            unclassified_variables, wheel_tool)

DOCTOR_SCHEMA_VERSION = 1


def _installed_triton() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return None


def version_line() -> str:
    """`xisa --version`: xisa's version and the toolchain it would compile with (read from the installed
    packages' metadata: nothing is imported), for a CI log."""
    import platform

    from xisa import __version__

    return (f"xisa {__version__} (triton {_installed_triton() or 'not installed'}, "
            f"python {platform.python_version()})")


def _backends() -> list[str]:
    try:
        from triton import backends
    except Exception:
        return []
    return sorted(getattr(backends, "backends", {}) or {})


def _lld() -> dict[str, Any]:
    """Triton's AMD backend links hsaco with the lld inside libtriton (amd.link_hsaco); older wheels ship a binary."""
    try:
        import triton

        package = Path(triton.__file__).parent
    except Exception:
        return {"found": False, "path": None, "note": "Triton cannot be imported"}
    for candidate in (package / "backends" / "amd" / "llvm" / "bin" / "ld.lld", package / "third_party" / "hip" /
                      "llvm" / "bin" / "ld.lld"):
        if candidate.is_file():
            return {"found": True, "path": str(candidate), "note": "bundled binary"}
    try:
        from triton._C.libtriton import amd

        if hasattr(amd, "link_hsaco"):
            return {"found": True, "path": None, "note": "linked into libtriton (triton._C.libtriton.amd.link_hsaco)"}
    except Exception:
        pass
    system = shutil.which("ld.lld")
    return {"found": bool(system), "path": system, "note": "from PATH" if system else "not found"}


def _find_tool(name: str, env) -> dict[str, Any]:
    return _lld() if name == "ld.lld" else _wheel_tool(name, env)


def _wheel_tool(name: str, env) -> dict[str, Any]:
    """The tool Triton would run: the one a TRITON_<TOOL>_PATH names (which xisa refuses), else the wheel's."""
    variable = f"TRITON_{name.upper().replace('-', '_')}_PATH"
    if env.get(variable, "") not in ("", "0"):
        path = env[variable]
        note = f"from {variable}, not the Triton wheel: refused"
    else:
        wheel = wheel_tool(name)
        path = str(wheel) if wheel else None
        note = "from the Triton wheel"
    found = bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)
    return {"found": found, "path": path, "note": note if found else f"not executable ({note})"}


def _tools(env, backends: list[str], warnings: list[str]) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Each backend's tools (found where; a missing one is a warning), and ptxas's version."""
    tools = {}
    for handler in BACKENDS:
        for name in handler.tools:
            tools[name] = (_find_tool(name, env) if handler.package in backends
                           else {"found": False, "path": None, "note": f"no {handler.vendor} backend"})
    ptxas = ptxas_version() if tools["ptxas"]["found"] else None
    if ptxas:
        tools["ptxas"]["version"] = ptxas
    for name, tool in tools.items():
        if not tool["found"] and not tool["note"].endswith(" backend"):
            warnings.append(f"{name} not found: cells of that backend will fail to compile")
    return tools, ptxas


def _environment(env, environ, version: str | None, problems: list[str]) -> dict[str, Any]:
    """The environment as xisa classifies it: what it overrides, refuses, does not know, or knows harmless."""
    overridden = {k: {"user": v, "pinned": PINNED_ENV[k]} for k, v in pinned_overrides(dict(env)).items()}
    refused = refused_variables(dict(env))
    for name, why in refused.items():
        problems.append(f"{name} is set: it {why}; no result could be trusted (fix: unset {name})")
    unclassified = unclassified_variables(environ) if version else []
    for name in unclassified:
        problems.append(f"{name} is set: the installed Triton reads it and xisa does not know whether it changes "
                        f"the compiled code; no result could be trusted (fix: unset {name})")
    harmless = {name: why for name, why in HARMLESS_ENV.items() if name in env}
    return {"pinned": dict(PINNED_ENV), "overridden": overridden, "refused": refused,
            "refused_known": sorted(REFUSED_ENV), "unclassified": unclassified, "harmless": harmless}


def _project(cwd: Path | None, warnings: list[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The project, its targets (for device matching) and its goldens' toolchains; doctor also runs outside one."""
    project_info: dict[str, Any] = {"root": None, "golden_dir": None}
    targets: dict[str, Any] = {}
    goldens: dict[str, Any] = {"dir": None, "files": 0, "triton": {}, "amd_codegen": {}, "ptxas": {}, "unreadable": []}
    try:
        from xisa.spec.project import load_project
        from xisa.spec.targets import load_targets

        project = load_project(cwd=cwd)
        project_info = {"root": str(project.root), "golden_dir": project.display(project.golden_dir)}
        targets = load_targets(list(project.target_dirs), root=project.root)
        goldens = scan_golden_toolchains(project.golden_dir, display_root=project.root)
    except XisaError as exc:
        warnings.append(f"project: {exc}")
    return project_info, targets, goldens


def _judge_goldens(goldens: dict[str, Any], installed: dict[str, str | None], problems: list[str],
                   warnings: list[str]) -> None:
    """Whether every golden's toolchain is the installed one (`goldens["matches"]`); each other one is a problem."""
    goldens["installed"] = {k: v for k, v in installed.items() if v is not None}
    mismatched = {}
    for key in ("triton", "amd_codegen", "ptxas"):
        others = {v: n for v, n in goldens[key].items() if v != installed[key]}
        if others and (key == "triton" or installed[key] is not None):
            mismatched[key] = others
    goldens["matches"] = not mismatched
    for key, others in mismatched.items():
        listing = ", ".join(f"{v} ({n} file{'s' if n != 1 else ''})" for v, n in others.items())
        problems.append(f"goldens were made with {key} {listing} but {installed[key]} is installed: fingerprints "
                        f"cannot be compared (fix: install the goldens' toolchain or re-bless)")
    if goldens["unreadable"]:
        warnings.append(f"{len(goldens['unreadable'])} golden file(s) have no readable toolchain, "
                        f"e.g. {goldens['unreadable'][0]}")


def diagnose(*, cwd: Path | None = None, environ: dict[str, str] | None = None, torch_module: Any = None,
             probe_devices: bool = True) -> dict[str, Any]:
    env = os.environ if environ is None else environ
    problems: list[str] = []
    warnings: list[str] = []

    version = _installed_triton()
    low, high = SUPPORTED_TRITON
    supported = version is not None and low <= parse_version(version)[:2] <= high
    if version is None:
        problems.append(f"Triton is not installed (fix: pip install triton=={GOLDEN_TRITON})")
    elif not supported:
        problems.append(f"Triton {version} is not supported: xisa supports {low[0]}.{low[1]} to {high[0]}.{high[1]}")
    backends = _backends() if version else []
    codegen = amd_codegen_revision() if AMD.package in backends else None
    tools, ptxas = _tools(env, backends, warnings)
    environment = _environment(env, environ, version, problems)
    project_info, targets, goldens = _project(cwd, warnings)
    _judge_goldens(goldens, {"triton": version, "amd_codegen": codegen, "ptxas": ptxas}, problems, warnings)

    # Optional: llvm-mca's loop estimates (`xisa.compile.tools.mca`); its absence is said, never a problem.
    modelled = {name: t for name, t in targets.items() if t.handler.mca_triple}
    llvm_mca = doctor_facts({n: t.handler.mca_triple for n, t in modelled.items()},
                            {n: str(t.arch) for n, t in modelled.items()})

    devices: list[dict[str, Any]] = []
    if probe_devices:
        from xisa.device.detect import detect_devices

        devices = [{"index": d.index, "name": d.name, "backend": d.backend, "arch": d.arch, "target": d.target}
                   for d in detect_devices(targets, torch_module=torch_module)]

    exit_code = EXIT_UNTRUSTED if problems else EXIT_OK
    verdict = ("ok: results made here can be trusted and compared with the goldens" if not problems else
               "untrusted: " + "; ".join(problems))
    return {
        "schema": DOCTOR_SCHEMA_VERSION, "kind": "doctor",
        "triton": {"version": version, "supported": supported, "supported_range": f"{low[0]}.{low[1]}-{high[0]}.{high[1]}",
                   "amd_codegen_revision": codegen, "ptxas_version": ptxas},
        "backends": backends, "tools": tools, "llvm_mca": llvm_mca, **environment,
        "devices": devices, "project": project_info, "goldens": goldens,
        "problems": problems, "warnings": warnings, "verdict": verdict, "exit_code": exit_code,
    }
