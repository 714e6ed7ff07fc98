"""The code object is the verdict's ground truth (issue 22): every byte a launch loads is fingerprinted, debug
information alone is left out, and that one mask is measured, not assumed.

Unit tests build small ELF files by hand; the measured ones compile a kernel on every bundled target from two
checkouts (another path, lines moved) and compare the code objects section by section.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from xisa.analyze import codeobject
from xisa.compile.cell import SourceFiles
from xisa.compile.tools.ptxas import _CanonicalSubprocess, relative_ptx
from xisa.errors import ParseError, ToolchainError

_SECTION = struct.Struct("<IIQQQQIIQQ")
SHF_WRITE, SHF_ALLOC, SHF_EXEC = 0x1, 0x2, 0x4
PROGBITS, NOBITS = 1, 8


def elf(sections: list[tuple[str, int, int, bytes]], *, flags: int = 0, machine: int = 224) -> bytes:
    """An ELF of (name, type, flags, bytes) sections (NOBITS: bytes stand for the size), with its name table."""
    names = b"\0" + b"".join(name.encode() + b"\0" for name, *_ in sections) + b".shstrtab\0"
    body, headers, offset = b"", [_SECTION.pack(*[0] * 10)], 64
    name_at = 1
    for name, kind, section_flags, data in sections:
        size = len(data)
        headers.append(_SECTION.pack(name_at, kind, section_flags, 0, offset, size, 0, 0, 4, 0))
        name_at += len(name) + 1
        if kind != NOBITS:
            body += data
            offset += size
    headers.append(_SECTION.pack(name_at, 3, 0, 0, offset, len(names), 0, 0, 1, 0))
    shoff = offset + len(names)
    header = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + b"\0" * 9, 2, machine, 1, 0, 0, shoff, flags,
                         64, 0, 0, 64, len(headers), len(headers) - 1)
    return header + body + names + b"".join(headers)


CODE = (".text.k", PROGBITS, SHF_ALLOC | SHF_EXEC, b"\x01\x02\x03\x04")
BASE = [CODE, (".nv.constant3", PROGBITS, SHF_ALLOC, b"\x01\0\0\0\x02\0\0\0"),
        (".nv.info.k", 0x70000000, 0, b"\x04\x37\x04\x00\x80\x00\x00\x00"),
        (".data", PROGBITS, SHF_ALLOC | SHF_WRITE, b"\x05\0\0\0"), (".bss", NOBITS, SHF_ALLOC | SHF_WRITE, b"\0" * 16),
        (".debug_line", PROGBITS, 0, b"/home/a/k.py\0"), (".nv_debug_ptx_txt", PROGBITS, 0, b".file 1 /home/a\0"),
        (".rela.debug_line", 4, 0, b"\0" * 24), (".nv.merc.debug_line", PROGBITS, 0, b"/home/a/k.py\0")]


def _with(index: int, data: bytes) -> bytes:
    sections = list(BASE)
    name, kind, flags, _ = sections[index]
    sections[index] = (name, kind, flags, data)
    return elf(sections)


@pytest.mark.unit
@pytest.mark.parametrize("index, data", [
    (0, b"\x01\x02\x03\x05"),                       # an instruction
    (1, b"\x05\0\0\0\x06\0\0\0"),                   # a constant bank the text names by address only
    (2, b"\x04\x37\x04\x00\x00\x01\x00\x00"),       # a launch attribute (REQNTID 128 -> 256)
    (3, b"\x06\0\0\0"),                             # writable initialised data
    (4, b"\0" * 32),                                # the size of zeroed data
])
def test_every_loaded_byte_moves_the_fingerprint_and_names_its_section(index, data):
    before, after = elf(BASE), _with(index, data)
    assert codeobject.code_sha256(before) != codeobject.code_sha256(after)
    changed = codeobject.changed_sections(codeobject.short_digests(codeobject.section_digests(before)),
                                          codeobject.short_digests(codeobject.section_digests(after)))
    assert changed == [BASE[index][0]]


@pytest.mark.unit
@pytest.mark.parametrize("index", [5, 6, 7, 8])
def test_debug_information_alone_is_left_out(index):
    assert codeobject.code_sha256(elf(BASE)) == codeobject.code_sha256(_with(index, b"/somewhere/else/k.py\0"))


@pytest.mark.unit
def test_the_header_identity_is_fingerprinted():
    """e_flags carries the target ID (AMD: gfx942, xnack, sramecc; NVIDIA: the SM): another target, another code."""
    assert codeobject.code_sha256(elf(BASE, flags=0x4c)) != codeobject.code_sha256(elf(BASE, flags=0x4d))
    assert codeobject.code_sha256(elf(BASE, machine=224)) != codeobject.code_sha256(elf(BASE, machine=190))


@pytest.mark.unit
def test_the_debug_mask_is_names_of_debug_information_only():
    for name in (".debug_info", ".debug_line", ".nv_debug_line_sass", ".rela.debug_frame", ".rel.debug_line",
                 ".nv.merc.debug_line", ".nv.merc.rela.debug_frame", ".nv.merc.nv_debug_ptx_txt"):
        assert codeobject.is_debug_info(name), name
    for name in (".text", ".rodata", ".data", ".note", ".nv.info.k", ".nv.constant3", ".rela.text.k", ".symtab",
                 ".nv.capmerc.text.k", ".nv.merc.nv.info.k", ".comment", ".debugger_hint", "debug_line"):
        assert not codeobject.is_debug_info(name), name


@pytest.mark.unit
def test_a_code_object_without_code_is_a_parse_error():
    with pytest.raises(ParseError, match="no executable section"):
        codeobject.code_sha256(elf([s for s in BASE if s is not CODE]))


# --- measured: the mask is what a moved checkout changes, on every bundled target ------------------------------

KERNEL = """\
import triton
import triton.language as tl


