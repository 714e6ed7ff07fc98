"""`xisa capture`'s hook: records every Triton kernel launch of the process it runs in.

`xisa capture -- COMMAND` puts this folder first on PYTHONPATH, so every Python process of COMMAND
(and the processes they start) imports this module at start-up. It runs in a foreign program: it
imports nothing from xisa, nothing from Triton until the program does, and never changes what the
program does: each launch proceeds exactly as without it; a failure to record one is noted, never
raised. A `sitecustomize` of the environment that this one shadows still runs (`_chain`).

When Triton's runtime modules are imported, three methods are wrapped:
- `JITFunction.run` (a launch on a GPU) and `InterpretedFunction.run` (under TRITON_INTERPRET=1):
  each launch's arguments are described as Triton's launch binder sees them and written, once per
  specialization, as one JSON line to `$XISA_CAPTURE_RECORDS/launches-<pid>.jsonl`;
- `Autotuner.run`: the config the autotuner chose is noted with the launch it makes, and the
  benchmarking launches of the other configs (`Autotuner._bench`) are not recorded.
"""

import os
import sys

RECORDS_VARIABLE = "XISA_CAPTURE_RECORDS"
_HERE = os.path.dirname(os.path.abspath(__file__))
_WRAPPED = "_xisa_capture_original"
TWO_GIB = 2**31 - 1   # the AMD backend's bound for tt.pointer_range 32 (HIPBackend.is_within_2gb)


def _chain() -> None:
    """Run the `sitecustomize` this one shadows (Debian's, a virtual environment's), as Python would have."""
    import importlib.machinery
    import importlib.util

    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:   # Python's site.py reports a failing sitecustomize the same way and goes on
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}",
              file=sys.stderr)


class _Recorder:
    def __init__(self, folder: str):
        import threading

        self.folder = folder
        self.lock = threading.Lock()
        self.local = threading.local()   # .benching (depth), .autotuners (stack)
        self.seen: set = set()
        self.failed: set = set()
        self.params: dict = {}

    # ------------------------------------------------------------------ describing one launch

    def launch(self, kernel, args: tuple, kwargs: dict) -> None:
        if kwargs.get("warmup") or getattr(self.local, "benching", 0):
            return
        try:
            record = self.describe(kernel, args, kwargs)
            key = record["key"]
            with self.lock:
                if key in self.seen:
                    return
                self.seen.add(key)
                self.write(record)
        except Exception as exc:   # never the program's problem: noted once per kernel, the launch goes on
            where = getattr(getattr(kernel, "fn", None), "__qualname__", repr(kernel))
            with self.lock:
                if where not in self.failed:
                    self.failed.add(where)
                    self.write({"error": f"{where}: {type(exc).__name__}: {exc}"})

    def write(self, record: dict) -> None:
        import json

        path = os.path.join(self.folder, f"launches-{os.getpid()}.jsonl")
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")   # parameter order kept

    def kernel_params(self, kernel) -> list:
        """Triton's KernelParam of each parameter (is_constexpr, is_const, do_not_specialize...): a JITFunction
        has them; an InterpretedFunction gets them built the way JITFunction.__init__ builds them."""
        params = getattr(kernel, "params", None)
        if params is not None:
            return params
        cached = self.params.get(id(kernel))
        if cached is None or cached[0] is not kernel:
            import inspect

            from triton.runtime.jit import KernelParam

            options = getattr(kernel, "kwargs", {}) or {}
            dns = options.get("do_not_specialize") or []
            dns_oa = options.get("do_not_specialize_on_alignment") or []
            built = [KernelParam(i, p, i in dns or p.name in dns, i in dns_oa or p.name in dns_oa)
                     for i, p in enumerate(inspect.signature(kernel.fn).parameters.values())]
            cached = self.params[id(kernel)] = (kernel, built)
        return cached[1]

    def describe(self, kernel, args: tuple, kwargs: dict) -> dict:
        import time

        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend

        fn = kernel.fn
        params = self.kernel_params(kernel)
        names = [p.name for p in params]
        launch = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
        passed = dict(zip(names, args))
        passed.update({k: v for k, v in launch.items() if k in names})
        options = {k: _plain(v) for k, v in sorted(launch.items()) if k not in names and k != "debug"}
        described_args, specialization, constexprs = {}, {}, {}
        for param in params:
            if param.name not in passed:
                continue   # its default applies, as it will when the spec is compiled
            value = passed[param.name]
            if param.is_constexpr:
                constexprs[param.name] = _constexpr(value)
                continue
            # What the launch binder computes for this argument (create_function_from_signature), with the
            # backend-independent rules: the type, and "D" (tt.divisibility 16) for 16-aligned pointers and ints.
            kind = native_specialize_impl(BaseBackend, value, param.is_const, not param.do_not_specialize,
                                          not param.do_not_specialize_on_alignment)
            specialization[param.name] = _plain(list(kind))
            described_args[param.name] = _argument(value, kind)
        autotuners = getattr(self.local, "autotuners", None)
        chosen = None
        config = getattr(autotuners[-1], "best_config", None) if autotuners else None
        if config is not None:
            chosen = {"kwargs": {k: _constexpr(v) for k, v in config.kwargs.items()},
                      "options": {k: _plain(v) for k, v in config.all_kwargs().items() if k not in config.kwargs}}
        module = sys.modules.get(fn.__module__)
        record = {
            "function": fn.__name__, "qualname": fn.__qualname__, "module": fn.__module__,
            "file": os.path.abspath(fn.__code__.co_filename),
            # what the module's attribute of that name is, when not the kernel itself (an Autotuner, Heuristics)
            "wrapper": _wrapper_name(getattr(module, fn.__name__, None), kernel),
            "interpreted": type(kernel).__name__ == "InterpretedFunction",
            "args": described_args, "specialization": specialization, "constexprs": constexprs,
            "options": options, "autotune": chosen, "test": os.environ.get("PYTEST_CURRENT_TEST"),
            "time": time.time_ns(),   # orders the launches of several processes
        }
        large = {name: a.get("storage_bytes") is None or a["storage_bytes"] > TWO_GIB
                 for name, a in described_args.items() if "tensor" in a}
        record["key"] = repr((record["file"], record["qualname"], sorted(specialization.items()), sorted(large.items()),
                              sorted((k, repr(v)) for k, v in constexprs.items()), sorted(options.items())))
        return record


