"""The loops of a kernel's instruction stream, and what each one executes per iteration.

Per function of the stream (the kernel, then each callee) the control-flow graph is built from the
basic blocks the ISA's parser already split (at labels and terminators): a block's successors are the
blocks named in its last instruction's operands (renumbered labels, `bbN`) where that instruction
jumps or branches, and the next block where control can fall through. How an instruction leaves its
block is the ISA's rule (`Backend.flow`: `next`, `jump`, `branch`, `stop`, `call`). A loop is a
natural loop: an edge to a block that dominates its source (a back edge) and every block that reaches
the source without passing the header; back edges to one header make one loop. Irreducible cycles
(entered in two places) have no header and are not reported. A call's target is another function
(in SASS also a subroutine inside the kernel, `CALL.REL`): control returns to the next block, and the
called blocks are not part of the caller's loops. A loop's counts include its inner
loops' instructions (they run inside it); depth 1 is outermost.

The same stream read back from a golden's text (`Backend.stream_from_text`) gives the same loops, so
a check compares loops without a golden format change. Source locations are not in the text: the
loop's `loc` comes from the compile's side table (`Analysis.locs`), "" where unknown.

Pure: nothing here runs a tool (llvm-mca lives in `xisa.compile.tools.mca`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from xisa.analyze.backends import Backend, backend_of_isa
from xisa.analyze.model import Analysis, Block, Instruction, Stream

FLOWS = ("next", "jump", "branch", "stop", "call")
_BLOCK_REF = re.compile(r"\bbb\d+\b")
# What the loop report shows of each loop beside `instructions`, `scratch` and `spills`: instruction
# classes by their AMD names; a backend that names them otherwise maps them through `class_aliases`, and
# one that has no such class (NVIDIA's waits are control bits, not instructions) shows none.
SHOWN_CLASSES = ("matrix", "vmem", "lds", "wait", "barrier")


@dataclass(frozen=True)
class Loop:
    function: str                       # "" for the kernel, else the callee's name
    header: str                         # the header block (`bb3`, numbered within its function)
    depth: int                          # 1 outermost
    blocks: tuple[str, ...]             # its blocks, in stream order
    loc: str                            # its source line ("FILE:LINE"), "" where unknown (see `loop_loc`)
    instructions: int
    histogram: dict[str, int]           # raw mnemonics
    base_histogram: dict[str, int]
    classes: dict[str, int]
    scratch_loads: int
    scratch_stores: int
    body: tuple[Instruction, ...] = field(default=(), compare=False, repr=False)   # in stream order

    @property
    def scratch(self) -> int:
        """Scratch (private, NVIDIA local) memory accesses per iteration, loads and stores."""
        return self.scratch_loads + self.scratch_stores

    @property
    def spills(self) -> int:
        """Writes to scratch per iteration: in a Triton kernel (no private arrays) these are register spills."""
        return self.scratch_stores

    @property
    def where(self) -> str:
        """How a report names the loop: its source line where known, else its header block."""
        fn = f" in {self.function}" if self.function else ""
        return f"loop at {self.loc or self.header}{fn} (depth {self.depth})"

    def shown(self, handler: Backend) -> dict[str, int]:
        """The figures a report shows, in order: instructions, scratch, spills, then `SHOWN_CLASSES`."""
        figures = {"instructions": self.instructions, "scratch": self.scratch, "spills": self.spills}
        for name in SHOWN_CLASSES:
            own = handler.class_aliases.get(name, name)
            if own in handler.classes:
                figures[own] = self.classes.get(own, 0)
        return figures

    def to_json(self) -> dict[str, Any]:
        return {"function": self.function, "header": self.header, "depth": self.depth, "blocks": list(self.blocks),
                "loc": self.loc, "instructions": self.instructions, "scratch_loads": self.scratch_loads,
                "scratch_stores": self.scratch_stores, "classes": dict(self.classes),
                "base_histogram": dict(self.base_histogram)}


def successors(blocks: list[Block], handler: Backend) -> dict[str, list[str]]:
    """Each block's successors within its function."""
    names = {b.name for b in blocks}
    edges: dict[str, list[str]] = {}
    for index, block in enumerate(blocks):
        last = block.instructions[-1]
        kind = handler.flow(last)
        out: list[str] = []
        if kind in ("jump", "branch"):
            out.extend(t for t in _BLOCK_REF.findall(last.operands) if t in names)
        if kind in ("next", "branch", "call") and index + 1 < len(blocks):
            out.append(blocks[index + 1].name)
        edges[block.name] = list(dict.fromkeys(out))
    return edges


