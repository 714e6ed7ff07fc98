"""The SASS parser and normalizer, cuobjdump resources, and the CUDA occupancy calculator."""

from __future__ import annotations

import pytest

from support import REPO
from xisa.analyze.occupancy import cuda_warps_per_sm
from xisa.analyze.sass import CLASSES, base_mnemonic, classify, parse_resource_usage, parse_stream
from xisa.errors import ParseError
from xisa.spec.targets import load_targets

TARGETS = load_targets([REPO / "targets"])

# Triton's asm["sass"] spelling (triton/tools/disasm.py): control bits, TAB, instruction, LBBn labels.
TRITON_SASS = """\
Function:k
--:-:0:-:1\tLDC R1, c[0x0][0x28];
--:-:1:-:7\tS2R R7, SR_CTAID.X;
02:-:-:Y:5\tIMAD.SHL.U32 R7, R7, 0x400, RZ;
--:-:-:-:1\tISETP.GE.AND P6, PT, R7, UR6, PT;
--:-:2:-:1\t@!P6 LDG.E.128 R4, desc[UR4][R8.64];
--:-:-:-:1\t@P6 BRA LBB1;
04:-:-:-:2\tHMMA.16816.F32.BF16 R12, R4, R6, R12;
LBB1:
--:-:-:-:1\tBSSY B0, 0xa0;
--:-:-:-:1\tF2FP.BF16.F32.PACK_AB R3, R13, R12;
--:-:-:-:5\tEXIT;
LBB0:
--:-:-:Y:0\tBRA LBB0;
--:-:-:Y:0\tNOP;
--:-:-:Y:0\tNOP;

"""

# The same machine code as nvdisasm prints it: directives, addresses, encodings, .L_x_ labels.
NVDISASM_SASS = """\
\t.headerflags\t@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
\t.elftype\t@"ET_EXEC"
//--------------------- .text.k                  --------------------------
\t.section\t.text.k,"ax",@progbits
\t.align\t128
        .global         k
        .type           k,@function
        .size           k,(.L_x_9 - k)
k:
.text.k:
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
                                                                          /* 0x000fe20000000800 */
        /*0010*/                   S2R R7, SR_CTAID.X ;
        /*0020*/                   IMAD.SHL.U32 R7, R7, 0x400, RZ ;
        /*0030*/                   ISETP.GE.AND P6, PT, R7, UR6, PT ;
        /*0040*/               @!P6 LDG.E.128 R4, desc[UR4][R8.64] ;
        /*0050*/                @P6 BRA `(.L_x_7) ;
        /*0060*/                   HMMA.16816.F32.BF16 R12, R4, R6, R12 ;
.L_x_7:
        /*0070*/                   BSSY B0, `(.L_x_8) ;
        /*0080*/                   F2FP.BF16.F32.PACK_AB R3, R13, R12 ;
        /*0090*/                   EXIT ;
.L_x_8:
        /*00a0*/                   BRA `(.L_x_8);
        /*00b0*/                   NOP;
.L_x_9:
"""

EXPECTED_TEXT = """\
bb0:
  LDC R1, c[0x0][0x28]
  S2R R7, SR_CTAID.X
  IMAD.SHL.U32 R7, R7, 0x400, RZ
  ISETP.GE.AND P6, PT, R7, UR6, PT
  LDG.E.128 @!P6 R4, desc[UR4][R8.64]
  BRA @P6 bb2
bb1:
  HMMA.16816.F32.BF16 R12, R4, R6, R12
bb2:
  BSSY B0, bb3
  F2FP.BF16.F32.PACK_AB R3, R13, R12
  EXIT
bb3:
  BRA bb3
"""


@pytest.mark.unit
def test_triton_spelling_is_normalized():
    stream = parse_stream(TRITON_SASS)
    assert stream.text() == EXPECTED_TEXT
    ins = list(stream.instructions())
    assert [i.mnemonic for i in ins][:6] == ["LDC", "S2R", "IMAD.SHL.U32", "ISETP.GE.AND", "LDG.E.128", "BRA"]
    assert ins[4].base == "LDG" and ins[4].operands.startswith("@!P6 ")
    assert ins[6].mnemonic == "HMMA.16816.F32.BF16" and ins[6].base == "HMMA"
    assert ins[0].line == 2  # lines of the source text, 1-based


@pytest.mark.unit
def test_nvdisasm_spelling_gives_the_same_stream_and_fingerprint():
    """Addresses, encodings, directives and nvdisasm's label numbers do not reach the fingerprint."""
    assert parse_stream(NVDISASM_SASS).text() == EXPECTED_TEXT
    assert parse_stream(NVDISASM_SASS).sha256() == parse_stream(TRITON_SASS).sha256()


