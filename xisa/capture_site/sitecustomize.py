"""`xisa capture`'s hook: records every Triton kernel launch of the process it runs in.

`xisa capture -- COMMAND` puts this folder first on PYTHONPATH, so every Python process of COMMAND
(and the processes they start) imports this module at start-up. It runs in a foreign program: it
imports nothing from xisa, nothing from Triton until the program does, and changes what the program
does only where asked (`--no-run`) or where the program could not go on (an autotuner under the
interpreter); a failure to record a launch is noted, never raised. A `sitecustomize` of the
environment that this one shadows still runs (`_chain`).

When Triton's runtime modules are imported, these methods are wrapped:
- `JITFunction.run` (a launch on a GPU) and `InterpretedFunction.run` (under TRITON_INTERPRET=1):
  each launch's arguments are described as Triton's launch binder sees them and written, once per
  specialization, as one JSON line to `$XISA_CAPTURE_RECORDS/launches-<pid>.jsonl`;
- the `run` of every other triton `KernelInterface` class, as each is defined (`__init_subclass__`):
  Autotuner and Heuristics, their subclasses (FlagGems' LibTuner, fla's CachedAutotuner) and any
  library wrapper (FlagGems' LibEntry). The chain of wrappers a launch came through is noted with it,
  outermost first (the spec names the outermost in `function:`), each by its role, decided by
  isinstance: "Autotuner", "Heuristics", else the wrapper's own type name (it passes the launch
  through); with the config the autotuner chose and the values the heuristics computed. The
  benchmarking launches of the other configs (`Autotuner._bench`) are not recorded.
A `kernel.warmup(...)` / `kernel[grid](..., warmup=True)` compile is recorded like a launch (it is a
specialization the program compiles), except the autotuner's own warm-ups of every config.

`$XISA_CAPTURE_NO_RUN=1` (`xisa capture --no-run`): each launch is recorded and returns without being
compiled or run (a `NotRun` in place of the CompiledKernel), so a program runs whole on a machine with
no GPU and no interpreter; what the kernels should have written is garbage. `$XISA_CAPTURE_CONFIG_POLICY`
(`--config-policy`) says how an autotuner with several configs picks one where it must not benchmark
(`CONFIG_POLICIES`); by default it benchmarks on a device, and picks `first` under --no-run and under
the interpreter (Triton's benchmark needs a GPU driver).
The methods wrapped have the same signatures in Triton 3.6 and 3.8 (`run(self, *args, grid, warmup,
**kwargs)`, `native_specialize_impl(backend, arg, is_const, specialize, align)`, `KernelParam`,
`Autotuner.configs / prune_configs / best_config`).
"""

import os
import sys

from _xisa_capture_values import _argument, _config, _constexpr, _plain, _same
from _xisa_capture_hook import (ANSWER_AS_VARIABLE, CONFIG_POLICIES, IMPORT_HOOKS_VARIABLE, MODULES, NO_RUN_VARIABLE,
                                POLICY_VARIABLE, RECORDS_VARIABLE, TARGET_DIRS_VARIABLE, PatchOnImport, WouldBenchmark, active_device,
                                innermost, interpreted_class, launch_classes, launch_site, patch, wrapper_classes)

