"""Parse and normalize amdgcn assembly as LLVM's AMDGPU backend prints it.

Normalization is an ordered list of named rules (as in LLVM's update_llc_test_checks.py):
comments, `.loc`/`.file`/`.cfi` and every other directive, debug labels and padding are dropped;
block labels are renumbered by position, so neither a moved checkout nor a comment added above the
kernel can move the fingerprint.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import yaml

from xisa.analyze.model import Analysis, Block, Instruction, Stream, histograms
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


def _kernel_name(lines: list[str]) -> str:
    for line in lines:
        text = line.strip()
        match = re.match(r"^\.type\s+([\w.$]+)\s*,\s*@function", text)
        if match:
            return match.group(1)
    for line in lines:
        match = re.match(r"^\.amdhsa_kernel\s+([\w.$]+)", line.strip())
        if match:
            return match.group(1)
    raise ParseError("no kernel found: no `.type NAME,@function` or `.amdhsa_kernel NAME` line", field="line 1")


def parse_stream(asm: str) -> tuple[str, Stream]:
    """The kernel's name and its instruction stream by basic block."""
    lines = asm.splitlines()
    name = _kernel_name(lines)
    start = None
    for index, line in enumerate(lines):
        if line.startswith(f"{name}:"):
            start = index + 1
            break
    if start is None:
        raise ParseError(f"kernel {name!r} has no `{name}:` label", field="line 1")
    blocks: list[Block] = [Block("bb0")]
    label_to_block: dict[str, str] = {}
    end_seen = False
    for index in range(start, len(lines)):
        raw = lines[index]
        text = _strip_comment(raw)
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
            continue  # directives: .loc, .file, .cfi_*, .p2align, .section ...
        parts = text.split(None, 1)
        mnemonic = parts[0]
        if not re.match(r"^[a-z_][a-z0-9_.]*$", mnemonic):
            raise ParseError(f"cannot parse instruction {text[:60]!r}", field=f"line {index + 1}")
        operands = _SPACES.sub(" ", parts[1]).strip() if len(parts) > 1 else ""
        operands = ", ".join(op.strip() for op in operands.split(",")) if operands else ""
        second = ""
        if " :: " in operands:  # VOPD: one instruction word, two operations
            tail = operands.split(" :: ", 1)[1].split(None, 1)
            second = tail[0] if tail and re.match(r"^v_[a-z0-9_]+$", tail[0]) else ""
        blocks[-1].instructions.append(Instruction(mnemonic, base_mnemonic(mnemonic), operands, index + 1, second))
        if _TERMINATORS.match(mnemonic):
            blocks.append(Block(f"bb{len(blocks)}"))
    if not end_seen:
        raise ParseError(f"kernel {name!r} has no `.Lfunc_end` label: truncated assembly?", field=f"line {len(lines)}")
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
        block.instructions = [
            Instruction(i.mnemonic, i.base, _LOCAL_LABEL.sub(rename, i.operands), i.line, i.second)
            for i in block.instructions
        ]
    return name, Stream(blocks)


def parse_metadata(asm: str) -> dict[str, Any]:
    """Resource facts from the `.amdhsa_*` directives, `.set` symbols, kernel-info comments and amdhsa.kernels."""
    facts: dict[str, Any] = {"amdhsa": {}, "info": {}, "kernel": {}, "set": {}}
    lines = asm.splitlines()
    in_meta = False
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
        match = re.match(r"^\.(amdhsa_\w+)\s+(-?\d+)\s*$", text)
        if match:
            facts["amdhsa"][match.group(1)] = int(match.group(2))
            continue
        match = re.match(r"^\.set\s+\.?L?[\w.$]*\.(num_vgpr|num_agpr|numbered_sgpr|private_seg_size)\s*,\s*(\d+)\s*$", text)
        if match:
            facts["set"][match.group(1)] = int(match.group(2))
            continue
        match = re.match(r"^;\s*(\w+)\s*:\s*(-?\d+)\b", text)
        if match:
            facts["info"].setdefault(match.group(1), int(match.group(2)))
    if meta_lines:
        try:
            document = yaml.safe_load("\n".join(meta_lines))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = meta_start + (mark.line if mark else 0) + 1
            raise ParseError("amdgpu_metadata block is not valid YAML", field=f"line {line}") from None
        kernels = (document or {}).get("amdhsa.kernels") if isinstance(document, dict) else None
        if isinstance(kernels, list) and kernels and isinstance(kernels[0], dict):
            facts["kernel"] = kernels[0]
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


def analyze_amdgcn(asm: str, *, lds_bytes: int = 0) -> tuple[Analysis, str]:
    """(analysis without occupancy, kernel name). Occupancy needs the target: see `occupancy`."""
    name, stream = parse_stream(asm)
    raw, base = histograms(stream)
    classes = Counter(classify(ins.mnemonic) for ins in stream.instructions())
    text = stream.text()
    analysis = Analysis(
        isa="amdgcn", sha256=stream.sha256(), instructions=sum(raw.values()), blocks=len(stream.blocks),
        histogram=raw, base_histogram=base, classes={c: classes.get(c, 0) for c in CLASSES if classes.get(c)},
        resources=resources(asm, lds_bytes=lds_bytes), stream_text=text,
    )
    return analysis, name
