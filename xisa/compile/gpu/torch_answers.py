"""torch's and Triton's doors answered as the target under way: torch.cuda's functions, its random-number calls,
torch.accelerator, torch.version, `torch.compile` while xisa answers, and the calls refused because they need a live
GPU (`DeviceAnswers` holds the answers and the refusals; this module puts them where a library looks)."""


from __future__ import annotations

import contextlib
import functools
import sys
import types
from collections.abc import Iterator
from typing import Any

from xisa.compile.gpu.probes import refuse_probes
from xisa.compile.gpu.tensors import tensors_on_cpu
from xisa.compile.gpu.device_answers import _ANSWERING, DeviceAnswers, _answering_now, current_answers
from xisa.compile.worker.platform_facts import BACKEND


def _torch_functions(answers: DeviceAnswers) -> dict[str, Any]:
    def is_available() -> bool:
        current_answers(answers).note("torch.cuda.is_available()")
        return current_answers(answers).target is not None or _refused(current_answers(answers), "torch.cuda.is_available()")

    def device_count() -> int:
        current_answers(answers).note("torch.cuda.device_count()")
        return 1 if current_answers(answers).target is not None else _refused(current_answers(answers), "torch.cuda.device_count()")

    def current_device() -> int:
        current_answers(answers).note("torch.cuda.current_device()")
        return 0 if current_answers(answers).target is not None else _refused(current_answers(answers), "torch.cuda.current_device()")

    def set_device(device) -> None:
        current_answers(answers).device_index(device, f"torch.cuda.set_device({device!r})")

    def exchange_device(device: int) -> int:
        # what `with torch.cuda.device(i):` calls on entry and exit (FlagGems' generated wrappers): -1 is "none",
        # as torch answers it; the one device is 0, so the device before was 0
        if device < 0:
            return -1
        current_answers(answers).device_index(device, f"torch.cuda.device({device!r})")
        return 0

    def get_device_properties(device=None):
        return current_answers(answers).torch_properties(device)

    def get_device_capability(device=None) -> tuple[int, int]:
        query = f"torch.cuda.get_device_capability({'' if device is None else repr(device)})"
        current_answers(answers).device_index(device, query)
        return current_answers(answers).capability(query)

    def get_device_name(device=None) -> str:
        query = f"torch.cuda.get_device_name({'' if device is None else repr(device)})"
        current_answers(answers).device_index(device, query)
        return current_answers(answers).fact("name", query)

    def get_arch_list():
        raise current_answers(answers).refuse("torch.cuda.get_arch_list()", why="it lists the archs a CUDA torch was built for, no "
                                                               "fact of the target")

    def is_initialized() -> bool:
        # a process that compiles for its GPU has it: a library then asks torch (answered), not NVML (refused)
        current_answers(answers).note("torch.cuda.is_initialized()")
        return current_answers(answers).target is not None or _refused(current_answers(answers), "torch.cuda.is_initialized()")

    return {"is_available": is_available, "device_count": device_count, "current_device": current_device,
            "set_device": set_device, "_exchange_device": exchange_device, "_maybe_exchange_device": exchange_device,
            "get_device_properties": get_device_properties,
            "get_device_capability": get_device_capability, "get_device_name": get_device_name,
            "get_arch_list": get_arch_list, "is_initialized": is_initialized}


