"""Load a spec's kernel module in isolation and find the kernel object its `function:` names.

A long-lived compile worker loads each kernel module once (`WORKER.loaded`), with no project module of an
earlier load in sight, and undoes what the load changed in the process (sys.path, sys.modules, the
environment, Triton's knobs). What the load read is recorded for the result cache (`kernel_dependencies`).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from xisa.compile.incremental.installed import is_toolchain_module
from xisa.compile.incremental.load_store import LoadStore
from xisa.compile.incremental.reads import (ENVIRONMENT_ENTRY, dependency_files, file_sha256, hook_reads,
                                is_project_module, package_folders, variable_digest, watched_environment)
from xisa.compile.worker.platform_facts import DEVICE, ENVIRONMENT_PACKAGES
from xisa.compile.worker.state import PREFIX_MARK, WORKER, LoadedModule
from xisa.compile.gpu.import_hooks import first_line as _first_line, import_hook
from xisa.compile.gpu.target_driver import target_driver
from xisa.compile.worker.toolchain import HARMLESS_KNOB_ATTRIBUTES, changes_compilation, knob_settings, toolchain_variable
from xisa.errors import SpecError
from xisa.spec.cases import KernelSpec

def load_kernel_object(spec: KernelSpec, *, roots: list[Path], target=None):
    """Import the spec's module and return what `function:` names: a JITFunction, or a chain of triton
    KernelInterface wrappers around one (@triton.autotune, @triton.heuristics, FlagGems' LibEntry: `unwrap_kernel`
    takes it apart); `target` (a Target) is the one the load is for.

    The module is loaded once per process in a namespace of its own (`_load_isolated`), again for a target on
    which a platform fact the load read has another value, and the files the load imported are recorded for the
    result cache (`kernel_dependencies`).
    """
    loaded = WORKER.loaded_for(spec, target)
    if loaded is None:
        loaded = WORKER.shared_load(spec, _sharing(spec), target) or _load_isolated(spec, roots, target)
        WORKER.add_load(spec, loaded)
    module = loaded.module
    fn = getattr(module, spec.function, None)
    if fn is None:
        names = [n for n in dir(module) if is_kernel_object(getattr(module, n))]
        near = difflib.get_close_matches(spec.function, names, n=1)
        fix = f"did you mean {near[0]!r}?" if near else f"kernels in the module: {', '.join(names) or 'none'}"
        raise SpecError(f"no function {spec.function!r} in the module", path=spec.spec_path, field="function", fix=fix)
    unwrap_kernel(fn, spec)   # refuse anything else now
    return fn


def load_kernel_function(spec: KernelSpec, *, roots: list[Path], target=None):
    """The @triton.jit function the spec names, itself or inside its wrappers."""
    return unwrap_kernel(load_kernel_object(spec, roots=roots, target=target), spec)[0]


def is_kernel_object(value: Any) -> bool:
    """A @triton.jit function or any triton KernelInterface (an autotuner, heuristics, a library's wrapper)."""
    from triton.runtime.jit import JITFunction, KernelInterface

    return isinstance(value, (JITFunction, KernelInterface))


def unwrap_kernel(fn, spec: KernelSpec) -> tuple[Any, tuple[Any, ...]]:
    """A kernel object -> its JITFunction and the wrappers around it, outermost first (the order a launch runs them
    in): any chain of triton KernelInterface objects, each holding the next in `.fn`, that ends in a JITFunction.

    What each wrapper does is decided by its type, never its class name (`autotune.run_wrappers`): an Autotuner
    (FlagGems' LibTuner, fla's CachedAutotuner included) adds its config, a Heuristics its values, and any other
    KernelInterface (FlagGems' LibEntry) passes the launch's arguments through unchanged. LibEntry.run (flag_gems
    5.0.2 utils/libentry.py) hands its args and kwargs as they are to `self.fn.run` on the first launch of each of
    its cache keys, and that call is the one that compiles; its `key` (each tensor's dtype and `data_ptr() %
    divisibility`, each scalar's value, constexprs), `jit_function` and per-device kernel cache only decide when
    it replays that compiled kernel instead (`kernel[grid](*args)`), and its own evaluation of the heuristics
    only feeds its grid: none of it changes the code, so xisa reproduces none of it. (Its key ignores a tensor's
    storage size, which decides AMD's `tt.pointer_range 32`: a replay can reuse a kernel compiled for a smaller
    storage. A capture records the compiling launch, which is the code that ran.)
    """
    from triton.runtime.jit import JITFunction, KernelInterface

    wrappers: list[Any] = []
    inner = fn
    while not isinstance(inner, JITFunction):
        if not isinstance(inner, KernelInterface):
            what = type(inner).__name__ if inner is fn else f"{_chain_types(wrappers)} around a {type(inner).__name__}"
            raise SpecError(f"{spec.function!r} is a {what}, not a @triton.jit kernel", path=spec.spec_path,
                            field="function", fix="name a @triton.jit function, or an @triton.autotune, "
                                                  "@triton.heuristics or other triton KernelInterface object (a "
                                                  "library's wrapper) holding one in `.fn`")
        if any(inner is seen for seen in wrappers):
            raise SpecError(f"{spec.function!r} is a {_chain_types(wrappers)} whose `.fn` chain comes back to the "
                            f"{type(inner).__name__}: it never reaches a @triton.jit function", path=spec.spec_path,
                            field="function", fix="name the @triton.jit function the wrapper launches")
        wrappers.append(inner)
        try:
            inner = getattr(inner, "fn", None)
        except Exception:   # a property that fails holds nothing xisa can see either
            inner = None
        if inner is None:
            last = type(wrappers[-1]).__name__
            said = f"{spec.function!r} is a {_chain_types(wrappers)}" if len(wrappers) > 1 else f"{spec.function!r}"
            raise SpecError(f"{said}: the {last} is a triton KernelInterface that holds no `.fn`, so xisa cannot see "
                            "the @triton.jit function inside it", path=spec.spec_path, field="function",
                            fix=f"name the @triton.jit function it launches{_held_kernel(wrappers[-1])}")
    return inner, tuple(wrappers)


def _chain_types(wrappers: list[Any]) -> str:
    return " around a ".join(type(w).__name__ for w in wrappers)


def _held_kernel(wrapper) -> str:
    """Where a wrapper without `.fn` keeps a @triton.jit function, if in one of its own attributes."""
    from triton.runtime.jit import JITFunction

    for attribute, value in sorted(getattr(wrapper, "__dict__", {}).items()):
        if isinstance(value, JITFunction):
            return f" (its `.{attribute}` is the @triton.jit {value.__name__!r})"
    return ""


def kernel_dependencies(spec: KernelSpec, target=None) -> dict[str, str | None] | None:
    """What compiling `spec`'s kernel used -> SHA-256 (None: must stay absent), or None if not loaded: the files
    and environment variables (`$NAME`) its module's load read, and the project files its compiles read."""
    loaded = WORKER.loaded_for(spec, target)
    return {**loaded.dependencies, **loaded.compile_reads} if loaded is not None else None


def kernel_platform_facts(spec: KernelSpec, target) -> dict[str, Any]:
    """The platform facts the load serving `target` and its compiles so far read -> value (their values on
    `target`: the load serves no target where one differs); the device itself (`device`) is the target."""
    loaded = WORKER.loaded_for(spec, target)
    return {fact: value for fact, value in (loaded.platform_facts if loaded else {}).items() if fact != DEVICE}


def _load_isolated(spec: KernelSpec, roots: list[Path], target=None) -> LoadedModule:
    """Import the kernel module with no project module of an earlier load in sight, record what it read, and
    undo what it changed in the process.

    A long-lived worker would otherwise keep the first `common` it imported and hand it to every later
    kernel doing `from common import f`, whatever folder that kernel is in. So the project's modules
    (everything outside the standard library and installed packages) are set aside during the load,
    the ones the load added are dropped after it (the kernel keeps references to what it uses), and
    sys.path is restored. So are the environment and Triton's knobs: a module that set one would change
    how every later kernel in the worker compiles; one that changes compilation is refused. Project
    modules are compiled from their source, never from a __pycache__ entry (trusted by mtime and size,
    so an edit that keeps both would run the old code). A source inside a package folder imports as that
    package's submodule: every module under the package's top name is set aside too (another project's
    `kernels`, or the user's own in a pytest process, installed or not) and none of the load's stays, the
    kernel module included (callers reach it through `WORKER.loaded` and the function's globals).
    """
    hook_reads()
    saved_path = list(sys.path)
    saved_environ, saved_knobs = dict(os.environ), knob_settings()
    package = _package_of(spec.source_file, roots) if spec.source_file is not None else None
    if package:
        top = package[0].partition(".")[0]
    elif spec.module is not None and spec.module.partition(".")[0] not in ENVIRONMENT_PACKAGES:
        top = spec.module.partition(".")[0]   # an installed package's files count too: it is the kernel
    else:
        top = None

    def isolated(name: str, module: Any) -> bool:   # a package (or a module of torch) that asked the device is
        package = name.partition(".")[0]                # loaded anew per load
        return is_project_module(name, module) or package == top or package in WORKER.device_packages or \
            name in WORKER.device_packages

    set_aside = {name: module for name, module in list(sys.modules.items()) if isolated(name, module)}
    for name in set_aside:
        del sys.modules[name]
    before = set(sys.modules)
    dropped: dict[str, Any] = {}
    after_top: set[str] = set()   # the package's modules once the import that imported the kernel's ended
    WORKER.reads, WORKER.env_reads = reads, variables = [], set()
    WORKER.read_stats = {}   # this load's reads, as first opened
    try:
        with watched_environment(), from_source(), target_driver(target) as driver, \
                contextlib.ExitStack() as hooks:
            sys.path[:0] = [str(folder) for folder in spec.pythonpath]   # [tool.xisa] pythonpath, ahead of the rest
            for hook in spec.import_hooks:
                hooks.enter_context(import_hook(hook, target, driver.answers))
            module = _import_kernel_module(spec, roots, package, after_top)
        WORKER.reads, WORKER.env_reads = None, None  # hashing the files below reads them too
        added = {name: sys.modules[name] for name in set(sys.modules) - before}
        folders = package_folders(added, top)
        dependencies = dependency_files(added, reads, kernel_package=top, package_folders=folders)
        dependencies.update({str(hook): file_sha256(str(hook)) for hook in spec.import_hooks})
        # A variable's value as the load found it: one the load sets itself (torch's inductor sets
        # TORCHINDUCTOR_CACHE_DIR when imported) is absent again when the next process starts its load.
        dependencies.update({ENVIRONMENT_ENTRY + name: variable_digest(name, saved_environ)
                             for name in sorted(variables) if not toolchain_variable(name)})
    finally:
        WORKER.reads, WORKER.env_reads = None, None
        for name in set(sys.modules) - before:
            added = sys.modules[name]   # an object put there in a module's place (`sys.modules[__name__] = ...`) too
            if isolated(name, added) or not isinstance(added, types.ModuleType):
                dropped[name] = sys.modules.pop(name)   # back in sight while its cells compile (reads.compiling)
        sys.modules.update(set_aside)
        sys.path[:] = saved_path
        changed = _restore_process(saved_environ, saved_knobs)
    package_load = frozenset(after_top)
    if changed:
        raise SpecError(f"loading {spec.source_file.name if spec.source_file else spec.module} set {changed}: it "
                        "changes how Triton compiles this kernel and every later one in the process, so a result "
                        "would depend on which kernel loaded first", path=spec.spec_path,
                        field="source" if spec.source_file else "module",
                        fix="remove the setting from the module (xisa compiles every kernel as a default launch)")
    return LoadedModule(module=module, dependencies=dict(sorted(dependencies.items())),
                        package_folders=folders, platform_facts=dict(driver.answers.facts), modules=dropped,
                        package_load=package_load, sharing=_sharing(spec))


def _sharing(spec: KernelSpec) -> tuple:
    """What two `module:` specs' loads must have in common to be one load: the top package, the folders ahead of
    sys.path, the import hooks."""
    return (spec.module.partition(".")[0] if spec.module else None, tuple(map(str, spec.pythonpath)),
            tuple(map(str, spec.import_hooks)))


_LOAD_STORE = LoadStore(None)   # in memory, until a worker names its cache folder (`keep_loads_in`)


def keep_loads_in(cache_dir: Path | None, *, lookup: bool = True) -> None:
    """Keep what loads compile and find in `cache_dir` (`load_store.py`); `lookup` False: write only (--no-cache)."""
    global _LOAD_STORE
    _LOAD_STORE = LoadStore(cache_dir, lookup=lookup)


@contextlib.contextmanager
def from_source() -> Iterator[None]:
    """Compile the modules a load imports from source (the toolchain's aside) and write no bytecode; a text compiled
    before is not compiled again, nor a function's source block found again (`WORKER.load_store`: each @triton.jit
    decorator asks `inspect.getsourcelines`, which tokenizes its function: 70% of loading fla, ~340 kernels)."""
    import inspect
    from importlib.machinery import SourceFileLoader

    saved = sys.dont_write_bytecode
    get_code, source_to_code = SourceFileLoader.get_code, SourceFileLoader.source_to_code
    getblock = inspect.getblock

    def code_from_source(loader, fullname):
        if is_toolchain_module(fullname):   # keyed as the toolchain, not per cell: imported as usual (a library's
            return get_code(loader, fullname)   # `torch.compiler.disable` imports torch._dynamo, sympy, networkx ...)
        if type(loader).source_to_code is not source_to_code:   # an import hook's loader that rewrites the source
            return get_code(loader, fullname)                       # (from what, the store's key cannot tell)
        path = loader.get_filename(fullname)
        return _LOAD_STORE.code(path, loader.get_data(path), loader.source_to_code)

    def remembered_getblock(lines):
        return lines[:_LOAD_STORE.block_length(lines, getblock)]

    sys.dont_write_bytecode = True
    SourceFileLoader.get_code = code_from_source
    inspect.getblock = remembered_getblock
    try:
        yield
    finally:
        sys.dont_write_bytecode = saved
        SourceFileLoader.get_code = get_code
        inspect.getblock = getblock


def _restore_process(environ: dict[str, str], knob_settings: dict[str, dict[str, Any]]) -> str | None:
    """Put the environment and Triton's knobs back as they were; the first change that alters compilation, named."""
    from triton import knobs

    changed: list[str] = []
    for name in sorted(set(os.environ) | set(environ)):
        if os.environ.get(name) != environ.get(name):
            if changes_compilation(name):
                changed.append(name)
            if name in environ:
                os.environ[name] = environ[name]
            else:
                del os.environ[name]
    for group_name, saved in knob_settings.items():
        group = getattr(knobs, group_name)
        settings = vars(group)
        for attribute in sorted(set(settings) | set(saved)):
            now, before = settings.get(attribute, saved), saved.get(attribute, saved)
            if now is before or (now is not saved and before is not saved and now == before):
                continue
            descriptor = group.knob_descriptors.get(attribute)
            variable = getattr(descriptor, "key", None)
            if changes_compilation(variable) if variable else attribute not in HARMLESS_KNOB_ATTRIBUTES:
                changed.append(f"triton.knobs.{group_name}.{attribute}" + (f" ({variable})" if variable else ""))
        settings.clear()
        settings.update(saved)
    return changed[0] if changed else None



def _package_of(source: Path, roots: list[Path]) -> tuple[str, Path] | None:
    """A source in a package folder (one with __init__.py, nested ones too) -> its dotted module name and the
    folder holding the top package; None for a file in a plain folder. The walk up stops at a folder whose name
    is no identifier and at the project's edge, so a load never puts a folder outside the project on sys.path."""
    parts = [] if source.name == "__init__.py" else [source.stem]
    folder = source.parent
    while ((folder / "__init__.py").is_file() and folder.name.isidentifier()
           and any(_within(folder.parent, root) for root in roots)):
        parts.insert(0, folder.name)
        folder = folder.parent
    if folder == source.parent or not all(part.isidentifier() for part in parts):
        return None
    return ".".join(parts), folder


def _import_package_module(spec: KernelSpec, module_name: str, folder: Path):
    """Import `module_name` from `folder` the normal way, each parent package first, so relative imports work;
    a failing package `__init__.py` is named, and so is a package served from anywhere else."""
    parts = module_name.split(".")
    module = None
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        expected = spec.source_file if depth == len(parts) else folder.joinpath(*parts[:depth], "__init__.py")
        shown = expected.relative_to(folder).as_posix()
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            where = "" if expected == spec.source_file else f" in {shown}"
            raise SpecError(f"importing {spec.source_file.name} failed{where}: {type(exc).__name__}: {exc}",
                            path=spec.spec_path, field="source",
                            fix=None if not where else "make the package's __init__.py import cleanly (it runs "
                                "before every kernel in the package)") from None
        origin = vars(module).get("__file__")
        if not origin or Path(origin).resolve() != expected.resolve():
            raise SpecError(f"{spec.source_file.name} imports as {module_name!r}, but {name!r} comes from "
                            f"{origin or 'no file'}, not {shown}", path=spec.spec_path, field="source",
                            fix=f"rename the package folder {parts[0]!r} (another importer serves that name)")
    return module


def _import_kernel_module(spec: KernelSpec, roots: list[Path], package: tuple[str, Path] | None = None,
                          after_top: set[str] | None = None):
    if spec.source_file is not None:
        source = spec.source_file
        if not any(_within(source, root) for root in roots):
            raise SpecError(f"{source} is outside the project's kernel roots", path=spec.spec_path, field="source",
                            fix="keep kernel sources inside the project")
        sys.path.insert(0, str(source.parent))  # `from common import f` beside the kernel
        if package is not None:
            module_name, folder = package
            sys.path.insert(0, str(folder))     # its top package, imported the normal way
            return _import_package_module(spec, module_name, folder)
        module_name = f"xisa_kernels.{spec.name}.{source.stem}"
        loader_spec = importlib.util.spec_from_file_location(module_name, source)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:
            raise SpecError(f"importing {source.name} failed: {type(exc).__name__}: {exc}",
                            path=spec.spec_path, field="source") from None
        return module
    return _import_dotted_module(spec, after_top if after_top is not None else set())


def _import_dotted_module(spec: KernelSpec, after_top: set[str]):
    """`module: pkg.sub.mod` from sys.path, wherever it is installed, each parent package first: a parent whose
    `__init__.py` fails is named, one line (it runs before the kernel, and often imports a whole framework).
    `after_top` gets the names of the top package's modules in sight once the import of the first parent package
    that imported the kernel's module ended, and that package's name after `PREFIX_MARK`."""
    parts = spec.module.split(".")
    module = None
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name and depth < len(parts):
                raise SpecError(f"cannot import module {spec.module!r}: its parent package {name!r} was not found",
                                path=spec.spec_path, field="module",
                                fix=f"add {name.replace('.', '/')}/__init__.py inside a [tool.xisa] pythonpath "
                                    "folder, or install the package") from None
            if exc.name == name:
                raise SpecError(f"cannot import module {spec.module!r}: ModuleNotFoundError: {_first_line(exc)}",
                                path=spec.spec_path, field="module",
                                fix="add its folder to [tool.xisa] pythonpath, or install the package") from None
            raise _import_failure(spec, name, depth == len(parts), exc) from None
        except Exception as exc:
            raise _import_failure(spec, name, depth == len(parts), exc) from None
        if not after_top and spec.module in sys.modules:   # imported by this package's import (or by itself)
            top = parts[0]
            after_top.update(n for n in sys.modules if n == top or n.startswith(top + "."))
            after_top.add(PREFIX_MARK + name)
    return module


def _import_failure(spec: KernelSpec, name: str, is_kernel: bool, exc: Exception) -> SpecError:
    if is_kernel:
        return SpecError(f"cannot import module {spec.module!r}: {type(exc).__name__}: {_first_line(exc)}",
                         path=spec.spec_path, field="module")
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        found = None
    where = f" ({found.origin})" if found is not None and found.origin else ""
    return SpecError(f"cannot import module {spec.module!r}: its parent package {name!r}{where} failed: "
                     f"{type(exc).__name__}: {_first_line(exc)}", path=spec.spec_path, field="module",
                     fix="its __init__.py runs before the kernel: make it import without a GPU, or stub what it asks "
                         "in a [tool.xisa] import_hooks file")


def _within(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def named_object(spec: KernelSpec, fn, target=None):
    """The object `function:` names when `fn` is the JITFunction inside it (callers holding the plain function)."""
    loaded = WORKER.loaded_for(spec, target)
    named = getattr(loaded.module, spec.function, None) if loaded is not None else None
    if named is not None and named is not fn and is_kernel_object(named) and unwrap_kernel(named, spec)[0] is fn:
        return named
    return fn

