"""A cell's entry in Triton's own cache, as a launch on the target's GPU writes it and looks it up.

`triton.compile` files a compile under `sha256(f"{triton_key()}-{src.hash()}-{backend.hash()}-{options.hash()}-{env}")`
(`get_cache_key` in `triton/runtime/cache.py`, Triton 3.6 to 3.9). xisa's own compiles are not that entry: they pin
codegen variables to their defaults *in the environment*, and Triton folds every set cache-invalidating variable
into `env` (`AMDGCN_USE_BUFFER_OPS=1` set is another key than unset, for the same code); xisa salts its Triton
cache's keys with what a load read; and on NVIDIA it hands ptxas a path-free copy of the PTX. So an export compiles
each cell again, in a process that looks like a default launch: the pinned and refused variables unset, Triton's
knobs as the environment gives them, Triton's own `FileCacheManager` writing into a folder of the bundle, and
`triton.compile` called as `JITFunction.run` calls it (the ASTSource Triton's binder gives, the target, the options
the binder parsed). What Triton writes there is the entry, byte for byte; nothing of xisa's is added.

The key is then restated from its parts (`launch_key`), with Triton's own `get_cache_key`: the kernel's source hash
as exported, the backend Triton makes for the target here, the launch's option keywords parsed by this Triton as a
launch parses them, the cache-invalidating variables set here. At export that must give the key Triton filed the
entry under (else the cell is an error); `xisa export --verify` gives it on the deploying machine. Imports Triton.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

from xisa.compile.worker.toolchain import PINNED_ENV, REFUSED_ENV
from xisa.errors import ToolchainError


def default_launch_environ(environ: dict[str, str]) -> dict[str, str]:
    """`environ` as a default launch has it: no pinned or refused variable set (each pin is its knob's default,
    `tests/compile/test_launch_cache.py`), so Triton's `env` part of the key is what a launch with none set gets."""
    return {name: value for name, value in environ.items() if name not in PINNED_ENV and name not in REFUSED_ENV}


def prepare_launch_process(triton_cache: Path) -> None:
    """This process (an export's worker) as a default launch sees Triton: the environment of
    `default_launch_environ`, Triton's cache in `triton_cache` through Triton's own manager, knobs as the
    environment gives them, and the backends' options classes made under that environment."""
    from xisa.compile.runner import _reimport_backend_compilers as reimport_backend_compilers
    from xisa.compile.launch.warm import import_compile_modules

    import_compile_modules()   # torch, Triton and its backends, as a compile worker has them
    from triton import knobs

    kept = default_launch_environ(dict(os.environ))
    os.environ.clear()
    os.environ.update(kept)
    os.environ["TRITON_CACHE_DIR"] = str(triton_cache)
    for group in vars(knobs).values():
        if isinstance(group, knobs.base_knobs):
            group.reset()
    refresh = getattr(knobs, "refresh_knobs", None)
    if refresh is not None:
        refresh()
    reimport_backend_compilers()
    if knobs.cache.manager_class is not None or knobs.cache.dir != str(triton_cache):
        raise ToolchainError("Triton's cache is not its own file cache in the export's folder, so the export "
                             "would not be the entry a launch reads", fix="unset TRITON_CACHE_MANAGER and TRITON_HOME")


class _SourceHash:
    """What `get_cache_key` asks of a source: its hash (the kernel's source, callees, constexpr globals, starting
    line, signature, attributes and constexprs), as `ASTSource.hash()` gave it at export."""

    def __init__(self, digest: str):
        self.digest = digest

    def hash(self) -> str:
        return self.digest


def launch_key(parts: dict[str, Any], *, environ_vars: dict[str, str] | None = None) -> dict[str, Any]:
    """The key this machine's Triton files a launch of `parts` under, and its parts: `parts` gives `source_hash`,
    `gpu_target` ([backend, arch, warp_size]) and `launch_options` (the keywords a launch parses); this Triton gives
    `triton_key()`, its backend's hash for the target (ptxas's version on NVIDIA), its options' hash (their defaults
    from knobs, AMD's bitcode library paths) and the cache-invalidating variables set in this process (or
    `environ_vars`). Returns {"key", "triton_key_sha256", "backend_hash", "options_hash", "env"}."""
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.cache import get_cache_key, triton_key

    backend_name, arch, warp_size = parts["gpu_target"]
    backend = make_backend(GPUTarget(backend_name, arch, warp_size))
    options = backend.parse_options(dict(parts["launch_options"]))      # `JITFunction._pack_args`
    options = backend.parse_options(dict(options.__dict__))             # `triton.compile`
    env = get_cache_invalidating_env_vars() if environ_vars is None else environ_vars
    text = get_cache_key(_SourceHash(parts["source_hash"]), backend, options, env)
    return {"key": hashlib.sha256(text.encode()).hexdigest(),
            "triton_key_sha256": hashlib.sha256(triton_key().encode()).hexdigest(),
            "backend_hash": backend.hash(), "options_hash": options.hash(), "env": dict(sorted(env.items()))}