def _random_functions(answers: DeviceAnswers, torch) -> dict[str, Any]:
    """torch.cuda's random-number state, answered from the CPU generator: under xisa a tensor made on the GPU is made
    on the CPU (`tensors_on_cpu`), from the CPU generator, so that generator is the one `torch.cuda`'s stands for.
    Dynamo saves and restores it around a trace once `is_available()` is True (cut-cross-entropy's
    `@torch.compile(fullgraph=True)` helpers), checkpointing and `torch.random.fork_rng` too; `torch.cuda.manual_seed`
    seeds what the program's GPU tensors are drawn from, as on a GPU."""
    generator = torch.default_generator

    def one_device(query: str, device) -> None:
        current_answers(answers).device_index(device, query)
        current_answers(answers).note(query)

    def get_rng_state(device="cuda"):
        one_device(f"torch.cuda.get_rng_state({device!r})", device)
        return generator.get_state()

    def set_rng_state(new_state, device="cuda") -> None:
        one_device(f"torch.cuda.set_rng_state(..., {device!r})", device)
        generator.set_state(new_state)

    def get_rng_state_all():
        return [get_rng_state(0)]

    def set_rng_state_all(new_states) -> None:
        for index, state in enumerate(new_states):
            set_rng_state(state, index)

    def manual_seed(seed) -> None:
        current_answers(answers).note("torch.cuda.manual_seed()")
        generator.manual_seed(int(seed))

    def seed() -> None:
        current_answers(answers).note("torch.cuda.seed()")
        generator.seed()

    def initial_seed() -> int:
        current_answers(answers).note("torch.cuda.initial_seed()")
        return generator.initial_seed()

    return {"get_rng_state": get_rng_state, "set_rng_state": set_rng_state, "get_rng_state_all": get_rng_state_all,
            "set_rng_state_all": set_rng_state_all, "manual_seed": manual_seed, "manual_seed_all": manual_seed,
            "seed": seed, "seed_all": seed, "initial_seed": initial_seed}


def _accelerator_functions(answers: DeviceAnswers, torch) -> dict[tuple[Any, str], Any]:
    """torch's device-generic doors (`torch.get_device_module()`, `torch.accelerator`; SGLang's and vLLM's kernels
    size configs through them): the accelerator is the target's GPU, `torch.cuda` as answered above. On a CPU
    torch they would answer `torch.cpu` and no device, silently."""
    original = torch.get_device_module

    def get_device_module(device=None):
        kind = getattr(device, "type", None) or (str(device).partition(":")[0] if device is not None else "cuda")
        if kind not in ("cuda", "hip"):
            return original(device)
        current_answers(answers).device_index(device if device is not None else 0, f"torch.get_device_module({device!r})")
        return torch.cuda

    def current_accelerator(check_available: bool = False):
        current_answers(answers).note("torch.accelerator.current_accelerator()")
        return torch.device("cuda") if current_answers(answers).target is not None else \
            _refused(current_answers(answers), "torch.accelerator.current_accelerator()")

    def index(query: str):
        def answer(*_args, **_kwargs) -> int:
            current_answers(answers).note(query)
            return 0 if current_answers(answers).target is not None else _refused(current_answers(answers), query)
        return answer

    def set_index(device) -> None:
        current_answers(answers).device_index(device, f"torch.accelerator.set_device_index({device!r})")

    accelerator = getattr(torch, "accelerator", None)
    answered = {(torch, "get_device_module"): get_device_module}
    if accelerator is not None:
        count = index("torch.accelerator.device_count()")
        answered.update({(accelerator, "current_accelerator"): current_accelerator,
                         (accelerator, "device_count"): lambda: count() + 1,
                         (accelerator, "is_available"): lambda: current_accelerator() is not None,
                         (accelerator, "current_device_index"): index("torch.accelerator.current_device_index()"),
                         (accelerator, "current_device_idx"): index("torch.accelerator.current_device_idx()"),
                         (accelerator, "set_device_index"): set_index, (accelerator, "set_device_idx"): set_index})
        for name in _ACCELERATOR_LIVE:   # streams, synchronize, memory: a live GPU's (a CPU torch has no accelerator)
            if callable(getattr(accelerator, name, None)):
                answered[(accelerator, name)] = _refusing(answers, f"torch.accelerator.{name}()")
    return answered


_ACCELERATOR_LIVE = ("current_stream", "set_stream", "synchronize", "empty_cache", "empty_host_cache", "get_memory_info",
                     "max_memory_allocated", "max_memory_reserved", "memory_allocated", "memory_reserved",
                     "memory_stats", "reset_accumulated_memory_stats", "reset_peak_memory_stats")