@triton.jit
def moved_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.exp(x) * 2.0 + 1.0, mask=mask)
"""
SPEC = """\
source: moved.py
function: moved_kernel
targets: ['*']
defaults:
  args:
    x_ptr: {tensor: fp32, shape: [4096]}
    y_ptr: {tensor: fp32, shape: [4096]}
    n: 4096
cases:
  - name: b256
    constexprs: {BLOCK: 256}
"""


def _project(root: Path) -> Path:
    (root / "kernels").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["kernels"]\n')
    (root / "kernels" / "moved.py").write_text(KERNEL)
    (root / "kernels" / "moved.yaml").write_text(SPEC)
    return root


def _emitted(run_xisa, project: Path, cache: Path) -> tuple[dict[str, dict], dict[str, bytes]]:
    out = run_xisa("compile", "--json", "--no-cache", "--emit", "emit", cwd=project, env={"XISA_CACHE_DIR": str(cache)})
    assert out.code == 0, out.err
    cells = {c["target"]: c for c in json.loads(out.out)["cells"]}
    binaries = {path.parent.name: path.read_bytes() for path in (project / "emit").glob("moved/b256/*/moved.*")
                if path.suffix in (".hsaco", ".cubin")}
    return cells, binaries


def test_a_moved_checkout_changes_debug_information_only_on_every_target(run_xisa, tmp_path):
    first_cells, first = _emitted(run_xisa, _project(tmp_path / "a"), tmp_path / "cache-a")
    moved = tmp_path / "elsewhere" / "a much longer path" / "checkout"
    shutil.copytree(tmp_path / "a", moved)
    source = moved / "kernels" / "moved.py"
    source.write_text("# moved, and every line of the kernel two lines down\n\n" + source.read_text())
    moved_cells, second = _emitted(run_xisa, moved, tmp_path / "cache-b")
    assert set(first) == set(first_cells) and len(first) == 13
    for target, binary in first.items():
        identity_a, sections_a = codeobject.read_elf(binary)
        identity_b, sections_b = codeobject.read_elf(second[target])
        differing = {a.name for a, b in zip(sections_a, sections_b, strict=True) if a != b}
        assert identity_a == identity_b
        assert all(codeobject.is_debug_info(name) for name in differing), (target, differing)
        assert moved_cells[target]["code_sha256"] == first_cells[target]["code_sha256"]
    # the mask is not vacuous: the line information did move on the targets that keep it in the code object
    assert any(first[t] != second[t] for t in first)


DEBUG_KERNEL = KERNEL.replace("    tl.store(", "    tl.device_assert(x < 100.0, \"x out of range\")\n    tl.store(")


def test_a_debug_kernel_names_its_source_path_in_its_data_so_a_move_is_a_change(run_xisa, tmp_path):
    """`tl.device_assert` under `debug: true` puts the message, the source file's absolute path and the line into
    the code object's data: another checkout is another code object, and xisa says so instead of masking it."""
    def project(root: Path) -> Path:
        _project(root)
        (root / "kernels" / "moved.py").write_text(DEBUG_KERNEL)
        spec = root / "kernels" / "moved.yaml"
        spec.write_text(spec.read_text().replace("targets: ['*']", "targets: [gfx942, sm_90]")
                        .replace("    n: 4096\n", "    n: 4096\n  options: {debug: true}\n"))
        return root

    first_cells, first = _emitted(run_xisa, project(tmp_path / "a"), tmp_path / "cache-a")
    second_cells, second = _emitted(run_xisa, project(tmp_path / "b-elsewhere"), tmp_path / "cache-b")
    for target in ("gfx942", "sm_90"):
        assert str(tmp_path / "a" / "kernels" / "moved.py").encode() in first[target]
        assert second_cells[target]["code_sha256"] != first_cells[target]["code_sha256"]
        digests_a = codeobject.short_digests(codeobject.section_digests(first[target]))
        digests_b = codeobject.short_digests(codeobject.section_digests(second[target]))
        assert set(codeobject.changed_sections(digests_a, digests_b)) & {".rodata", ".nv.global.init"}


