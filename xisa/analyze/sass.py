"""Parse and normalize NVIDIA SASS, and read a cubin's resource usage as cuobjdump prints it.

Three spellings of the same machine code are accepted:

- Triton's `compiled.asm["sass"]` (`triton.tools.disasm`): a `Function:NAME` line, then one
  `CTRL<TAB>INSTR ;` line per instruction (CTRL = the scheduling bits `wait:read:write:yield:stall`
  decoded from the encoding), `LBBn:` labels, and `BRA LBBn;` targets;
- `nvdisasm -c` output: directives (`.headerflags`, `.section`, `.type` ...), `//---` section
  comments, `/*0040*/` addresses, `` BRA `(.L_x_0) `` targets, `.L_x_N:` labels;
- `cuobjdump -sass` output: `code for sm_90` / `Function : NAME` headers, addresses and
  `/* 0x... */` encoding words (each instruction's second word on a line of its own).

Normalization is an ordered list of named rules (as in LLVM's update_llc_test_checks.py, and as
`amdgcn.py` does): comments, addresses, encodings, scheduling control bits, headers and directives
are dropped; branch-target labels and in-function code addresses (`BSSY B0, 0x3f0`) are renumbered
by the block they start, so neither nvdisasm's label numbering nor the spelling picks the
fingerprint; trailing `NOP` padding (the function is padded to 128 bytes) is dropped. The three
spellings of one cubin give the same stream and the same sha256.

Pure: text in, analysis out. Running nvdisasm and cuobjdump on a cubin is `xisa.compile.tools.disassemble`'s.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from xisa.analyze import codeobject
from xisa.analyze.lines import attributed_location, count_by_line
from xisa.analyze.model import Analysis, Block, Instruction, Stream, histograms, parse_stream_text
from xisa.errors import ParseError

# Every SASS instruction from Volta on is 128 bits: an in-function code address is index * 16.
INSTRUCTION_BYTES = 16

# --- normalization rules, applied in this order to each line -------------------------------------
_NORMALIZE: tuple[tuple[str, re.Pattern, str], ...] = (
    ("block-comment", re.compile(r"/\*.*?\*/"), " "),          # /*0040*/ addresses, /* 0x... */ encodings
    ("line-comment", re.compile(r"//.*$"), ""),                # //------ .text.k ------ headers
    ("triton-ctrl", re.compile(r"^\s*(?:\d\d|--):[0-7-]:[0-7-]:[Y-]:[0-9a-f]\s+"), ""),  # disasm.parseCtrl
)
_HEADER = re.compile(
    r"^(?:Function\s*:\s*(?P<fn>[\w.$]+)"            # Triton `Function:k`, cuobjdump `Function : k`
    r"|code for sm_\w+|Fatbin \w+ code:|=+|arch = \w+|code version = .*|host = \w+|compile_size = \w+"
    r"|producer = .*|identifier = .*|ptxasOptions = .*)\s*$"
)
_LABEL_DEF = re.compile(r"^([.$A-Za-z_][\w.$]*):")
_PREDICATE = re.compile(r"^@!?U?P(?:T|\d+)\b")
_OPCODE = re.compile(r"^[A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*$")
# Label references: nvdisasm writes `(.L_x_3)` in backquotes, Triton `LBB3`.
_LABEL_REF = re.compile(r"`\(([.$A-Za-z_][\w.$]*)\)|\b(LBB\d+)\b|(\.L_x_\d+)\b")
_HEX_TARGET = re.compile(r"(?<![\w.+\-\[])0x([0-9a-fA-F]+)\s*$")
_SPACES = re.compile(r"\s+")

# Opcodes whose last operand may be a code address inside the function (relative targets; not
# WARPSYNC masks, BPT codes or .ABS calls).
_CODE_TARGET_OPS = frozenset({"BRA", "BSSY", "CALL"})
# Opcodes after which a basic block ends (a predicated one too: the fall-through starts a block).
_TERMINATORS = frozenset({"BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "KILL"})

# Instruction classes: first matching rule wins on the base opcode; every instruction gets one class.
CLASS_RULES: tuple[tuple[str, re.Pattern], ...] = (
    # mma.sync (HMMA/IMMA/DMMA/BMMA, QMMA fp8 and OMMA fp4 on sm_89+/sm_100+), wgmma (HGMMA,
    # IGMMA, QGMMA, BGMMA on sm_90a) and tcgen05.mma (UTCHMMA, UTCQMMA, UTCOMMA, UTCIMMA ...).
    ("tensor", re.compile(r"^(?:[HIDBQO]MMA|[HIQBO]GMMA|UTC\w*MMA\w*|MXMMA|OMMA\w*)$")),
    ("tma", re.compile(r"^(?:UTMA\w+|UBLK\w+)$")),                  # cp.async.bulk[.tensor] and prefetches
    ("global", re.compile(r"^(?:LDG\w*|STG|ATOMG|ATOM|RED|REDG|LDGSTS|LDGDEPBAR|LD|ST|CCTL\w*)$")),
    ("shared", re.compile(r"^(?:LDS|STS|LDSM|STSM|ATOMS|STAS|REDAS|LDSMT?)$")),
    ("local", re.compile(r"^(?:LDL|STL)$")),
    ("constant", re.compile(r"^(?:LDC|ULDC|LDCU)$")),
    ("conversion", re.compile(r"^(?:F2F|F2I|I2F|F2FP|I2FP|F2IP|I2I|I2IP|FRND)$")),
    ("branch", re.compile(r"^(?:BRA|BRX|JMP|JMX|CALL|RET|EXIT|BSSY|BSYNC|BREAK|BMOV|WARPSYNC|KILL)$")),
    ("barrier", re.compile(r"^(?:BAR|MEMBAR|DEPBAR|SYNCS|ERRBAR|CGAERRBAR|FENCE|WARPGROUP|ARRIVES|UCGABAR\w*"
                           r"|UTCBAR|ACQBULK|ACQSHMINIT)$")),
    ("uniform", re.compile(r"^U[A-Z0-9_]+$")),
    ("alu", re.compile(
        r"^(?:F(?:ADD|ADD2|MUL|MUL2|FMA|FMA2|MNMX|MNMX3|SET|SETP|SEL|CHK|SWZADD|ADD32I|MUL32I|FMA32I)"
        r"|H(?:ADD2|MUL2|FMA2|MNMX2|SET2|SETP2|ADD2_32I|MUL2_32I|FMA2_32I)|MUFU"
        r"|D(?:ADD|MUL|FMA|SETP|MNMX)"
        r"|I(?:ADD|ADD3|ADD32I|MAD|MAD32I|MADSP|MUL|MNMX|SCADD|SETP|ABS|DP|DP4A|DE)"
        r"|VIADD|VIMNMX|VIMNMX3|VHMNMX|VABSDIFF|VABSDIFF4"
        r"|LEA|LOP|LOP3|LOP32I|SHF|SHL|SHR|POPC|FLO|BREV|BMSK|SGXT|PRMT|SEL|MOV|MOV32I|CS2R|R2P|P2R"
        r"|PLOP3|PSETP|LEPC|VIADDMNMX)$")),
)
CLASSES = tuple(name for name, _ in CLASS_RULES) + ("other",)


def base_mnemonic(mnemonic: str) -> str:
    """`HMMA.16816.F32.BF16` -> `HMMA`: the opcode before its first modifier."""
    return mnemonic.split(".", 1)[0]


def classify(mnemonic: str) -> str:
    base = base_mnemonic(mnemonic)
    for name, rule in CLASS_RULES:
        if rule.match(base):
            return name
    return "other"


def _normalize_line(raw: str) -> str:
    text = raw
    for _name, rule, replacement in _NORMALIZE:
        text = rule.sub(replacement, text)
    return text.strip()


def _operands(text: str) -> str:
    text = _SPACES.sub(" ", text).strip()
    return ", ".join(op.strip() for op in text.split(",")) if text else ""


class _Raw:
    """One instruction before labels are resolved."""

    __slots__ = ("mnemonic", "operands", "line", "index", "loc")

    def __init__(self, mnemonic: str, operands: str, line: int, index: int, loc: str = ""):
        self.mnemonic, self.operands, self.line, self.index, self.loc = mnemonic, operands, line, index, loc


# nvdisasm's line information (`-gi`, from the cubin's .debug_line): `//## File "/path/k.py", line 12` before the
# instructions of that line, an inlined one with ` inlined at "...", line 30` and its caller's on the next line
# (`lines.attributed_location` picks the frame). Line 0 means no source line. Comments: dropped from the stream
# by rule line-comment.
_LINE_INFO = re.compile(r'^\s*//## File "')
_LINE_FRAME = re.compile(r'"((?:[^"\\]|\\.)*)", line (\d+)')


def _scan(sass: str) -> tuple[list[_Raw], dict[str, int]]:
    """Instructions in order, and each label's position (index of the instruction it precedes)."""
    instructions: list[_Raw] = []
    labels: dict[str, int] = {}
    functions: list[str] = []
    loc, frames = "", []
    for number, raw in enumerate(sass.splitlines(), start=1):
        if _LINE_INFO.match(raw):
            # `-gi`: a run of lines, each `"A", line 7 inlined at "B", line 15`, then B's own: one chain
            for path, line in _LINE_FRAME.findall(raw):
                if not frames or frames[-1] != (path, int(line)):
                    frames.append((path, int(line)))
            continue
        if frames:
            loc, frames = attributed_location(frames), []
        text = _normalize_line(raw)
        if not text:
            continue
        header = _HEADER.match(text)
        if header:
            if header.group("fn"):
                functions.append(header.group("fn"))
                if len(functions) > 1:
                    raise ParseError(f"more than one function ({functions[0]}, {functions[1]}): "
                                     "give one kernel's SASS", field=f"line {number}")
            continue
        label = _LABEL_DEF.match(text)
        if label:
            labels.setdefault(label.group(1), len(instructions))
            text = text[label.end():].strip()
            if not text:
                continue
        if text.startswith("."):
            continue  # directives: .headerflags .elftype .section .sectionflags .align .global .type .size .other
        if not text.endswith(";"):
            raise ParseError(f"cannot parse SASS line {text[:60]!r}: an instruction ends with ';'",
                             field=f"line {number}")
        body = text[:-1].strip()
        predicate = ""
        match = _PREDICATE.match(body)
        if match:
            predicate, body = match.group(0), body[match.end():].strip()
        parts = body.split(None, 1)
        if not parts or not _OPCODE.match(parts[0]):
            raise ParseError(f"cannot parse SASS instruction {text[:60]!r}", field=f"line {number}")
        operands = _operands(parts[1]) if len(parts) > 1 else ""
        if predicate:
            operands = f"{predicate} {operands}".rstrip()
        instructions.append(_Raw(parts[0], operands, number, len(instructions), loc))
    return instructions, labels