def dominators(entry: str, edges: dict[str, list[str]]) -> dict[str, set[str]]:
    """Each block reachable from `entry` -> the blocks that dominate it (itself included)."""
    order: list[str] = []
    seen = {entry}
    stack = [entry]
    while stack:                                  # reachable blocks, depth first
        node = stack.pop()
        order.append(node)
        for succ in edges.get(node, ()):
            if succ not in seen:
                seen.add(succ)
                stack.append(succ)
    preds: dict[str, list[str]] = {n: [] for n in order}
    for node in order:
        for succ in edges.get(node, ()):
            preds[succ].append(node)
    dom = {n: set(order) for n in order}
    dom[entry] = {entry}
    changed = True
    while changed:
        changed = False
        for node in order:
            if node == entry:
                continue
            new = set.intersection(*(dom[p] for p in preds[node])) | {node} if preds[node] else {node}
            if new != dom[node]:
                dom[node], changed = new, True
    return dom


def natural_loops(blocks: list[Block], handler: Backend) -> list[tuple[str, set[str]]]:
    """(header, body blocks) of each natural loop of one function, headers in stream order."""
    if not blocks:
        return []
    edges = successors(blocks, handler)
    dom = dominators(blocks[0].name, edges)
    preds: dict[str, list[str]] = {b.name: [] for b in blocks}
    for src, outs in edges.items():
        for dst in outs:
            preds[dst].append(src)
    bodies: dict[str, set[str]] = {}
    for src in dom:
        for header in edges[src]:
            if header in dom[src]:                # a back edge src -> header
                body = bodies.setdefault(header, {header})
                stack = [src]
                while stack:
                    node = stack.pop()
                    if node not in body:
                        body.add(node)
                        stack.extend(p for p in preds[node] if p in dom)
    position = {b.name: i for i, b in enumerate(blocks)}
    return sorted(bodies.items(), key=lambda item: position[item[0]])


# A Python loop statement (`for k in range(...)`, `for k in tl.range(...)`, `while ...:`): the line a loop
# is named by when the line information's texts are known.
_LOOP_STATEMENT = re.compile(r"^(?:for|while)\b")


def loop_loc(body: list[Instruction], latch_branches: list[Instruction],
             texts: Mapping[str, str] | None = None) -> str:
    """A loop's source line. With the lines' texts (`texts`: loc -> text): the back-edge branch's line when it
    is a `for`/`while` statement, else the loop statement most of `body` (the loop's own instructions, inner
    loops' left out) carries; ptxas for sm_100+ gives the back edge the last body statement's line. Otherwise,
    or without texts: the back-edge branch's line (the compiler gives the loop's compare and branch the `for`
    line), else the most frequent location in `body` (first seen wins a tie), else ""."""
    if texts:
        statements = [ins.loc for ins in body if ins.loc and _LOOP_STATEMENT.match(texts.get(ins.loc, ""))]
        for ins in latch_branches:
            if ins.loc in statements:
                return ins.loc
        if statements:
            counts = Counter(statements)
            return max(counts, key=lambda loc: (counts[loc], -statements.index(loc)))
    for ins in latch_branches:
        if ins.loc:
            return ins.loc
    counts = Counter(ins.loc for ins in body if ins.loc)
    if not counts:
        return ""
    most = max(counts.values())
    return next(ins.loc for ins in body if counts.get(ins.loc) == most)


def find_loops(stream: Stream, handler: Backend, texts: Mapping[str, str] | None = None) -> list[Loop]:
    """Every natural loop of every function of `stream`: the kernel's first, each by header position.
    `texts` (loc -> the line's text) lets a loop be named by its `for`/`while` line (`loop_loc`)."""
    loops: list[Loop] = []
    for function, blocks in [("", stream.blocks), *((f.name, f.blocks) for f in stream.callees)]:
        found = natural_loops(blocks, handler)
        for header, body in found:
            depth = sum(1 for other, outer in found if other != header and header in outer and body < outer) + 1
            ordered = [b for b in blocks if b.name in body]
            instructions = [ins for b in ordered for ins in b.instructions]
            # The branches back to the header (a latch that falls through into it has none).
            latches = [b.instructions[-1] for b in ordered if handler.flow(b.instructions[-1]) in ("jump", "branch")
                       and header in _BLOCK_REF.findall(b.instructions[-1].operands)]
            inner = set().union(*(b for h, b in found if h != header and b < body))
            own = [ins for b in ordered if b.name not in inner for ins in b.instructions]
            keys = [ins.histogram_keys() for ins in instructions]
            scratch = Counter(handler.scratch_access(ins) for ins in instructions)
            loops.append(Loop(
                function=function, header=header, depth=depth, blocks=tuple(b.name for b in ordered),
                loc=loop_loc(own, latches, texts), instructions=len(instructions),
                histogram=dict(sorted(Counter(k[0] for k in keys).items())),
                base_histogram=dict(sorted(Counter(k[1] for k in keys).items())),
                classes=dict(sorted(Counter(handler.classify(ins.mnemonic) for ins in instructions).items())),
                scratch_loads=scratch.get("load", 0), scratch_stores=scratch.get("store", 0),
                body=tuple(instructions)))
    return loops


