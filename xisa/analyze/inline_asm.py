"""Inline asm in printed amdgcn: LLVM prints an `asm volatile` body verbatim between `;;#ASMSTART` and
`;;#ASMEND` and assembles it after printing, so its directives (dropped everywhere else) can emit or remove
machine code. `expand_inline_asm` evaluates what it can without assembling (`.rept` over a literal, `.if`
over a literal, data directives kept); `assembled_files` names the files it pulls into the code object.
"""

from __future__ import annotations

import re

# LLVM prints an `asm volatile` body verbatim between these markers; it is assembled after printing,
# so its directives (dropped everywhere else) can emit or remove machine code.
ASM_START, ASM_END = ";;#ASMSTART", ";;#ASMEND"
# Directives that emit data words into the code: kept as stream entries, counted under their name.
_DATA_DIRECTIVES = frozenset({".byte", ".short", ".hword", ".word", ".value", ".2byte", ".int", ".long", ".4byte",
                              ".quad", ".8byte", ".octa", ".inst", ".ascii", ".asciz", ".string"})
# Conditionals over a literal: (directive, does the value make it true).
_LITERAL_CONDITIONS = {".if": lambda v: v != 0, ".ifne": lambda v: v != 0, ".ifeq": lambda v: v == 0,
                       ".ifge": lambda v: v >= 0, ".ifgt": lambda v: v > 0, ".ifle": lambda v: v <= 0,
                       ".iflt": lambda v: v < 0}
_LOOPS = (".rept", ".irp", ".irpc")
# Bounds an expanded `.rept`: beyond it the block stays verbatim (and the cell is marked).
MAX_EXPANDED_ASM = 1 << 16
_INT_LITERAL = re.compile(r"^[+-]?(?:0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9]\d*)$")

AsmLine = tuple[int, str]   # (line index in the file, text without comment)


def _literal(text: str) -> int | None:
    """An integer literal as GNU as reads it (leading 0 is octal), or None for anything else."""
    text = text.strip()
    if not _INT_LITERAL.match(text):
        return None
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-")
    if len(digits) > 1 and digits[0] == "0" and digits[1] not in "xXbB":
        return sign * int(digits, 8)
    return sign * int(digits, 0)


def directive(text: str) -> tuple[str, str]:
    word, _, rest = text.partition(" ")
    if "\t" in word:
        word, _, more = word.partition("\t")
        rest = f"{more} {rest}"
    return word.lower(), rest.strip()


_ASSEMBLED_FILE = re.compile(r'^\.(?:include|incbin)\s+"([^"]+)"', re.IGNORECASE)


def assembled_files(asm: str) -> list[str]:
    """The files inline asm pulls in when the code object is assembled (`.include "x.s"`, `.incbin "x.bin"`):
    their bytes are in the code but not in the printed text, so a compile depends on them."""
    files, inside = [], False
    for line in asm.splitlines():
        text = line.strip()
        if text.startswith((ASM_START, ASM_END)):
            inside = text.startswith(ASM_START)
        elif inside and (match := _ASSEMBLED_FILE.match(text)):
            files.append(match.group(1))
    return files


def _closing(body: list[AsmLine], start: int, openers: tuple[str, ...], closer: str) -> int | None:
    """Index of the `closer` that matches the opener at `start` (nesting counted), or None."""
    depth = 0
    for position in range(start, len(body)):
        word, _ = directive(body[position][1])
        if word in openers or (openers[0] == ".if" and word.startswith(".if")):
            depth += 1
        elif word == closer:
            depth -= 1
            if depth == 0:
                return position
    return None


def _else_of(body: list[AsmLine], start: int, end: int) -> int | None:
    depth = 0
    for position in range(start + 1, end):
        word, _ = directive(body[position][1])
        if word.startswith(".if"):
            depth += 1
        elif word == ".endif":
            depth -= 1
        elif word in (".else", ".elseif") and depth == 0:
            return position
    return None


def expand_inline_asm(body: list[AsmLine], opaque: set[str], budget: list[int] | None = None) -> list[AsmLine]:
    """The statements an inline-asm body assembles to, as far as xisa can tell without assembling it.

    `.rept N` with a literal N is unrolled and `.if`-family conditionals over a literal are decided;
    data directives stay (the caller makes them stream entries). Anything else that is a directive,
    or a construct that cannot be decided, stays verbatim and its name goes into `opaque`.
    """
    budget = budget if budget is not None else [MAX_EXPANDED_ASM]
    out: list[AsmLine] = []
    position = 0
    while position < len(body):
        index, text = body[position]
        if not text.startswith("."):
            out.append((index, text))
            position += 1
            continue
        word, argument = directive(text)
        if word == ".rept":
            end = _closing(body, position, _LOOPS, ".endr")
            count = _literal(argument)
            if end is not None and count is not None and count >= 0:
                once = expand_inline_asm(body[position + 1:end], opaque, budget)
                if len(once) * count <= budget[0]:
                    budget[0] -= len(once) * count
                    out.extend(once * count)
                    position = end + 1
                    continue
        elif word in _LITERAL_CONDITIONS:
            end = _closing(body, position, (".if",), ".endif")
            value = _literal(argument)
            if end is not None and value is not None:
                middle = _else_of(body, position, end)
                if middle is None or directive(body[middle][1])[0] == ".else":
                    taken = _LITERAL_CONDITIONS[word](value)
                    chosen = body[position + 1:middle if middle is not None else end] if taken else \
                        (body[middle + 1:end] if middle is not None else [])
                    out.extend(expand_inline_asm(chosen, opaque, budget))
                    position = end + 1
                    continue
        elif word in _DATA_DIRECTIVES:
            out.append((index, text))
            position += 1
            continue
        # Not decided here: keep the construct verbatim so a change to it still changes the stream.
        opaque.add(word)
        if word in _LOOPS or word.startswith(".if"):
            end = _closing(body, position, _LOOPS if word in _LOOPS else (".if",),
                           ".endr" if word in _LOOPS else ".endif")
            stop = end + 1 if end is not None else len(body)
            out.extend(body[position:stop])
            position = stop
            continue
        out.append((index, text))
        position += 1
    return out
