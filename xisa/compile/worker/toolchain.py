"""The toolchain xisa compiles with: versions, the pinned codegen knobs, refused variables.

Importing this module does not import Triton; only `describe_toolchain(full=True)` does.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import subprocess
from importlib import metadata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from xisa.analyze.backends import BACKENDS
from xisa.errors import ToolchainError

SUPPORTED_TRITON = ((3, 6), (3, 9))  # inclusive minor range
GOLDEN_TRITON = "3.8.0"              # the version this repository's goldens are made with
# The folder of Triton's own cache inside xisa's. Its entries outlive xisa's results, so one made by an xisa that
# compiled otherwise must not be found: "triton-5" holds only cubins that ptxas made from its checkout-free input
# (xisa.compile.tools.ptxas: fixed addresses, relative paths, fixed file names), which Triton's own key does not know of.
TRITON_CACHE_FOLDER = "triton-5"

# Every environment variable the installed Triton reads, classified once: its knobs (`triton.knobs`) and
# the variables its C++ side folds into its cache key (`get_cache_invalidating_env_vars`). A variable
# Triton reads that is in none of the three tables is refused (`unclassified_variables`), and
# tests/compile/test_environment.py fails when the installed Triton has a knob this table does not name.

# Refused: they rewrite kernels, replace a tool or a cache: results made under them cannot be trusted.
REFUSED_ENV = {
    "TRITON_KERNEL_OVERRIDE": "replaces compiled kernels with files from TRITON_OVERRIDE_DIR",
    "LLVM_PASS_PLUGIN_PATH": "loads an LLVM pass plugin into the compiler",
    "TRITON_PASS_PLUGIN_PATH": "loads a Triton pass plugin into the compiler",
    "TRITON_PLUGIN_PATHS": "loads Triton plugins into the compiler",
    "TRITON_SWAP_MIR": "swaps in hand-edited machine IR",
    "TRITON_ENABLE_ASAN": "instruments kernels with the address sanitizer",
    "TRITON_ENABLE_EXPERIMENTAL_CONSAN": "instruments kernels with the concurrency sanitizer",
    "TRITON_INTERPRET": "runs kernels in the interpreter instead of compiling them",
    "TRITON_CACHE_MANAGER": "replaces Triton's cache with a class that can hand back any artifact",
    "TRITON_REMOTE_CACHE_BACKEND": "fetches compiled artifacts from a remote cache",
    "TRITON_PTXAS_PATH": "replaces the ptxas that assembles sm_80/sm_90 kernels",
    "TRITON_PTXAS_BLACKWELL_PATH": "replaces the ptxas that assembles sm_100 kernels",
    "TRITON_CUOBJDUMP_PATH": "replaces the cuobjdump that reads SASS and register use",
    "TRITON_NVDISASM_PATH": "replaces the nvdisasm that disassembles SASS",
    "TRITON_LIBDEVICE_PATH": "replaces the libdevice bitcode linked into NVIDIA kernels",
}

# Pinned: knobs that change codegen (or what Triton keeps), set to what a default launch uses (None: unset).
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
    "TRITON_STORE_BINARY_ONLY": None,        # the cache would keep no amdgcn/sass to analyze
    "TRITON_ALLOW_NON_CONSTEXPR_GLOBALS": None,
    "TRITON_OVERRIDE_ARCH": None,            # xisa names the target; this would compile for another
    "TRITON_HOME": None,                     # xisa sets TRITON_CACHE_DIR to its own cache
    "LLVM_EXTRACT_DI_LOCAL_VARIABLES": None,  # rewrites debug info into the IR; the amdgcn is no longer text
    "USE_IR_LOC": None,
    "AMDGCN_USE_BUFFER_OPS": "1",
    "AMDGCN_USE_BUFFER_ATOMICS": "1",
    "AMDGCN_ANALYZE_SMALL_TENSOR_RANGE": "0",
    "AMDGCN_SCALARIZE_PACKED_FOPS": "0",
    "AMDGCN_ENABLE_DUMP": None,
    "TRITON_HIP_USE_ASYNC_COPY": None,
    "TRITON_HIP_USE_BLOCK_PINGPONG": None,
    "TRITON_HIP_USE_IN_THREAD_TRANSPOSE": None,
    "TRITON_HIP_USE_COEXEC_SCHEDULER": None,
    "TRITON_HIP_USE_EXPERT_SCHEDULING": None,
    "TRITON_HIP_GLOBAL_PREFETCH": None,
    "TRITON_HIP_LOCAL_PREFETCH": None,
    "TRITON_SWAP_MIR_ENABLE_MISCHED": None,
    "DISABLE_PTXAS_OPT": "0",
    "PTXAS_OPTIONS": None,
    "TRITON_MOCK_PTX_VERSION": None,
    "TRITON_DUMP_PTXAS_LOG": None,
    "NVPTX_ENABLE_DUMP": None,
    "DISABLE_MMA_V3": None,
    "DISABLE_MMA_V5": None,
    "ALLOW_LHS_TMEM_LAYOUT_CONVERSION": None,
    "TRITON_CONSAN_INIT_ALLOCATIONS": None,
    "DISABLE_LLVM_OPT": None,
    "MLIR_ENABLE_DUMP": None,
    "MLIR_DUMP_PATH": None,
    "MLIR_ENABLE_TIMING": None,
    "MLIR_ENABLE_DIAGNOSTICS": None,
    "MLIR_DISABLE_MULTITHREADING": None,
    "LLVM_IR_ENABLE_DUMP": None,
    "LLVM_ENABLE_TIMING": None,
    "TRITON_ENABLE_LLVM_DEBUG": None,
    "TRITON_LLVM_DEBUG_ONLY": None,
    "TRITON_REPRODUCER_PATH": None,
    "TRITON_PARTITION_SCHEDULING_DUMP_DATA_ONLY": None,
    "TRITON_PARTITION_SCHEDULING_DUMP_LOOP_ONLY": None,
    "TRITON_PARTITION_SCHEDULING_ENABLE_DUMP_DOT": None,
}

# Harmless for an ahead-of-time compile: printing, profiling, autotuning, launching on a device.
HARMLESS_ENV = {
    "TRITON_CACHE_DIR": "xisa compiles into a Triton cache of its own",
    "TRITON_DUMP_DIR": "where dumps go; dumps are pinned off",
    "TRITON_OVERRIDE_DIR": "read only by TRITON_KERNEL_OVERRIDE, which is refused",
    "TRITON_REDIS_KEY_FORMAT": "read only by a remote cache, which is refused",
    "TRITON_REDIS_HOST": "read only by a remote cache, which is refused",
    "TRITON_REDIS_PORT": "read only by a remote cache, which is refused",
    "TRITON_FRONT_END_DEBUGGING": "changes how compile errors are reported",
    "TRITON_ENABLE_PYTHON_STACKTRACE": "changes how compile errors are reported",
    "TRITON_CACHE_AUTOTUNING": "autotuning; xisa compiles given configs",
    "TRITON_PRINT_AUTOTUNING": "autotuning; xisa compiles given configs",
    "TRITON_DEFAULT_BACKEND": "picks the driver of a launch; xisa names the target",
    "TRITON_BACKENDS_IN_TREE": "loads only the backends inside the Triton wheel",
    "CC": "builds launcher stubs for a device",
    "TRITON_CUDACRT_PATH": "builds launcher stubs for a device",
    "TRITON_CUDART_PATH": "builds launcher stubs for a device",
    "TRITON_LIBCUDA_PATH": "loads kernels on a device",
    "TRITON_LIBHIP_PATH": "loads kernels on a device",
    "TRITON_PROTON_DISABLE": "the profiler",
    "TRITON_CUPTI_LIB_PATH": "the profiler",
    "TRITON_CUPTI_LIB_BLACKWELL_PATH": "the profiler",
    "TRITON_ROCPROFILER_SDK_INCLUDE_PATH": "the profiler",
    "TRITON_ROCPROFILER_SDK_LIB_PATH": "the profiler",
    "TRITON_PROFILE_BUFFER_SIZE": "the profiler",
    "TRITON_PROFILE_METRIC_BUFFER_SIZE": "the profiler",
    "TRITON_ENABLE_NVTX": "the profiler",
    "TRITON_ENABLE_HW_TRACE": "the profiler",
    "TRITON_PLUGIN_VERSION_CHECK": "read only with TRITON_PLUGIN_PATHS, which is refused",
    "LLVM_SYMBOLIZER_PATH": "symbolizes a compiler crash",
    "LLVM_DISABLE_SYMBOLIZATION": "symbolizes a compiler crash",
    "LLVM_ENABLE_SYMBOLIZER_MARKUP": "symbolizes a compiler crash",
    "LLVM_OVERRIDE_PRODUCER": "the producer string in bitcode metadata, not the code",
}
# Triton knobs without a variable that code may set: hooks and listeners that change nothing compiled.
HARMLESS_KNOB_ATTRIBUTES = {"listener", "jit_cache_hook", "jit_post_compile_hook", "impl"}

# Prefixes of the variables Triton, MLIR and LLVM read. A set variable with one of them that the tables
# do not name is part of the result-cache key, so a warm run (which must not import Triton to list
# the knobs) never answers for an environment it has not compiled under.
_TOOLCHAIN_PREFIXES = ("TRITON_", "AMDGCN_", "NVPTX_", "PTXAS_", "MLIR_", "LLVM_", "DISABLE_", "USE_IR_", "ALLOW_")


def classified(name: str) -> bool:
    return name in REFUSED_ENV or name in PINNED_ENV or name in HARMLESS_ENV


def toolchain_variable(name: str) -> bool:
    """A variable the cache key covers already (pinned, refused, or toolchain-like: `unclassified_environment`)."""
    return classified(name) or name.startswith(_TOOLCHAIN_PREFIXES)


def changes_compilation(name: str) -> bool:
    """A variable that changes what Triton compiles or which tool it runs: refused, pinned, or toolchain-like
    and not known to be harmless."""
    return name in REFUSED_ENV or name in PINNED_ENV or (name.startswith(_TOOLCHAIN_PREFIXES)
                                                         and name not in HARMLESS_ENV)


def refused_variables(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {name: why for name, why in REFUSED_ENV.items() if env.get(name, "") not in ("", "0")}


def check_environment(environ: dict[str, str] | None = None) -> None:
    """The refusals that need no Triton import (a warm run checks these too)."""
    refused = refused_variables(environ)
    if refused:
        name, why = next(iter(refused.items()))
        raise ToolchainError(f"{name} is set: it {why}, so no result could be trusted", field=name,
                             fix=f"unset {name}")


def unclassified_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Set toolchain-like variables the tables do not name: part of the result-cache key."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in sorted(env.items()) if k.startswith(_TOOLCHAIN_PREFIXES) and not classified(k)}


def triton_knob_variables() -> set[str]:
    """Every environment variable behind a knob of the installed Triton (imports Triton)."""
    from triton import knobs

    names = set()
    for group in vars(knobs).values():
        if isinstance(group, knobs.base_knobs):
            names.update(descriptor.key for descriptor in group.knob_descriptors.values())
    return names


def unclassified_variables(environ: dict[str, str] | None = None) -> list[str]:
    """Set variables the installed Triton reads (a knob, or a C++ cache-invalidating variable) that no table names.

    Imports Triton: the cold path pays for that anyway. The C++ side reads the process environment.
    """
    env = os.environ if environ is None else environ
    read = {name for name in triton_knob_variables() if name in env}
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars

        if environ is None:
            read.update(get_cache_invalidating_env_vars())
    except ImportError:  # not every Triton exposes it
        pass
    return sorted(name for name in read if not classified(name))


def check_triton_environment(environ: dict[str, str] | None = None) -> None:
    """Refuse a variable the installed Triton reads that xisa does not know to be safe (imports Triton)."""
    unknown = unclassified_variables(environ)
    if unknown:
        name = unknown[0]
        raise ToolchainError(f"{name} is set: the installed Triton reads it and xisa does not know whether it "
                             "changes the compiled code, so no result could be trusted", field=name,
                             fix=f"unset {name}")


# --- an `xisa ab` side's knobs ------------------------------------------------------------------------
# `xisa ab --b-env NAME=VALUE` compiles one side with a codegen knob set. The knob is passed explicitly (a
# side's RunOptions.knobs, a child's --knob), never through the environment, so `xisa check` keeps refusing
# an unknown variable in the environment while a side may set one on purpose.

def parse_knobs(pairs: list[str], *, field: str) -> dict[str, str]:
    """`NAME=VALUE` settings of one side, each refused when it cannot change codegen (`check_side_knobs`)."""
    knobs: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ToolchainError(f"{pair!r} is not NAME=VALUE", field=field,
                                 fix=f"e.g. {field} TRITON_HIP_USE_BLOCK_PINGPONG=1")
        if name in knobs and knobs[name] != value:
            raise ToolchainError(f"{name} is set twice ({knobs[name]!r} and {value!r})", field=field,
                                 fix="give each variable once")
        knobs[name] = value
    check_side_knobs(knobs, field=field)
    return knobs


# Pinned variables a side may not set either: they break what xisa reads, or only print and dump.
NOT_SIDE_KNOBS = {
    "TRITON_STORE_BINARY_ONLY": "keeps no assembly for xisa to analyze",
    "TRITON_OVERRIDE_ARCH": "compiles for another architecture than the cell's target",
    "TRITON_HOME": "moves Triton's folders; xisa keeps a cache of its own",
    "LLVM_EXTRACT_DI_LOCAL_VARIABLES": "rewrites debug info into the IR, so the amdgcn is no longer text",
    **{name: "prints, times or dumps the compile; it changes nothing compiled" for name in (
        "TRITON_KERNEL_DUMP", "TRITON_DUMP_MIR", "AMDGCN_ENABLE_DUMP", "NVPTX_ENABLE_DUMP", "MLIR_ENABLE_DUMP",
        "MLIR_DUMP_PATH", "LLVM_IR_ENABLE_DUMP", "TRITON_DUMP_PTXAS_LOG", "MLIR_ENABLE_TIMING", "LLVM_ENABLE_TIMING",
        "MLIR_ENABLE_DIAGNOSTICS", "TRITON_ENABLE_LLVM_DEBUG", "TRITON_LLVM_DEBUG_ONLY", "TRITON_REPRODUCER_PATH",
        "TRITON_ALWAYS_COMPILE", "TRITON_PARTITION_SCHEDULING_DUMP_DATA_ONLY",
        "TRITON_PARTITION_SCHEDULING_DUMP_LOOP_ONLY", "TRITON_PARTITION_SCHEDULING_ENABLE_DUMP_DOT")},
}


def check_side_knobs(knobs: dict[str, str], *, field: str = "--knob") -> None:
    """Refuse a side knob that makes results untrustworthy (a refused variable, one that breaks what xisa
    reads), that changes nothing compiled (the A/B would compare nothing), or that is no toolchain variable."""
    for name in knobs:
        if name in REFUSED_ENV:
            raise ToolchainError(f"{name} {REFUSED_ENV[name]}, so no result of that side could be trusted",
                                 field=field, fix=f"compare codegen knobs, not {name}")
        if name in NOT_SIDE_KNOBS:
            raise ToolchainError(f"{name} {NOT_SIDE_KNOBS[name]}: it cannot be a side's knob", field=field,
                                 fix="name a codegen knob, e.g. AMDGCN_USE_BUFFER_OPS=0")
        if name in HARMLESS_ENV:
            raise ToolchainError(f"{name} changes nothing compiled ({HARMLESS_ENV[name]}): that A/B would compare "
                                 "nothing", field=field, fix="name a codegen knob, e.g. AMDGCN_USE_BUFFER_OPS=0")
        if not name.startswith(_TOOLCHAIN_PREFIXES):
            raise ToolchainError(f"{name} is not a Triton, LLVM or compiler variable", field=field,
                                 fix="name a codegen knob of Triton's knobs.py, e.g. TRITON_HIP_USE_BLOCK_PINGPONG=1")


def check_knobs_read(knobs: dict[str, str], *, field: str = "--knob") -> None:
    """Refuse a side knob the installed Triton never reads (a typo would make every cell `same`), imports
    Triton: its knobs, the variables its C++ side folds into its cache key, and the variables xisa pins
    (read by a backend directly)."""
    if not knobs:
        return
    read = triton_knob_variables() | set(PINNED_ENV)
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars

        saved = {name: os.environ.get(name) for name in knobs}
        try:
            os.environ.update(knobs)
            read |= set(get_cache_invalidating_env_vars())
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    except ImportError:  # not every Triton exposes it
        pass
    for name in sorted(knobs):
        if name not in read:
            import difflib

            near = difflib.get_close_matches(name, sorted(read), n=1)
            raise ToolchainError(f"Triton {triton_version()} reads no variable {name}, so setting it would change "
                                 "nothing", field=field,
                                 fix=f"did you mean {near[0]}?" if near else "see triton/knobs.py of that Triton")


def knobs_digest(knobs: dict[str, str]) -> str:
    """A short name for a knob setting: its Triton cache folder and part of its results' cache key."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(sorted(knobs.items())).encode()).hexdigest()[:16]


