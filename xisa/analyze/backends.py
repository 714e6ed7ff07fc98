"""One entry per target family: everything xisa does differently for AMD and for NVIDIA.

As LLVM's UpdateTestChecks keeps one handler per target family and Triton's `compiler.py` one backend
object per target, every "AMD or NVIDIA?" question in xisa is a field of the `Backend` below, read
through `backend(name)` (Triton's backend name, `hip` or `cuda`) or `backend_of_isa(isa)` (`amdgcn`,
`sass`, as analyses and goldens name it), never an `if` on a name.

Pure data and pure functions: nothing here runs a tool, writes a file or imports Triton. What the
tools print (cuobjdump's resource usage) is handed in by `xisa.compile.tools.disassemble`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from xisa.analyze import amdgcn, sass
from xisa.analyze.model import Analysis, Instruction, Stream
from xisa.analyze.occupancy import (Excess, Target, amd_launch_excess, amd_waves_per_simd, cuda_launch_excess,
                                    cuda_warps_per_sm)


@dataclass(frozen=True)
class Resource:
    """A key of `Analysis.resources`."""

    key: str
    expect: bool = True     # an expectation may name it (`vgpr_spills: 0`)
    compare: bool = True    # a change of it alone changes the cell (a golden's `resources` delta)


# Every resource key any backend reports, in the order reports show them (the check's resource delta,
# the HTML page's resource table). A backend names the ones its analysis reports.
RESOURCES: tuple[Resource, ...] = (
    Resource("vgprs"), Resource("agprs"), Resource("sgprs"), Resource("vgpr_spills"), Resource("sgpr_spills"),
    Resource("scratch_bytes"), Resource("lds_bytes"), Resource("occupancy"),
    Resource("llvm_occupancy", expect=False, compare=False),   # LLVM's own figure, shown beside xisa's
    Resource("registers"), Resource("local_bytes"), Resource("stack_bytes"),
    Resource("kernarg_bytes", expect=False),
    Resource("wavefront_size", expect=False, compare=False),
)
RESOURCE_ORDER: tuple[str, ...] = tuple(r.key for r in RESOURCES)
COMPARED_RESOURCES: tuple[str, ...] = tuple(r.key for r in RESOURCES if r.compare)
_EXPECTABLE = frozenset(r.key for r in RESOURCES if r.expect)


@dataclass(frozen=True)
class Backend:
    name: str                       # Triton's backend: GPUTarget(name, arch, warp_size)
    package: str                    # its package in the wheel: triton.backends.<package>
    vendor: str                     # as users say it: AMD | NVIDIA
    isa: str                        # as analyses and goldens name it: amdgcn | sass
    stages: tuple[str, ...]         # the Triton stages xisa keeps (`--emit`)
    # The stages fingerprinted in a cell's `Analysis.stages`, in pipeline order (`xisa.analyze.stages`):
    # the text stages, the final assembly (its stream's sha256) and a binary whose code bytes are hashed.
    fingerprinted_stages: tuple[str, ...]
    assembly: str                   # the stage analyzed as text
    binary: str                     # the stage the hardware loads
    # What a tool must print about `binary` for the analysis (None: the bytes themselves are analyzed).
    binary_tool: tuple[str, ...] | None
    # The tool that prints `assembly` from `binary` with line information (None: Triton's own `asm[assembly]`).
    assembly_tool: tuple[str, ...] | None
    tools: tuple[str, ...]          # the programs its compiles and analysis run (`xisa doctor` looks for them)
    # Whether its assembler must get the same input and the same addresses to give the same output
    # (`xisa.compile.tools.ptxas`): ptxas-blackwell's register allocation follows heap addresses and the lengths of
    # the paths it holds, so it runs with address randomization off, relative paths and fixed file names.
    canonical_tool_inputs: bool
    base_mnemonic: Callable[[str], str]        # `v_add_f32_e32` -> `v_add_f32`, `HMMA.16816.F32` -> `HMMA`
    # The resource keys its analysis reports: those an expectation may name first, in the order
    # messages list them, then those only shown.
    resources: tuple[str, ...]
    # A key this ISA lacks but measures as the sum of others, because it means the same thing there.
    resource_aliases: Mapping[str, tuple[str, ...]]
    classes: tuple[str, ...]                   # instruction classes, `class:NAME` in expectations
    class_aliases: Mapping[str, str]           # the other vendor's class name -> this one's
    mnemonic: re.Pattern                       # what an instruction mnemonic looks like
    spells: Callable[[str], bool]              # whether an expectation key could be spelt by this ISA
    spelling_rule: str                         # said when a key cannot be
    respell: Callable[[str], str]              # the key as this ISA would spell it
    occupancy_unit: str                        # what `occupancy` counts
    occupancy_required: tuple[str, ...]        # positive ints every target file's `occupancy` must give
    occupancy_optional: tuple[str, ...]        # ints it may give
    occupancy_choices: Mapping[str, tuple[str, ...]]   # required keys with a fixed set of values
    check_arch: Callable[[Any], str | None]    # why a target file's `arch` is not one of this backend's
    toolchain_keys: tuple[str, ...]            # what a golden's `toolchain` records beside `triton`
    torch_build: str                           # the `torch.version` attribute a torch built for it sets
    device_arch: Callable[[Any], str]          # a torch device's properties -> the arch `device.match` globs
    classify: Callable[[str], str]             # a mnemonic -> its instruction class (one of `classes`)
    # Classes of scheduling filler (waits, delay and nop hints) that a source-line ranking does not count: the
    # compiler hangs them on whichever line is nearby, so they say where the scheduler moved, not what changed.
    filler_classes: frozenset[str]
    # For the loop analysis (`xisa.analyze.loops`): how control leaves an instruction (`loops.FLOWS`),
    # whether it reads or writes scratch/local memory ("load", "store", None), and the stream of a
    # normalized stream text (a golden's `.isa`).
    flow: Callable[[Instruction], str]
    scratch_access: Callable[[Instruction], str | None]
    stream_from_text: Callable[[str], Stream]
    # llvm-mca's `-mtriple` for a static estimate of a loop (`xisa.compile.tools.mca`); None: no LLVM model.
    mca_triple: str | None
    _analyze: Callable[..., Analysis] = field(repr=False)
    _launch_excess: Callable[..., list[Excess]] = field(repr=False)

    @property
    def text_stages(self) -> tuple[str, ...]:
        """The kept stages that are text (every one but the binary)."""
        return tuple(stage for stage in self.stages if stage != self.binary)

    @property
    def expectable_resources(self) -> tuple[str, ...]:
        """The keys an expectation may name on this ISA, `instructions` first."""
        return ("instructions", *(key for key in self.resources if key in _EXPECTABLE))

    def analyze(self, assembly: str, binary: bytes | None, binary_facts: str | None, *, shared_bytes: int,
                num_warps: int, target: Target) -> Analysis:
        """The analysis of one compiled kernel, occupancy included. `binary`: the code object's bytes (its
        fingerprint, `codeobject.py`; None only for a unit test's text), `binary_facts`: what `binary_tool` printed
        about it (None where the backend has none); `shared_bytes`: Triton's dynamic shared memory (metadata)."""
        return self._analyze(assembly, binary, binary_facts, shared_bytes=shared_bytes, num_warps=num_warps,
                             target=target)


    def launch_excess(self, resources: Mapping[str, Any], *, num_warps: int, target: Target) -> list[Excess]:
        """The per-workgroup (per-block) limits of `target` that one workgroup of this kernel exceeds: empty
        when it can launch. Computed from an analysis's resources, so a golden needs no field for it."""
        return self._launch_excess(resources, num_warps=num_warps, target=target)


