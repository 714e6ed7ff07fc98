"""The verdict's oracle: mutate kernels and specs; wherever a cell's code object changed, `xisa check` must say so.

For every mutation (one edit to a kernel source or a spec) and every cell it can touch, three runs of the real
`xisa` command on a copy of a blessed project: `xisa check` with the cache still holding the unmutated results
(warm), `xisa check --no-cache` (cold), and `xisa compile --no-cache --emit` for the code object itself (hsaco,
cubin). The raw verdict is the code object's bytes against the unmutated compile's, every section compared
except debug information (paths and line numbers: `xisa/analyze/codeobject.py`, the one mask). A disagreement
is a cell whose warm or cold verdict is `same` where the bytes changed, or `changed` where they did not.

    python bench/mutation.py                      # the scratch kernels below on gfx942, gfx1100, sm_90, sm_100
    python bench/mutation.py --corpus             # and a mutation set per bundled kernel (kernels/), first case
    python bench/mutation.py --arch sm_90 --arch gfx950

Prints the table (mutation x target: code-object sections changed, warm verdict, cold verdict) and exits 1 on
any disagreement. `tests/golden/test_mutations.py` runs the scratch set.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from xisa.analyze.codeobject import read_elf, is_debug_info  # noqa: E402  (the repo first, as above)

DEFAULT_TARGETS = ("gfx942", "gfx1100", "sm_90", "sm_100")

SCRATCH_KERNELS = {
    "fma.py": '''\
import triton
import triton.language as tl


@triton.jit
def fma_kernel(a_ptr, b_ptr, c_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    c = tl.load(c_ptr + offsets, mask=mask)
    out = a * b + c
    out = tl.where(out > 0.0, out, out * 0.5)
    tl.store(out_ptr + offsets, out + 1.5, mask=mask)
''',
    "table.py": '''\
import triton
import triton.language as tl


@triton.jit
def table_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    y = tl.inline_asm_elementwise(
        "{ .const .align 4 .b32 tbl[4] = {1,2,3,4}; .reg .u64 a; .reg .u64 b; .reg .u32 i; and.b32 i, $1, 3; "
        "mul.wide.u32 a, i, 4; mov.u64 b, tbl; add.u64 a, a, b; ld.const.u32 $0, [a]; }",
        "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(y_ptr + offsets, y)
''',
    "amdtable.py": '''\
import triton
import triton.language as tl


@triton.jit
def amdtable_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    y = tl.inline_asm_elementwise(
        ".pushsection .data.xisa_table,\\"aw\\"\\n.long 1, 2, 3, 4\\n.popsection\\nv_mov_b32 $0, $1",
        "=v,v", [x], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(y_ptr + offsets, y)
''',
    "assertk.py": '''\
import triton
import triton.language as tl


@triton.jit
def assertk_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    tl.device_assert(x < 100.0, "x out of range")
    tl.store(y_ptr + offsets, x * 2.0)
''',
    "strided.py": '''\
import triton
import triton.language as tl


@triton.heuristics({"CONTIG": lambda args: args["x_ptr"].stride(1) == 1})
@triton.jit
def strided_kernel(x_ptr, y_ptr, stride_row, stride_col, CONTIG: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    if CONTIG:
        x = tl.load(x_ptr + r[:, None] * stride_row + r[None, :])
    else:
        x = tl.load(x_ptr + r[:, None] * stride_row + r[None, :] * stride_col)
    tl.store(y_ptr + r[:, None] * BLOCK + r[None, :], x)
''',
    "scalar.py": '''\
import triton
import triton.language as tl


@triton.jit
def scalar_kernel(x_ptr, y_ptr):
    tl.store(y_ptr, tl.load(x_ptr) * 3.0)
''',
}

# kernel -> (the vendor whose targets it runs on, None: all; its arguments; its options; its case)
FP32_4096 = "{tensor: fp32, shape: [4096]}"
INT32_1024 = "{tensor: int32, shape: [1024]}"
SCRATCH_SPECS = {
    "fma": (None, {"a_ptr": FP32_4096, "b_ptr": FP32_4096, "c_ptr": FP32_4096, "out_ptr": FP32_4096, "n": "4096"},
            "", "b256\n    constexprs: {BLOCK: 256}"),
    "table": ("sm_", {"x_ptr": INT32_1024, "y_ptr": INT32_1024}, "", "b128\n    constexprs: {BLOCK: 128}"),
    "amdtable": ("gfx", {"x_ptr": INT32_1024, "y_ptr": INT32_1024}, "", "b128\n    constexprs: {BLOCK: 128}"),
    "assertk": (None, {"x_ptr": FP32_4096, "y_ptr": FP32_4096}, "{debug: true}", "b256\n    constexprs: {BLOCK: 256}"),
    "strided": (None, {"x_ptr": "{tensor: fp32, shape: [64, 64], strides: [64, 1]}", "y_ptr": FP32_4096,
                       "stride_row": "64", "stride_col": "3"}, "", "b64\n    constexprs: {BLOCK: 64}"),
    "scalar": (None, {"x_ptr": "{tensor: fp32, shape: [16]}", "y_ptr": "{tensor: fp32, shape: [16]}"},
               "{num_warps: 4}", "one"),
}


def scratch_spec(kernel: str, targets: list[str]) -> str | None:
    """The spec YAML of a scratch kernel for those of `targets` it runs on (None: none)."""
    vendor, args, options, case = SCRATCH_SPECS[kernel]
    chosen = [t for t in targets if vendor is None or t.startswith(vendor)]
    if not chosen:
        return None
    lines = [f"source: {kernel}.py", f"function: {kernel}_kernel", f"targets: [{', '.join(chosen)}]", "defaults:",
             "  args:", *(f"    {name}: {value}" for name, value in args.items())]
    lines += [f"  options: {options}"] if options else []
    return "\n".join([*lines, "cases:", f"  - name: {case}", ""])


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str        # relative to the project
    old: str
    new: str


SCRATCH_MUTATIONS = (
    Mutation("swap operands a*b+c -> a*c+b", "kernels/fma.py", "out = a * b + c", "out = a * c + b"),
    Mutation("literal 1.5 -> 2.5", "kernels/fma.py", "out + 1.5", "out + 2.5"),
    Mutation("branch > -> >=", "kernels/fma.py", "out > 0.0", "out >= 0.0"),
    Mutation("comment above the kernel", "kernels/fma.py", "@triton.jit\n", "# a comment\n@triton.jit\n"),
    Mutation("constant table {1,2,3,4} -> {5,6,7,8}", "kernels/table.py", "{1,2,3,4}", "{5,6,7,8}"),
    Mutation("data section .long 1,2,3,4 -> 5,6,7,8", "kernels/amdtable.py", ".long 1, 2, 3, 4", ".long 5, 6, 7, 8"),
    Mutation("assert bound 100.0 -> 200.0 (debug: true)", "kernels/assertk.py", "x < 100.0", "x < 200.0"),
    Mutation("a transposed view: the heuristic's other branch", "kernels/strided.yaml", "strides: [64, 1]}",
             "strides: [1, 64]}"),
    Mutation("launch option num_warps 4 -> 8", "kernels/scalar.yaml", "num_warps: 4", "num_warps: 8"),
    Mutation("literal 3.0 -> 3.5", "kernels/scalar.py", "* 3.0", "* 3.5"),
)


def scratch_project(root: Path, targets: tuple[str, ...]) -> Path:
    """A project of the scratch kernels for `targets` (a kernel for one vendor only gets that vendor's)."""
    kernels = root / "kernels"
    kernels.mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["kernels"]\n')
    for name, text in SCRATCH_KERNELS.items():
        (kernels / name).write_text(text)
        spec = scratch_spec(Path(name).stem, list(targets))
        if spec is not None:
            (kernels / f"{Path(name).stem}.yaml").write_text(spec)
    return root


def corpus_mutations() -> tuple[Mutation, ...]:
    """Edits of the bundled kernels, some that change code and some that cannot (`--corpus` compiles the first
    case of gemm, kv_dequant and decode_stage1 on the selected targets)."""
    return (
        Mutation("gemm: store mask n -> m", "kernels/gemm.py", "mask=mask_m[:, None] & mask_n[None, :])",
                 "mask=mask_m[:, None] & mask_m[None, :])"),
        Mutation("gemm: the fp8 scales' order (a branch bf16 never takes)", "kernels/gemm.py",
                 "(tl.load(scale_ptr) * tl.load(scale_ptr + 1))", "(tl.load(scale_ptr + 1) * tl.load(scale_ptr))"),
        Mutation("kv_dequant: the scale doubled", "kernels/kv_dequant.py", ".to(tl.float32) * scale[:, None]",
                 ".to(tl.float32) * scale[:, None] * 2.0"),
        Mutation("decode: log2(e) literal", "kernels/decode_attention.py", "sm_scale * 1.4426950408889634",
                 "sm_scale * 1.4426950408889600"),
        Mutation("decode: comment above a kernel", "kernels/decode_attention.py", "@triton.jit\n",
                 "# a comment\n@triton.jit\n"),
    )


def xisa(project: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XISA_CACHE_DIR": str(cache), "COLUMNS": "250"}
    env.pop("CI", None)
    return subprocess.run([sys.executable, "-m", "xisa", *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=1800)


def verdicts(proc: subprocess.CompletedProcess) -> dict[str, str]:
    try:
        cells = json.loads(proc.stdout)["cells"]
    except (ValueError, KeyError):
        raise SystemExit(f"xisa check printed no report (exit {proc.returncode}): {proc.stderr.strip()[-400:]}")
    return {f"{c['kernel']}:{c['case']}@{c['target']}": c["verdict"] for c in cells}


def binaries(folder: Path) -> dict[str, bytes]:
    """cell id -> its code object's bytes, from an `--emit` folder (<kernel>/<case>/<target>/<kernel>.hsaco|cubin)."""
    found = {}
    for path in sorted(folder.glob("*/*/*/*")):
        if path.suffix in (".hsaco", ".cubin"):
            kernel, case, target = path.parts[-4:-1]
            found[f"{kernel}:{case}@{target}"] = path.read_bytes()
    return found


def changed_sections(old: bytes, new: bytes) -> list[str]:
    """The sections (and the header) whose bytes or header fields differ, debug information left out."""
    (old_id, old_sections), (new_id, new_sections) = read_elf(old), read_elf(new)
    before = {s.name: s for s in old_sections if not is_debug_info(s.name)}
    after = {s.name: s for s in new_sections if not is_debug_info(s.name)}
    names = ["(header)"] if old_id != new_id else []
    return names + [n for n in dict.fromkeys([*after, *before]) if before.get(n) != after.get(n)]


def emit(project: Path, cache: Path, out: Path, selection: list[str]) -> dict[str, bytes]:
    proc = xisa(project, cache, "compile", "--no-cache", "--emit", str(out), *selection)
    if proc.returncode != 0:
        raise SystemExit(f"xisa compile --emit failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}")
    return binaries(out)


@dataclass
class Row:
    mutation: str
    cell: str
    sections: list[str]     # changed outside debug information; empty: the code object is the same
    warm: str
    cold: str               # `-`: not run (a focused run's cell outside the mutated file)

    @property
    def agrees(self) -> bool:
        expected = "changed" if self.sections else "same"
        return self.warm == expected and self.cold in (expected, "-")


def run_mutations(project: Path, mutations: tuple[Mutation, ...], selection: list[str], work: Path, *,
                  focus: bool = False) -> list[Row]:
    """Bless a copy of `project`, then apply each mutation to that same tree in turn (as a pull request edits a
    checkout: some kernels, a debug assert's message among them, carry their file's path) and undo it after:
    the rows of the table. `focus`: the cold check and the code objects only for the kernel named by the
    mutated file's stem, for a quicker run where each file holds one kernel; every other cell, whose files the
    mutation did not touch, is judged by the warm check alone (cold: `-`)."""
    cache = work / "cache"
    tree = work / "tree"
    shutil.copytree(project, tree)
    blessed = xisa(tree, cache, "bless", *selection)
    if blessed.returncode != 0:
        raise SystemExit(f"xisa bless failed (exit {blessed.returncode}): {blessed.stderr.strip()[-400:]}")
    original = emit(tree, cache, work / "emit-base", selection)
    rows = []
    for number, mutation in enumerate(mutations):
        path = tree / mutation.file
        text = path.read_text()
        if mutation.old not in text:
            raise SystemExit(f"mutation {mutation.name!r}: {mutation.old!r} is not in {mutation.file}")
        path.write_text(text.replace(mutation.old, mutation.new, 1))
        try:
            warm = verdicts(xisa(tree, cache, "check", "--format", "json", *selection))
            cold_selection = [*selection, "--kernel", Path(mutation.file).stem] if focus else selection
            cold = verdicts(xisa(tree, work / f"cold{number}", "check", "--no-cache", "--format", "json",
                                 *cold_selection))
            mutated = emit(tree, work / f"cold{number}", work / f"emit{number}", cold_selection)
        finally:
            path.write_text(text)
        for cell in sorted(original):
            if cell not in mutated and focus:
                rows.append(Row(mutation.name, cell, [], warm.get(cell, "?"), "-"))
                continue
            sections = changed_sections(original[cell], mutated[cell]) if cell in mutated else ["(no code object)"]
            rows.append(Row(mutation.name, cell, sections, warm.get(cell, "?"), cold.get(cell, "?")))
    return rows


def print_table(rows: list[Row]) -> int:
    width = max(len(r.mutation) for r in rows)
    cell_width = max(len(r.cell) for r in rows)
    print(f"{'mutation':<{width}}  {'cell':<{cell_width}}  {'code object changed in':<40}  warm     cold     ok")
    for row in rows:
        changed = ", ".join(row.sections) or "-"
        print(f"{row.mutation:<{width}}  {row.cell:<{cell_width}}  {changed[:40]:<40}  {row.warm:<8} {row.cold:<8} "
              f"{'yes' if row.agrees else 'NO'}")
    bad = [r for r in rows if not r.agrees]
    moved = sum(1 for r in rows if r.sections)
    print(f"{len(rows)} cells x mutations: {moved} with a changed code object, {len(rows) - moved} without; "
          f"{len(bad)} disagreements")
    return len(bad)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", action="append", help="targets (default: %s)" % ", ".join(DEFAULT_TARGETS))
    parser.add_argument("--corpus", action="store_true", help="also mutate the bundled kernels (first case each)")
    args = parser.parse_args()
    targets = tuple(args.arch or DEFAULT_TARGETS)
    selection = [flag for t in targets for flag in ("--arch", t)]
    with tempfile.TemporaryDirectory(prefix="xisa-mutation-") as tmp:
        work = Path(tmp)
        rows = run_mutations(scratch_project(work / "scratch", targets), SCRATCH_MUTATIONS, selection, work / "s")
        if args.corpus:
            corpus = work / "corpus"
            corpus.mkdir()
            for name in ("kernels", "targets", "pyproject.toml"):
                if (REPO / name).exists():
                    (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(REPO / name, corpus / name)
            kernels = ["--kernel", "gemm:bf16_4k", "--kernel", "kv_dequant:int8_d128", "--kernel",
                       "decode_stage1:fp8_d128"]
            rows += run_mutations(corpus, corpus_mutations(), selection + kernels, work / "c")
    return 1 if print_table(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
