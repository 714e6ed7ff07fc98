"""Fingerprints of every Triton stage of a cell, and which stage two compiles first differ at.

A cell's final stream says *that* its machine code changed; the stages before it say *where* the
change started: TTIR (the kernel as Triton's front end wrote it), TTGIR (layouts, pipelining), LLIR
(lowering to LLVM, and LLVM's middle end), then the LLVM backend's assembly (amdgcn, PTX) and, on
NVIDIA, ptxas's SASS. Each text stage is normalized as the final stream is, so that only code moves a
fingerprint: no file paths, no line or debug info, and the kernel's own name replaced (the final
stream does not print it either):

- MLIR (ttir, ttgir): every `loc(...)` attribute and every `#loc` alias line is dropped, and SSA values
  are renumbered (Triton names them after the Python variables they came from);
- LLVM IR (llir): `; ModuleID`, `source_filename`, comment lines, `!dbg` attachments, debug records
  and intrinsics are dropped, and every metadata node no longer reachable from the code (the `!DI*`
  nodes and what only they used) goes; the nodes left are renumbered in order of first use, so a
  different count of debug nodes cannot renumber a `!range` or a loop's metadata;
- PTX: comments, `.loc`/`.file`, `.section .debug_*` blocks and the labels only debug info uses
  (`$L__tmp0`, `$L__func_begin0`, `$L__func_end0`) are dropped.

The final assembly's fingerprint *is* the analysis's stream `sha256` (amdgcn, SASS: the same rules,
so "the last stage is identical" means "the stream is identical"). A binary is not a text stage: an
AMD code object's fingerprint is its loaded bytes' `code_sha256`, which xisa already takes; a cubin's
code is what its SASS disassembles, so it has no fingerprint of its own (`Backend.fingerprinted_stages`).

Pure: text in, fingerprints out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xisa.analyze.model import Analysis

if TYPE_CHECKING:
    from xisa.analyze.backends import Backend

# The kernel's own name in every stage, so a renamed kernel keeps its fingerprints as its stream does.
KERNEL_TOKEN = "__kernel__"
# How a golden without stage fingerprints gets them, without rewriting any golden whose cell changed.
RECORD_COMMAND = "xisa bless --record-stages"


def _drop_calls(text: str, word: str) -> str:
    """`text` without each `WORD(...)` (balanced parentheses, quoted strings skipped) and the blank before it."""
    out: list[str] = []
    position = 0
    pattern = re.compile(rf"\s*\b{re.escape(word)}\(")
    while True:
        match = pattern.search(text, position)
        if match is None:
            out.append(text[position:])
            return "".join(out)
        out.append(text[position:match.start()])
        depth, index, quoted = 1, match.end(), False
        while index < len(text) and depth:
            char = text[index]
            if quoted:
                if char == "\\":
                    index += 1
                elif char == '"':
                    quoted = False
            elif char == '"':
                quoted = True
            elif char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
            index += 1
        position = index


def _rename_kernel(text: str, kernel: str | None) -> str:
    if not kernel:
        return text
    # `@name` (MLIR, LLVM IR), `.entry name(` and its parameters `name_param_0` (PTX)
    return re.sub(rf"(?<![\w.$]){re.escape(kernel)}(?=_param_\d|[^\w$]|$)", KERNEL_TOKEN, text, flags=re.MULTILINE)


def _lines(text: str) -> Iterable[str]:
    for line in text.splitlines():
        line = line.rstrip()
        if line.strip():
            yield line


_MLIR_LOC_ALIAS = re.compile(r"^\s*#loc\w*\s*=")
# An SSA value: `%0`, `%arg3`, or named after the Python variable it was assigned to (`%offsets_3`, `%x_ptr`).
_MLIR_VALUE = re.compile(r"%(?:[A-Za-z_$.][\w$.\-]*|\d+)")


def normalize_mlir(text: str, kernel: str | None = None) -> str:
    """TTIR and TTGIR without locations (`loc(...)` attributes, `#locN = loc(...)` lines) and with SSA values
    renumbered by first use: Triton names a value after the Python variable it came from, and renaming a
    variable is no more a code change than moving its line."""
    body = "\n".join(line for line in text.splitlines() if not _MLIR_LOC_ALIAS.match(line))
    values: dict[str, str] = {}
    body = _MLIR_VALUE.sub(lambda m: values.setdefault(m.group(0), f"%v{len(values)}"), _drop_calls(body, "loc"))
    return "\n".join(_lines(_rename_kernel(body, kernel))) + "\n"


_LLIR_DROPPED_LINE = re.compile(r"^\s*(?:;|source_filename\s*=|#dbg_\w+\(|!llvm\.dbg\.\w+\s*=|declare\s.*@llvm\.dbg\.)"
                                r"|^\s*(?:tail\s+)?call\s+void\s+@llvm\.dbg\.")
_LLIR_DBG_ATTACHMENT = re.compile(r",\s*!dbg\s+!\d+|\s!dbg\s+!\d+")
_LLIR_TRAILING_COMMENT = re.compile(r"\s+;\s*(?:preds\s*=|Function Attrs:).*$")
_METADATA_DEF = re.compile(r"^\s*!(\d+)\s*=\s*(.*)$")
_METADATA_REF = re.compile(r"!(\d+)\b")
_LIST_REF = re.compile(r"(,\s*)?!(\d+)\b")
_DEBUG_NODE = re.compile(r"^(?:distinct\s+)?!DI")


def normalize_llir(text: str, kernel: str | None = None) -> str:
    """LLVM IR without its module id, file name and debug info; metadata renumbered by first use."""
    code: list[str] = []
    nodes: dict[str, str] = {}
    for line in text.splitlines():
        if _LLIR_DROPPED_LINE.match(line):
            continue
        line = _LLIR_TRAILING_COMMENT.sub("", _LLIR_DBG_ATTACHMENT.sub("", line)).rstrip()
        definition = _METADATA_DEF.match(line)
        if definition:
            nodes[definition.group(1)] = definition.group(2)
        elif line.strip():
            code.append(line)
    # Keep the nodes the code reaches (module flags, `!range`, loop metadata ...), never a `!DI*` one.
    kept: set[str] = set()
    todo = [ref for line in code for ref in _METADATA_REF.findall(line)]
    while todo:
        ref = todo.pop()
        if ref in kept or ref not in nodes or _DEBUG_NODE.match(nodes[ref]):
            continue
        kept.add(ref)
        todo.extend(_METADATA_REF.findall(nodes[ref]))
    numbers: dict[str, str] = {}      # old number -> new, in order of first use

    def renumber(match: re.Match) -> str:
        return "!" + numbers.setdefault(match.group(1), str(len(numbers)))

    def drop_unkept(match: re.Match) -> str:   # a kept node's reference to a debug node
        return match.group(0) if match.group(2) in kept else ""

    code = [_METADATA_REF.sub(renumber, line) for line in code]
    position = 0
    while position < len(numbers):          # a node's definition can name nodes not numbered yet
        old = list(numbers)[position]
        position += 1
        if old in kept:
            node = re.sub(r"\{\s*,\s*", "{", _LIST_REF.sub(drop_unkept, nodes[old]))
            code.append(f"!{numbers[old]} = {_METADATA_REF.sub(renumber, node)}")
    return "\n".join(_rename_kernel("\n".join(code), kernel).splitlines()) + "\n"


_PTX_DROPPED_LINE = re.compile(r"^\s*(?:\.loc\s|\.file\s|\$L__(?:tmp|func_begin|func_end)\d+:\s*$)")
_PTX_DEBUG_SECTION = re.compile(r"^\s*\.section\s+\.debug_\w+")


def normalize_ptx(text: str, kernel: str | None = None) -> str:
    """PTX without comments, line info, debug sections and debug-only labels."""
    kept: list[str] = []
    depth = 0
    in_debug = False
    for raw in text.splitlines():
        line = raw.split("//", 1)[0].rstrip()
        if in_debug or _PTX_DEBUG_SECTION.match(line):
            # `.section .debug_info { ... }`, the braces on the same line or on lines of their own
            in_debug = True
            depth += line.count("{") - line.count("}")
            if depth <= 0 and "}" in line:
                in_debug, depth = False, 0
            continue
        if not line.strip() or _PTX_DROPPED_LINE.match(line):
            continue
        kept.append(line)
    return "\n".join(_rename_kernel("\n".join(kept), kernel).splitlines()) + "\n"


# The text stages xisa normalizes itself; the final assembly and the binary come from the analysis.
NORMALIZERS: Mapping[str, Callable[[str, str | None], str]] = {
    "ttir": normalize_mlir, "ttgir": normalize_mlir, "llir": normalize_llir, "ptx": normalize_ptx,
}


def fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stage_fingerprints(handler: "Backend", asm: Mapping[str, str | bytes], analysis: Analysis, *,
                       kernel: str | None) -> dict[str, str]:
    """SHA-256 of each stage of `handler.fingerprinted_stages` (in that order) that the compile has:
    `asm` is Triton's `compiled.asm`, `analysis` the final stream's, `kernel` the kernel's name."""
    prints: dict[str, str] = {}
    for stage in handler.fingerprinted_stages:
        if stage == handler.assembly:
            prints[stage] = analysis.sha256
        elif stage == handler.binary:
            if analysis.code_sha256:
                prints[stage] = analysis.code_sha256
        else:
            text = asm.get(stage)   # `get`: never makes Triton compute a stage it did not keep
            if isinstance(text, str):
                prints[stage] = fingerprint(NORMALIZERS[stage](text, kernel))
    return prints


