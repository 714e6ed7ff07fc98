"""What a library sees when it asks the device while xisa loads, binds or compiles a kernel for a target.

Libraries ask the GPU at import and in their heuristics (fla-core's `check_shared_mem`, FlagGems' `DeviceDetector`
and `get_device_info`) and pick configs from the answers. xisa has no GPU and compiles for many targets in one
process, so each answer comes from the target file of the cell being compiled (`xisa.spec.device_facts`), as the
reference product of that target would give it, through the two doors libraries knock on:
- `torch.cuda` (`is_available`, `device_count`, `current_device`, `get_device_properties`, `get_device_capability`,
  `get_device_name`, `set_device`, the `torch.cuda.device(i)` context) and `torch.version.cuda` / `torch.version.hip`, patched for the duration only;
- Triton's driver (`xisa.compile.gpu.target_driver`): `utils.get_device_properties(i)` with the backend's keys.
What a CPU-only program would see, exactly, is answered so: a tensor made on the GPU is made on the CPU
(`tensors.py`), torch.cuda's random state is the CPU generator's, `torch.compile` runs the function itself.
A query xisa cannot answer (a fact the file does not state, a stream, a second device, a benchmark, what torch's CPU
build cannot do) raises `UnansweredDeviceQuery`, a BaseException, so a library's `except Exception:` fallback cannot
turn it into a silently different config; its one line (a `TargetError`) names the library's line that asked
(`where.py`), what it asked and the fix (an import hook), never a target file as the place.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from typing import Any

from xisa.compile.gpu.where import IMPORT_HOOK_FIX, asking_line
from xisa.compile.worker.platform_facts import BACKEND, ENVIRONMENT_PACKAGES, platform_fact
from xisa.errors import TargetError
from xisa.spec.device_facts import device_fact


class UnansweredDeviceQuery(BaseException):
    """A device query the target cannot answer. A BaseException on purpose: `except Exception` does not catch it."""

    def __init__(self, error: TargetError):
        super().__init__(str(error))
        self.error = error


# The answers of the answering contexts entered (`torch_answers`), innermost last.
_ANSWERING: list["DeviceAnswers"] = []


def current_answers(answers: "DeviceAnswers") -> "DeviceAnswers":
    """The answers of the innermost answering context under way, else `answers`: a function or an object a module
    kept from its load (`from torch.cuda import get_device_properties`, `DRIVER = triton.runtime.driver.active`,
    a properties object) answers, when called later, as the target the code runs for then, as it would on that
    target's GPU, and the fact it read is recorded there."""
    return _ANSWERING[-1] if _ANSWERING else answers


def _answering_now() -> "DeviceAnswers | None":
    return _ANSWERING[-1] if _ANSWERING else None


# torch's _CudaDeviceProperties attributes (torch/csrc/cuda/Module.cpp; the same names on ROCm's torch) -> the fact
# that answers each; None: no fact of a target model answers it (it differs per card).
TORCH_PROPERTIES: dict[str, str | None] = {
    "name": "name", "major": "capability", "minor": "capability", "total_memory": "total_memory",
    "multi_processor_count": "multiprocessor_count", "warp_size": "warp_size",
    "max_threads_per_multi_processor": "max_threads_per_multiprocessor", "max_threads_per_block": "max_threads_per_block",
    "regs_per_multiprocessor": "registers_per_multiprocessor", "shared_memory_per_block": "shared_memory_per_block",
    "shared_memory_per_block_optin": "shared_memory_per_block_optin",
    "shared_memory_per_multiprocessor": "shared_memory_per_multiprocessor", "memory_bus_width": "memory_bus_width",
    "memory_clock_rate": "memory_clock_rate", "clock_rate": "clock_rate", "L2_cache_size": "l2_cache_size",
    "gcnArchName": "arch_name", "uuid": None, "pci_bus_id": None, "pci_device_id": None, "pci_domain_id": None,
    "is_integrated": None, "is_multi_gpu_board": None,
}

# Attributes a backend's torch does not have: reading one raises AttributeError as it does on that GPU, so a
# library's `getattr(props, name, default)` takes its default as it does there. ROCm's torch does not bind
# `shared_memory_per_block_optin` (pytorch/pytorch#198198, 2026: "exposes shared_memory_per_block_optin on NVIDIA,
# but the binding is excluded from ROCm builds"), though HIP reports a value.
TORCH_ABSENT: dict[str, frozenset[str]] = {"cuda": frozenset(), "hip": frozenset({"shared_memory_per_block_optin"})}