# torch.cuda's classes of a live GPU: on a CPU torch their bases are dummies that fail in torch's words.
_CUDA_LIVE_CLASSES = ("Stream", "ExternalStream", "Event", "CUDAGraph", "MemPool", "graph")


def _refusing(answers: DeviceAnswers, query: str):
    def refuse(*_args, **_kwargs):
        raise current_answers(answers).refuse(query)
    return refuse


def _refusing_new(answers: DeviceAnswers, query: str):
    def __new__(cls, *_args, **_kwargs):
        raise current_answers(answers).refuse(query)
    return staticmethod(__new__)


def _in_torchs_words(answers: DeviceAnswers, name: str, original):
    """torch.cuda.`name` as torch's CPU build runs it; where it fails for want of CUDA (`reset_peak_memory_stats`:
    no `torch._C._cuda_resetPeakMemoryStats`; `nvtx.range_push`), called from a library's line, the failure is the
    one line of a refusal naming that line. Called from torch itself, torch's own error stays (its own fallbacks)."""
    @functools.wraps(original)
    def call(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except Exception as exc:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.partition(".")[0] == "torch":
                raise
            first = (str(exc).splitlines() or [""])[0][:160]
            raise current_answers(answers).refuse(
                f"torch.cuda.{name}()", why=f"torch without CUDA cannot do it ({type(exc).__name__}: {first})") from None
    return call


def _compile_eagerly(answers: DeviceAnswers):
    """`torch.compile` while xisa answers as a target: the function or module itself, run eagerly. Dynamo and
    inductor would trace for the GPU the answers describe (its streams, its RNG) on a machine without one; no kernel
    of theirs is one xisa records (a Triton kernel launched inside runs through its own launch, recorded), and the
    values are the function's own. cut-cross-entropy's `@torch.compile(fullgraph=True, dynamic=True)` helpers."""
    def compile(model=None, **_options):
        current_answers(answers).note("torch.compile")
        if model is None:
            return lambda function: function
        return model
    return compile


def _refused(answers: DeviceAnswers, query: str):
    raise answers.refuse(query)


@functools.cache   # once a process: every load and compile asks, and the headers are the installed Triton's
def toolkit_versions() -> dict[str, str]:
    """torch.version.cuda / .hip as the installed Triton's bundled toolkits spell them: the CUDA of its cuda.h
    (CUDA_VERSION 13010 -> '13.1') and the HIP of its hip_version.h ('7.1.25424'), the toolkits the kernel's
    code is built with."""
    import os
    import re
    from importlib.util import find_spec

    # found, not imported: torch's answers start as torch is imported, before the program imports Triton
    backends = os.path.join(os.path.dirname(find_spec("triton").origin), "backends")

    def defines(path: str) -> dict[str, int]:
        with open(path, encoding="utf-8") as handle:
            return {m[1]: int(m[2]) for m in re.finditer(r"^#define (\w+) (\d+)\s*$", handle.read(), re.M)}

    cuda = defines(os.path.join(backends, "nvidia", "include", "cuda.h"))["CUDA_VERSION"]
    hip = defines(os.path.join(backends, "amd", "include", "hip", "hip_version.h"))
    return {"cuda": f"{cuda // 1000}.{cuda % 1000 // 10}",
            "hip": f"{hip['HIP_VERSION_MAJOR']}.{hip['HIP_VERSION_MINOR']}.{hip['HIP_VERSION_PATCH']}"}


@contextlib.contextmanager
def torch_answers(answers: DeviceAnswers) -> Iterator[None]:
    """torch.cuda's device queries and torch.version.cuda/hip answered for `answers.target`, then restored. Every
    other torch.cuda call that needs a device (it initializes CUDA through `_lazy_init`: streams, events,
    synchronize, memory) is refused, naming the call."""
    import torch
    import torch.cuda

    saved: list[tuple[Any, str, Any]] = []

    def patch(owner, name: str, value) -> None:
        saved.append((owner, name, vars(owner).get(name, _ABSENT)))
        setattr(owner, name, value)

    for name, function in _torch_functions(answers).items():
        patch(torch.cuda, name, function)
    for (owner, name), function in _accelerator_functions(answers, torch).items():
        patch(owner, name, function)
    import torch.cuda.random

    for name, function in _random_functions(answers, torch).items():
        for owner in (torch.cuda, torch.cuda.random):
            if name in vars(owner):
                patch(owner, name, function)
    patch(torch.cuda, "default_generators", (torch.default_generator,))   # the one device's: the CPU generator
    answered = {name for owner, name, _ in saved if owner is torch.cuda}
    for name in getattr(torch.cuda, "__all__", ()):
        function = vars(torch.cuda).get(name)
        if name not in answered and isinstance(function, types.FunctionType) and name != "_lazy_init":
            patch(torch.cuda, name, _in_torchs_words(answers, name, function))
    import torch.cuda.nvtx

    for name in ("range_push", "range_pop", "range_start", "range_end", "mark", "range"):
        function = vars(torch.cuda.nvtx).get(name)
        if isinstance(function, types.FunctionType):
            patch(torch.cuda.nvtx, name, _in_torchs_words(answers, f"nvtx.{name}", function))
    for name in _CUDA_LIVE_CLASSES:
        cls = vars(torch.cuda).get(name)
        if isinstance(cls, type):
            patch(cls, "__new__", _refusing_new(answers, f"torch.cuda.{name}()"))
    patch(torch, "compile", _compile_eagerly(answers))
    original_init = vars(torch.cuda).get("_lazy_init")

    def lazy_init(*_args, **_kwargs):
        raise answers.refuse(_torch_call(sys._getframe(1), torch))

    for module in [m for n, m in list(sys.modules.items()) if n == "torch.cuda" or n.startswith("torch.cuda.")]:
        if module is not None and original_init is not None and vars(module).get("_lazy_init") is original_init:
            patch(module, "_lazy_init", lazy_init)
    saved_class = type(torch.version)
    torch.version.__class__ = _version_module(answers, saved_class)
    refuse_probes(_answering_now)   # NVML, AMD SMI and the vendors' tools, while any target answers
    _ANSWERING.append(answers)
    on_cpu = tensors_on_cpu()   # a tensor made on the GPU outside a launch: on the CPU, the same values
    on_cpu.__enter__()
    try:
        yield
    finally:
        on_cpu.__exit__(None, None, None)
        _ANSWERING.remove(answers)
        torch.version.__class__ = saved_class
        for owner, name, value in reversed(saved):
            if value is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


def _version_module(answers: DeviceAnswers, base: type) -> type:
    """A class for the `torch.version` module whose `hip` and `cuda` answer as the target's torch build and are
    recorded as read (a module-level `IS_HIP = torch.version.hip is not None` picks the vendor's branch: a load that
    read it serves only targets of the same backend). Properties, so `from torch.version import hip` and any alias
    of the module are answered too; with no target, this machine's torch answers, recorded as no target's."""
    def answer(kind: str):
        def read(module):
            now = current_answers(answers)
            now.note(f"torch.version.{kind}", BACKEND)
            if now.target is None:
                return vars(module)[kind]
            return toolkit_versions()[kind] if now.target.backend == kind else None
        return property(read)

    return type("TargetVersionModule", (base,), {"hip": answer("hip"), "cuda": answer("cuda")})


_ABSENT = object()



def _torch_call(frame, torch) -> str:
    """The call of torch.cuda's that reached CUDA's initialization, as the library (or torch itself) made it: the
    outermost of the torch.cuda frames under it (`torch.cuda.mem_get_info()`, not the `cudart()` it calls)."""
    outermost = None
    while frame is not None:
        name = frame.f_globals.get("__name__") or ""
        if name == "torch.cuda" or name.startswith("torch.cuda."):
            outermost = frame
        elif name.partition(".")[0] != "xisa":
            break
        frame = frame.f_back
    if outermost is None:
        return "a CUDA call of torch's C++"
    module, function = outermost.f_globals["__name__"], outermost.f_code.co_name
    if hasattr(torch.cuda, function):
        return f"torch.cuda.{function}()"
    return f"{module}.{function}()"
