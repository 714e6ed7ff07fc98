"""Parse and normalize amdgcn assembly as LLVM's AMDGPU backend prints it.

The stream covers every function of the code object: the kernel (the function with the
`.amdhsa_kernel` descriptor) first, then each noinline callee in the order LLVM prints it.
Normalization is an ordered list of named rules (as in LLVM's update_llc_test_checks.py):
comments, `.loc`/`.file`/`.cfi` and every other directive LLVM prints, debug labels and padding
are dropped; block labels are renumbered by position within their function, so neither a moved
checkout nor a comment added above the kernel can move the fingerprint. Inline asm is the
exception: its directives are assembled after printing, so inside `;;#ASMSTART`..`;;#ASMEND` data
directives are stream entries, `.rept`/`.if` over literals are evaluated, and any other directive
stays verbatim and marks the cell (`opaque_asm`). The code object's bytes are hashed as well
(`codeobject.py`), so what the text cannot show still moves `code_sha256`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import yaml

from xisa.analyze import codeobject
from xisa.analyze.inline_asm import ASM_END, ASM_START, directive, expand_inline_asm
from xisa.analyze.lines import attributed_location, count_by_line, in_triton_library
from xisa.analyze.model import Analysis, Block, Function, Instruction, Stream, histograms, parse_stream_text
from xisa.errors import ParseError

# Encoding suffixes that name the same operation (VOP1/2/C as _e32, VOP3 as _e64, SDWA, DPP).
_SUFFIX = re.compile(r"(?:_e32|_e64|_sdwa|_dpp8|_dpp|_e64_dpp)$")
_LABEL_DEF = re.compile(r"^([.$A-Za-z_][\w.$]*):(?:\s|$)")
_LOCAL_LABEL = re.compile(r"\.L[A-Za-z_]+[\w.]*")
_BLOCK_LABEL = re.compile(r"^\.LBB\d+_\d+$")
_TERMINATORS = re.compile(r"^(s_branch|s_cbranch_\w+|s_setpc_b64|s_endpgm\w*|s_trap|s_swappc_b64|s_call_b64)$")
_SPACES = re.compile(r"\s+")

# Instruction classes: first matching rule wins, every instruction gets exactly one class.
CLASS_RULES: tuple[tuple[str, re.Pattern], ...] = (
    ("matrix", re.compile(r"^v_(mfma|smfmac|wmma|swmmac)")),
    ("conversion", re.compile(r"^v_cvt")),
    ("lds", re.compile(r"^ds_")),
    ("vmem", re.compile(r"^(buffer|global|flat|tbuffer|image)_")),
    ("scratch", re.compile(r"^scratch_")),
    ("smem", re.compile(r"^s_(load|buffer_load|store|buffer_store|scratch|dcache|atc|memtime|memrealtime|prefetch)")),
    ("branch", re.compile(r"^s_(branch|cbranch|setpc|swappc|call|getpc)")),
    ("wait", re.compile(r"^s_(waitcnt|wait_|sleep)")),
    ("barrier", re.compile(r"^s_barrier")),
    ("program", re.compile(r"^s_(endpgm|nop|trap|sethalt|setprio|sendmsg|code_end|set_inst_prefetch|delay_alu|clause)")),
    ("salu", re.compile(r"^s_")),
    ("valu", re.compile(r"^v_")),
    ("export", re.compile(r"^exp")),
    ("data", re.compile(r"^\.")),   # data directives inside inline asm (`.long 0xbf800000`)
)
CLASSES = tuple(name for name, _ in CLASS_RULES) + ("other",)


def base_mnemonic(mnemonic: str) -> str:
    previous = None
    while previous != mnemonic:
        previous, mnemonic = mnemonic, _SUFFIX.sub("", mnemonic)
    return mnemonic


def classify(mnemonic: str) -> str:
    for name, rule in CLASS_RULES:
        if rule.match(mnemonic):
            return name
    return "other"


def _strip_comment(line: str) -> str:
    # `;` starts a comment; amdgcn has no string literals inside instructions.
    cut = line.find(";")
    if cut >= 0:
        line = line[:cut]
    cut = line.find("//")
    if cut >= 0:
        line = line[:cut]
    return line.strip()


_TYPE_FUNCTION = re.compile(r"^\.type\s+([\w.$]+)\s*,\s*@function")
_AMDHSA_KERNEL = re.compile(r"^\.amdhsa_kernel\s+([\w.$]+)")


def _functions(lines: list[str]) -> tuple[str, list[str]]:
    """The kernel and the other functions of the code object, in the order they are printed.

    The kernel is the function with an `.amdhsa_kernel` descriptor: LLVM prints a noinline callee
    before it, so "the first function" would be the callee.
    """
    functions: list[str] = []
    kernels: list[tuple[str, int]] = []
    for index, line in enumerate(lines):
        text = line.strip()
        match = _TYPE_FUNCTION.match(text)
        if match and match.group(1) not in functions:
            functions.append(match.group(1))
            continue
        match = _AMDHSA_KERNEL.match(text)
        if match and all(match.group(1) != name for name, _ in kernels):
            kernels.append((match.group(1), index))
    if len(kernels) > 1:
        raise ParseError(f"more than one kernel ({kernels[0][0]}, {kernels[1][0]}): give one kernel's code object",
                         field=f"line {kernels[1][1] + 1}")
    if kernels:
        kernel = kernels[0][0]
    elif functions:
        kernel = functions[0]  # hand-written assembly without a descriptor
    else:
        raise ParseError("no kernel found: no `.type NAME,@function` or `.amdhsa_kernel NAME` line", field="line 1")
    return kernel, [name for name in functions if name != kernel]


# --- inline asm (`inline_asm.py`) expanded in the statement stream -----------------------------------

def _statements(lines: list[str], start: int, opaque: set[str]) -> Iterator[tuple[int, str, bool]]:
    """(line index, text without comment, from inline asm) from `start` on, inline asm expanded."""
    index = start
    while index < len(lines):
        if lines[index].strip().startswith(ASM_START):
            end = next((j for j in range(index + 1, len(lines)) if lines[j].strip().startswith(ASM_END)), None)
            if end is None:
                raise ParseError("inline asm `;;#ASMSTART` has no `;;#ASMEND`", field=f"line {index + 1}")
            body = [(j, text) for j in range(index + 1, end) if (text := _strip_comment(lines[j]))]
            yield from ((j, text, True) for j, text in expand_inline_asm(body, opaque))
            index = end + 1
            continue
        yield index, _strip_comment(lines[index]), False
        index += 1


# DWARF line information as LLVM prints it: `.file 1 "dir" "name.py"` (DWARF 5 adds `md5 0x...`; a one-string
# form names the file alone) and `.loc FILE LINE [COLUMN] [flags]`; line 0 means "no source line".
_FILE_DIRECTIVE = re.compile(r'^\.file\s+(\d+)\s+"((?:[^"\\]|\\.)*)"(?:\s+"((?:[^"\\]|\\.)*)")?')
_LOC_DIRECTIVE = re.compile(r"^\.loc\s+(\d+)\s+(\d+)\b")


# LLVM's comment after a `.loc` names the inlining chain: `; standard.py:43:12 @[ decode.py:60:25 @[ ... ] ]`.
_INLINED_AT = re.compile(r"([^\s\[\]@;]+):(\d+):\d+")


def source_files(lines: list[str]) -> dict[str, str]:
    """The `.file` table: number -> path as LLVM wrote it (directory and name joined, unless the name is absolute)."""
    files: dict[str, str] = {}
    for line in lines:
        match = _FILE_DIRECTIVE.match(line.strip())
        if match:
            number, first, second = match.groups()
            path = first if second is None else (second if second.startswith("/") or not first
                                                 else f"{first.rstrip('/')}/{second}")
            files[number] = path.replace('\\"', '"').replace("\\\\", "\\")
    return files


def source_location(text: str, files: dict[str, str], comment: str = "") -> str | None:
    """`FILE:LINE` a `.loc` directive sets ("" for line 0 or an unknown file), None when `text` is no `.loc`.
    `comment`, LLVM's comment on that line, gives the lines it was inlined at (`lines.attributed_location`)."""
    match = _LOC_DIRECTIVE.match(text)
    if match is None:
        return None
    number, line = match.group(1), int(match.group(2))
    if not line or number not in files:
        return ""
    if not in_triton_library(files[number]):   # the usual case: the chain cannot change the answer
        return f"{files[number]}:{line}"
    frames = [(files[number], line)]
    _, inlined, chain = comment.partition("@[")
    if inlined:   # the callers, named as the `.file` table names its files (by name)
        by_name = {path.rsplit("/", 1)[-1]: path for path in files.values()}
        frames += [(by_name.get(name, name), int(at)) for name, at in _INLINED_AT.findall(chain)]
    return attributed_location(frames)