@pytest.mark.unit
def test_ptxas_gets_the_ptx_with_relative_source_paths_and_nothing_else_changed():
    """ptxas-blackwell's allocation follows the `.file` strings (xisa.compile.tools.ptxas)."""
    ptx = ('.version 8.7\n.target sm_100a\n\t.file\t1 "/home/u/proj/kernels/k.py"\n'
           '\t.file\t2 "/home/u/proj/.venv/lib/python3.11/site-packages/triton/language" "standard.py"\n'
           '\tmov.u32 %r1, "/not/a/file/directive";\n\t.loc\t1 12 7\n')
    shown = {"/home/u/proj/kernels/k.py": "kernels/k.py",
             "/home/u/proj/.venv/lib/python3.11/site-packages/triton/language": "triton/language"}
    out = relative_ptx(ptx, shown.__getitem__)
    assert '.file\t1 "kernels/k.py"' in out and '.file\t2 "triton/language" "standard.py"' in out
    assert out.replace('"kernels/k.py"', "").replace('"triton/language"', "") == \
        ptx.replace('"/home/u/proj/kernels/k.py"', "").replace(
            '"/home/u/proj/.venv/lib/python3.11/site-packages/triton/language"', "")
    assert '"/not/a/file/directive"' in out


def _dwarf_bytes(ptx: str) -> bytes:
    """The `.b8` bytes of the PTX's `.debug_info` (its inline strings among them)."""
    body = ptx[ptx.index(".section\t.debug_info"):]
    body = body[:body.index("}")]
    return bytes(int(v) for line in body.splitlines() if line.startswith(".b8 ")
                 for v in line[4:].split("//")[0].split(","))


