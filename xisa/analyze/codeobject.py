"""The bytes an AMD code object (hsaco) loads for the hardware, hashed.

The printed amdgcn is LLVM's text, not the code: inline asm can emit bytes through directives the
text analysis cannot see (`.long`, `.rept`, `.if`). The code object's allocated, read-only
PROGBITS sections are the code (`.text`, flag X) and the read-only data it runs with (`.rodata`:
the kernel descriptors with the register, scratch and mode settings the dispatch uses). Line info
and paths live in the non-allocated `.debug_*` sections, so a moved checkout does not move this hash.

A few lines of `struct` instead of a dependency: an hsaco is a plain 64-bit little-endian ELF made
by the toolchain's own linker, and only the section table is needed.
"""

from __future__ import annotations

import hashlib
import struct

from xisa.errors import ParseError

_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")
_SHT_PROGBITS = 1
_SHF_WRITE, _SHF_ALLOC = 0x1, 0x2


def _bad(what: str) -> ParseError:
    return ParseError(f"code object is not a readable ELF: {what}", field="hsaco")


def loaded_sections(elf: bytes) -> list[tuple[str, bytes]]:
    """(name, bytes) of every allocated, read-only PROGBITS section, in section-table order."""
    if len(elf) < _ELF_HEADER.size or elf[:4] != b"\x7fELF":
        raise _bad("no ELF magic")
    if elf[4] != 2 or elf[5] != 1:
        raise _bad("not 64-bit little-endian")
    header = _ELF_HEADER.unpack_from(elf)
    shoff, shentsize, shnum, shstrndx = header[6], header[11], header[12], header[13]
    if shentsize != _SECTION_HEADER.size or shoff + shnum * shentsize > len(elf) or shstrndx >= shnum:
        raise _bad("section table out of bounds")
    sections = [_SECTION_HEADER.unpack_from(elf, shoff + i * shentsize) for i in range(shnum)]

    def body(section) -> bytes:
        offset, size = section[4], section[5]
        if offset + size > len(elf):
            raise _bad("section out of bounds")
        return elf[offset:offset + size]

    names = body(sections[shstrndx])

    def name(section) -> str:
        start = section[0]
        end = names.find(b"\0", start)
        if start >= len(names) or end < 0:
            raise _bad("section name out of bounds")
        return names[start:end].decode("ascii", "replace")

    return [(name(s), body(s)) for s in sections
            if s[1] == _SHT_PROGBITS and s[2] & _SHF_ALLOC and not s[2] & _SHF_WRITE]


def code_sha256(elf: bytes) -> str:
    """SHA-256 over the loaded read-only sections: each one's name, size and bytes."""
    digest = hashlib.sha256()
    sections = loaded_sections(elf)
    if not sections:
        raise _bad("no loaded read-only section")
    for name, data in sections:
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()