def _parse_function(lines: list[str], name: str, opaque: set[str],
                    files: dict[str, str] | None = None) -> list[Block]:
    """One function's instructions by basic block, labels renumbered within the function; each instruction
    carries the source location of the last `.loc` before it (`Instruction.loc`)."""
    files = files or {}
    loc = ""
    seen_locs: dict[str, str | None] = {}
    start = None
    for index, line in enumerate(lines):
        if line.startswith(f"{name}:"):
            start = index + 1
            break
    if start is None:
        raise ParseError(f"function {name!r} has no `{name}:` label", field="line 1")
    blocks: list[Block] = [Block("bb0")]
    label_to_block: dict[str, str] = {}
    end_seen = False
    for index, text, from_asm in _statements(lines, start, opaque):
        if not text:
            continue
        label = _LABEL_DEF.match(text)
        if label:
            symbol = label.group(1)
            if symbol.startswith(".Lfunc_end"):
                end_seen = True
                break
            if _BLOCK_LABEL.match(symbol):
                if blocks[-1].instructions:
                    blocks.append(Block(f"bb{len(blocks)}"))
                label_to_block[symbol] = blocks[-1].name
            text = text[label.end():].strip()
            if not text:
                continue
        if text.startswith("."):
            if not from_asm:
                if text.startswith(".loc"):
                    raw = lines[index]
                    if raw not in seen_locs:   # a kernel repeats few distinct `.loc` lines many times
                        seen_locs[raw] = source_location(text, files, raw.partition(";")[2])
                    loc = seen_locs[raw] if seen_locs[raw] is not None else loc
                continue  # LLVM's own directives: .loc, .file, .cfi_*, .p2align, .section ...
            word, argument = directive(text)
            blocks[-1].instructions.append(Instruction(word, word, _normalize_operands(argument), index + 1, loc=loc))
            continue
        parts = text.split(None, 1)
        mnemonic = parts[0]
        if not re.match(r"^[a-z_][a-z0-9_.]*$", mnemonic):
            raise ParseError(f"cannot parse instruction {text[:60]!r}", field=f"line {index + 1}")
        blocks[-1].instructions.append(instruction(mnemonic, _normalize_operands(parts[1] if len(parts) > 1 else ""),
                                                   index + 1, loc=loc))
        if _TERMINATORS.match(mnemonic):
            blocks.append(Block(f"bb{len(blocks)}"))
    if not end_seen:
        raise ParseError(f"function {name!r} has no `.Lfunc_end` label: truncated assembly?",
                         field=f"line {len(lines)}")
    blocks = [b for b in blocks if b.instructions]
    # Renumber: block labels by the block they start, other local labels by first use.
    renamed = {}
    for block_index, block in enumerate(blocks):
        old = block.name
        block.name = f"bb{block_index}"
        renamed[old] = block.name
    labels = {symbol: renamed.get(bname, bname) for symbol, bname in label_to_block.items()}
    others: dict[str, str] = {}

    def rename(match: re.Match) -> str:
        symbol = match.group(0)
        if symbol in labels:
            return labels[symbol]
        return others.setdefault(symbol, f".L{len(others)}")

    for block in blocks:
        block.instructions = [replace(i, operands=_LOCAL_LABEL.sub(rename, i.operands)) for i in block.instructions]
    return blocks


