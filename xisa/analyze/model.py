"""The result of analyzing one kernel's machine code, independent of the ISA."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from xisa.errors import ParseError

# Bumped whenever counting or normalization changes, so that a golden made by another analyzer is
# reported as such instead of as a kernel change. 1: the kernel's stream only; 2: every function of
# the code object, inline-asm directives, `code_sha256`; 3: `code_sha256` is the whole code object (header,
# code, data, launch attributes, for AMD and NVIDIA; `codeobject.py`), `code_sections` says which part changed,
# SASS keeps its register numbers on every target.
ANALYZER_VERSION = 3


@dataclass(frozen=True)
class Instruction:
    mnemonic: str          # as written, e.g. v_add_f32_e32
    base: str              # encoding suffixes stripped, e.g. v_add_f32
    operands: str          # normalized operand text
    line: int              # 1-based line in the source assembly
    second: str = ""       # the other half of a dual-issue pair (gfx11+ VOPD `X ... :: Y ...`), raw
    second_base: str = ""  # that half with its encoding suffixes stripped (the parser knows the ISA's rule)
    # Kernel source location the compiler's line information gives this instruction ("FILE:LINE", FILE as
    # the compiler wrote it), or "" where it gives none. Never part of `text()`: moving a source line must
    # not move the fingerprint.
    loc: str = ""

    def histogram_keys(self) -> tuple[str, str]:
        """(raw, base) keys: a dual-issue pair counts once, as `X::Y`, so both halves are visible."""
        if not self.second:
            return self.mnemonic, self.base
        return f"{self.mnemonic}::{self.second}", f"{self.base}::{self.second_base}"

    def text(self) -> str:
        return f"{self.mnemonic} {self.operands}".rstrip()


@dataclass
class Block:
    name: str
    instructions: list[Instruction] = field(default_factory=list)


@dataclass
class Function:
    """A function the kernel calls (`@triton.jit(noinline=True)`), printed in the same code object."""

    name: str
    blocks: list[Block]


@dataclass
class Stream:
    """A kernel's instructions by basic block, labels renumbered, then each function it calls.

    The kernel comes first and is written exactly as a single-function stream, so a kernel without
    callees keeps its fingerprint; each callee follows under a `function NAME:` header.
    """

    blocks: list[Block]                                        # the kernel's
    callees: list[Function] = field(default_factory=list)     # in the order they are printed

    def all_blocks(self):
        yield from self.blocks
        for function in self.callees:
            yield from function.blocks

    def instructions(self):
        for block in self.all_blocks():
            yield from block.instructions

    def text(self) -> str:
        lines = []
        for header, blocks in [(None, self.blocks), *((f.name, f.blocks) for f in self.callees)]:
            if header is not None:
                lines.append(f"function {header}:")
            for block in blocks:
                lines.append(f"{block.name}:")
                lines.extend(f"  {ins.text()}" for ins in block.instructions)
        return "\n".join(lines) + "\n"

    def sha256(self) -> str:
        return hashlib.sha256(self.text().encode("utf-8")).hexdigest()


def parse_stream_text(text: str, instruction: Callable[[str, str, int], Instruction]) -> Stream:
    """The `Stream` whose `text()` is `text` (a golden's `TARGET.isa`): the one inverse of `Stream.text`.

    `instruction(mnemonic, operands, line)` is the ISA's own constructor (it knows the base-mnemonic
    rule and dual-issue pairs), so a stream read back counts exactly as the stream that was written.
    Source locations are not in the text: every `loc` is ""."""
    kernel: list[Block] = []
    callees: list[Function] = []
    blocks = kernel
    for number, line in enumerate(text.splitlines(), start=1):
        if not line:
            continue
        if line.startswith("  "):
            if not blocks:
                raise ParseError("an instruction before any block label", field=f"line {number}")
            mnemonic, _, operands = line[2:].partition(" ")
            blocks[-1].instructions.append(instruction(mnemonic, operands, number))
        elif line.startswith("function ") and line.endswith(":"):
            callees.append(Function(line[len("function "):-1], []))
            blocks = callees[-1].blocks
        elif line.endswith(":"):
            blocks.append(Block(line[:-1]))
        else:
            raise ParseError("not a block label, a `function NAME:` header or an indented instruction",
                             field=f"line {number}")
    return Stream(kernel, callees)


def histograms(stream: Stream) -> tuple[dict[str, int], dict[str, int]]:
    keys = [ins.histogram_keys() for ins in stream.instructions()]
    raw = Counter(k[0] for k in keys)
    base = Counter(k[1] for k in keys)
    return dict(sorted(raw.items())), dict(sorted(base.items()))


@dataclass
class Analysis:
    """Everything xisa records about one compiled cell."""

    isa: str                            # amdgcn | sass
    sha256: str
    instructions: int
    blocks: int
    histogram: dict[str, int]           # raw mnemonics
    base_histogram: dict[str, int]      # suffixes stripped
    classes: dict[str, int]
    resources: dict[str, Any]
    stream_text: str
    # SHA-256 of the code object as the driver loads it (hsaco, cubin: code, data, launch attributes; debug
    # information left out), the verdict's ground truth; None only where no binary was analyzed (a unit test's
    # text): see `codeobject.py`. `code_sections`: each part's digest, short, to say which one changed.
    code_sha256: str | None = None
    code_sections: dict[str, str] = field(default_factory=dict)
    # What the launcher reads beside the code object from Triton's compiled metadata, options aside (those are the
    # golden's `options`): the dynamic shared memory it passes to the launch, global and profile scratch sizes,
    # tensor memory, tensor descriptors, the kernel's name. Part of the record: a change is a changed cell.
    metadata: dict[str, Any] = field(default_factory=dict)
    # Directives inside inline asm that xisa could not evaluate (kept verbatim in the stream): the
    # counts of such a cell may not be the machine code's; `code_sha256` still is.
    opaque_asm: list[str] = field(default_factory=list)
    # SHA-256 of each normalized Triton stage, in pipeline order (`xisa.analyze.stages`): where a change
    # started. Not counted or compared by the analyzer (no ANALYZER_VERSION bump): empty where unknown
    # (a golden blessed before xisa recorded them).
    stages: dict[str, str] = field(default_factory=dict)
    # Instructions per kernel source line (`xisa.analyze.lines`): a side table, never counted or compared by the
    # analyzer (no ANALYZER_VERSION bump), so a moved source line moves no verdict; empty where unknown.
    lines: list[dict[str, Any]] = field(default_factory=list)
    # The source location of each instruction of `stream_text`, in stream order ("" where the line
    # information gives none; empty where unknown: a golden, whose stream text has no locations). A
    # side table, never recorded in a golden nor fingerprinted; the loop report names loops by it.
    locs: list[str] = field(default_factory=list)

    def to_record(self) -> dict[str, Any]:
        record = {
            "analyzer": ANALYZER_VERSION, "isa": self.isa, "sha256": self.sha256, "code_sha256": self.code_sha256,
            "instructions": self.instructions, "blocks": self.blocks,
            "histogram": dict(self.histogram), "base_histogram": dict(self.base_histogram),
            "classes": dict(self.classes), "resources": dict(self.resources),
        }
        if self.code_sections:
            record["code_sections"] = dict(self.code_sections)
        if self.metadata:
            record["metadata"] = dict(self.metadata)
        if self.opaque_asm:
            record["opaque_asm"] = list(self.opaque_asm)
        if self.stages:
            record["stages"] = dict(self.stages)
        if self.lines:
            record["lines"] = [dict(row) for row in self.lines]
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any], stream_text: str = "") -> "Analysis":
        return cls(isa=record["isa"], sha256=record["sha256"], instructions=record["instructions"],
                   blocks=record["blocks"], histogram=dict(record["histogram"]),
                   base_histogram=dict(record["base_histogram"]), classes=dict(record["classes"]),
                   resources=dict(record["resources"]), stream_text=stream_text,
                   code_sha256=record.get("code_sha256"), code_sections=dict(record.get("code_sections") or {}),
                   metadata=dict(record.get("metadata") or {}),
                   opaque_asm=list(record.get("opaque_asm") or []),
                   stages=dict(record.get("stages") or {}), lines=list(record.get("lines") or []))