def _amd_launch_excess(res: Mapping[str, Any], *, num_warps: int, target: Target) -> list[Excess]:
    return amd_launch_excess(target, vgprs=int(res.get("vgprs") or 0), agprs=int(res.get("agprs") or 0),
                             lds_bytes=int(res.get("lds_bytes") or 0), num_warps=num_warps)


def _cuda_launch_excess(res: Mapping[str, Any], *, num_warps: int, target: Target) -> list[Excess]:
    return cuda_launch_excess(target, regs=int(res.get("registers") or 0), smem_bytes=int(res.get("lds_bytes") or 0),
                              num_warps=num_warps)


def _analyze_amdgcn(assembly: str, hsaco: bytes | None, _facts: None, *, shared_bytes: int, num_warps: int,
                    target: Target) -> Analysis:
    analysis, _ = amdgcn.analyze_amdgcn(assembly, lds_bytes=shared_bytes, code_object=hsaco)
    res = analysis.resources
    res["occupancy"] = amd_waves_per_simd(target, vgprs=res["vgprs"], agprs=res["agprs"], sgprs=res["sgprs"],
                                          lds_bytes=res["lds_bytes"], num_warps=num_warps)
    return analysis


def _analyze_sass(assembly: str, cubin: bytes | None, resource_usage: str, *, shared_bytes: int, num_warps: int,
                  target: Target) -> Analysis:
    analysis = sass.analyze_sass(assembly, resource_usage, shared_bytes=shared_bytes, cubin=cubin)
    res = analysis.resources
    res["occupancy"] = cuda_warps_per_sm(target, regs=res["registers"], smem_bytes=res["lds_bytes"],
                                         num_warps=num_warps)
    return analysis