def _code_target(ins: _Raw, count: int) -> int | None:
    """The instruction index a hex branch target names, if it is a code address inside the function."""
    base = base_mnemonic(ins.mnemonic)
    if base not in _CODE_TARGET_OPS or ".ABS" in ins.mnemonic:
        return None
    match = _HEX_TARGET.search(ins.operands)
    if not match:
        return None
    address = int(match.group(1), 16)
    if address % INSTRUCTION_BYTES or not 0 <= address // INSTRUCTION_BYTES <= count:
        return None
    return address // INSTRUCTION_BYTES


def parse_stream(sass: str) -> Stream:
    """The kernel's instruction stream by basic block, labels and code addresses renumbered."""
    instructions, labels = _scan(sass)
    if not instructions:
        raise ParseError("no SASS instructions found", field="line 1")
    # Rule trailing-nop-padding: ptxas pads the function with NOPs after its last real instruction.
    while len(instructions) > 1 and instructions[-1].mnemonic == "NOP":
        instructions.pop()
    count = len(instructions)
    labels = {name: min(index, count) for name, index in labels.items()}

    # Block starts: position 0, every referenced label, every in-function code target, after terminators.
    starts = {0}
    targets: dict[int, int] = {}
    for ins in instructions:
        for match in _LABEL_REF.finditer(ins.operands):
            name = next(g for g in match.groups() if g)
            if name in labels:
                starts.add(labels[name])
        target = _code_target(ins, count)
        if target is not None:
            targets[ins.index] = target
            starts.add(target)
        if base_mnemonic(ins.mnemonic) in _TERMINATORS:
            starts.add(ins.index + 1)
    # A label nobody references still starts a block (nvdisasm prints labels only where needed).
    starts.update(index for name, index in labels.items() if name.startswith((".L_x_", "LBB")))
    ordered = sorted(s for s in starts if s < count)
    # Symbols at the entry (`kernel:`, `.text.kernel:` in nvdisasm's listing) are names, not branch targets.
    entry = {name for name, index in labels.items() if index == 0 and not name.startswith((".L_x_", "LBB"))}
    block_of = {start: f"bb{n}" for n, start in enumerate(ordered)}

    def block_name(index: int) -> str:
        return block_of.get(index, f"bb{len(ordered)}" if index >= count else f"@{index}")

    def rename(match: re.Match) -> str:
        name = next(g for g in match.groups() if g)
        if name in entry:
            return "0x0"  # `(kernel)` in RET.REL: the function's start, which cuobjdump spells 0x0
        if name not in labels:
            return match.group(0)  # a symbol outside the function: keep it
        return block_name(labels[name])

    blocks: list[Block] = []
    for ins in instructions:
        if ins.index in block_of:
            blocks.append(Block(block_of[ins.index]))
        operands = _LABEL_REF.sub(rename, ins.operands)
        if ins.index in targets:
            operands = _HEX_TARGET.sub(block_name(targets[ins.index]), operands)
        blocks[-1].instructions.append(instruction(ins.mnemonic, operands, ins.line, loc=ins.loc))
    return Stream(blocks)


