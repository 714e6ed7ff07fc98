"""The settings of `xisa capture`'s hook (sitecustomize.py), and which of Triton's methods it wraps and how.

A launch class's `run` (JITFunction, InterpretedFunction) records the launch; every other KernelInterface
class's `run` (Autotuner, Heuristics, their subclasses, a library's wrapper) runs through the recorder's wrapper
stack; the autotuner's benchmark and warm-up are quiet. Modules are patched right after they execute, so
nothing of Triton is imported before the program imports it. Named `_xisa_capture_*` because this folder is
on every captured process's sys.path; `xisa.api.capture` reads the settings from here (nothing here imports xisa).
"""

import sys

RECORDS_VARIABLE = "XISA_CAPTURE_RECORDS"
NO_RUN_VARIABLE = "XISA_CAPTURE_NO_RUN"            # "1": record each launch, compile and run nothing
POLICY_VARIABLE = "XISA_CAPTURE_CONFIG_POLICY"     # one of CONFIG_POLICIES
ANSWER_AS_VARIABLE = "XISA_CAPTURE_AS"             # a target: the program's device queries answered as its GPU
TARGET_DIRS_VARIABLE = "XISA_CAPTURE_TARGETS"      # the folders of its target files (os.pathsep-separated)
IMPORT_HOOKS_VARIABLE = "XISA_CAPTURE_IMPORT_HOOKS"   # the project's [tool.xisa] import_hooks, entered as the target
# How an autotuner with several configs picks the one a launch uses (and the case records):
CONFIG_POLICIES = {
    "bench": "the autotuner benchmarks each config, as the program does (needs the kernels to run)",
    "first": "the first config left after the autotuner's own pruning (early_config_prune, perf_model), unbenchmarked",
    "cached": "the config the library's own cache holds for the launch (Triton's autotune cache, FlagGems' tuning "
              "database, fla's FLA_CACHE_MODE config files), else `first`",
    "all": "every config left after pruning, one case each; the program goes on with the first",
}

_WRAPPED = "_xisa_capture_original"
_LAUNCHES = "_xisa_capture_launch"   # a launch method's own mark: InterpretedFunction.run is wrapped as both


class WouldBenchmark(BaseException):
    """Raised in `_bench` when the `cached` policy asked the autotuner for its choice: it has none cached. A
    BaseException, so a library's `except Exception` around its benchmark does not take it for a failed config."""


class NotRun:
    """What a launch returns under --no-run instead of Triton's CompiledKernel: nothing was compiled or run.
    Launching it (`kernel[grid](*args)`, as FlagGems' LibEntry replays the kernel it cached) does nothing either."""

    def __init__(self, name: str):
        self._name = name

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None

    def run(self, *args, **kwargs):
        return None

    def __getattr__(self, attribute):
        raise AttributeError(f"xisa capture --no-run: {self._name} was not compiled, so it has no {attribute!r}")


def wrapper_classes() -> tuple:
    """Triton's Autotuner and Heuristics classes (imported by then: a wrapper ran), or placeholders matching nothing."""
    module = sys.modules.get("triton.runtime.autotuner")
    return getattr(module, "Autotuner", _Nothing), getattr(module, "Heuristics", _Nothing)


def interpreted_class():
    return getattr(sys.modules.get("triton.runtime.interpreter"), "InterpretedFunction", _Nothing)


def launch_classes() -> tuple:
    """The classes whose run is a launch, not a wrapper: JITFunction and the interpreter's InterpretedFunction."""
    return getattr(sys.modules.get("triton.runtime.jit"), "JITFunction", _Nothing), interpreted_class()


class _Nothing:
    pass


def innermost(wrapper):
    """The launch object at the end of a wrapper's `.fn` chain (a JITFunction or InterpretedFunction)."""
    launch, inner = launch_classes(), wrapper
    for _ in range(32):
        if isinstance(inner, launch) or not hasattr(inner, "fn"):
            break
        inner = inner.fn
    return inner


def launch_site() -> str:
    """Where the program made the launch under way: its own frames (Triton's and this folder's left out), innermost
    first, as a digest; the same in every run of the program, whatever target answers its device queries."""
    import hashlib
    import os

    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    triton = getattr(sys.modules.get("triton"), "__file__", None)
    skipped = (here,) + ((os.path.dirname(triton) + os.sep,) if triton else ())
    frames, frame = [], sys._getframe(1)
    while frame is not None:
        if not frame.f_code.co_filename.startswith(skipped):
            frames.append(f"{frame.f_code.co_filename}:{frame.f_lineno}")
        frame = frame.f_back
    return hashlib.sha256("\n".join(frames).encode()).hexdigest()[:16]


def active_device() -> dict:
    """The backend and arch of the GPU Triton launches on (`9.0`, `gfx942`: as xisa's targets match a device)."""
    try:
        from triton.runtime.driver import driver

        target = driver.active.get_current_target()
    except Exception as exc:   # the launch reports its own driver's failure
        return {"error": f"{type(exc).__name__}: {exc}"}
    arch = f"{target.arch // 10}.{target.arch % 10}" if isinstance(target.arch, int) else str(target.arch)
    return {"backend": target.backend, "arch": arch.split(":")[0]}


