"""The code object as the driver loads it (an AMD hsaco, an NVIDIA cubin): the verdict's ground truth.

The printed assembly is not the whole program a launch runs. Inline asm emits bytes through directives the
text cannot show (`.long`, `.rept`); constant tables live in data sections (`.nv.constant3`, `.rodata`,
`.data`) the text names only by address; the launch attributes live outside the instructions (NVIDIA's
`.nv.info.<kernel>`: REQNTID, max registers, parameter layout; AMD's kernel descriptor in `.rodata` and the
metadata note: workgroup size, wave size, LDS, kernarg layout). So a cell's `code_sha256` covers the ELF
header's identity (machine, flags: the target ID) and every section with its header fields and bytes,
except the one family of sections proven not to change what runs:

- debug information (`.debug_*`, NVIDIA's `.nv_debug_*`, their relocations and their `.nv.merc.*`
  copies): the source paths and line numbers a debugger and a profiler read. Measured on Triton 3.8.0
  (`tests/analyze/test_codeobject.py`): the same kernel compiled from two checkouts differs only there, on
  every bundled target; on AMD they are not even loaded (no SHF_ALLOC).

File offsets are not hashed (where a section sits in the file is not what it holds). Each section's own
digest is kept too (`section_digests`), so a verdict can say *what* changed: code, data or launch
attributes.

A few lines of `struct` instead of a dependency: both are plain 64-bit little-endian ELF files and only the
section table is needed.
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass

from xisa.errors import ParseError

_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")
_SHT_NOBITS = 8
# A debug section, a relocation of one, or NVIDIA's Mercury copy (`.nv.merc.`) of either.
_DEBUG_INFO = re.compile(r"^(?:\.nv\.merc)?(?:\.rela?)?\.(?:debug_|nv_debug_)")
HEADER = "(header)"          # the entry of the ELF header's identity fields in `section_digests`
DIGEST_CHARS = 16            # a section's digest as recorded (a golden's `code_sections`): enough to tell


@dataclass(frozen=True)
class Section:
    name: str
    kind: int                # sh_type
    flags: int
    address: int
    link: int
    info: int
    align: int
    entry_size: int
    size: int
    data: bytes              # empty for NOBITS: only its size is loaded (zeroed)

    def digest(self) -> str:
        digest = hashlib.sha256(struct.pack("<IQQIIQQQ", self.kind, self.flags, self.address, self.link, self.info,
                                            self.align, self.entry_size, self.size))
        digest.update(self.data)
        return digest.hexdigest()


def _bad(what: str) -> ParseError:
    return ParseError(f"code object is not a readable ELF: {what}", field="binary")


def is_debug_info(name: str) -> bool:
    """The only sections the fingerprint leaves out (see the module's note)."""
    return bool(_DEBUG_INFO.match(name))


def read_elf(elf: bytes) -> tuple[bytes, list[Section]]:
    """(the header's identity fields, every section in section-table order)."""
    if len(elf) < _ELF_HEADER.size or elf[:4] != b"\x7fELF":
        raise _bad("no ELF magic")
    if elf[4] != 2 or elf[5] != 1:
        raise _bad("not 64-bit little-endian")
    ident, e_type, machine, version, entry, _, shoff, flags, _, _, _, shentsize, shnum, shstrndx = \
        _ELF_HEADER.unpack_from(elf)
    if shentsize != _SECTION_HEADER.size or shoff + shnum * shentsize > len(elf) or shstrndx >= shnum:
        raise _bad("section table out of bounds")
    identity = ident[4:9] + struct.pack("<HHIQI", e_type, machine, version, entry, flags)
    headers = [_SECTION_HEADER.unpack_from(elf, shoff + i * shentsize) for i in range(shnum)]

    def body(header) -> bytes:
        if header[1] == _SHT_NOBITS:
            return b""
        offset, size = header[4], header[5]
        if offset + size > len(elf):
            raise _bad("section out of bounds")
        return elf[offset:offset + size]

    names = body(headers[shstrndx])

    def name(header) -> str:
        start = header[0]
        end = names.find(b"\0", start)
        if start >= len(names) or end < 0:
            raise _bad("section name out of bounds")
        return names[start:end].decode("ascii", "replace")

    sections = [Section(name(h), h[1], h[2], h[3], h[6], h[7], h[8], h[9], h[5], body(h)) for h in headers[1:]]
    return identity, sections


def section_digests(elf: bytes) -> dict[str, str]:
    """The full SHA-256 of the header's identity (`HEADER`) and of each section but debug information, in
    section-table order; a repeated section name gets `#2`, `#3`."""
    identity, sections = read_elf(elf)
    if not any(s.flags & 0x4 for s in sections):    # SHF_EXECINSTR: no code at all is no code object
        raise _bad("no executable section")
    digests = {HEADER: hashlib.sha256(identity).hexdigest()}
    for section in sections:
        if is_debug_info(section.name):
            continue
        key, n = section.name, 1
        while key in digests:
            n += 1
            key = f"{section.name}#{n}"
        digests[key] = section.digest()
    return digests


def code_sha256(elf: bytes) -> str:
    """The code object's fingerprint: SHA-256 over `section_digests` (names and digests, in order)."""
    return fingerprint_of(section_digests(elf))


def fingerprint_of(digests: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{name}\0{value}\n" for name, value in digests.items()).encode()).hexdigest()


def short_digests(digests: dict[str, str]) -> dict[str, str]:
    """Each section's digest cut to `DIGEST_CHARS`: what a golden records to say which section changed."""
    return {name: value[:DIGEST_CHARS] for name, value in digests.items()}


def fingerprint(analysis, elf: bytes) -> None:
    """Set an `Analysis`'s `code_sha256` and `code_sections` from its code object."""
    digests = section_digests(elf)
    analysis.code_sha256 = fingerprint_of(digests)
    analysis.code_sections = short_digests(digests)


def changed_sections(base: dict[str, str], head: dict[str, str]) -> list[str]:
    """The sections (and `HEADER`) whose recorded digests differ, added or removed, sorted (a golden's YAML and a
    cached result keep their keys sorted, a fresh analysis in section-table order)."""
    return sorted(n for n in set(base) | set(head) if base.get(n) != head.get(n))