def toolchain_facts() -> dict[str, Any]:
    """What a bundle is valid for: this Triton's build (`triton_key()`: its version, Python files and libtriton,
    LLVM inside it), the Python ABI that loaded it, and the tool versions xisa records in goldens."""
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.runtime.cache import triton_key

    key = triton_key()
    return {"triton_key": key, "triton_key_sha256": hashlib.sha256(key.encode()).hexdigest(),
            "python": {"version": sys.version.split()[0], "cache_tag": sys.implementation.cache_tag,
                       "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"), "platform": sysconfig.get_platform()},
            "triton_dir": str(Path(sys.modules["triton"].__file__).parent),
            "cache_invalidating_env": dict(sorted(get_cache_invalidating_env_vars().items()))}


def export_cell(cell, *, roots: list[Path], triton_cache: Path) -> dict[str, Any]:
    """Compile `cell` as its launch does into `triton_cache` (`prepare_launch_process` first); what the bundle's
    manifest says of it. Raises XisaError or Triton's exception."""
    import triton
    from triton.compiler import ASTSource

    from xisa.compile.gpu.import_hooks import hooks_entered
    from xisa.compile.launch.bind import bind_cell
    from xisa.compile.launch.loader import from_source, load_kernel_function
    from xisa.compile.incremental.reads import compiling
    from xisa.compile.launch.standins import plain
    from xisa.compile.worker.toolchain import knobs_restored

    fn = load_kernel_function(cell.kernel, roots=roots, target=cell.target)
    with knobs_restored(), compiling(cell.kernel, cell.target), from_source(), hooks_entered(cell.kernel, cell.target):
        bound = bind_cell(cell, fn)
        source = ASTSource(bound.fn, bound.signature, bound.constexprs, bound.attrs)
        compiled = triton.compile(source, target=bound.target, options=vars(bound.options))
        target = bound.target
        parts = {"source_hash": source.hash(), "gpu_target": [target.backend, target.arch, target.warp_size],
                 "launch_options": {k: plain(v) for k, v in sorted(bound.launch_options.items())}}
        restated = launch_key(parts)
    if restated["key"] != compiled.hash:
        raise ToolchainError(f"Triton filed the compile under {compiled.hash[:16]}..., but its parts restate "
                             f"{restated['key'][:16]}...: a bundle could not be verified", fix="report this with the cell")
    facts = {name: restated[name] for name in ("backend_hash", "options_hash", "env")}
    return {**parts, **facts, "key": compiled.hash, **group_files(compiled, triton_cache),
            "fingerprint": analyzed_fingerprint(cell, compiled, bound.options)}


def analyzed_fingerprint(cell, compiled, options) -> str:
    """xisa's fingerprint of the entry's code object (`code_sha256` of its analysis: what a golden compares)."""
    from xisa.compile.cell import backend_analysis

    return backend_analysis(cell, compiled, options).code_sha256


def group_files(compiled, triton_cache: Path) -> dict[str, Any]:
    """The entry's folder, its group file and files (as Triton's group names them), and the code object's digest."""
    group = dict(compiled.metadata_group)
    folders = {Path(path).parent for path in group.values()}
    if len(folders) != 1 or next(iter(folders)).parent != Path(triton_cache):
        raise ToolchainError(f"Triton's group for {compiled.name} names files outside one folder of "
                             f"{triton_cache}: {sorted(map(str, folders))}", fix="unset TRITON_HOME and TRITON_CACHE_DIR")
    folder = next(iter(folders))
    metadata_file = next(name for name in group if name.endswith(".json"))
    binary_ext = "hsaco" if compiled.metadata.target.backend == "hip" else "cubin"
    code = [name for name in group if name.endswith(f".{binary_ext}")]
    if len(code) != 1:
        raise ToolchainError(f"Triton's group for {compiled.name} holds {len(code)} .{binary_ext} files",
                             fix="report this with the cell")
    return {"folder": folder.name, "group_file": f"__grp__{metadata_file}", "files": sorted(group),
            "code_object": code[0], "code_sha256": hashlib.sha256((folder / code[0]).read_bytes()).hexdigest()}


def relocate_group(text: str, old_root: Path, new_root: Path) -> str:
    """A group file as Triton writes it with its cache in `new_root` rather than `old_root`: `put_group` writes
    `json.dumps({"child_paths": group})`, each path the cache folder joined with the entry's folder and file."""
    data = json.loads(text)
    paths = data["child_paths"]
    moved = {}
    for name, path in paths.items():
        relative = Path(path).relative_to(old_root)
        moved[name] = os.path.join(str(new_root), *relative.parts)
    return json.dumps({"child_paths": moved})


def finds_group(cache_root: Path, folder: str, group_file: str) -> bool:
    """Whether Triton's own file cache, with its folder at `cache_root`, finds the entry's group whole (every file
    it names present: the lookup `triton.compile` makes before compiling), and finds it here: a group naming the
    files of another copy of the bundle would be found only while that copy is there."""
    from triton.runtime.cache import FileCacheManager

    manager = FileCacheManager.__new__(FileCacheManager)   # its reading half only: no folder made
    manager.key, manager.lock_path = folder, None
    manager.cache_dir = os.path.join(str(cache_root), folder)
    group = manager.get_group(group_file[len("__grp__"):])
    return group is not None and all(os.path.dirname(path) == manager.cache_dir for path in group.values())