def instruction(mnemonic: str, operands: str, line: int, loc: str = "") -> Instruction:
    """An instruction from its opcode and normalized operands: the one constructor for a listing and for a
    stream read back from its text (`stream_from_text`); `loc` its source location, if known."""
    return Instruction(mnemonic, base_mnemonic(mnemonic), operands, line, loc=loc)


def stream_from_text(text: str) -> Stream:
    """The stream of a normalized stream text (a golden's `TARGET.isa`)."""
    return parse_stream_text(text, instruction)


# --- control flow and memory, for the loop analysis (`xisa.analyze.loops`) ---------------------------
# A guard is written first among the operands (`BRA @!P4 bb3`); `@PT` always holds, `@!PT` never.
# A uniform branch names its predicate as
# an operand instead (`BRA.U !UP0, bb3`): a conditional jump as well.
_GUARD = re.compile(r"^@(!?)(U?P(?:T|\d+)?)(?![\w])")
_PREDICATE_OPERAND = re.compile(r"(?:^|, )!?U?P\d*, ")
_FLOW = {"BRA": "jump", "JMP": "jump", "BRX": "stop", "JMX": "stop",   # BRX/JMX: indirect, targets unknown
         "RET": "stop", "EXIT": "stop", "KILL": "stop", "CALL": "call"}