def _debug_info(comp_dir: str) -> str:
    """A PTX debug section as LLVM writes it: a unit whose DIE at 0x20 is referenced from a later one."""
    name = "".join(f".b8 {b}\n" for b in comp_dir.encode()) + ".b8 0\n"
    length = 7 + 1 + len(comp_dir) + 1 + 1 + 4 + 8 + 2
    return (".section\t.debug_abbrev\n\t{\n.b8 1 // Abbreviation Code\n.b8 17 // DW_TAG_compile_unit\n"
            ".b8 27 // DW_AT_comp_dir\n.b8 8 // DW_FORM_string\n.b8 49 // DW_AT_abstract_origin\n"
            ".b8 19 // DW_FORM_ref4\n.b8 58 // DW_AT_decl_file\n.b8 6 // DW_FORM_data4\n\t}\n"
            f".section\t.debug_info\n\t{{\n.b32 {length} // Length of Unit\n.b8 2 // DWARF version number\n"
            ".b8 0\n.b32 .debug_abbrev // Offset Into Abbrev. Section\n.b8 8 // Address Size (in bytes)\n"
            f".b8 1 // Abbrev [1] 0xb:0x{length:x} DW_TAG_compile_unit\n"
            + name.replace(".b8", ".b8", 1).replace("\n", " // DW_AT_comp_dir\n", 1)
            + f".b32 {12 + len(comp_dir) + 1} // DW_AT_abstract_origin\n.b32 7 // DW_AT_decl_file\n"
            ".b64 $L__func_begin0 // DW_AT_low_pc\n.b8 0 // End Of Children Mark\n.b8 0\n\t}\n"
            ".section\t.debug_str\n\t{\n$L__info_string0:\n.b8 103 // string offset=0\n\t}\n")


@pytest.mark.unit
def test_the_dwarf_compile_unit_folder_is_shown_relative_and_its_offsets_follow():
    """The PTX's DWARF names the kernel's folder in bytes; the unit length and the references after it follow its
    length, so two checkouts give ptxas the same bytes, and a plain number of the same width is left alone."""
    def shown(path):
        return path.removeprefix("/home/someone/a/much/longer/checkout/").removeprefix("/w/")
    short, deep = (relative_ptx(".version 8.7\n" + _debug_info(folder), shown)
                   for folder in ("/w/kernels", "/home/someone/a/much/longer/checkout/kernels"))
    assert short == deep
    assert "kernels".encode() in _dwarf_bytes(short) and b"/w/" not in _dwarf_bytes(short)
    lines = short.split(".section\t.debug_info")[1].splitlines()
    numbers = [int(line.split()[1]) for line in lines if line.startswith(".b32 ") and line.split()[1].isdigit()]
    length = 7 + 1 + len("kernels") + 1 + 1 + 4 + 8 + 2
    assert numbers == [length, 12 + len("kernels") + 1, 7]    # unit length, the reference, decl_file untouched
    assert "//" not in short.split(".section\t.debug_info")[1].split("}")[0]
    assert ".section\t.debug_str\n\t{\n$L__info_string0:" in short


@pytest.mark.unit
def test_a_dwarf_reference_xisa_cannot_move_is_refused():
    ptx = _debug_info("/w/kernels").replace(".b8 19 // DW_FORM_ref4", ".b8 18 // DW_FORM_ref2")
    with pytest.raises(ToolchainError, match="references other than DW_FORM_ref4"):
        relative_ptx(ptx, lambda path: path)


