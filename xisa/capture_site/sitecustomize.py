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
- `Autotuner.run` and `Heuristics.run`: the wrapper a launch came through is noted with it (the spec
  names the outermost one in `function:`), with the config the autotuner chose and the values the
  heuristics computed; the benchmarking launches of the other configs (`Autotuner._bench`) are not
  recorded.
A `kernel.warmup(...)` / `kernel[grid](..., warmup=True)` compile is recorded like a launch (it is a
specialization the program compiles), except the autotuner's own warm-ups of every config.
The methods wrapped have the same signatures in Triton 3.6 and 3.8 (`run(self, *args, grid, warmup,
**kwargs)`, `native_specialize_impl(backend, arg, is_const, specialize, align)`, `KernelParam`).
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
        self.local = threading.local()   # .benching (depth), .wrappers (stack of Autotuner/Heuristics runs)
        self.seen: set = set()
        self.failed: set = set()
        self.params: dict = {}
        self.sources = _sources_recorder(folder)   # the text of kernels no other machine can import

    # ------------------------------------------------------------------ describing one launch

    def launch(self, kernel, args: tuple, kwargs: dict) -> None:
        if getattr(self.local, "benching", 0):
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
        debug = _launch_debug(kernel, launch)
        if debug is not None:
            options = dict(sorted({**options, "debug": debug}.items()))
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
        chain = self.wrapper_chain(kernel)
        chosen, computed = None, {}
        for wrapper in chain:
            if type(wrapper).__name__ == "Autotuner" and getattr(wrapper, "best_config", None) is not None:
                chosen = _config(wrapper.best_config)
            elif type(wrapper).__name__ == "Heuristics":
                computed.update({k: constexprs[k] for k in wrapper.values if k in constexprs})
        if chosen is not None:
            # the config's values are the case's `config:`, not constexprs or options restated
            for name in chosen["kwargs"]:
                constexprs.pop(name, None)
            for name in ("num_warps", "num_stages", "num_ctas", "maxnreg", "ir_override"):
                options.pop(name, None)
        for name in computed:   # the heuristics compute these again from the case's arguments
            constexprs.pop(name, None)
        module = sys.modules.get(fn.__module__)
        outer = chain[-1] if chain else kernel
        named = _attribute_name(module, outer, fn.__name__)
        record = {
            "function": named or fn.__name__, "qualname": fn.__qualname__, "module": fn.__module__,
            "file": os.path.abspath(fn.__code__.co_filename),
            # the wrappers the launch came through, outermost first (the spec's `function:` names the outermost)
            "through": [type(w).__name__ for w in reversed(chain)],
            # what the module's attribute of that name is, when the launch did not come through it
            "wrapper": None if named else _wrapper_name(getattr(module, fn.__name__, None), kernel),
            "interpreted": type(kernel).__name__ == "InterpretedFunction",
            "args": described_args, "specialization": specialization, "constexprs": constexprs,
            "options": options, "autotune": chosen, "heuristics": computed,
            "warmup": bool(kwargs.get("warmup")), "test": os.environ.get("PYTEST_CURRENT_TEST"),
            "generated": self.sources.describe(kernel),   # None: its module imports by name elsewhere too
            "time": time.time_ns(),   # orders the launches of several processes
        }
        large = {name: a.get("storage_bytes") is None or a["storage_bytes"] > TWO_GIB
                 for name, a in described_args.items() if "tensor" in a}
        record["key"] = repr((record["file"], record["qualname"], record["function"], sorted(specialization.items()),
                              sorted(large.items()), sorted((k, repr(v)) for k, v in constexprs.items()),
                              sorted((k, repr(v)) for k, v in options.items()), repr(chosen), repr(sorted(computed.items()))))
        return record

    def wrapper_chain(self, kernel) -> list:
        """The Autotuner/Heuristics runs under way in this thread that wrap `kernel`, innermost first."""
        stack = getattr(self.local, "wrappers", None) or []
        chain, inner = [], kernel
        for wrapper in reversed(stack):
            if getattr(wrapper, "fn", None) is not inner:
                break
            chain.append(wrapper)
            inner = wrapper
        return chain


def _sources_recorder(folder: str):
    """_xisa_capture_sources.SourceRecorder, loaded from this folder at start-up (it notes sys.path as it was)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_xisa_capture_sources", os.path.join(_HERE, "_xisa_capture_sources.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SourceRecorder(folder)


def _launch_debug(kernel, launch: dict):
    """The launch's `debug` where compiling the spec would not get it by itself: JITFunction.run takes the
    launch's option, else the jit's (`@triton.jit(debug=True)`), or TRITON_DEBUG; a compile of the case gets
    the jit's with TRITON_DEBUG pinned off. None: the same either way."""
    from triton import knobs

    jit = getattr(kernel, "debug", None) if hasattr(kernel, "debug") else (getattr(kernel, "kwargs", None) or {}).get("debug")
    ran = bool(launch.get("debug", jit) or knobs.runtime.debug)
    return ran if ran != bool(jit) else None