# Triton's `driver.active.utils.get_device_properties(i)` keys per backend (Triton 3.8 backends/nvidia/driver.c and
# backends/amd/driver.c getDeviceProperties) -> the fact that answers each.
TRITON_PROPERTIES: dict[str, dict[str, str | None]] = {
    "cuda": {"max_shared_mem": "shared_memory_per_block_optin", "max_num_regs": "registers_per_block",
             "multiprocessor_count": "multiprocessor_count", "warpSize": "warp_size", "sm_clock_rate": "clock_rate",
             "mem_clock_rate": "memory_clock_rate", "mem_bus_width": "memory_bus_width"},
    "hip": {"max_shared_mem": "shared_memory_per_block", "max_num_regs": "registers_per_block",
            "multiprocessor_count": "multiprocessor_count", "sm_clock_rate": "clock_rate",
            "mem_clock_rate": "memory_clock_rate", "mem_bus_width": "memory_bus_width", "arch": "arch_name",
            "warpSize": "warp_size", "max_threads_per_sm": "max_threads_per_multiprocessor", "cooperativeLaunch": None},
}

# Never a package whose answers could be stale: the toolchain and xisa itself answer, they do not keep answers.
LIVE_GPU = "it needs a live GPU (a stream, an event, memory, a synchronize), and xisa runs nothing on one"

_NOT_ASKERS = frozenset({"_frozen_importlib", "_frozen_importlib_external", "sitecustomize"})