@pytest.mark.unit
def test_label_numbering_does_not_move_the_fingerprint():
    renumbered = TRITON_SASS.replace("LBB1", "LBB7").replace("LBB0", "LBB1").replace("LBB7", "LBB0")
    assert renumbered != TRITON_SASS
    assert parse_stream(renumbered).sha256() == parse_stream(TRITON_SASS).sha256()
    # ...and neither do scheduling control bits nor spacing
    respaced = TRITON_SASS.replace("--:-:-:-:1\tISETP", "01:2:3:Y:f\t  ISETP").replace("R7, R7, 0x400", "R7 ,R7,   0x400")
    assert parse_stream(respaced).sha256() == parse_stream(TRITON_SASS).sha256()


@pytest.mark.unit
@pytest.mark.parametrize("change", [
    ("HMMA.16816.F32.BF16", "HMMA.1688.F32.BF16"),    # a modifier
    ("@!P6 LDG", "@P6 LDG"),                         # a predicate
    ("0x400, RZ", "0x800, RZ"),                      # an operand
    ("--:-:-:-:1\t@P6 BRA LBB1;", "--:-:-:-:1\t@P6 BRA LBB0;"),  # a branch target
])
def test_a_changed_instruction_moves_the_fingerprint(change):
    old, new = change
    changed = TRITON_SASS.replace(old, new)
    assert changed != TRITON_SASS
    assert parse_stream(changed).sha256() != parse_stream(TRITON_SASS).sha256()


@pytest.mark.unit
def test_blocks_start_at_labels_and_after_branches():
    stream = parse_stream(TRITON_SASS)
    assert [b.name for b in stream.blocks] == ["bb0", "bb1", "bb2", "bb3"]
    assert [len(b.instructions) for b in stream.blocks] == [6, 1, 3, 1]


@pytest.mark.unit
def test_bad_line_is_a_parse_error_naming_the_line():
    bad = TRITON_SASS.replace("04:-:-:-:2\tHMMA.16816.F32.BF16 R12, R4, R6, R12;", "--:-:-:-:2\thmma r12 r4")
    with pytest.raises(ParseError) as info:
        parse_stream(bad)
    assert info.value.field == "line 8"
    assert "line 8" in str(info.value)
    missing_semicolon = NVDISASM_SASS.replace("S2R R7, SR_CTAID.X ;", "S2R R7, SR_CTAID.X")
    with pytest.raises(ParseError) as info:
        parse_stream(missing_semicolon)
    assert info.value.field == "line 13"
    with pytest.raises(ParseError):
        parse_stream("Function:k\n\n")


@pytest.mark.unit
@pytest.mark.parametrize("mnemonic,cls", [
    ("HMMA.16816.F32.BF16", "tensor"), ("HGMMA.64x64x16.F32.BF16", "tensor"), ("IMMA.16832.S8.S8", "tensor"),
    ("QMMA.16832.F32.E4M3.E4M3", "tensor"), ("UTCHMMA", "tensor"), ("UTCQMMA.2CTA", "tensor"),
    ("LDG.E.128", "global"), ("STG.E", "global"), ("LDGSTS.E.BYPASS.128", "global"), ("RED.E.ADD.F32", "global"),
    ("LDGDEPBAR", "global"), ("LDS.128", "shared"), ("LDSM.16.M88.4", "shared"), ("STSM.16.M88.4", "shared"),
    ("UTMALDG.2D", "tma"), ("UBLKCP.S.G", "tma"), ("LDL.64", "local"), ("STL", "local"),
    ("LDC.64", "constant"), ("ULDC.64", "constant"), ("F2FP.BF16.F32.PACK_AB", "conversion"), ("I2F.U32", "conversion"),
    ("BRA", "branch"), ("EXIT", "branch"), ("BSSY", "branch"), ("WARPSYNC", "branch"), ("RET.REL.NODEC", "branch"),
    ("BAR.SYNC.DEFER_BLOCKING", "barrier"), ("SYNCS.ARRIVE.TRANS64.RED.A1T0", "barrier"), ("MEMBAR.GPU", "barrier"),
    ("WARPGROUP.ARRIVE", "barrier"), ("DEPBAR.LE", "barrier"),
    ("UIADD3", "uniform"), ("UMOV", "uniform"), ("USHF.R.U32.HI", "uniform"),
    ("FFMA", "alu"), ("IADD3", "alu"), ("IMAD.WIDE.U32", "alu"), ("LOP3.LUT", "alu"), ("SHF.R.S32.HI", "alu"),
    ("MOV", "alu"), ("MUFU.EX2", "alu"), ("HFMA2.MMA", "alu"), ("FMNMX", "alu"),
    ("S2R", "other"), ("NOP", "other"), ("SHFL.BFLY", "other"),
])
def test_classes(mnemonic, cls):
    assert classify(mnemonic) == cls
    assert cls in CLASSES


