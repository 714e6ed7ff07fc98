"""A target file's `device:` section: what a GPU of the target answers when a library asks the device.

Libraries size configs from the device at import and in their heuristics (`torch.cuda.get_device_properties`,
Triton's `driver.active.utils.get_device_properties`); xisa answers from these facts, the ones of the target's
reference product (`product`), each cited under `sources:` like every other number of a target file. A fact a
file leaves out is a query xisa refuses to answer (`xisa.compile.gpu.device_answers`), never a guess.
Facts the file already states elsewhere are not repeated here: the compute capability of an NVIDIA target is its
`arch`, the warp size is `warp_size`, shared memory per block (opt-in) and per SM and registers per SM are the
`occupancy` tables'.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable

from xisa.errors import TargetError


@dataclass(frozen=True)
class DeviceFacts:
    """The reference product's answers; None: the file does not state it (a query for it is an error)."""

    product: str                                # which GPU these numbers are of, e.g. 'NVIDIA H200 SXM 141GB'
    multiprocessor_count: int                   # SMs / CUs
    name: str | None = None                     # what the driver names it (torch.cuda.get_device_name)
    capability: tuple[int, int] | None = None   # AMD: HIP's major, minor (GFXIP version); NVIDIA: from `arch`
    arch_name: str | None = None                # AMD: HIP's gcnArchName with its features, 'gfx942:sramecc+:xnack-'
    total_memory: int | None = None             # bytes, as the driver reports them (less than the datasheet's)
    shared_memory_per_block: int | None = None  # bytes a block gets without opting in (NVIDIA: 48 KiB)
    registers_per_block: int | None = None      # 32-bit registers one block may use
    max_threads_per_block: int | None = None
    max_threads_per_multiprocessor: int | None = None   # AMD only: NVIDIA's is occupancy.max_warps_per_sm * 32
    l2_cache_size: int | None = None            # bytes
    clock_rate: int | None = None               # kHz, the peak SM clock
    memory_clock_rate: int | None = None        # kHz, the peak memory clock
    memory_bus_width: int | None = None         # bits

    def stated(self) -> dict[str, Any]:
        """The facts the file states, as written (the target summary, so the result cache keys on them)."""
        return {f.name: (list(v) if isinstance(v, tuple) else v) for f in fields(self)
                if (v := getattr(self, f.name)) is not None}


_TEXT_FACTS = ("product", "name", "arch_name")
DEVICE_KEYS = ("match", *(f.name for f in fields(DeviceFacts)))
# Facts of the architecture, alike on every device of it: a device target (`device_of:`) takes them from its arch
# target's file and states only the product's own (name, CU/SM count, memory, clocks, L2).
ARCH_FACTS = ("capability", "arch_name", "shared_memory_per_block", "registers_per_block", "max_threads_per_block",
              "max_threads_per_multiprocessor")


def _nvidia_capability(target) -> tuple[int, int]:
    return divmod(int(target.arch), 10)   # arch 90 -> (9, 0), 86 -> (8, 6), 120 -> (12, 0)


# Facts a backend derives from what the file states elsewhere (one home for each number): a file stating one of
# these under `device:` is refused. Each derivation is the driver's own rule, cited in the target files' sources.
DERIVED: dict[str, dict[str, Callable[[Any], Any]]] = {
    "cuda": {
        "capability": _nvidia_capability,
        "arch_name": lambda t: t.device.name,    # torch's gcnArchName on CUDA is the device name
        "shared_memory_per_block_optin": lambda t: t.occupancy["smem_per_block"],
        "shared_memory_per_multiprocessor": lambda t: t.occupancy["smem_per_sm"],
        "registers_per_multiprocessor": lambda t: t.occupancy["regs_per_sm"],
        "max_threads_per_multiprocessor": lambda t: t.occupancy["max_warps_per_sm"] * t.warp_size,
    },
    "hip": {
        # hipDeviceProp_t.sharedMemPerBlock, Triton's max_shared_mem on AMD (the files' launch_rule source)
        "shared_memory_per_block": lambda t: t.occupancy["lds_per_workgroup"],
    },
}


def device_fact(target, key: str) -> Any:
    """What the target's device answers for `key`: a stated fact, one derived from the file, or None (unstated)."""
    derive = DERIVED.get(target.backend, {}).get(key)
    if derive is not None:
        return derive(target)
    if key == "warp_size":
        return target.warp_size
    return getattr(target.device, key, None)


def parse_device_facts(device: dict[str, Any], sources: dict[str, Any], path: str, backend: str, *,
                       arch: Any = None) -> DeviceFacts:
    """The `device:` section's facts, each checked and cited (`sources.<fact>`). For a device target, `arch` is its
    arch target, whose architecture facts (ARCH_FACTS) it answers with and may not restate."""
    allowed = [key for key in DEVICE_KEYS if arch is None or (key != "match" and key not in ARCH_FACTS)]
    unknown = sorted(set(device) - set(allowed))
    if unknown:
        if arch is not None and set(unknown) <= {"match", *ARCH_FACTS}:
            raise TargetError(f"{unknown[0]} is the architecture's, stated once in {arch.path or arch.name}",
                              path=path, field=f"device.{unknown[0]}", fix=f"remove device.{unknown[0]}")
        raise TargetError(f"unknown key(s) {unknown}", path=path, field="device", fix=f"allowed keys: {allowed}")
    derived = sorted(set(device) & set(DERIVED.get(backend, {})))
    if derived:
        raise TargetError(f"{derived[0]} is derived from the rest of the file on {backend} targets (one home for each "
                          "number)", path=path, field=f"device.{derived[0]}", fix=f"remove device.{derived[0]}")
    for required in ("product", "multiprocessor_count"):
        if required not in device:
            raise TargetError("missing: the device facts a library asks are answered from it", path=path,
                              field=f"device.{required}", fix=f"add device.{required} and sources.{required}")
    values: dict[str, Any] = {}
    for key, value in device.items():
        if key == "match":
            continue
        if key in _TEXT_FACTS:
            _require(isinstance(value, str) and value.strip() != "", "must be a non-empty string", path, key)
        elif key == "capability":
            _require(isinstance(value, list) and len(value) == 2 and all(_is_count(v, zero=True) for v in value),
                     "must be [major, minor]", path, key)
            value = tuple(value)
        else:
            _require(_is_count(value), "must be a positive int", path, key)
        cite = sources.get(key)
        _require(isinstance(cite, str) and len(cite.strip()) > 10, "this fact cites no source", path, key,
                 fix=f"add sources.{key}: '<document, section, URL>'", field=f"sources.{key}")
        values[key] = value
    if arch is not None:
        values.update((key, v) for key in ARCH_FACTS if (v := getattr(arch.device, key)) is not None)
    return DeviceFacts(**values)


def _is_count(value: Any, *, zero: bool = False) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and (value >= 0 if zero else value > 0)


def _require(ok: bool, message: str, path: str, key: str, *, fix: str | None = None, field: str | None = None) -> None:
    if not ok:
        raise TargetError(message, path=path, field=field or f"device.{key}", fix=fix)