_HERE = os.path.dirname(os.path.abspath(__file__))
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
    def __init__(self, folder: str, *, no_run: bool = False, policy: str | None = None):
        import threading

        self.folder = folder
        self.no_run = no_run
        self.policy = policy             # None: "bench" where kernels run on a device, else "first"
        self.lock = threading.Lock()
        # per thread: .benching and .record_only (depths), .no_bench (depth: `cached` asks the autotuner without
        # letting it benchmark), .wrappers (the stack of wrapper runs under way), .chosen_by (id -> policy)
        self.local = threading.local()
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
            # once per specialization and place: a capture as several targets matches each target's launches by
            # where they were made (xisa.spec.capture_targets); a one-target capture keeps the first of each
            key = (record["key"], record["site"], record["test"])
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
        autotuner, heuristics = wrapper_classes()
        chosen, computed, chosen_by = None, {}, None
        if sum(isinstance(wrapper, autotuner) for wrapper in chain) > 1:
            raise ValueError("it is launched through several autotuners, and a spec case picks the config of one")
        for wrapper in chain:
            if isinstance(wrapper, autotuner):
                chosen = _config(_chosen_config(wrapper), self.listed_configs(wrapper), lambda: self.kept(wrapper))
                chosen_by = self.chosen_by(wrapper)
            elif isinstance(wrapper, heuristics):   # a constexpr, or a launch option (FlagGems' num_warps)
                computed.update({k: constexprs[k] for k in wrapper.values if k in constexprs})
                computed.update({k: options.pop(k) for k in wrapper.values if k in options})
        if chosen is not None:
            # the config's values are the case's `config:`, not constexprs or options restated
            for name in chosen["kwargs"]:
                constexprs.pop(name, None)
            for name in ("num_warps", "num_stages", "num_ctas", "maxnreg", "ir_override"):
                options.pop(name, None)
        # A value the program passed itself and a heuristic computed alike (cut-cross-entropy's `"REQUIRES_GRAD":
        # lambda args: args["REQUIRES_GRAD"]`) stays the case's own too: a heuristic that reads its own key needs it
        # given, or the compile has nothing to read (KeyError). Else the heuristics compute it again from the case.
        passed = self.local.__dict__.get("calls", {}).get(id(chain[-1]), {}) if chain else {}
        configured = set(chosen["kwargs"]) | set(chosen["options"]) if chosen is not None else set()
        for name in computed:
            if name in passed and name not in configured and _same(_constexpr(passed[name]), computed[name]):
                if name in constexprs or name in names:
                    constexprs[name] = computed[name]
                else:
                    options[name] = computed[name]
            else:
                constexprs.pop(name, None)
        module = sys.modules.get(fn.__module__)
        outer = chain[-1] if chain else kernel
        named = _attribute_name(module, outer, fn.__name__)
        record = {
            "function": named or fn.__name__, "qualname": fn.__qualname__, "module": fn.__module__,
            "file": os.path.abspath(fn.__code__.co_filename),
            # the wrappers the launch came through, outermost first (the spec's `function:` names the outermost):
            # each one's role ("Autotuner", "Heuristics", else its type: it passes the launch through), its type
            "through": [_role(w, autotuner, heuristics) for w in reversed(chain)],
            "wrapper_types": [type(w).__name__ for w in reversed(chain)],
            # what the module's attribute of that name is, when the launch did not come through it
            "wrapper": None if named else _wrapper_name(getattr(module, fn.__name__, None), kernel),
            "interpreted": isinstance(kernel, interpreted_class()),
            "args": described_args, "specialization": specialization, "constexprs": constexprs,
            "options": options, "autotune": chosen, "config_chosen_by": chosen_by, "heuristics": computed,
            "no_run": self.no_run,
            "answered_as": os.environ.get(ANSWER_AS_VARIABLE),   # the target whose GPU answered the device queries
            "ran_on": self.ran_on(kernel),   # the GPU the launch runs on (its values are that target's)
            "site": launch_site(),
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

    def ran_on(self, kernel):
        """The backend and arch of the GPU this process launches on (`9.0`, `gfx942`, as xisa's targets match a
        device), asked once; None where no kernel runs on a GPU or the device queries are answered as a target."""
        if self.no_run or os.environ.get(ANSWER_AS_VARIABLE) or isinstance(kernel, interpreted_class()):
            return None
        if not hasattr(self, "_ran_on"):
            self._ran_on = active_device()
        return self._ran_on

    def wrapper_chain(self, kernel) -> list:
        """The wrapper runs under way in this thread that wrap `kernel`, innermost first."""
        stack = getattr(self.local, "wrappers", None) or []
        chain, inner = [], kernel
        for wrapper in reversed(stack):
            if getattr(wrapper, "fn", None) is not inner:
                break
            chain.append(wrapper)
            inner = wrapper
        return chain

    # ------------------------------------------------------------------ a wrapper's run

    def through(self, wrapper, original, args: tuple, kwargs: dict):
        """`wrapper.run(*args, **kwargs)` with the wrapper on this thread's stack; an autotuner that must not
        benchmark here picks its config by the policy (`run_by_policy`)."""
        stack = self.local.__dict__.setdefault("wrappers", [])
        if (stack and stack[-1] is wrapper) or isinstance(wrapper, launch_classes()):
            return original(wrapper, *args, **kwargs)   # a subclass's run calling super().run; a launch class
        calls = self.local.__dict__.setdefault("calls", {})   # what its pruning reads (`kept`), while it runs
        calls[id(wrapper)] = kwargs
        stack.append(wrapper)
        try:
            autotuner = wrapper_classes()[0]
            policy = self.policy_for(wrapper) if isinstance(wrapper, autotuner) else "bench"
            if policy == "bench" or len(wrapper.configs) <= 1:
                return original(wrapper, *args, **kwargs)
            return self.run_by_policy(wrapper, original, args, kwargs, policy)
        finally:
            stack.pop()
            calls.pop(id(wrapper), None)

    def policy_for(self, tuner) -> str:
        if self.policy is not None:
            return self.policy
        return "first" if self.no_run or isinstance(innermost(tuner), interpreted_class()) else "bench"

    def chosen_by(self, tuner) -> str:
        return self.local.__dict__.get("chosen_by", {}).get(id(tuner), "autotuner")

    def run_by_policy(self, tuner, original, args: tuple, kwargs: dict, policy: str):
        """Run the autotuner with its config chosen by `policy` (CONFIG_POLICIES), never benchmarking: for each
        config chosen it runs as if that were its only config (Autotuner.run and LibTuner.run then take it
        without benchmark, cache or pruning; the config's pre_hook still runs)."""
        chosen_by = self.local.__dict__.setdefault("chosen_by", {})
        try:
            if policy == "cached":
                chosen_by[id(tuner)] = "cached"
                self.local.no_bench = getattr(self.local, "no_bench", 0) + 1
                try:
                    return original(tuner, *args, **kwargs)
                except WouldBenchmark:
                    pass   # no config cached for this launch: the first, as `first`
                finally:
                    self.local.no_bench -= 1
            tuner.nargs = dict(zip(tuner.arg_names, args))   # what prune_configs reads, as Autotuner.run sets it
            pruned = list(tuner.prune_configs(kwargs))
            self.local.__dict__.setdefault("pruned", {})[id(tuner)] = pruned   # a pruner may make configs (gemlite)
            if policy == "all":
                chosen_by[id(tuner)] = "all"
                self.local.record_only = getattr(self.local, "record_only", 0) + 1
                try:
                    for config in pruned:
                        self.run_with_config(tuner, original, config, args, kwargs)
                finally:
                    self.local.record_only -= 1
            chosen_by[id(tuner)] = {"first": "first", "cached": "first (nothing cached)"}.get(policy, policy)
            return self.run_with_config(tuner, original, pruned[0], args, kwargs)
        finally:
            chosen_by.pop(id(tuner), None)
            self.local.__dict__.get("pruned", {}).pop(id(tuner), None)

    def run_with_config(self, tuner, original, config, args: tuple, kwargs: dict):
        """The autotuner's run as if `config` were its only one; the case still names it among all of them. (A
        thread launching the same autotuner meanwhile would see the one config too: programs tune from one.)"""
        listed = self.local.__dict__.setdefault("listed", {})
        saved = listed[id(tuner)] = tuner.configs
        tuner.configs = [config]
        self.local.no_bench = getattr(self.local, "no_bench", 0) + 1
        try:
            return original(tuner, *args, **kwargs)
        except WouldBenchmark:
            raise RuntimeError(f"xisa capture: the {type(tuner).__name__} of {innermost(tuner).__name__} benchmarks "
                               "even a single config, so the config policy cannot choose without running it: capture "
                               "it where the kernels run (--config-policy bench)") from None
        finally:
            self.local.no_bench -= 1
            tuner.configs = saved
            del listed[id(tuner)]

    def listed_configs(self, tuner) -> list:
        return self.local.__dict__.get("listed", {}).get(id(tuner), tuner.configs)

    def kept(self, tuner) -> list:
        """What the autotuner's pruning kept for the launch under way: the list a policy chose from, else (`bench`)
        its pruning again, as its run ran it (with one config it prunes nothing; no nargs: not inside its run)."""
        pruned, kwargs = self.local.__dict__.get("pruned", {}), self.local.__dict__.get("calls", {}).get(id(tuner))
        if id(tuner) in pruned or kwargs is None or getattr(tuner, "nargs", None) is None:
            return pruned.get(id(tuner), [])
        return list(tuner.prune_configs(kwargs)) if len(tuner.configs) > 1 else []

    def skips(self) -> bool:
        """Whether a launch returns without compiling or running: --no-run, or one config of `all` recorded."""
        return self.no_run or bool(getattr(self.local, "record_only", 0))


def _role(wrapper, autotuner, heuristics) -> str:
    """A wrapper's part in the launch, as the spec reads it: "Autotuner", "Heuristics", or its own type's name."""
    if isinstance(wrapper, autotuner):
        return "Autotuner"
    if isinstance(wrapper, heuristics):
        return "Heuristics"
    name = type(wrapper).__name__
    return name if name not in ("Autotuner", "Heuristics") else f"{type(wrapper).__module__}.{name}"


def _chosen_config(tuner):
    """The config the autotuner launched with (Autotuner.run and LibTuner.run set `best_config` before they launch)."""
    config = getattr(tuner, "best_config", None)
    if config is None:
        raise ValueError(f"the {type(tuner).__name__} around it set no best_config, so the config it chose is unknown")
    return config


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


def _wrapper_name(attribute, kernel):
    if attribute is None or attribute is kernel:
        return None
    return type(attribute).__name__


def _install() -> None:
    folder = os.environ.get(RECORDS_VARIABLE)
    if not folder or not os.path.isdir(folder):
        return
    policy = os.environ.get(POLICY_VARIABLE) or None
    recorder = _Recorder(folder, no_run=os.environ.get(NO_RUN_VARIABLE) == "1",
                         policy=policy if policy in CONFIG_POLICIES else None)
    if policy is not None and (policy not in CONFIG_POLICIES or (policy == "bench" and recorder.no_run)):
        recorder.policy = None
        recorder.write({"error": f"{POLICY_VARIABLE}={policy} is not a policy here ({', '.join(CONFIG_POLICIES)}; "
                                 "bench needs the kernels to run): the default applies"})
    for name in MODULES:   # already imported (unusual at start-up): patch now
        if name in sys.modules:
            patch(name, sys.modules[name], recorder)
    sys.meta_path.insert(0, PatchOnImport(recorder))


# --- device answers: XISA_CAPTURE_AS=<target> answers the program's device queries (torch.cuda, Triton's driver) as
# that target's reference product (xisa.compile.gpu.target_driver.answer_device_queries), for a capture on a machine
# without its GPU; XISA_CAPTURE_TARGETS: the target folders (os.pathsep-separated), else the working folder's project.
# Asked for explicitly, so a failure stops the program in one line instead of letting it see this machine's device.
if os.environ.get(ANSWER_AS_VARIABLE):
    sys.path.append(os.path.dirname(os.path.dirname(_HERE)))   # xisa itself, wherever the program's Python is
    try:
        from xisa.compile.gpu.target_driver import answer_device_queries

        _folders = [p for p in os.environ.get(TARGET_DIRS_VARIABLE, "").split(os.pathsep) if p]
        _hooks = [p for p in os.environ.get(IMPORT_HOOKS_VARIABLE, "").split(os.pathsep) if p]
        answer_device_queries(os.environ[ANSWER_AS_VARIABLE], [__import__("pathlib").Path(p) for p in _folders] or None,
                              [__import__("pathlib").Path(p) for p in _hooks])
    except Exception as exc:
        print(f"xisa capture: {ANSWER_AS_VARIABLE}={os.environ[ANSWER_AS_VARIABLE]}: {exc}", file=sys.stderr, flush=True)
        os._exit(2)

_install()
_chain()