@pytest.mark.unit
def test_base_mnemonic():
    assert base_mnemonic("HMMA.16816.F32.BF16") == "HMMA"
    assert base_mnemonic("EXIT") == "EXIT"


@pytest.mark.unit
def test_resource_usage_parse():
    text = """
Resource usage:
 Common:
  GLOBAL:0
 Function other_kernel:
  REG:12 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:392 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function dot_kernel:
  REG:64 STACK:16 SHARED:1024 LOCAL:8 CONSTANT[0]:568 TEXTURE:0 SURFACE:0 SAMPLER:0
"""
    facts = parse_resource_usage(text, "dot_kernel")
    assert (facts["REG"], facts["STACK"], facts["SHARED"], facts["LOCAL"]) == (64, 16, 1024, 8)
    assert parse_resource_usage(text)["REG"] == 12
    with pytest.raises(ParseError):
        parse_resource_usage("Resource usage:\n Common:\n  GLOBAL:0\n")


# --- a real compile: no GPU, Triton's ptxas and cuobjdump ----------------------------------------

@pytest.fixture(scope="module")
def sm90_dot():
    triton = pytest.importorskip("triton")
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def dot_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)
        a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
        b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :])
        tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], tl.dot(a, b))

    source = ASTSource(dot_kernel, {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*fp32"}, {"BLOCK": 64}, {})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32))


def test_real_sm90_dot_has_tensor_instructions_and_registers(sm90_dot):
    from xisa.analyze.backends import NVIDIA
    from xisa.compile.tools.disassemble import machine_code

    shared = int(sm90_dot.metadata.shared)
    sass_text, cubin, usage = machine_code(NVIDIA, sm90_dot)   # nvdisasm and cuobjdump run here, not in the analysis
    assert "Function dot_kernel:" in usage and "REG:" in usage
    analysis = NVIDIA.analyze(sass_text, cubin, usage, shared_bytes=shared, num_warps=4, target=TARGETS["sm_90"])
    assert analysis.code_sha256 and ".text.dot_kernel" in analysis.code_sections
    assert analysis.isa == NVIDIA.isa
    assert analysis.classes.get("tensor", 0) > 0
    assert any(m.startswith("HGMMA.") for m in analysis.histogram), analysis.histogram
    assert analysis.base_histogram["HGMMA"] == analysis.classes["tensor"]
    assert analysis.instructions == sum(analysis.classes.values()) == sum(analysis.histogram.values())
    res = analysis.resources
    assert 0 < res["registers"] <= 255
    assert res["lds_bytes"] >= shared > 0
    assert res["local_bytes"] == 0 and res["stack_bytes"] == 0
    assert set(res) == set(NVIDIA.resources)       # the table names every key the analysis reports
    assert res["occupancy"] > 0
    assert len(analysis.sha256) == 64
    # nvdisasm's own listing of the same cubin gives the same fingerprint as Triton's spelling
    import subprocess
    import tempfile

    from triton import knobs
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(sm90_dot.asm["cubin"])
        handle.flush()
        listing = subprocess.run([knobs.nvidia.nvdisasm.path, "-c", handle.name], capture_output=True,
                                 text=True, check=True).stdout
    assert parse_stream(listing).sha256() == analysis.sha256


# --- occupancy: cudaOccMaxActiveBlocksPerMultiprocessor (cuda_occupancy.h) ------------------------
# sm_90: 65536 registers in 4 sub-partitions of 16384, allocated per warp in units of 256; 64 warps,
# 32 blocks, 233472 B shared per SM, 232448 B per block (opt-in) + 1024 B reserved per block,
# shared memory allocated in 128 B granules; at most 1024 threads (32 warps) per block.

@pytest.mark.unit
@pytest.mark.parametrize("regs,smem,warps,expected", [
    # 64 regs: 64*32 = 2048 per warp; 16384 // 2048 = 8 warps per partition -> 32 warps -> 8 blocks of 4;
    # smem (16384 + 1024) = 17408 -> 233472 // 17408 = 13 blocks; warps 64 // 4 = 16: min 8 blocks -> 32 warps.
    (64, 16384, 4, 32),
    # 40 regs: 1280 per warp; 16384 // 1280 = 12 per partition -> 48 warps -> 24 blocks of 2 -> 48 warps.
    # (one pool of 65536 // (1280*2) = 25 blocks would say 50: the partition split is what makes it 48.)
    (40, 0, 2, 48),
    # 79 regs: 2528 -> 2560 per warp; 16384 // 2560 = 6 per partition -> 24 warps -> 6 blocks of 4 -> 24 warps.
    (79, 0, 4, 24),
    # 32 regs, 45632 B: (45632 + 1024) = 46656 -> 46720 in 128 B granules; 233472 // 46720 = 4 blocks -> 16
    # warps (without the granule 233472 // 46656 = 5 blocks would say 20).
    (32, 45632, 4, 16),
    # the largest opt-in block: 232448 + 1024 = 233472 -> one block of 4 warps; one byte more cannot launch.
    (32, 232448, 4, 4),
    (32, 232449, 4, 0),
    # 32 warps of 32 regs: 1024 per warp, 16 per partition -> 64 warps -> 2 blocks of 32 = 64 (warp limit too).
    (32, 0, 32, 64),
    # 64 warps = 2048 threads > 1024 per block: cannot launch.
    (32, 0, 64, 0),
    # 128 regs x 16 warps: 4096 * 16 = 65536 fits a block exactly -> 1 block -> 16 warps.
    (128, 0, 16, 16),
    # 255 regs: 8160 -> 8192 per warp; 16 warps need 131072 > 65536 registers per block: cannot launch.
    (255, 0, 16, 0),
    # over the per-thread register limit
    (256, 0, 1, 0),
    # 16 regs x 1 warp: 512 per warp, 32 per partition -> 128 warps; warps 64 blocks; max 32 blocks -> 32 warps.
    (16, 0, 1, 32),
])
def test_cuda_occupancy_follows_the_calculator(regs, smem, warps, expected):
    assert cuda_warps_per_sm(TARGETS["sm_90"], regs=regs, smem_bytes=smem, num_warps=warps) == expected


@pytest.mark.unit
def test_cuda_occupancy_sm80_has_less_shared_memory():
    # sm_80: 167936 B per SM; 64 KiB + 1024 reserved = 66560 -> 167936 // 66560 = 2 blocks of 4 -> 8 warps
    # (sm_90's 233472 // 66560 = 3 blocks -> 12 warps).
    assert cuda_warps_per_sm(TARGETS["sm_80"], regs=32, smem_bytes=65536, num_warps=4) == 8
    assert cuda_warps_per_sm(TARGETS["sm_90"], regs=32, smem_bytes=65536, num_warps=4) == 12


@pytest.mark.unit
@pytest.mark.parametrize("target,blocks", [("sm_86", 16), ("sm_89", 24), ("sm_120", 24)])
def test_cuda_occupancy_of_the_48_warp_parts(target, blocks):
    t = TARGETS[target]
    # 1-warp blocks of 16 regs: registers allow 128 warps, the 48-warp limit 48 blocks; the block cap binds.
    assert cuda_warps_per_sm(t, regs=16, smem_bytes=0, num_warps=1) == blocks
    # 4-warp blocks of 32 regs: 64 warps by registers, 12 blocks by the 48-warp limit (sm_80: 64 warps).
    assert cuda_warps_per_sm(t, regs=32, smem_bytes=0, num_warps=4) == 48
    assert cuda_warps_per_sm(TARGETS["sm_80"], regs=32, smem_bytes=0, num_warps=4) == 64
    # 100 KiB per SM: one 64 KiB block (+1 KiB reserved); 99 KiB is the largest opt-in block, one byte
    # more cannot launch.
    assert cuda_warps_per_sm(t, regs=32, smem_bytes=65536, num_warps=4) == 4
    assert cuda_warps_per_sm(t, regs=32, smem_bytes=99 * 1024, num_warps=4) == 4
    assert cuda_warps_per_sm(t, regs=32, smem_bytes=99 * 1024 + 1, num_warps=4) == 0


@pytest.mark.unit
def test_a_permuted_register_allocation_is_another_fingerprint():
    """Renaming registers away would make `a*b + c` and `a*c + b` one program: every number is fingerprinted."""
    from xisa.analyze.sass import parse_stream

    fma = "Function:k\n--:-:-:-:1\tFFMA R11, R2, R5, R7;\n--:-:-:-:1\tEXIT;\n"
    swapped = fma.replace("R5, R7", "R6, R5")
    assert parse_stream(fma).sha256() != parse_stream(swapped).sha256()
    assert "FFMA R11, R2, R5, R7" in parse_stream(fma).text()


@pytest.mark.unit
def test_a_target_asking_for_a_normalization_rule_is_refused_naming_the_field():
    import pytest
    import yaml

    from xisa.errors import TargetError
    from xisa.spec.targets import parse_target

    data = yaml.safe_load((REPO / "targets" / "sm_100.yaml").read_text())
    assert "normalize" not in data
    parse_target(data, "targets/sm_100.yaml")
    for rules in (["register-numbers"], []):
        data["normalize"] = rules
        with pytest.raises(TargetError, match="normalize.*delete the `normalize:` line"):
            parse_target(data, "targets/sm_100.yaml")