def stream_with_locs(stream: Stream, locs: list[str]) -> Stream:
    """`stream` with each instruction's `loc` from `locs` (stream order); unchanged when the counts differ."""
    if len(locs) != sum(1 for _ in stream.instructions()):
        return stream
    it = iter(locs)
    for block in stream.all_blocks():
        block.instructions = [replace(ins, loc=next(it)) for ins in block.instructions]
    return stream


def analysis_loops(analysis: Analysis) -> list[Loop]:
    """The loops of an analysis's stream (a compile's, or a golden's read back from its `.isa` text)."""
    if not analysis.stream_text:
        return []
    handler = backend_of_isa(analysis.isa)
    texts = {row["loc"]: row["text"] for row in analysis.lines}
    return find_loops(stream_with_locs(handler.stream_from_text(analysis.stream_text), analysis.locs), handler, texts)


@dataclass(frozen=True)
class LoopChange:
    """One loop whose figures differ between a base (golden) and a head (compile), or that one side lacks."""

    base: Loop | None
    head: Loop | None
    figures: dict[str, tuple[int, int]]             # shown figure -> (base, head), every shown one
    histogram: list[tuple[str, int, int]]           # base mnemonics that differ, largest change first

    @property
    def where(self) -> str:
        loop = self.head or self.base
        assert loop is not None
        # The head's source line where the base's is unknown (a golden's text has none).
        return replace(loop, loc=(self.head.loc if self.head else "") or loop.loc).where

    def phrase(self, top: int = 3) -> str:
        """`loop at gemm.py:57 (depth 1): scratch 0 -> 24, matrix 32 -> 32, v_add_f32 +2`."""
        if self.base is None:
            return f"{self.where}: new loop, {self.head.instructions} instructions"
        if self.head is None:
            return f"{self.where}: loop gone (had {self.base.instructions} instructions)"
        # Instructions always, matrix work where there is any (what a hot loop is judged by), the rest where it moved.
        parts = [f"{k} {b} -> {h}" for k, (b, h) in self.figures.items()
                 if b != h or k == "instructions" or (k in ("matrix", "tensor") and (b or h))]
        parts += [f"{m} {h - b:+d}" for m, b, h in self.histogram[:top]]
        more = len(self.histogram) - top
        return f"{self.where}: " + ", ".join(parts) + (f" (+{more} more mnemonics)" if more > 0 else "")

    def to_json(self) -> dict[str, Any]:
        return {"where": self.where, "base": self.base.to_json() if self.base else None,
                "head": self.head.to_json() if self.head else None,
                "figures": {k: list(v) for k, v in self.figures.items()},
                "histogram": [{"mnemonic": m, "base": b, "head": h} for m, b, h in self.histogram]}


def loop_changes(base: list[Loop], head: list[Loop], handler: Backend) -> list[LoopChange]:
    """The loops that differ. Loops pair by function and position (the n-th loop of a function on each
    side): labels are renumbered by position, so a header's name moves with any block added before it."""
    def by_function(loops: list[Loop]) -> dict[str, list[Loop]]:
        grouped: dict[str, list[Loop]] = {}
        for loop in loops:
            grouped.setdefault(loop.function, []).append(loop)
        return grouped

    old, new = by_function(base), by_function(head)
    changes = []
    for function in dict.fromkeys([*old, *new]):
        a, b = old.get(function, []), new.get(function, [])
        for index in range(max(len(a), len(b))):
            x = a[index] if index < len(a) else None
            y = b[index] if index < len(b) else None
            if x is not None and y is not None and x.base_histogram == y.base_histogram and x.depth == y.depth \
                    and x.scratch_loads == y.scratch_loads and x.scratch_stores == y.scratch_stores:
                continue
            fx = x.shown(handler) if x else {}
            fy = y.shown(handler) if y else {}
            figures = {k: (fx.get(k, 0), fy.get(k, 0)) for k in dict.fromkeys([*fx, *fy])}
            hx, hy = (x.base_histogram if x else {}), (y.base_histogram if y else {})
            hist = [(m, hx.get(m, 0), hy.get(m, 0)) for m in set(hx) | set(hy) if hx.get(m, 0) != hy.get(m, 0)]
            hist.sort(key=lambda row: (-abs(row[2] - row[1]), row[0]))
            changes.append(LoopChange(x, y, figures, hist))
    return changes