def instruction(mnemonic: str, operands: str, line: int, loc: str = "") -> Instruction:
    """An instruction from its mnemonic and normalized operands: the one constructor for assembly and
    for a stream read back from its text (`stream_from_text`); `loc` its source location, if known."""
    second = ""
    if " :: " in operands:  # VOPD: one instruction word, two operations
        tail = operands.split(" :: ", 1)[1].split(None, 1)
        second = tail[0] if tail and re.match(r"^v_[a-z0-9_]+$", tail[0]) else ""
    return Instruction(mnemonic, base_mnemonic(mnemonic), operands, line, second,
                       base_mnemonic(second) if second else "", loc=loc)


def stream_from_text(text: str) -> Stream:
    """The stream of a normalized stream text (a golden's `TARGET.isa`)."""
    return parse_stream_text(text, instruction)


# --- control flow and memory, for the loop analysis (`xisa.analyze.loops`) ---------------------------
_FLOW = (
    (re.compile(r"^s_branch$"), "jump"),                          # unconditional: its target only
    (re.compile(r"^s_cbranch_"), "branch"),                       # its target or the next block
    (re.compile(r"^(s_endpgm\w*|s_setpc_b64)$"), "stop"),         # end of program, return (indirect)
    (re.compile(r"^(s_swappc_b64|s_call_b64)$"), "call"),          # another function, then the next block
)