def pinned_overrides(environ: dict[str, str] | None = None) -> dict[str, str]:
    """User settings that xisa overrides with its pinned value (shown by `xisa doctor`)."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k, v in PINNED_ENV.items() if k in env and env[k] != v}


def pinned_note(environ: dict[str, str] | None = None) -> str | None:
    """One line naming every pinned variable the environment sets to another value than xisa compiles with,
    and the `xisa ab` that measures what it would change (None: the environment sets none). A pin that is
    silent lets a user believe the results honour a knob they set."""
    import shlex

    overridden = pinned_overrides(environ)
    if not overridden:
        return None
    shown = lambda name, value: f"{name}={shlex.quote(value)}"  # noqa: E731
    pins = ", ".join(f"{name} unset" if PINNED_ENV[name] is None else shown(name, PINNED_ENV[name])
                     for name in overridden)
    line = (f"the environment sets {', '.join(shown(k, v) for k, v in overridden.items())}, which xisa pins "
            f"({pins}, as a default launch has them): these results do not follow "
            f"{'it' if len(overridden) == 1 else 'them'}")
    measurable = [name for name in overridden if name not in NOT_SIDE_KNOBS]
    if measurable:
        flags = " ".join(f"--b-env {shown(name, overridden[name])}" for name in measurable)
        line += f"; to see what {'it changes' if len(measurable) == 1 else 'they change'}: xisa ab {flags} " \
                "(with this command's --arch/--kernel)"
    for name in overridden:
        if name in NOT_SIDE_KNOBS:
            line += f"; {name} {NOT_SIDE_KNOBS[name]}"
    return line


def apply_pinned_env(cache_dir: Path, *, triton_cache: Path | None = None, knobs: dict[str, str] | None = None) -> None:
    """Pin codegen knobs and a Triton cache private to xisa, in this process, before Triton compiles.

    `triton_cache` defaults to `cache_dir/triton`; `--no-cache` passes an empty folder of its own.
    `knobs` are an `xisa ab` side's explicit settings (`check_side_knobs`): set after the pins, over them.
    They never come from the environment, so the refusals below judge the user's environment alone.
    """
    check_environment()
    check_triton_environment()  # before pinning: a refusal leaves the environment as it was
    check_side_knobs(knobs or {})
    for name in REFUSED_ENV:  # set to "" or "0": counted as unset, and Triton never sees them
        os.environ.pop(name, None)
    for name, value in PINNED_ENV.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    os.environ.update(knobs or {})
    # Triton's cache keys on a kernel's starting line, not its path: a shared cache could hand us
    # another checkout's asm. Keep ours apart.
    os.environ["TRITON_CACHE_DIR"] = str(triton_cache or cache_dir / TRITON_CACHE_FOLDER)


def knob_settings() -> dict[str, dict[str, Any]]:
    """Triton's knobs as code has set them: each group's own attributes (an unset knob reads the environment)."""
    from triton import knobs

    return {name: dict(vars(group)) for name, group in vars(knobs).items() if isinstance(group, knobs.base_knobs)}


@contextlib.contextmanager
def knobs_restored() -> Iterator[None]:
    """Triton's knobs set in code, whether they follow the environment, and the environment itself, put back as they
    were after the block: a heuristic or an autotune pre_hook that sets one while its cell binds compiles that cell
    as its launch would, and no later cell of the worker inherits it."""
    from triton import knobs

    groups = {name: group for name, group in vars(knobs).items() if isinstance(group, knobs.base_knobs)}
    saved, propagate, environ = knob_settings(), getattr(knobs, "propagate_env", None), dict(os.environ)
    try:
        yield
    finally:
        for name, group in groups.items():
            settings = vars(group)
            if settings != saved[name]:
                settings.clear()
                settings.update(saved[name])
        if propagate is not None:
            knobs.propagate_env = propagate
        if os.environ != environ:
            for name in set(os.environ) - set(environ):
                del os.environ[name]
            os.environ.update(environ)


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


def wheel_tool(name: str) -> Path | None:
    """The NVIDIA tool inside the Triton wheel: the only one xisa compiles with (TRITON_*_PATH are refused)."""
    folder = _triton_dir()
    return folder / "backends" / "nvidia" / "bin" / name if folder else None


@functools.lru_cache(maxsize=1)
def ptxas_version() -> str | None:
    """The release of the wheel's ptxas, without importing Triton."""
    path = wheel_tool("ptxas")
    if path is None or not path.exists():
        return None
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"release (\S+?),", out) or re.search(r"V(\d+\.\d+\.\d+)", out)
    return match.group(1) if match else None


# How each toolchain key a backend records (`Backend.toolchain_keys`) is found out.
_PROBES = {"amd_codegen": amd_codegen_revision, "ptxas": ptxas_version}


def describe_toolchain(*, backends: set[str] | None = None) -> dict[str, str]:
    """What goes into every golden and cache key. `backends` (Triton's names) limits the slow probes to what
    is used."""
    info = {"triton": triton_version()}
    for entry in BACKENDS:
        if entry.name in (backends or ()):
            for key in entry.toolchain_keys:
                value = _PROBES[key]()
                if value:
                    info[key] = value
    return info