def _gfx_arch(arch: Any) -> str | None:
    return None if isinstance(arch, str) and arch.startswith("gfx") else f"arch {arch!r} is not a gfx name"


def _compute_capability(arch: Any) -> str | None:
    return None if isinstance(arch, int) else f"arch {arch!r} must be an int compute capability (e.g. 90)"


def base_gcn_arch(gcn_arch_name: str) -> str:
    """ROCm's `gcnArchName` with its feature flags stripped: `gfx942:sramecc+:xnack-` -> `gfx942`."""
    return gcn_arch_name.split(":", 1)[0].strip()


# LLVM prints AMD mnemonics in lower case (AMD's manuals write them in capitals); SASS opcodes are upper
# case (modifiers may not be: `HGMMA.64x128x16.F32`). A glob may stand for the opcode.
_GLOB = re.compile(r"[*?\[]")

AMD = Backend(
    name="hip", package="amd", vendor="AMD", isa="amdgcn",
    stages=("ttir", "ttgir", "llir", "amdgcn", "hsaco"),
    fingerprinted_stages=("ttir", "ttgir", "llir", "amdgcn", "hsaco"),   # hsaco: its `code_sha256`
    assembly="amdgcn", binary="hsaco", binary_tool=None, assembly_tool=None,   # the amdgcn keeps `.loc`
    tools=("ld.lld",), canonical_tool_inputs=False,
    base_mnemonic=amdgcn.base_mnemonic,
    resources=("vgprs", "agprs", "sgprs", "vgpr_spills", "sgpr_spills", "scratch_bytes", "lds_bytes", "occupancy",
               "llvm_occupancy", "kernarg_bytes", "wavefront_size"),
    resource_aliases=MappingProxyType({}),
    classes=amdgcn.CLASSES,
    class_aliases=MappingProxyType({"tensor": "matrix", "shared": "lds", "global": "vmem", "local": "scratch"}),
    # `v_cvt_pk_f32_fp8_e32`, a gfx11+ dual-issue pair `v_dual_mov_b32::v_dual_and_b32`
    mnemonic=re.compile(r"^(?:(?:v|s|ds|buffer|global|flat|scratch|image|tbuffer)_[a-z0-9_]+"
                        r"(?:::v_[a-z0-9_]+)?|exp[a-z0-9_]*)$"),
    spells=lambda key: key == key.lower(),
    spelling_rule="AMD mnemonics are lower case, as LLVM prints them",
    respell=str.lower,
    occupancy_unit="waves per SIMD",
    occupancy_required=("vgpr_granule", "vgpr_budget", "vgpr_max_per_wave", "max_waves_per_simd",
                        "simds_per_cu", "lds_per_cu", "lds_per_workgroup"),
    occupancy_optional=("sgpr_budget", "sgpr_granule", "max_workgroups_per_cu"),
    occupancy_choices=MappingProxyType({"agpr": ("unified", "none")}),
    check_arch=_gfx_arch,
    toolchain_keys=("amd_codegen",),
    torch_build="hip",
    device_arch=lambda props: base_gcn_arch(str(getattr(props, "gcnArchName", "") or "")),
    classify=amdgcn.classify, filler_classes=frozenset({"program", "wait"}),
    flow=amdgcn.flow, scratch_access=amdgcn.scratch_access,
    stream_from_text=amdgcn.stream_from_text,
    mca_triple="amdgcn-amd-amdhsa",
    _analyze=_analyze_amdgcn,
    _launch_excess=_amd_launch_excess,
)