class DeviceAnswers:
    """The answers for one target (None: a load for no particular target, which can answer nothing), and what
    was asked: `asked` (queries answered), `facts` (the platform facts they read -> value, see `platform_fact`),
    `refused` (those that were not), `askers` (the top packages whose code was running when the device was asked:
    they may keep the answers, so they are loaded anew per target)."""

    def __init__(self, target, *, capturing: bool = False):
        self.target = target
        self.capturing = capturing   # the answers of a whole captured program (`xisa capture`), not of one load
        self.asked: list[str] = []
        self.facts: dict[str, Any] = {}
        self.refused: list[UnansweredDeviceQuery] = []
        self.askers: set[str] = set()

    # --- recording ---------------------------------------------------------------------------------------------

    def note(self, query: str, fact: str | None = None) -> None:
        """`query` was answered; its answer is `fact` of the target (None: the same on every target)."""
        self.asked.append(query)
        if fact is not None:
            self.facts[fact] = platform_fact(self.target, fact)
        self.askers.update(_asking_packages())

    def refuse(self, query: str, fact: str | None = None, why: str = "", fix: str = "") -> UnansweredDeviceQuery:
        """The error for a query with no answer, recorded (a bare `except:` that swallows it is still caught). It
        names the line of the library's (or the program's) code that asked, and the fix; never a target file as
        the place: the target answered, the library asked."""
        target = self.target
        asked = asking_line(sys._getframe(1))
        place = None if asked is None else asked[0] if asked[1] == "<module>" else f"{asked[0]} (in {asked[1]})"
        if target is None:
            error = TargetError(f"{query} was asked while xisa loads the kernel's module for no particular target "
                                "(as `config: all` does, to count an autotuner's configs)", path=place,
                                fix="give the case's config as an index or a mapping of values")
        elif fact is not None:
            owner = (f"xisa's target file {target.name}.yaml" if target.bundled else
                     f"the target file {target.path or target.name}")
            error = TargetError(f"{query} asks device.{fact}, which {owner} does not state for its "
                                f"{target.device.product}", path=place, fix=self.unstated_fix(fact))
        else:
            error = TargetError(f"{query} is refused while xisa answers as {target.name} ({target.device.product}): "
                                f"{why or LIVE_GPU}", path=place, fix=fix or self.live_gpu_fix())
        refused = UnansweredDeviceQuery(error)
        self.refused.append(refused)
        return refused

    def unstated_fix(self, fact: str) -> str:
        """State the fact in the project's own target file (a project's `targets/NAME.yaml` replaces xisa's), or
        stub the query in an import hook."""
        target = self.target
        where = (f"a targets/{target.name}.yaml of the project (a copy of xisa's: the project's file of a name "
                 "replaces xisa's)" if target.bundled else target.path or f"targets/{target.name}.yaml")
        return f"state device.{fact}, with its source under sources.{fact}, in {where}; or stub the query in {IMPORT_HOOK_FIX}"

    def live_gpu_fix(self) -> str:
        """What to do about a call that needs a live GPU, where the program runs (capture) or a module loads."""
        if self.capturing:
            return ("stub it in " + IMPORT_HOOK_FIX + "; or skip it where XISA_CAPTURE_NO_RUN=1 is set (`xisa capture "
                    "--no-run` sets it), or capture on a GPU")
        launch = _launch_under_way(sys._getframe(2))
        if launch is not None:   # a script's own launch at its top level: the copy capture kept of it, loaded
            return (f"{launch} launches a kernel while its module loads: xisa loads a module to compile its kernels "
                    "and runs no launch; put the program's launches under `if __name__ == \"__main__\":` (or in a "
                    "function) and capture again")
        return "stub it in " + IMPORT_HOOK_FIX + "; or make the call in the launch function (xisa runs no launch)"

    # --- answers -----------------------------------------------------------------------------------------------

    def fact(self, fact: str | None, query: str) -> Any:
        if self.target is None:
            raise self.refuse(query)
        if fact is None:
            raise self.refuse(query, why="it differs between cards of one model, so no target file states it")
        value = device_fact(self.target, fact)
        if value is None:
            raise self.refuse(query, fact)
        self.note(query, fact)
        return value

    def device_index(self, device: Any, query: str) -> int:
        """0 for the one device a compile has (None, 0, 'cuda', 'cuda:0', torch.device('cuda')); any other is refused."""
        index = getattr(device, "index", device)
        if getattr(device, "type", "cuda") not in ("cuda", "hip"):
            raise self.refuse(query, why=f"{device!r} is no GPU")
        if isinstance(device, str):
            index = device.partition(":")[2] or None
            if device.partition(":")[0] not in ("cuda", "hip"):
                raise self.refuse(query, why=f"{device!r} is no GPU")
        if index in (None, 0, "0"):
            return 0
        raise self.refuse(query, why=f"xisa compiles for one device, index 0, not {index!r}")

    def capability(self, query: str) -> tuple[int, int]:
        return tuple(self.fact("capability", query))

    def triton_properties(self, index: Any) -> Mapping[str, Any]:
        return self._properties(index, f"triton.runtime.driver.active.utils.get_device_properties({index!r})",
                                _TritonProperties)

    def torch_properties(self, device: Any) -> TorchDeviceProperties:
        return self._properties(device, f"torch.cuda.get_device_properties({'' if device is None else repr(device)})",
                                TorchDeviceProperties)

    def _properties(self, device: Any, query: str, kind):
        self.device_index(device, query)
        if self.target is None:
            raise self.refuse(query)
        self.note(query)   # the object answers each read as the target then under way
        return kind(self, query)


def _asking_packages() -> set[str]:
    """The top packages of the frames between a device query and the xisa code that loads or compiles (modules
    being imported, heuristics running): those that may keep what they were told. A module of torch is named
    instead (`torch.utils._triton`), the innermost one only: torch is never imported anew, its caches are cleared
    (`clear_torch_caches`)."""
    packages = set()
    torch_seen = False
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__") or ""
        top = name.partition(".")[0]
        if top == "xisa" and not name.startswith("xisa.compile.gpu."):   # the answering room's own frames go on
            break   # the loader or binder that started this: nothing further out is part of the load
        if top and top not in _NOT_ASKERS and top not in ENVIRONMENT_PACKAGES and top not in sys.stdlib_module_names:
            packages.add(top)
        elif top == "torch" and "." in name and not name.startswith(_TORCH_CORE) and not torch_seen:
            packages.add(name)   # the module of torch whose code asked (outer ones are only importing it)
            torch_seen = True
        frame = frame.f_back
    return packages


