"""What a compile worker process keeps between cells, in one object: the kernel modules it loaded and the
recording of what a load or a compile under way reads.

A forked compile worker loads each spec's module once, however many cells it compiles (once per target for a
spec whose module asked which target it runs on). `WORKER.reset()` forgets all of it, as a fresh worker starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xisa.spec.cases import KernelSpec

# Always the environment, wherever they are installed from (an editable Triton is still the toolchain): never a
# project module, never loaded anew, never a package that keeps device answers.
ENVIRONMENT_PACKAGES = {"triton", "torch", "xisa", "__main__"}
PREFIX_MARK = "<imported by> "   # in `LoadedModule.package_load`: the parent package whose import ended the load


@dataclass
class LoadedModule:
    """A kernel module as one isolated load left it, with what that load and the compiles since have read."""

    module: Any
    dependencies: dict[str, str | None]     # what the load read: files, and `$NAME` for a variable
    compile_reads: dict[str, str | None] = field(default_factory=dict)   # files its compiles read, so far
    package_folders: tuple[str, ...] = ()   # the kernel's own package: its files count wherever it is installed
    asked_target: bool = False              # the load asked the driver for the current target: one per target
    # The modules the load imported and took out of sys.modules after it (the project's, the kernel's package, the
    # packages that asked the device): in sight again while its cells compile, so a heuristic's lazy import finds
    # the load's own module, not a fresh copy that would stay behind with this target's answers.
    modules: dict[str, Any] = field(default_factory=dict)
    # A `module:` spec's load imports each parent package first; the first whose import imported the kernel's module
    # (fla.ops, whose `__init__` imports every op) ended the load's code. Its name (after `PREFIX_MARK`) and the
    # package's modules then: a spec of any of them below that package, with the same top package, pythonpath and
    # import hooks (`sharing`), would run exactly the same imports, so it shares the load.
    package_load: frozenset[str] = frozenset()
    sharing: tuple = ()


@dataclass
class CompileUnderWay:
    """The compile of a loaded kernel that this process runs now."""

    loaded: LoadedModule
    reads: list[str]                  # every file opened for reading so far
    reused: dict[str, str | None]     # what the compiles behind a Triton cache entry it reused read


@dataclass
class WorkerState:
    """The per-process state of kernel loading and read recording (one instance: `WORKER`)."""

    loaded: dict[tuple, LoadedModule] = field(default_factory=dict)   # by `key(spec, target)`
    per_target: set[tuple] = field(default_factory=set)   # specs (`key(spec)`) whose load asked the target
    # Files opened for reading while a load or a compile is under way (None: neither); the audit hook appends.
    reads: list[str] | None = None
    # Variables read through os.environ while a kernel module loads (None: no load under way).
    env_reads: set[str] | None = None
    compiling: CompileUnderWay | None = None
    # The back-end store's part in the compile under way (`xisa.compile.backend_store.BackendReuse`; None: off).
    backend: Any = None
    # Folders whose files a compile reads as its own output (Triton's cache), never a dependency.
    output_folders: tuple[str, ...] = ()
    # The audit hook is installed (once per process: a hook cannot be removed, so `reset` keeps this).
    reads_hooked: bool = False
    # Top packages whose code asked the device during a load or compile (`xisa.compile.device_answers`): they may
    # keep the answers (module globals, functools.cache), so every load imports them anew. Kept by `reset`: it is
    # what those packages do, not a load.
    device_packages: set[str] = field(default_factory=set)

    def learn_device_packages(self, packages: set[str]) -> None:
        """Packages newly seen asking the device: the loads made so far may share their modules (with answers
        for one target in them), so all but the compile under way are forgotten and load again."""
        new = packages - self.device_packages
        if not new:
            return
        self.device_packages |= new
        keep = self.compiling.loaded if self.compiling is not None else None
        self.loaded = {key: loaded for key, loaded in self.loaded.items() if loaded is keep}

    def mark_per_target(self, spec: KernelSpec, target) -> None:
        """A compile of `spec` asked the device: its load is one per target from now on (the one in hand becomes
        `target`'s, the other targets load anew, and so do other specs sharing its modules: they may hold the
        answers for `target` now)."""
        key = self.key(spec)
        if key in self.per_target:
            return
        loaded = self.loaded.pop(key, None)
        self.per_target.add(key)
        if loaded is not None:
            self.loaded = {k: other for k, other in self.loaded.items() if other.modules is not loaded.modules}
            self.loaded[self.key(spec, target)] = loaded

    def shared_load(self, spec: KernelSpec, sharing: tuple, target=None) -> LoadedModule | None:
        """Another spec's load that is the import of `spec`'s package and holds `spec`'s module, fit for `target` (a
        load for one target serves that target alone), as `spec`'s own; None when there is none."""
        if spec.module is None or spec.source_file is not None:
            return None
        for key, other in self.loaded.items():
            if other.sharing != sharing or spec.module not in other.package_load or spec.module not in other.modules:
                continue
            if not any(name.startswith(PREFIX_MARK) and spec.module.startswith(name[len(PREFIX_MARK):] + ".")
                       for name in other.package_load):
                continue   # a load of B would import another parent package first
            if len(key) > 3 and key[3] != getattr(target, "name", None):
                continue   # made for another target: its modules may hold that target's answers
            return LoadedModule(module=other.modules[spec.module], dependencies=other.dependencies,
                                package_folders=other.package_folders, asked_target=other.asked_target,
                                modules=other.modules, package_load=other.package_load, sharing=sharing)
        return None

    def key(self, spec: KernelSpec, target=None) -> tuple:
        """The load of `spec` for `target`: one per spec, or one per target once its load asked the target."""
        key = (str(spec.spec_file), str(spec.source_file), spec.module)
        return key + (getattr(target, "name", None),) if key in self.per_target else key

    def loaded_for(self, spec: KernelSpec, target=None) -> LoadedModule | None:
        return self.loaded.get(self.key(spec, target))

    def reset(self) -> None:
        """Forget every load and any recording under way, as a freshly started worker has none."""
        self.loaded = {}
        self.per_target = set()
        self.reads = None
        self.env_reads = None
        self.compiling = None
        self.backend = None
        self.output_folders = ()


WORKER = WorkerState()