def flow(ins: Instruction) -> str:
    """How control leaves `ins`: next | jump | branch | stop | call (`xisa.analyze.loops.FLOWS`)."""
    for rule, kind in _FLOW:
        if rule.match(ins.mnemonic):
            return kind
    return "next"


# LLVM spills through the private segment: `scratch_*` where flat scratch is on (gfx940+, gfx11+), else
# MUBUF on the scratch resource the kernel receives in s[0:3] with no VGPR address (`off`):
# `buffer_store_dword v1, off, s[0:3], 0 offset:8` (AMDGPU ABI, private segment buffer). Triton's own
# buffer ops always address through a VGPR (`offen`).
_SCRATCH_MUBUF = re.compile(r"^[^,]+, off, s\[0:3\],")


def scratch_access(ins: Instruction) -> str | None:
    """`load` or `store` where `ins` reads or writes private (scratch) memory, else None."""
    if ins.base.startswith("scratch_") or (ins.base.startswith("buffer_") and _SCRATCH_MUBUF.match(ins.operands)):
        return "store" if "_store" in ins.base else "load"
    return None


def _normalize_operands(text: str) -> str:
    text = _SPACES.sub(" ", text).strip()
    return ", ".join(op.strip() for op in text.split(",")) if text else ""


def _parse(asm: str) -> tuple[str, Stream, list[str]]:
    lines = asm.splitlines()
    kernel, callees = _functions(lines)
    opaque: set[str] = set()
    files = source_files(lines)
    stream = Stream(_parse_function(lines, kernel, opaque, files),
                    [Function(name, _parse_function(lines, name, opaque, files)) for name in callees])
    return kernel, stream, sorted(opaque)


def parse_stream(asm: str) -> tuple[str, Stream]:
    """The kernel's name and the instruction stream of the code object: the kernel's basic blocks,
    then those of every function it calls (noinline helpers), each under its name."""
    kernel, stream, _ = _parse(asm)
    return kernel, stream


def parse_metadata(asm: str) -> dict[str, Any]:
    """The kernel's resource facts: its `.amdhsa_*` directives, its `.set` symbols, its `; Kernel info:`
    comments and its amdhsa.kernels entry. A callee's `; Function info:` and `.set` lines are not the
    kernel's: LLVM folds a callee's register and stack use into the kernel's own figures."""
    facts: dict[str, Any] = {"amdhsa": {}, "info": {}, "kernel": {}, "set": {}}
    lines = asm.splitlines()
    try:
        kernel, _ = _functions(lines)
    except ParseError:
        kernel = None
    symbol = re.escape(kernel) if kernel else r"[\w.$]*"
    set_line = re.compile(rf"^\.set\s+\.?L?{symbol}\.(num_vgpr|num_agpr|numbered_sgpr|private_seg_size)"
                          r"\s*,\s*(\d+)\s*$")
    in_meta = False
    in_callee_info = False
    meta_lines: list[str] = []
    meta_start = 0
    for index, line in enumerate(lines):
        text = line.strip()
        if text == ".amdgpu_metadata":
            in_meta, meta_start = True, index + 1
            continue
        if text == ".end_amdgpu_metadata":
            in_meta = False
            continue
        if in_meta:
            meta_lines.append(line)
            continue
        if re.match(r"^;\s*(Function|Kernel) info:", text):
            in_callee_info = text.split()[1] == "Function"
            continue
        match = re.match(r"^\.(amdhsa_\w+)\s+(-?\d+)\s*$", text)
        if match:
            facts["amdhsa"][match.group(1)] = int(match.group(2))
            continue
        match = set_line.match(text)
        if match:
            facts["set"][match.group(1)] = int(match.group(2))
            continue
        match = re.match(r"^;\s*(\w+)\s*:\s*(-?\d+)\b", text)
        if match and not in_callee_info:
            facts["info"].setdefault(match.group(1), int(match.group(2)))
    if meta_lines:
        try:
            document = yaml.safe_load("\n".join(meta_lines))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = meta_start + (mark.line if mark else 0) + 1
            raise ParseError("amdgpu_metadata block is not valid YAML", field=f"line {line}") from None
        kernels = (document or {}).get("amdhsa.kernels") if isinstance(document, dict) else None
        if isinstance(kernels, list):
            entries = [k for k in kernels if isinstance(k, dict)]
            named = [k for k in entries if k.get(".name") == kernel]
            if named or entries:
                facts["kernel"] = (named or entries)[0]
    return facts


