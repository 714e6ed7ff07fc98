"""The toolchain xisa compiles with: versions, the pinned codegen knobs, refused variables.

Importing this module does not import Triton; only `describe_toolchain(full=True)` does.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from importlib import metadata
from pathlib import Path

from xisa.errors import ToolchainError

SUPPORTED_TRITON = ((3, 6), (3, 9))  # inclusive minor range
GOLDEN_TRITON = "3.8.0"              # the version this repository's goldens are made with

# Variables that rewrite kernels or the compiler: results made under them cannot be trusted.
REFUSED_ENV = {
    "TRITON_KERNEL_OVERRIDE": "replaces compiled kernels with files from TRITON_OVERRIDE_DIR",
    "LLVM_PASS_PLUGIN_PATH": "loads an LLVM pass plugin into the compiler",
    "TRITON_PASS_PLUGIN_PATH": "loads a Triton pass plugin into the compiler",
    "TRITON_SWAP_MIR": "swaps in hand-edited machine IR",
    "TRITON_ENABLE_ASAN": "instruments kernels with the address sanitizer",
    "TRITON_INTERPRET": "runs kernels in the interpreter instead of compiling them",
}

# Knobs that change codegen, pinned to what a default launch uses (None: unset).
PINNED_ENV: dict[str, str | None] = {
    # Line info stays on, as in a launch: measured on an H200 (Triton 3.6, ptxas 12.8), ptxas allocated
    # registers differently for one kernel without it. Normalization strips .loc/.file instead.
    "TRITON_DISABLE_LINE_INFO": None,
    "TRITON_DEFAULT_FP_FUSION": "1",
    "TRITON_F32_DEFAULT": None,
    "TRITON_DEBUG": "0",
    "TRITON_INSTRUMENTATION_MODE": None,
    "TRITON_ALWAYS_COMPILE": None,
    "TRITON_KERNEL_DUMP": None,
    "TRITON_DUMP_MIR": None,
    "AMDGCN_USE_BUFFER_OPS": "1",
    "AMDGCN_USE_BUFFER_ATOMICS": "1",
    "AMDGCN_ANALYZE_SMALL_TENSOR_RANGE": "0",
    "AMDGCN_SCALARIZE_PACKED_FOPS": "0",
    "TRITON_HIP_USE_ASYNC_COPY": None,
    "TRITON_HIP_USE_BLOCK_PINGPONG": None,
    "TRITON_HIP_USE_IN_THREAD_TRANSPOSE": None,
    "TRITON_HIP_GLOBAL_PREFETCH": None,
    "TRITON_HIP_LOCAL_PREFETCH": None,
    "DISABLE_PTXAS_OPT": "0",
    "PTXAS_OPTIONS": None,
    "TRITON_MOCK_PTX_VERSION": None,
    "DISABLE_LLVM_OPT": None,
    "MLIR_ENABLE_DUMP": None,
    "LLVM_IR_ENABLE_DUMP": None,
}


def refused_variables(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {name: why for name, why in REFUSED_ENV.items() if env.get(name, "") not in ("", "0")}


def check_environment(environ: dict[str, str] | None = None) -> None:
    refused = refused_variables(environ)
    if refused:
        name, why = next(iter(refused.items()))
        raise ToolchainError(f"{name} is set: it {why}, so no result could be trusted", field=name,
                             fix=f"unset {name}")


def pinned_overrides(environ: dict[str, str] | None = None) -> dict[str, str]:
    """User settings that xisa overrides with its pinned value (shown by `xisa doctor`)."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k, v in PINNED_ENV.items() if k in env and env[k] != v}


def apply_pinned_env(cache_dir: Path) -> None:
    """Pin codegen knobs and a Triton cache private to xisa, in this process, before Triton compiles."""
    check_environment()
    for name, value in PINNED_ENV.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    # Triton's cache keys on a kernel's starting line, not its path: a shared cache could hand us
    # another checkout's asm. Keep ours apart.
    os.environ["TRITON_CACHE_DIR"] = str(cache_dir / "triton")
    os.environ.pop("TRITON_HOME", None)


def triton_version() -> str:
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        raise ToolchainError("Triton is not installed", fix="pip install triton==3.8.0") from None


def parse_version(text: str) -> tuple[int, int, int]:
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        return (0, 0, 0)
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def check_supported(version: str) -> None:
    major_minor = parse_version(version)[:2]
    low, high = SUPPORTED_TRITON
    if not (low <= major_minor <= high):
        raise ToolchainError(
            f"Triton {version} is not supported (xisa supports {low[0]}.{low[1]} to {high[0]}.{high[1]})",
            fix=f"pip install triton=={GOLDEN_TRITON}")


@functools.lru_cache(maxsize=1)
def amd_codegen_revision() -> str | None:
    """The AMD backend's codegen revision where Triton exposes one (3.9+); None before that.

    Older Triton has none, and looking would import Triton, which a warm run must not pay for.
    """
    if parse_version(triton_version())[:2] < (3, 9):
        return None
    try:
        from triton.backends.amd import compiler as amd_compiler
    except Exception:
        return None
    # Triton 3.9 compiles AMD code in a separate codegen library and reports its revision.
    getter = getattr(amd_compiler, "get_amd_codegen_revision", None)
    if getter is None:
        return None
    try:
        return str(getter())
    except Exception:  # a missing or broken codegen library is reported by the compile itself
        return None


def _triton_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("triton")
    return Path(spec.origin).parent if spec and spec.origin else None


@functools.lru_cache(maxsize=1)
def ptxas_version() -> str | None:
    """ptxas's release, from the binary Triton uses (TRITON_PTXAS_PATH or the wheel's), without importing Triton."""
    path = os.environ.get("TRITON_PTXAS_PATH")
    if not path:
        folder = _triton_dir()
        path = str(folder / "backends" / "nvidia" / "bin" / "ptxas") if folder else ""
    if not path or not os.path.exists(path):
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"release (\S+?),", out) or re.search(r"V(\d+\.\d+\.\d+)", out)
    return match.group(1) if match else None


def describe_toolchain(*, backends: set[str] | None = None) -> dict[str, str]:
    """What goes into every golden and cache key. `backends` limits the slow probes to what is used."""
    version = triton_version()
    info = {"triton": version}
    backends = backends or set()
    if "hip" in backends:
        revision = amd_codegen_revision()
        if revision:
            info["amd_codegen"] = revision
    if "cuda" in backends:
        ptxas = ptxas_version()
        if ptxas:
            info["ptxas"] = ptxas
    return info