def _replace(cls, method: str, make, mark: str = _WRAPPED) -> None:
    """`cls.method = make(original)`, once (the new function is marked with the original), keeping its name and doc.
    The method is the class's own, or inherited (`_bench` on Autotuner)."""
    original = getattr(cls, method)
    if getattr(original, mark, None) is not None:
        return
    replacement = make(original)
    setattr(replacement, mark, original)
    replacement.__doc__, replacement.__name__ = original.__doc__, original.__name__
    replacement.__qualname__ = getattr(original, "__qualname__", method)
    setattr(cls, method, replacement)


def _wrap_launch(cls, recorder) -> None:
    """`cls.run` (JITFunction, InterpretedFunction) records the launch, then runs it, or under --no-run returns
    without compiling it (an InterpretedFunction's run returns None anyway)."""
    def make(original):
        def run(self, *args, **kwargs):
            recorder.launch(self, args, kwargs)
            if recorder.skips():
                return None if isinstance(self, interpreted_class()) else NotRun(_kernel_name(self))
            return original(self, *args, **kwargs)
        return run

    _replace(cls, "run", make, _LAUNCHES)


def _wrap_through(cls, recorder) -> None:
    """`cls.run` (a wrapper's: Autotuner, Heuristics, a library's) runs with the object on the wrapper stack."""
    def make(original):
        def run(self, *args, **kwargs):
            return recorder.through(self, original, args, kwargs)
        return run

    _replace(cls, "run", make)


def _wrap_quiet(cls, method: str, recorder) -> None:
    """While `cls.method` runs (the autotuner's benchmark of each config, its warm-up of each), nothing is recorded;
    a benchmark the `cached` policy forbids raises WouldBenchmark instead."""
    def make(original):
        def quiet(self, *args, **kwargs):
            if method == "_bench" and getattr(recorder.local, "no_bench", 0):
                raise WouldBenchmark()
            recorder.local.benching = getattr(recorder.local, "benching", 0) + 1
            try:
                return original(self, *args, **kwargs)
            finally:
                recorder.local.benching -= 1
        return quiet

    _replace(cls, method, make)


def _wrap_kernel_class(cls, recorder) -> None:
    """A KernelInterface class's own methods, wrapped by their part (a JITFunction's run is a launch, wrapped once)."""
    if issubclass(cls, launch_classes()[0]):
        return
    if "run" in vars(cls):
        _wrap_through(cls, recorder)
    autotuner = wrapper_classes()[0]
    if issubclass(cls, autotuner):   # a subclass's own benchmark or warm-up (Autotuner's: `patch`)
        for method in ("_bench", "warmup"):
            if method in vars(cls):
                _wrap_quiet(cls, method, recorder)


def _hook_subclasses(base, recorder) -> None:
    """Every KernelInterface class defined from now on (Triton's Autotuner and Heuristics, FlagGems' LibEntry and
    LibTuner, fla's CachedAutotuner) is wrapped as it is created (`__init_subclass__`), those that exist now."""
    previous = vars(base).get("__init_subclass__")
    if getattr(getattr(previous, "__func__", None), _WRAPPED, None) is not None:
        return

    def __init_subclass__(cls, **kwargs):
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        try:
            _wrap_kernel_class(cls, recorder)
        except Exception as exc:
            recorder.write({"error": f"wrapping {cls.__qualname__}: {type(exc).__name__}: {exc}"})

    setattr(__init_subclass__, _WRAPPED, previous or base)
    base.__init_subclass__ = classmethod(__init_subclass__)
    pending = list(base.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        _wrap_kernel_class(cls, recorder)


def _kernel_name(kernel) -> str:
    return getattr(getattr(kernel, "fn", None), "__qualname__", type(kernel).__name__)


def patch(name: str, module, recorder) -> None:
    if name == "triton.runtime.jit":
        _wrap_launch(module.JITFunction, recorder)
        _hook_subclasses(module.KernelInterface, recorder)
    elif name == "triton.runtime.interpreter":
        _wrap_launch(module.InterpretedFunction, recorder)
    elif name == "triton.runtime.autotuner":
        _wrap_quiet(module.Autotuner, "_bench", recorder)
        _wrap_quiet(module.Autotuner, "warmup", recorder)


MODULES = ("triton.runtime.jit", "triton.runtime.interpreter", "triton.runtime.autotuner")


def spec_from_other_finders(finder, name, path=None, target=None):
    """The module spec the finders after `finder` on sys.meta_path give for `name` (None: none knows it)."""
    for other in sys.meta_path:
        if other is finder or not hasattr(other, "find_spec"):
            continue
        spec = other.find_spec(name, path, target)
        if spec is not None:
            return spec
    return None


class PatchOnImport:
    """A meta-path finder that patches Triton's runtime modules right after they execute (nothing is imported early)."""

    def __init__(self, recorder):
        self.recorder = recorder

    def find_spec(self, name, path=None, target=None):
        if name not in MODULES:
            return None
        spec = spec_from_other_finders(self, name, path, target)
        if spec is None:
            return None
        loader, recorder = spec.loader, self.recorder
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        class Loader:
            def __getattr__(self, attr):
                return getattr(loader, attr)

            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                original(module)
                try:
                    patch(name, module, recorder)
                except Exception as exc:
                    recorder.write({"error": f"patching {name}: {type(exc).__name__}: {exc}"})

        spec.loader = Loader()
        return spec