def _first_int(*values: Any) -> int:
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def resources(asm: str, *, lds_bytes: int) -> dict[str, Any]:
    facts = parse_metadata(asm)
    kernel, info, amdhsa, sets = facts["kernel"], facts["info"], facts["amdhsa"], facts["set"]
    agprs = _first_int(info.get("NumAgprs"), sets.get("num_agpr"), kernel.get(".agpr_count"))
    # Architectural VGPRs only: on gfx90a+ the metadata's .vgpr_count is VGPRs and AGPRs together.
    vgprs = _first_int(info.get("NumVgprs"), sets.get("num_vgpr"),
                       kernel[".vgpr_count"] - agprs if isinstance(kernel.get(".vgpr_count"), int) else None,
                       amdhsa.get("amdhsa_next_free_vgpr"))
    sgprs = _first_int(kernel.get(".sgpr_count"), info.get("TotalNumSgprs"), amdhsa.get("amdhsa_next_free_sgpr"))
    scratch = _first_int(kernel.get(".private_segment_fixed_size"), info.get("ScratchSize"),
                         amdhsa.get("amdhsa_private_segment_fixed_size"))
    static_lds = _first_int(kernel.get(".group_segment_fixed_size"), amdhsa.get("amdhsa_group_segment_fixed_size"))
    return {
        "vgprs": vgprs,
        "agprs": agprs,
        "sgprs": sgprs,
        "vgpr_spills": _first_int(kernel.get(".vgpr_spill_count")),
        "sgpr_spills": _first_int(kernel.get(".sgpr_spill_count")),
        "scratch_bytes": scratch,
        # Triton's LDS is dynamic: the asm says 0, the compiled metadata knows.
        "lds_bytes": max(lds_bytes, static_lds),
        "kernarg_bytes": _first_int(kernel.get(".kernarg_segment_size"), amdhsa.get("amdhsa_kernarg_size")),
        "wavefront_size": _first_int(kernel.get(".wavefront_size")),
        "llvm_occupancy": info.get("Occupancy"),
    }


def analyze_amdgcn(asm: str, *, lds_bytes: int = 0, code_object: bytes | None = None) -> tuple[Analysis, str]:
    """(analysis without occupancy, kernel name). Occupancy needs the target: see `occupancy`.

    `code_object` (the hsaco) ties the fingerprint to the bytes the hardware loads (`code_sha256`)."""
    name, stream, opaque = _parse(asm)
    raw, base = histograms(stream)
    classes = Counter(classify(ins.mnemonic) for ins in stream.instructions())
    text = stream.text()
    analysis = Analysis(
        isa="amdgcn", sha256=stream.sha256(), instructions=sum(raw.values()),
        blocks=sum(1 for _ in stream.all_blocks()),
        histogram=raw, base_histogram=base, classes={c: classes.get(c, 0) for c in CLASSES if classes.get(c)},
        resources=resources(asm, lds_bytes=lds_bytes), stream_text=text,
        opaque_asm=opaque, lines=count_by_line(stream), locs=[ins.loc for ins in stream.instructions()],
    )
    if code_object is not None:
        codeobject.fingerprint(analysis, code_object)
    return analysis, name