NVIDIA = Backend(
    name="cuda", package="nvidia", vendor="NVIDIA", isa="sass",
    stages=("ttir", "ttgir", "llir", "ptx", "cubin", "sass"),
    fingerprinted_stages=("ttir", "ttgir", "llir", "ptx", "sass", "cubin"),   # cubin: its `code_sha256`
    assembly="sass", binary="cubin",
    binary_tool=("cuobjdump", "--dump-resource-usage"),
    # Triton's `asm["sass"]` (cuobjdump -sass) has no line information; nvdisasm -gi prints the same code with
    # `//## File "...", line N [inlined at ...]` comments (the source lines; dropped from the stream like every comment).
    assembly_tool=("nvdisasm", "-c", "-gi"), tools=("ptxas", "ptxas-blackwell", "cuobjdump", "nvdisasm"),
    canonical_tool_inputs=True,
    base_mnemonic=sass.base_mnemonic,
    resources=("registers", "stack_bytes", "local_bytes", "lds_bytes", "occupancy", "llvm_occupancy"),
    # AMD's scratch (private segment: spills and stack) is NVIDIA's per-thread stack plus local memory.
    resource_aliases=MappingProxyType({"scratch_bytes": ("stack_bytes", "local_bytes")}),
    classes=sass.CLASSES,
    class_aliases=MappingProxyType({"matrix": "tensor", "lds": "shared", "vmem": "global", "scratch": "local"}),
    mnemonic=re.compile(r"^[A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*$"),        # `HMMA.16816.F32.BF16`
    spells=lambda key: bool(_GLOB.search(key)) or key.split(".", 1)[0] == key.split(".", 1)[0].upper(),
    spelling_rule="NVIDIA opcodes are upper case",
    respell=lambda key: key.split(".", 1)[0].upper(),
    occupancy_unit="warps per SM",
    occupancy_required=("regs_per_sm", "reg_alloc_unit", "max_regs_per_thread", "max_warps_per_sm",
                        "max_blocks_per_sm", "smem_per_sm", "smem_per_block", "smem_reserved_per_block"),
    occupancy_optional=(),
    occupancy_choices=MappingProxyType({}),
    check_arch=_compute_capability,
    toolchain_keys=("ptxas",),
    torch_build="cuda",
    device_arch=lambda props: f"{props.major}.{props.minor}",     # the compute capability
    classify=sass.classify, filler_classes=frozenset(),   # ptxas writes no wait or delay instructions
    flow=sass.flow, scratch_access=sass.scratch_access,
    stream_from_text=sass.stream_from_text,
    mca_triple=None,          # LLVM has no model of NVIDIA's SASS (its NVPTX backend stops at PTX)
    _analyze=_analyze_sass,
    _launch_excess=_cuda_launch_excess,
)

BACKENDS: tuple[Backend, ...] = (AMD, NVIDIA)
BACKEND_NAMES: tuple[str, ...] = tuple(b.name for b in BACKENDS)
_BY_NAME = {b.name: b for b in BACKENDS}
_BY_ISA = {b.isa: b for b in BACKENDS}


def backend(name: str) -> Backend:
    """The entry for Triton's backend name (`hip`, `cuda`); a target file's `backend` was checked on load."""
    return _BY_NAME[name]


def backend_of_isa(isa: str) -> Backend:
    """The entry for an analysis's or golden's `isa` (`amdgcn`, `sass`)."""
    return _BY_ISA[isa]


# Every resource an expectation may name, and every instruction class, over all backends (in table order).
EXPECTABLE_RESOURCES: tuple[str, ...] = tuple(dict.fromkeys(k for b in BACKENDS for k in b.expectable_resources))
CLASS_NAMES: tuple[str, ...] = tuple(dict.fromkeys(c for b in BACKENDS for c in b.classes))