def _wrapper_name(attribute, kernel):
    if attribute is None or attribute is kernel:
        return None
    return type(attribute).__name__


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return {"unsupported": type(value).__name__, "repr": repr(value)[:200]}


def _constexpr(value):
    inner = getattr(value, "value", value) if type(value).__name__ == "constexpr" else value
    if type(inner).__name__ == "dtype" and type(inner).__module__.startswith("triton"):
        return {"dtype": str(inner)}
    if inner is None or isinstance(inner, (bool, int, float, str)):
        return inner
    return {"unsupported": type(inner).__name__, "repr": repr(inner)[:200]}


def _argument(value, kind):
    """A runtime argument as a spec stand-in's facts."""
    type_name = kind[0]
    if isinstance(type_name, str) and type_name.startswith("*") and hasattr(value, "data_ptr"):
        pointer = value.data_ptr()
        align = 16
        while align > 1 and pointer % align:
            align //= 2
        shape = [int(s) for s in getattr(value, "shape", [])]
        try:
            strides = [int(s) for s in value.stride()]
        except Exception:
            strides = None
        # Triton's AMD backend judges the pointer range from ptr_range() if the argument has one, else from
        # a torch tensor's whole storage (not the view), else not at all (no tt.pointer_range 32).
        storage = None
        if hasattr(value, "ptr_range"):
            storage = int(value.ptr_range())
        elif hasattr(value, "untyped_storage"):
            storage = int(value.untyped_storage().size())
        element = type_name[1:]
        return {"tensor": element[1:] if element.startswith("k") and element[1:] else element,
                "torch_dtype": str(getattr(value, "dtype", "")).removeprefix("torch."), "shape": shape,
                "strides": strides, "align": align, "storage_bytes": storage,
                "element_bytes": getattr(getattr(value, "dtype", None), "itemsize", None)}
    if isinstance(value, bool) or value is None:
        return {"value": value}
    if isinstance(value, int) or type(value).__name__.startswith(("int", "uint")):
        return {"value": int(value)}
    if isinstance(value, float):
        return {"value": value}
    return {"unsupported": type(value).__name__, "repr": repr(value)[:200]}


# ---------------------------------------------------------------------- wrapping Triton's methods

def _wrap_launch(cls, recorder: _Recorder) -> None:
    original = cls.run
    if getattr(original, _WRAPPED, None) is not None:
        return

    def run(self, *args, **kwargs):
        recorder.launch(self, args, kwargs)
        return original(self, *args, **kwargs)

    setattr(run, _WRAPPED, original)
    run.__doc__, run.__name__, run.__qualname__ = original.__doc__, original.__name__, original.__qualname__
    cls.run = run


def _wrap_autotuner(cls, recorder: _Recorder) -> None:
    run_original, bench_original = cls.run, cls._bench
    if getattr(run_original, _WRAPPED, None) is not None:
        return

    def run(self, *args, **kwargs):
        stack = recorder.local.__dict__.setdefault("autotuners", [])
        stack.append(self)
        try:
            return run_original(self, *args, **kwargs)
        finally:
            stack.pop()

    def _bench(self, *args, **kwargs):
        recorder.local.benching = getattr(recorder.local, "benching", 0) + 1
        try:
            return bench_original(self, *args, **kwargs)
        finally:
            recorder.local.benching -= 1

    for wrapper, original in ((run, run_original), (_bench, bench_original)):
        setattr(wrapper, _WRAPPED, original)
        wrapper.__doc__, wrapper.__name__, wrapper.__qualname__ = original.__doc__, original.__name__, original.__qualname__
    cls.run, cls._bench = run, _bench


def _patch(name: str, module, recorder: _Recorder) -> None:
    if name == "triton.runtime.jit":
        _wrap_launch(module.JITFunction, recorder)
    elif name == "triton.runtime.interpreter":
        _wrap_launch(module.InterpretedFunction, recorder)
    elif name == "triton.runtime.autotuner":
        _wrap_autotuner(module.Autotuner, recorder)


_MODULES = ("triton.runtime.jit", "triton.runtime.interpreter", "triton.runtime.autotuner")


class _PatchOnImport:
    """A meta-path finder that patches Triton's runtime modules right after they execute (nothing is imported early)."""

    def __init__(self, recorder: _Recorder):
        self.recorder = recorder

    def find_spec(self, name, path=None, target=None):
        if name not in _MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
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
                    _patch(name, module, recorder)
                except Exception as exc:
                    recorder.write({"error": f"patching {name}: {type(exc).__name__}: {exc}"})

        spec.loader = Loader()
        return spec


def _install() -> None:
    folder = os.environ.get(RECORDS_VARIABLE)
    if not folder or not os.path.isdir(folder):
        return
    recorder = _Recorder(folder)
    for name in _MODULES:   # already imported (unusual at start-up): patch now
        if name in sys.modules:
            _patch(name, sys.modules[name], recorder)
    sys.meta_path.insert(0, _PatchOnImport(recorder))


_install()
_chain()