def test_ptxas_reads_the_same_bytes_from_any_checkout(run_xisa, tmp_path):
    """Measured on the PTX Triton writes: it names the checkout (`.file`, DWARF), what ptxas gets does not."""
    texts = {}
    for root in (tmp_path / "a", tmp_path / "a much longer" / "path to another" / "checkout"):
        _project(root)
        out = run_xisa("compile", "--arch", "sm_100", "--no-cache", "--emit", "emit", "-q", cwd=root,
                       env={"XISA_CACHE_DIR": str(tmp_path / "cache")})
        assert out.code == 0, out.err
        texts[root] = (root / "emit/moved/b256/sm_100/moved.ptx").read_text()
    (a, ptx_a), (b, ptx_b) = texts.items()
    assert ptx_a != ptx_b and str(b / "kernels").encode() in _dwarf_bytes(ptx_b)
    assert relative_ptx(ptx_a, SourceFiles([a]).path_of) == relative_ptx(ptx_b, SourceFiles([b]).path_of)
    # and the compile workers do hand ptxas that form: the cubins, line information included, are one
    cubin_a, cubin_b = ((root / "emit/moved/b256/sm_100/moved.cubin").read_bytes() for root in (a, b))
    assert str(tmp_path).encode() not in cubin_a + cubin_b and b"moved.py" in cubin_b
    assert cubin_a == cubin_b


@pytest.mark.unit
def test_ptxas_runs_as_its_name_on_fixed_file_names_wherever_the_input_is(tmp_path, monkeypatch):
    """The input's path and argv[0] reach ptxas-blackwell's allocation (xisa.compile.tools.ptxas): ptxas gets the same
    command whatever folder Triton's temp file and the virtual environment are in, in a fresh folder of its own,
    and the output lands where Triton reads it."""
    import subprocess

    from xisa.compile.tools import ptxas

    seen = []

    def run(argv, *, executable, cwd, **kwargs):
        seen.append((argv, executable, sorted(p.name for p in Path(cwd).iterdir())))
        (Path(cwd) / argv[-1]).write_bytes((Path(cwd) / argv[-3]).read_bytes() + b"// assembled")
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(ptxas.subprocess, "run", run)
    for folder in ("t", "a/much/deeper/temp/folder"):
        tool = tmp_path / folder / "venv" / "bin" / "ptxas-blackwell"
        source = tmp_path / folder / "tmpab12cd.ptx"
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(".version 8.7\n")
        _CanonicalSubprocess.run([str(tool), "-lineinfo", "-v", "--gpu-name=sm_100a", str(source), "-o",
                                  f"{source}.o"], check=True)
        assert Path(f"{source}.o").read_text() == ".version 8.7\n// assembled"
    assert [argv for argv, _, _ in seen] == [["ptxas-blackwell", "-lineinfo", "-v", "--gpu-name=sm_100a",
                                              "kernel.ptx", "-o", "kernel.cubin"]] * 2
    assert [executable for _, executable, _ in seen] == [str(tmp_path / f / "venv/bin/ptxas-blackwell")
                                                         for f in ("t", "a/much/deeper/temp/folder")]
    assert [files for _, _, files in seen] == [["kernel.ptx"]] * 2


@pytest.mark.unit
def test_a_ptxas_command_of_another_shape_is_refused():
    with pytest.raises(ToolchainError, match="cannot give it fixed file names"):
        _CanonicalSubprocess.run(["/x/ptxas", "--version"], check=True)


@pytest.mark.unit
def test_every_compile_unit_is_made_relative_with_its_own_offsets():
    """LLVM writes a unit per function with debug information (a noinline callee's too): each one's folder, length
    and references are its own."""
    def two_units(folder: str) -> str:
        one = _debug_info(folder)
        head, info = one.split(".section\t.debug_info\n\t{\n")
        unit, tail = info.split("\t}\n", 1)
        return f"{head}.section\t.debug_info\n\t{{\n{unit}{unit}\t}}\n{tail}"

    short, deep = (relative_ptx(".version 8.7\n" + two_units(f), lambda p: p.rpartition("/")[2])
                   for f in ("/w/kernels", "/a/much/longer/checkout/kernels"))
    assert short == deep
    info = short.split(".section\t.debug_info")[1].split("}")[0]
    numbers = [int(line.split()[1]) for line in info.splitlines() if line.startswith(".b32 ") and line.split()[1].isdigit()]
    length = 7 + 1 + len("kernels") + 1 + 1 + 4 + 8 + 2
    assert numbers == [length, 12 + len("kernels") + 1, 7] * 2