def flow(ins: Instruction) -> str:
    """How control leaves `ins`: next | jump | branch | stop | call (`xisa.analyze.loops.FLOWS`). A guarded
    jump or exit falls through when its guard fails."""
    kind = _FLOW.get(ins.base, "next")
    guard = _GUARD.match(ins.operands)
    if kind == "next":
        return kind
    if not guard:
        # `BRA.DIV UR4, bb5`: taken only where the warp diverged
        conditional = _PREDICATE_OPERAND.search(ins.operands) or ".DIV" in ins.mnemonic
        return "branch" if kind == "jump" and conditional else kind
    negated, predicate = guard.groups()
    if predicate in ("PT", "UPT"):
        return "next" if negated else kind
    return {"jump": "branch", "stop": "next"}.get(kind, kind)


def scratch_access(ins: Instruction) -> str | None:
    """`load` or `store` where `ins` reads or writes local memory (per-thread: spills and stack), else None."""
    return {"LDL": "load", "STL": "store"}.get(ins.base)


# --- resources: what cuobjdump --dump-resource-usage prints -------------------------------------

_RESOURCE_FN = re.compile(r"^\s*Function\s+([^\s:]+)\s*:\s*$")
_RESOURCE_KV = re.compile(r"([A-Z_]+(?:\[\d+\])?):(\d+)")


