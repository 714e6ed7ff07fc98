"""What a compile worker process keeps between cells, in one object: the kernel modules it loaded and the
recording of what a load or a compile under way reads.

A forked compile worker loads each spec's module once, however many cells it compiles, and again for a target
on which a platform fact the load read (torch.version.hip, the SM count, Triton's target) has another value. `WORKER.reset()` forgets all of it, as a fresh worker starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xisa.compile.worker.platform_facts import same_platform
from xisa.spec.cases import KernelSpec

PREFIX_MARK = "<imported by> "   # in `LoadedModule.package_load`: the parent package whose import ended the load


@dataclass
class LoadedModule:
    """A kernel module as one isolated load left it, with what that load and the compiles since have read."""

    module: Any
    dependencies: dict[str, str | None]     # what the load read: files, and `$NAME` for a variable
    compile_reads: dict[str, str | None] = field(default_factory=dict)   # files its compiles read, so far
    package_folders: tuple[str, ...] = ()   # the kernel's own package: its files count wherever it is installed
    # The platform facts the load and the compiles since read -> value (`xisa.compile.worker.platform_facts`):
    # the load serves only targets where each is the same.
    platform_facts: dict[str, Any] = field(default_factory=dict)
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

    # Each spec's loads (by `key(spec)`), each serving the targets on which every platform fact it read is the same
    # (`LoadedModule.platform_facts`, `xisa.compile.worker.platform_facts.same_platform`).
    loaded: dict[tuple, list[LoadedModule]] = field(default_factory=dict)
    # Files opened for reading while a load or a compile is under way (None: neither); the audit hook appends.
    reads: list[str] | None = None
    # Each file read while recording, as it was when first opened: (mtime_ns, ctime_ns, size, inode, when read).
    # A file whose bytes may differ from those read (saved meanwhile) is never recorded by its digest now.
    read_stats: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # Variables read through os.environ while a kernel module loads (None: no load under way).
    env_reads: set[str] | None = None
    compiling: CompileUnderWay | None = None
    # Folders whose files a compile reads as its own output (Triton's cache), never a dependency.
    output_folders: tuple[str, ...] = ()
    # The audit hook is installed (once per process: a hook cannot be removed, so `reset` keeps this).
    reads_hooked: bool = False
    # Top packages whose code asked the device during a load or compile (`xisa.compile.gpu.device_answers`): they may
    # keep the answers (module globals, functools.cache), so every load imports them anew. Kept by `reset`: it is
    # what those packages do, not a load.
    device_packages: set[str] = field(default_factory=set)
    # Modules of torch whose code asked the device (`torch.utils._triton`): their caches are cleared when the target
    # changes (`xisa.compile.gpu.device_answers.clear_torch_caches`); the target they last answered for.
    torch_askers: set[str] = field(default_factory=set)
    torch_answered: str | None = None

    def learn_device_packages(self, packages: set[str]) -> None:
        """Packages newly seen asking the device: the loads made so far may share their modules (with answers
        for one target in them), so all but the compile under way are forgotten and load again. Modules of torch
        are kept apart: never loaded anew, their caches cleared when the target changes."""
        self.torch_askers |= {name for name in packages if name.startswith("torch.")}
        packages = {name for name in packages if not name.startswith("torch.")}
        new = packages - self.device_packages
        if not new:
            return
        self.device_packages |= new
        keep = self.compiling.loaded if self.compiling is not None else None
        self.loaded = {key: kept for key, loads in self.loaded.items() if (kept := [l for l in loads if l is keep])}

    def learn_platform_facts(self, loaded: LoadedModule, facts: dict[str, Any]) -> None:
        """A compile of `loaded` read `facts`: its modules may keep them (a functools.cache), so from now on the load,
        and every load sharing its modules, serves only targets with the same values."""
        loaded.platform_facts.update(facts)

    def shared_load(self, spec: KernelSpec, sharing: tuple, target=None) -> LoadedModule | None:
        """Another spec's load that is the import of `spec`'s package and holds `spec`'s module, fit for `target`
        (every platform fact it read is the same there), as `spec`'s own; None when there is none."""
        if spec.module is None or spec.source_file is not None:
            return None
        for other in (load for loads in self.loaded.values() for load in loads):
            if other.sharing != sharing or spec.module not in other.package_load or spec.module not in other.modules:
                continue
            if not any(name.startswith(PREFIX_MARK) and spec.module.startswith(name[len(PREFIX_MARK):] + ".")
                       for name in other.package_load):
                continue   # a load of B would import another parent package first
            if not same_platform(other.platform_facts, target):
                continue   # its modules hold another platform's answers
            # the same facts dict: a fact a compile of either reads is kept by the modules both use
            return LoadedModule(module=other.modules[spec.module], dependencies=other.dependencies,
                                package_folders=other.package_folders, platform_facts=other.platform_facts,
                                modules=other.modules, package_load=other.package_load, sharing=sharing)
        return None

    @staticmethod
    def key(spec: KernelSpec) -> tuple:
        return (str(spec.spec_file), str(spec.source_file), spec.module)

    def loaded_for(self, spec: KernelSpec, target=None) -> LoadedModule | None:
        """The load of `spec` that may serve `target`, or None."""
        return next((loaded for loaded in self.loaded.get(self.key(spec), ())
                     if same_platform(loaded.platform_facts, target)), None)

    def add_load(self, spec: KernelSpec, loaded: LoadedModule) -> None:
        self.loaded.setdefault(self.key(spec), []).append(loaded)

    def reset(self) -> None:
        """Forget every load and any recording under way, as a freshly started worker has none."""
        self.loaded = {}
        self.reads = None
        self.read_stats = {}
        self.env_reads = None
        self.compiling = None
        self.output_folders = ()


WORKER = WorkerState()