def _attribute_name(module, obj, preferred):
    """The name under which `obj` is an attribute of its module (the function's own name first), or None."""
    if module is None:
        return None
    if getattr(module, preferred, None) is obj:
        return preferred
    for name, value in list(vars(module).items()):
        if value is obj:
            return name
    return None


def _config(config) -> dict:
    """An autotune Config as the spec's `config:` holds it: its kwargs, num_warps and num_stages, and num_ctas,
    maxnreg only when not their defaults (1, None)."""
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    if getattr(config, "num_ctas", 1) not in (1, None):
        options["num_ctas"] = config.num_ctas
    if getattr(config, "maxnreg", None) is not None:
        options["maxnreg"] = config.maxnreg
    if getattr(config, "ir_override", None) is not None:
        options["ir_override"] = _plain(config.ir_override)
    return {"kwargs": {k: _constexpr(v) for k, v in config.kwargs.items()}, "options": options}


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
        try:   # elements from the storage's start: with the strides, where the view sits in its allocation
            offset = int(value.storage_offset())
        except Exception:
            offset = None
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
                "strides": strides, "offset": offset, "align": align, "storage_bytes": storage,
                "element_bytes": getattr(getattr(value, "dtype", None), "itemsize", None)}
    if type(value).__name__ == "TensorDescriptor" and hasattr(value, "block_shape"):   # a host-side TMA descriptor
        if getattr(value, "round_f32_to_tf32", False):
            return {"unsupported": "TensorDescriptor(round_f32_to_tf32=True)", "repr": repr(value)[:200]}
        return {"descriptor": str(value.base.dtype).removeprefix("torch."), "shape": [int(s) for s in value.shape],
                "strides": [int(s) for s in value.strides], "block_shape": [int(s) for s in value.block_shape],
                "padding": str(value.padding)}
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


def _wrap_run(cls, recorder: _Recorder) -> None:
    """`cls.run` (Autotuner, Heuristics) pushes the object on this thread's wrapper stack while it runs."""
    original = cls.run
    if getattr(original, _WRAPPED, None) is not None:
        return

    def run(self, *args, **kwargs):
        stack = recorder.local.__dict__.setdefault("wrappers", [])
        stack.append(self)
        try:
            return original(self, *args, **kwargs)
        finally:
            stack.pop()

    setattr(run, _WRAPPED, original)
    run.__doc__, run.__name__, run.__qualname__ = original.__doc__, original.__name__, original.__qualname__
    cls.run = run


def _wrap_quiet(cls, method: str, recorder: _Recorder) -> None:
    """While `cls.method` runs (the autotuner's benchmark of each config, its warm-up of each), nothing is recorded."""
    original = getattr(cls, method)
    if getattr(original, _WRAPPED, None) is not None:
        return

    def quiet(self, *args, **kwargs):
        recorder.local.benching = getattr(recorder.local, "benching", 0) + 1
        try:
            return original(self, *args, **kwargs)
        finally:
            recorder.local.benching -= 1

    setattr(quiet, _WRAPPED, original)
    quiet.__doc__, quiet.__name__, quiet.__qualname__ = original.__doc__, original.__name__, original.__qualname__
    setattr(cls, method, quiet)


def _patch(name: str, module, recorder: _Recorder) -> None:
    if name == "triton.runtime.jit":
        _wrap_launch(module.JITFunction, recorder)
    elif name == "triton.runtime.interpreter":
        _wrap_launch(module.InterpretedFunction, recorder)
    elif name == "triton.runtime.autotuner":
        _wrap_run(module.Autotuner, recorder)
        _wrap_quiet(module.Autotuner, "_bench", recorder)
        _wrap_quiet(module.Autotuner, "warmup", recorder)
        _wrap_run(module.Heuristics, recorder)


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


# --- device answers: XISA_CAPTURE_AS=<target> answers the program's device queries (torch.cuda, Triton's driver) as
# that target's reference product (xisa.compile.target_driver.answer_device_queries), for a capture on a machine
# without its GPU; XISA_CAPTURE_TARGETS: the target folders (os.pathsep-separated), else the working folder's project.
# Asked for explicitly, so a failure stops the program in one line instead of letting it see this machine's device.
if os.environ.get("XISA_CAPTURE_AS"):
    sys.path.append(os.path.dirname(os.path.dirname(_HERE)))   # xisa itself, wherever the program's Python is
    try:
        from xisa.compile.target_driver import answer_device_queries

        _folders = [p for p in os.environ.get("XISA_CAPTURE_TARGETS", "").split(os.pathsep) if p]
        answer_device_queries(os.environ["XISA_CAPTURE_AS"], [__import__("pathlib").Path(p) for p in _folders] or None)
    except Exception as exc:
        print(f"xisa capture: XISA_CAPTURE_AS={os.environ['XISA_CAPTURE_AS']}: {exc}", file=sys.stderr, flush=True)
        os._exit(2)

_install()
_chain()