# torch's own modules that answer (patched above) or are torch itself. Another module of torch whose code asked
# (`torch.utils._triton.has_triton_tma_device`, a functools.cache over the capability) keeps the first target's answer
# in its caches, cleared whenever the target changes (`clear_torch_caches`). torch's modules are never imported anew:
# they register themselves with torch at import (inductor's templates, dynamo's hooks), and a second import fails
# (fla's `fla.modules` then failed to import for every target after the first). A value one computes at import
# (inductor's config defaults under `torch.version.hip`) stays the first target's: docs/platform.md.
_TORCH_CORE = ("torch.cuda", "torch.version", "torch.accelerator", "torch._C", "torch.backends", "torch.overrides",
               "torch.nn", "torch.autograd", "torch.library", "torch._ops", "torch._tensor", "torch.functional",
               "torch.random", "torch.types", "torch.utils._device", "torch.utils._contextlib", "torch.serialization")


def clear_torch_caches(modules: set[str]) -> None:
    """Forget what the functions of these modules of torch cached (functools.cache, lru_cache): they asked the device
    for another target."""
    for name in sorted(modules):
        module = sys.modules.get(name)
        for value in list(vars(module).values()) if module is not None else ():
            # by type, never getattr: a module's objects answer any attribute (inductor's op handlers warn)
            if isinstance(value, functools._lru_cache_wrapper) and getattr(value, "__module__", None) == name:
                value.cache_clear()


def _launch_under_way(frame) -> str | None:
    """`file:line` of a module's top-level code that launched the kernel under way (a JIT function's or an
    autotuner's `run` on the stack, called from a module being executed), or None."""
    launching = False
    while frame is not None:
        name = frame.f_globals.get("__name__") or ""
        if name.startswith("triton.runtime.") and frame.f_code.co_name == "run":
            launching = True
        elif launching and frame.f_code.co_name == "<module>":
            asked = asking_line(frame)
            return asked[0] if asked is not None and asked[1] == "<module>" else None
        frame = frame.f_back
    return None


class _TritonProperties(Mapping):
    """Triton's device-properties dict: the backend's keys, each answered when read (an unstated one is refused)."""

    def __init__(self, answers: DeviceAnswers, query: str):
        self._answers, self._query = answers, query

    @property
    def _keys(self) -> dict[str, str | None]:
        """The keys of the backend under way (kept from one load, the dict answers as the target compiling now);
        which keys there are is the backend's: recorded as read."""
        now = current_answers(self._answers)
        now.note(f"{self._query} keys", BACKEND)
        return TRITON_PROPERTIES[now.target.backend]

    def __getitem__(self, key):
        keys = self._keys
        if key not in keys:
            raise KeyError(key)
        return current_answers(self._answers).fact(keys[key], f"{self._query}[{key!r}]")

    def __iter__(self):
        return iter(self._keys)

    def __len__(self):
        return len(self._keys)

    def __repr__(self):
        return f"<xisa: {self._query} for {self._answers.target.name}>"


class TorchDeviceProperties:
    """`torch.cuda.get_device_properties(...)` for the target: torch's attributes, each answered when read; an
    attribute torch does not have raises AttributeError, as torch does (`getattr(props, 'x', default)` works)."""

    def __init__(self, answers: DeviceAnswers, query: str):
        self._answers, self._query = answers, query

    def __getattr__(self, name: str):
        if name.startswith("__") or name not in self._names():
            raise AttributeError(f"'_CudaDeviceProperties' object has no attribute {name!r}")
        value = current_answers(self._answers).fact(TORCH_PROPERTIES[name], f"{self._query}.{name}")
        if name in ("major", "minor"):
            return value[0 if name == "major" else 1]
        return value

    def _names(self) -> list[str]:
        """torch's attributes on the backend under way (ROCm's torch has no `shared_memory_per_block_optin`): which
        there are is the backend's, recorded as read (a `getattr(props, name, default)` took its branch on it)."""
        now = current_answers(self._answers)
        now.note(f"{self._query} attributes", BACKEND)
        absent = TORCH_ABSENT[now.target.backend]
        return [name for name in TORCH_PROPERTIES if name not in absent]

    def __dir__(self):
        return sorted(self._names())

    def __repr__(self):
        return f"<xisa: {self._query} for {self._answers.target.name}>"


# --- torch.cuda, answered for the duration of a load or compile ---------------------------------------------------