def parse_resource_usage(text: str, kernel: str | None = None) -> dict[str, int]:
    """`REG:79 STACK:0 SHARED:1024 LOCAL:0 ...` of the kernel's Function block (the first one if unnamed)."""
    current = None
    found: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        match = _RESOURCE_FN.match(line)
        if match:
            current = match.group(1)
            continue
        if current and "REG:" in line:
            found.setdefault(current, {k: int(v) for k, v in _RESOURCE_KV.findall(line)})
    if not found:
        raise ParseError("cuobjdump --dump-resource-usage printed no `Function NAME:` block with REG:",
                         field="line 1")
    facts = found.get(kernel) if kernel else None
    if facts is None:
        facts = next(iter(found.values()))
    missing = [k for k in ("REG", "STACK", "SHARED", "LOCAL") if k not in facts]
    if missing:
        raise ParseError(f"cuobjdump resource usage lacks {', '.join(missing)}", field="line 1")
    return facts


_ENTRY_TYPE = re.compile(r"^\.type\s+([\w.$]+)\s*,\s*@function")


def _kernel_name(sass: str) -> str | None:
    """The function a listing names: Triton's and cuobjdump's `Function` header, nvdisasm's `.type K,@function`."""
    for line in sass.splitlines():
        match = _HEADER.match(line.strip())
        if match and match.group("fn"):
            return match.group("fn")
        match = _ENTRY_TYPE.match(line.strip())
        if match:
            return match.group(1)
    return None


def resources(usage: dict[str, int], *, shared_bytes: int) -> dict[str, Any]:
    return {
        "registers": usage["REG"],
        "stack_bytes": usage["STACK"],
        "local_bytes": usage["LOCAL"],
        # Triton's shared memory is dynamic (`.extern .shared global_smem[]`): the metadata knows it.
        "lds_bytes": max(shared_bytes, usage["SHARED"]),
        "llvm_occupancy": None,
    }


def analyze_sass(sass: str, resource_usage: str, *, shared_bytes: int, cubin: bytes | None = None) -> Analysis:
    """Analysis without occupancy (the caller adds it from the target: see `cuda_warps_per_sm`).

    `resource_usage` is what `cuobjdump --dump-resource-usage` prints for the cubin; `cubin` (its bytes) gives the
    code object's fingerprint (`codeobject.py`: constant banks and launch attributes the SASS text does not show).
    The stream keeps every register number: renaming them away would make `a*b + c` and `a*c + b` one program."""
    stream = parse_stream(sass)
    raw, base = histograms(stream)
    classes = Counter(classify(ins.mnemonic) for ins in stream.instructions())
    usage = parse_resource_usage(resource_usage, _kernel_name(sass))
    analysis = Analysis(
        isa="sass", sha256=stream.sha256(), instructions=sum(raw.values()), blocks=len(stream.blocks),
        histogram=raw, base_histogram=base, classes={c: classes.get(c, 0) for c in CLASSES if classes.get(c)},
        resources=resources(usage, shared_bytes=shared_bytes), stream_text=stream.text(),
        lines=count_by_line(stream),
        locs=[ins.loc for ins in stream.instructions()],
    )
    if cubin is not None:
        codeobject.fingerprint(analysis, cubin)
    return analysis