def first_changed_stage(base: Mapping[str, str] | None, head: Mapping[str, str] | None,
                        order: Iterable[str]) -> str | None:
    """The first stage of `order` that both sides fingerprinted and whose fingerprints differ; None when
    either side has none or every stage both have is identical."""
    if not base or not head:
        return None
    for stage in order:
        if stage in base and stage in head and base[stage] != head[stage]:
            return stage
    return None


@dataclass(frozen=True)
class StageAttribution:
    """Where a changed cell's two compiles first differ, and how to say it."""

    base: Mapping[str, str]
    head: Mapping[str, str]
    order: tuple[str, ...]
    base_name: str = "golden"
    head_name: str = "head"
    hint: str = field(default=f"record them with `{RECORD_COMMAND}`")

    @property
    def known(self) -> bool:
        return bool(self.base) and bool(self.head)

    @property
    def first(self) -> str | None:
        return first_changed_stage(self.base, self.head, self.order)

    def identical(self) -> list[str]:
        """The stages before the first change (all of them when none changed) that both sides have, equal."""
        first = self.first
        same = []
        for stage in self.order:
            if stage == first:
                break
            if stage in self.base and stage in self.head:
                same.append(stage)
        return same

    def phrase(self) -> str:
        """`first at llir: ttir, ttgir identical`; `stage unknown (golden has no stage fingerprints; ...)`."""
        if not self.known:
            missing = self.base_name if not self.base else self.head_name
            return f"stage unknown ({missing} has no stage fingerprints; {self.hint})"
        first, same = self.first, self.identical()
        if first is None:
            return f"no stage differs: {', '.join(same)} identical"
        return f"first at {first}" + (f": {', '.join(same)} identical" if same else "")

    def verdict_text(self, verdict: str = "changed") -> str:
        """`changed (first at llir: ttir, ttgir identical)`, or `changed, stage unknown (...)`."""
        return f"{verdict} ({self.phrase()})" if self.known else f"{verdict}, {self.phrase()}"
