"""Bad input: every one gets a clear one-line error, exit code 2, and nothing written or lost.

The catalogue (docs/reliability.md) lists each input with the test here that proves it. A helper
snapshots the project before and after each run: goldens byte-identical, no stray temp files.
Also here: determinism across shards and a cold or warm Triton cache, and the security checks.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import yaml

from support import FIXTURES, REPO, copy_tinyproj, xisa_process
import xisa.cli
import xisa.compile.worker.toolchain
from xisa.golden import bless as bless_module
from xisa.analyze.amdgcn import analyze_amdgcn
from xisa.errors import GoldenError, SpecError, ToolchainError, XisaError
from xisa.golden.store import golden_paths, read_golden, render_golden
from xisa.names import CASE_NAME, KERNEL_NAME, MAX_NAME_LENGTH, check_name
from xisa.compile.worker.result import CellResult
from xisa.compile.worker.toolchain import REFUSED_ENV, check_environment, check_supported
from xisa.yamlio import MAX_EXPANDED_NODES, parse_yaml

ASM = FIXTURES / "asm"


# --- helpers -------------------------------------------------------------------------------------

def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` (Python's own __pycache__ aside): what must not change on bad input."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def assert_one_line_error(out, *needles: str, code: int = 2) -> str:
    """Exit `code`, no traceback, exactly one line on stderr `xisa: error: ...` holding every needle."""
    assert out.code == code, (out.code, out.out[-2000:], out.err[-2000:])
    assert "Traceback" not in out.err and "Traceback" not in out.out
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1, out.err
    line = lines[0]
    assert line.startswith("xisa: error: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (old, path)
    path.write_text(text.replace(old, new, 1))


# --- 1. a bad spec or project file: refused before anything compiles --------------------------------

SCALE = "kernels/scale.yaml"
PYPROJECT = "pyproject.toml"


def _nested_aliases(levels: int, indent: str = "") -> str:
    """`levels` lists of nine, each of nine aliases of the one before: 9**levels values from a few hundred bytes."""
    lines, previous = [], None
    for level in range(levels):
        items = ", ".join(["lol"] * 9 if previous is None else [f"*a{previous}"] * 9)
        lines.append(f"{indent}  - &a{level} [{items}]")
        previous = level
    return "\n".join(lines) + "\n"


LONG_NAME = "s" * (MAX_NAME_LENGTH + 100)

# id -> (file, old, new | bytes, needles in the one-line error)
SPEC_CASES = {
    "malformed-yaml": (SCALE, "targets: [gfx1100, gfx1201, gfx942]", "targets: [gfx1100, gfx1201, gfx942",
                       ["kernels/scale.yaml", "invalid YAML: line", "fix: correct the YAML syntax"]),
    "tab-indent": (SCALE, "  args:\n    x_ptr", "  args:\n\tx_ptr",
                   ["kernels/scale.yaml", "line 7 is indented with a tab", "fix: indent with spaces"]),
    "duplicate-key": (SCALE, "function: scale_kernel\n", "function: scale_kernel\nfunction: dot_kernel\n",
                      ["kernels/scale.yaml", "duplicate key 'function' (line 4)"]),
    "non-utf8": (SCALE, None, b"name: scale\n# caf\xe9\nsource: scale.py\n",
                 ["kernels/scale.yaml", "not UTF-8 text", "fix: save the file as UTF-8"]),
    "python-tag": (SCALE, "name: scale", "name: !!python/object/apply:os.system ['touch PWNED']",
                   ["kernels/scale.yaml", "invalid YAML", "could not determine a constructor",
                    "python/object/apply:os.system"]),
    "not-a-mapping": (SCALE, None, b"- scale\n- dot\n", ["kernels/scale.yaml: <top>: must be a mapping, got list"]),
    "misspelt-key": (SCALE, "function: scale_kernel", "functon: scale_kernel",
                     ["kernels/scale.yaml: functon", "unknown key 'functon'", "did you mean 'function'?"]),
    "function-not-identifier": (SCALE, "function: scale_kernel", "function: scale-kernel",
                                ["kernels/scale.yaml: function", "not a Python identifier", "fix: function:"]),
    "kernel-name-dotdot": (SCALE, "name: scale", "name: ../scale",
                           ["kernels/scale.yaml: name", "kernel name '../scale' is not allowed",
                            "no path separators or '..'"]),
    "case-name-separator": (SCALE, "  - name: small", "  - name: sm/all",
                            ["kernels/scale.yaml: cases[0].name", "case name 'sm/all' is not allowed"]),
    "matrix-value-dotdot": (SCALE, "    constexprs: {BLOCK: 1024}\n", "    constexprs: {BLOCK: 1024}\n"
                            "    matrix: {v: {'..': {}}}\n",
                            ["kernels/scale.yaml: cases[1] (big).matrix.v", "matrix value name '..' is not allowed"]),
    "source-missing": (SCALE, "source: scale.py", "source: scale_v2.py",
                       ["kernels/scale.yaml: source", "'scale_v2.py' does not exist"]),
    "source-not-python": (SCALE, "source: scale.py", "source: ../../../etc/passwd",
                          ["kernels/scale.yaml: source", "is not a .py file path"]),
    "bad-expectation": (SCALE, "'buffer_load*': '>0'", "'buffer_load*': '>>0'",
                        ["kernels/scale.yaml: cases[1] (big).expect.gfx*.buffer_load*",
                         "'>>0' is not a count condition", "fix: use an int or a string like"]),
    "duplicate-kernel-name": ("kernels/dot.yaml", "name: dot", "name: scale",
                              ["name: kernel name 'scale' is also defined in kernels/"]),
    "pyproject-unknown-setting": (PYPROJECT, 'specs = ["kernels"]', 'spec = ["kernels"]',
                                  ["pyproject.toml: tool.xisa.spec", "unknown setting 'spec'", "allowed:"]),
    "pyproject-invalid-toml": (PYPROJECT, 'golden = "golden"', 'golden = golden',
                               ["pyproject.toml", "invalid TOML"]),
    "pyproject-specs-not-paths": (PYPROJECT, 'specs = ["kernels"]', "specs = 3",
                                  ["pyproject.toml: tool.xisa.specs", "must be a path or a list of paths"]),
    # 6 levels (531441 values) stay harmless for the old code to load; the bound is the same for 9.
    "billion-laughs": (SCALE, "name: scale\n", "name: scale\ndescription:\n" + _nested_aliases(6),
                       ["kernels/scale.yaml", f"aliases expand to more than {MAX_EXPANDED_NODES} YAML values",
                        "fix: write the values out"]),
    "case-name-too-long": (SCALE, "  - name: small", f"  - name: {LONG_NAME}",
                           ["kernels/scale.yaml: cases[0].name", f"is {len(LONG_NAME)} characters long",
                            f"more than {MAX_NAME_LENGTH}", "fix: use a name of at most"]),
    "matrix-name-too-long": (SCALE, "    constexprs: {BLOCK: 1024}\n",
                             "    constexprs: {BLOCK: 1024}\n    matrix: {v: {" + "v" * (MAX_NAME_LENGTH // 2)
                             + ": {}}, w: {" + "w" * (MAX_NAME_LENGTH // 2) + ": {}}}\n",
                             ["kernels/scale.yaml: cases[1] (big).matrix", "characters long",
                              f"more than {MAX_NAME_LENGTH}"]),
    "pyproject-stream-files": (PYPROJECT, 'golden = "golden"', 'golden = "golden"\nstream_files = "yes"',
                               ["pyproject.toml: tool.xisa.stream_files", "must be true or false"]),
}


@pytest.mark.parametrize("case", sorted(SPEC_CASES))
def test_bad_spec_or_project_file(run_xisa_in_process, tinyproj, case):
    name, old, new, needles = SPEC_CASES[case]
    path = tinyproj / name
    if isinstance(new, bytes):
        path.write_bytes(new)
    else:
        _edit(path, old, new)
    before = snapshot(tinyproj)
    out = run_xisa_in_process("compile", "--arch", "gfx942", cwd=tinyproj)
    assert_one_line_error(out, *needles)
    assert snapshot(tinyproj) == before
    assert not (tinyproj / "kernels" / "PWNED").exists() and not (tinyproj / "PWNED").exists()


# --- 2. bad command-line options ---------------------------------------------------------------------

OPTION_CASES = {
    "misspelt-target": (["compile", "--arch", "gfx94"],
                        ["--arch", "unknown target 'gfx94'", "did you mean 'gfx942'?", "known targets:"]),
    "unknown-target": (["check", "--arch", "gfx1101"], ["unknown target 'gfx1101'", "did you mean 'gfx1100'?"]),
    "unknown-option": (["compile", "--shard", "1/2"], ["No such option: --shard", "--help"]),
    "jobs-not-int": (["compile", "--jobs", "many"], ["Invalid value for '--jobs'"]),
    "shard-zero": (["check", "--shard", "0/3"], ["--shard", "'0/3' is not I/N", "fix: e.g. --shard 2/3"]),
    "shard-over": (["check", "--shard", "4/3"], ["--shard", "'4/3' is not I/N"]),
    "shard-garbage": (["check", "--shard", "half"], ["--shard", "'half' is not I/N"]),
    "scope-too-deep": (["check", "--arch", "gfx942", "--scope", "gfx942:scale:small:x"],
                       ["--scope", "not TARGET[:KERNEL[:CASE]]", "fix: e.g. --scope"]),
    "scope-empty-part": (["check", "--arch", "gfx942", "--scope", "gfx942::small"], ["--scope", "not TARGET"]),
    "spec-missing": (["compile", "--spec", "nowhere/specs"], ["nowhere/specs: --spec: no such file or folder"]),
    "kernel-no-match": (["compile", "--kernel", "scael"], ["--kernel", "no kernel matches 'scael'",
                                                           "did you mean 'scale'?"]),
    "lock-timeout-not-number": (["bless", "--lock-timeout", "soon"], ["Invalid value for '--lock-timeout'"]),
    "timeout-inf": (["compile", "--arch", "gfx942", "--timeout", "inf"],
                    ["Invalid value for '--timeout'", "inf is not a number of seconds above 0"]),
    "timeout-nan": (["compile", "--arch", "gfx942", "--timeout", "nan"],
                    ["Invalid value for '--timeout'", "nan is not a number of seconds"]),
    "timeout-zero": (["compile", "--arch", "gfx942", "--timeout", "0"], ["Invalid value for '--timeout'"]),
    "lock-timeout-nan": (["bless", "--arch", "gfx942", "--lock-timeout", "nan"],
                         ["Invalid value for '--lock-timeout'", "nan is not a number of seconds from 0"]),
}


@pytest.mark.parametrize("case", sorted(OPTION_CASES))
def test_bad_command_line(run_xisa_in_process, tinyproj, case):
    args, needles = OPTION_CASES[case]
    before = snapshot(tinyproj)
    out = run_xisa_in_process(*args, cwd=tinyproj)
    assert_one_line_error(out, *needles)
    assert snapshot(tinyproj) == before


def test_report_output_under_a_regular_file(run_xisa, tinyproj):
    (tinyproj / "reports").write_text("a file, not a folder\n")
    before = snapshot(tinyproj)
    out = run_xisa("check", "--arch", "gfx942", "--format", "json", "--output", "reports/check.json", cwd=tinyproj)
    assert_one_line_error(out, "reports", "a regular file is in the way of a folder")
    assert snapshot(tinyproj) == before


# --- 3. cells that cannot bind or import: error cells, one line each, the others complete -------------

_GOOD_ARGS = {"x_ptr": {"tensor": "fp32", "shape": [4096]}, "y_ptr": "*fp32", "n": 4096, "factor": 2.0}
_GOOD_CONSTEXPRS = {"BLOCK": 256, "GFX11_PATH": False}

# case -> (args patch, constexprs patch, options, needles); None as a value removes the key
BIND_CASES = {
    "unknown-dtype": ({"x_ptr": "*bf17"}, {}, {}, ["args.x_ptr.tensor", "unknown dtype 'bf17'",
                                                    "did you mean 'bf16'?"]),
    "constexpr-list": ({}, {"BLOCK": [128, 256]}, {}, ["constexprs.BLOCK", "constexpr value [128, 256] of type list",
                                                        "fix: use an int, float, bool, string or {dtype: NAME}"]),
    "unknown-launch-option": ({}, {}, {"num_warp": 4}, ["options.num_warp", "unknown launch option 'num_warp'",
                                                         "did you mean 'num_warps'?"]),
    "missing-argument": ({"n": None}, {}, {}, ["parameter 'n' has no value", "fix: add args: {n: ...}"]),
    "unknown-parameter": ({"count": 3}, {}, {}, ["args.count", "the kernel has no parameter 'count'"]),
    "constexpr-as-argument": ({"BLOCK": 256}, {"BLOCK": None}, {}, ["args.BLOCK", "is a tl.constexpr parameter",
                                                                     "fix: move it under `constexprs`"]),
    "argument-as-constexpr": ({"n": None}, {"n": 4096}, {}, ["constexprs.n", "is a runtime parameter",
                                                             "fix: move it under `args`"]),
    "bad-shape": ({"x_ptr": {"tensor": "fp32", "shape": [-4]}}, {}, {}, ["args.x_ptr.shape",
                                                                          "shape must be a list of positive ints"]),
    "tensor-unknown-key": ({"x_ptr": {"tensor": "fp32", "shap": [4]}}, {}, {}, ["args.x_ptr.shap",
                                                                                 "a tensor stand-in takes"]),
    "bad-align": ({"x_ptr": {"tensor": "fp32", "align": 3}}, {}, {}, ["args.x_ptr.align", "align 3 must be"]),
    "argument-of-list": ({"n": [1, 2]}, {}, {}, ["args.n", "unsupported argument value [1, 2]"]),
}

# kernel (a spec file of its own) -> (spec text, needles)
MODULE_CASES = {
    "nomodule": ("module: no_such_module_xyz\nfunction: k\n",
                 ["kernels/nomodule.yaml: module", "cannot import module 'no_such_module_xyz'",
                  "ModuleNotFoundError"]),
    "nofunction": ("source: scale.py\nfunction: scale_kernal\n",
                   ["kernels/nofunction.yaml: function", "no function 'scale_kernal'", "did you mean 'scale_kernel'?"]),
    "notjit": ("source: helpers.py\nfunction: helper\n",
               ["kernels/notjit.yaml: function", "'helper' is a function, not a @triton.jit kernel",
                "fix: name a @triton.jit function, or an @triton.autotune"]),
    "outside": ("source: ../../evil.py\nfunction: k\n",
                ["kernels/outside.yaml: source", "is outside the project's kernel roots",
                 "fix: keep kernel sources inside the project"]),
    "stdlibmodule": ("module: json\nfunction: k\n",
                     ["kernels/stdlibmodule.yaml: function", "no function 'k' in the module"]),
    "importfails": ("source: boom.py\nfunction: k\n",
                    ["kernels/importfails.yaml: source", "importing boom.py failed: RuntimeError: boom at import"]),
}


@pytest.fixture(scope="module")
def broken_cells(tmp_path_factory, shared_cache):
    """One project holding every cell-level bad input at once, compiled once: (project, outcome, before, after)."""
    base = tmp_path_factory.mktemp("broken")
    project = base / "proj"
    copy_tinyproj(project)
    kernels = project / "kernels"
    cases = []
    for name, (args, constexprs, options, _) in sorted(BIND_CASES.items()):
        merged_args = {k: v for k, v in {**_GOOD_ARGS, **args}.items() if v is not None}
        merged_cx = {k: v for k, v in {**_GOOD_CONSTEXPRS, **constexprs}.items() if v is not None}
        case = {"name": name, "args": merged_args, "constexprs": merged_cx}
        if options:
            case["options"] = options
        cases.append(case)
    cases.append({"name": "good", "args": _GOOD_ARGS, "constexprs": _GOOD_CONSTEXPRS})
    (kernels / "bad.yaml").write_text(yaml.safe_dump({"source": "scale.py", "function": "scale_kernel",
                                                      "targets": ["gfx942"], "cases": cases}, sort_keys=False))
    for name, (head, _) in MODULE_CASES.items():
        (kernels / f"{name}.yaml").write_text(head + "targets: [gfx942]\ncases:\n  - name: c\n"
                                              "    args: {x_ptr: '*fp32'}\n")
    (kernels / "helpers.py").write_text("def helper(x_ptr):\n    return x_ptr\n")
    (kernels / "boom.py").write_text("raise RuntimeError('boom at import')\n")
    marker = base / "EVIL-IMPORTED"
    (base / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    before = snapshot(project)
    out = xisa_process("compile", "--json", "--arch", "gfx942", "--jobs", "2", cwd=project, cache=shared_cache)
    return project, out, before, snapshot(project), marker


def _cells(outcome) -> dict[str, dict]:
    return {f"{c['kernel']}:{c['case']}": c for c in json.loads(outcome.out)["cells"]}


def test_broken_cells_fail_alone_with_one_line_each(broken_cells):
    project, out, before, after, marker = broken_cells
    assert out.code == 2 and "Traceback" not in out.err
    cells = _cells(out)
    assert {k for k, c in cells.items() if c["status"] == "ok"} == {"bad:good", "scale:small", "scale:big",
                                                                   "dot:f16_32"}
    errors = [line for line in out.err.splitlines() if line.strip()]
    assert len(errors) == len(BIND_CASES) + len(MODULE_CASES)     # one line per error cell, no wrapping
    assert all(line.startswith("error ") and "@gfx942: " in line for line in errors)
    assert after == before                                        # nothing written into the project
    assert not marker.exists()                                    # a source outside the roots is never imported


@pytest.mark.parametrize("case", sorted(BIND_CASES))
def test_arguments_not_matching_the_kernel(broken_cells, case):
    _, out, _, _, _ = broken_cells
    cell = _cells(out)[f"bad:{case}"]
    assert cell["status"] == "error" and "\n" not in cell["error"]
    assert cell["error"].startswith(f"kernels/bad.yaml: cases[")
    for needle in BIND_CASES[case][3]:
        assert needle in cell["error"], (needle, cell["error"])
    assert f"error bad:{case}@gfx942: {cell['error']}" in out.err


@pytest.mark.parametrize("case", sorted(MODULE_CASES))
def test_kernel_module_or_function_problems(broken_cells, case):
    _, out, _, _, _ = broken_cells
    cell = _cells(out)[f"{case}:c"]
    assert cell["status"] == "error" and "\n" not in cell["error"]
    for needle in MODULE_CASES[case][1]:
        assert needle in cell["error"], (needle, cell["error"])


# --- 4. damaged goldens: reported as untrustworthy (exit 2), never rewritten by check ----------------

def _sample_result(kernel="scale", case="small", target="gfx942", asm="scale_gfx942.amdgcn") -> CellResult:
    analysis, _ = analyze_amdgcn((ASM / asm).read_text())
    analysis.resources["occupancy"] = 8
    return CellResult(kernel=kernel, case=case, target=target, status="ok", analysis=analysis,
                      binding={"signature": {"x_ptr": "*fp32"}, "constexprs": {}, "attrs": {}},
                      options={"num_warps": 4})


def _write_sample_golden(golden_dir: Path, **kw) -> tuple[Path, Path]:
    from xisa.golden.store import write_golden

    result = _sample_result(**kw)
    yaml_text, stream_text = render_golden(result, toolchain={"triton": "3.8.0"},
                                           stream_file=True)
    paths = golden_paths(golden_dir, result.kernel, result.case, result.target)
    write_golden(*paths, yaml_text, stream_text)
    return paths


def _damage(yaml_path: Path, stream_path: Path, how: str) -> None:
    text = yaml_path.read_text()
    if how == "conflict-markers":
        yaml_path.write_text("<<<<<<< HEAD\n" + text + "=======\n" + text + ">>>>>>> theirs\n")
    elif how == "truncated":
        yaml_path.write_text(text[: len(text) // 2].rsplit("\n", 1)[0] + "\n")
    elif how == "other-format":
        yaml_path.write_text(text.replace("format: xisa-golden/1", "format: xisa-golden/3"))
    elif how == "stream-disagrees":
        stream_path.write_text(stream_path.read_text().replace("bb0:\n", "bb0:\n  s_nop 0\n", 1))
    elif how == "not-utf8":
        yaml_path.write_bytes(text.encode() + b"# \xff\xfe\n")
    elif how == "stream-missing":
        stream_path.unlink()
    elif how == "python-tag":
        yaml_path.write_text(text.replace("case: small", "case: !!python/object/apply:os.system ['true']"))
    elif how == "hand-edited-count":
        yaml_path.write_text(text.replace("instructions: ", "instructions: 1", 1))
    else:
        raise AssertionError(how)


GOLDEN_DAMAGE = {
    "conflict-markers": ["merge conflict markers at line 1", "fix: resolve the conflict"],
    "truncated": ["golden/scale/small/gfx942.yaml"],
    "other-format": ["format: format 'xisa-golden/3' is neither 'xisa-golden/1' nor 'xisa-golden/2'", "fix: re-bless"],
    "stream-disagrees": ["gfx942.isa: stream file disagrees with the SHA-256 in gfx942.yaml"],
    "not-utf8": ["not UTF-8 text: corrupt golden"],
    "stream-missing": ["gfx942.isa: stream file is missing"],
    "python-tag": ["invalid YAML", "could not determine a constructor"],
    "hand-edited-count": ["histogram does not add up to `instructions`"],
}


@pytest.mark.unit
@pytest.mark.parametrize("how", sorted(GOLDEN_DAMAGE))
def test_damaged_golden_is_a_golden_error(tmp_path, how):
    golden_dir = tmp_path / "golden"
    yaml_path, stream_path = _write_sample_golden(golden_dir)
    _damage(yaml_path, stream_path, how)
    before = snapshot(tmp_path)
    with pytest.raises(GoldenError) as info:
        read_golden(yaml_path, stream_path, display="golden/scale/small/gfx942.yaml")
    message = str(info.value)
    assert info.value.exit_code == 2 and "\n" not in message
    for needle in GOLDEN_DAMAGE[how]:
        assert needle in message, (needle, message)
    assert snapshot(tmp_path) == before


@pytest.fixture(scope="module")
def damaged_check(tmp_path_factory, shared_cache):
    """tinyproj blessed, then six goldens damaged six ways, then one `xisa check`."""
    project = tmp_path_factory.mktemp("damaged") / "proj"
    copy_tinyproj(project)
    blessed = xisa_process("bless", cwd=project, cache=shared_cache)
    assert blessed.code == 0, blessed.err
    golden = project / "golden"
    plan = {("scale", "small", "gfx942"): "conflict-markers", ("scale", "small", "gfx1100"): "truncated",
            ("scale", "small", "gfx1201"): "other-format", ("scale", "big", "gfx942"): "stream-disagrees",
            ("scale", "big", "gfx1100"): "not-utf8"}
    for key, how in plan.items():
        _damage(*golden_paths(golden, *key), how)
    before = snapshot(project)
    out = xisa_process("check", "--format", "json", cwd=project, cache=shared_cache)
    return plan, out, before, snapshot(project)


@pytest.mark.parametrize("how", ["conflict-markers", "truncated", "other-format", "stream-disagrees", "not-utf8"])
def test_check_reports_a_damaged_golden_and_never_rewrites_it(damaged_check, how):
    plan, out, before, after = damaged_check
    assert out.code == 2 and "Traceback" not in out.err
    key = next(k for k, v in plan.items() if v == how)
    cell = next(c for c in json.loads(out.out)["cells"] if (c["kernel"], c["case"], c["target"]) == key)
    assert cell["verdict"] == "error" and cell["message"].startswith("corrupt golden: ")
    assert f"golden/{key[0]}/{key[1]}/{key[2]}." in cell["message"]
    assert after == before


def test_check_refuses_goldens_of_another_toolchain(tmp_path, shared_cache):
    """One golden of another Triton: one line, exit 2, before any compile (the goldens say it already)."""
    import triton

    project = tmp_path / "proj"
    copy_tinyproj(project)
    assert xisa_process("bless", cwd=project, cache=shared_cache).code == 0
    toolchain_file, _ = golden_paths(project / "golden", "dot", "f16_32", "gfx942")
    toolchain_file.write_text(toolchain_file.read_text().replace(f"triton: {triton.__version__}", "triton: 3.6.0"))
    before = snapshot(project)
    cold = tmp_path / "cold-cache"
    out = xisa_process("check", "--format", "json", cwd=project, cache=cold)
    assert_one_line_error(out, "golden/dot/f16_32/gfx942.yaml: toolchain",
                          f"made with Triton 3.6.0 but {triton.__version__} is installed",
                          "fix: pip install triton==3.6.0, or re-bless")
    assert out.out == "" and not (cold / "results").exists()        # nothing was compiled
    assert snapshot(project) == before


# --- 5. bless cannot write: a non-folder golden path, a full disk ------------------------------------

def test_bless_into_a_path_under_a_regular_file(run_xisa, tinyproj):
    (tinyproj / "golden").write_text("a file where the golden folder should be\n")
    before = snapshot(tinyproj)
    out = run_xisa("bless", "--arch", "gfx942", cwd=tinyproj)
    assert_one_line_error(out, "golden", "cannot write goldens: a regular file is in the way of a folder", "0 written before the failure",
                          "fix: free disk space or fix the folder's permissions")
    assert snapshot(tinyproj) == before


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root ignores file permissions; test_bless_into_a_path_under_a_regular_file covers it")
def test_bless_into_a_read_only_golden_folder(run_xisa, tinyproj):
    golden = tinyproj / "golden"
    golden.mkdir()
    golden.chmod(0o555)
    try:
        before = snapshot(tinyproj)
        out = run_xisa("bless", "--arch", "gfx942", cwd=tinyproj)
        assert_one_line_error(out, "golden", "cannot write goldens", "Permission denied")
        assert snapshot(tinyproj) == before
    finally:
        golden.chmod(0o755)


def _bless(results: list[CellResult], golden_dir: Path):
    return bless_module.bless(results, golden_dir=golden_dir, display_root=golden_dir.parent,
                              toolchains={r.target: {"triton": "3.8.0"} for r in results}, stream_files=True,
                              selected_targets={r.target for r in results}, kernel_filters=None)


def _new_results() -> list[CellResult]:
    return [_sample_result(kernel="scale", case=case, target=target, asm="dot_gfx1100.amdgcn")
            for case in ("small", "big") for target in ("gfx942", "gfx1100")]


def _old_goldens(tmp_path: Path, monkeypatch) -> tuple[Path, dict[str, bytes]]:
    monkeypatch.delenv("CI", raising=False)
    golden_dir = tmp_path / "golden"
    old = [_sample_result(kernel="scale", case=case, target=target)
           for case in ("small", "big") for target in ("gfx942", "gfx1100")]
    assert len(_bless(old, golden_dir).written) == 4
    return golden_dir, snapshot(golden_dir)


def _assert_old_or_new(golden_dir: Path, old: dict[str, bytes]) -> tuple[int, int]:
    new_texts = {}
    for result in _new_results():
        yaml_text, stream_text = render_golden(result, toolchain={"triton": "3.8.0"},
                                               stream_file=True)
        yaml_path, stream_path = golden_paths(golden_dir, result.kernel, result.case, result.target)
        new_texts[str(yaml_path.relative_to(golden_dir))] = yaml_text.encode()
        new_texts[str(stream_path.relative_to(golden_dir))] = stream_text.encode()
    now = snapshot(golden_dir)
    assert set(now) == set(old), "a temp, pending or missing file"
    n_old = n_new = 0
    for name, data in now.items():
        assert data in (old[name], new_texts[name]), name
        n_old += data == old[name]
        n_new += data == new_texts[name]
    for result in _new_results():
        read_golden(*golden_paths(golden_dir, result.kernel, result.case, result.target), display="g")  # whole
    return n_old, n_new


@pytest.mark.parametrize("fail_at", ["write", "rename"])
def test_full_disk_during_bless_keeps_every_golden_whole(tmp_path, monkeypatch, fail_at):
    golden_dir, old = _old_goldens(tmp_path, monkeypatch)
    calls = {"n": 0}
    if fail_at == "write":   # the disk fills while the third temp file is written
        real = os.fsync

        def fsync(fd):
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return real(fd)
            calls["n"] += 1
            if calls["n"] == 3:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(fd)

        monkeypatch.setattr(os, "fsync", fsync)
    else:                    # the rename of the second golden's stream fails
        real = os.replace

        def replace(src, dst):
            calls["n"] += 1
            if calls["n"] == 5:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
            return real(src, dst)

        monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(GoldenError) as info:
        _bless(_new_results(), golden_dir)
    monkeypatch.undo()
    message = str(info.value)
    assert "cannot write goldens: No space left on device" in message and "\n" not in message
    assert "fix: free disk space" in message and info.value.exit_code == 2
    n_old, n_new = _assert_old_or_new(golden_dir, old)
    assert n_old > 0 and n_new > 0         # the failure came mid-bless: the first golden is new, the rest old


# --- 6. a tampered environment or an unsupported toolchain ---------------------------------------------

@pytest.mark.parametrize("variable", ["TRITON_KERNEL_OVERRIDE", "LLVM_PASS_PLUGIN_PATH"])
def test_refused_variable_is_refused_even_with_a_warm_cache(run_xisa, tinyproj, variable):
    assert run_xisa("compile", "--arch", "gfx942", cwd=tinyproj).code == 0    # every cell now cached
    before = snapshot(tinyproj)
    out = run_xisa("compile", "--arch", "gfx942", cwd=tinyproj, env={variable: "/tmp/anything"})
    assert_one_line_error(out, f"{variable} is set", "no result could be trusted", f"fix: unset {variable}")
    assert snapshot(tinyproj) == before


@pytest.mark.unit
@pytest.mark.parametrize("version,ok", [("3.5.1", False), ("3.10.0", False), ("2.3.1", False), ("4.0.0", False),
                                        ("garbage", False), ("3.6.0", True), ("3.8.0", True), ("3.9.1+gitabc", True)])
def test_check_supported_triton_versions(version, ok):
    if ok:
        check_supported(version)
        return
    with pytest.raises(ToolchainError) as info:
        check_supported(version)
    assert f"Triton {version} is not supported (xisa supports 3.6 to 3.9)" in str(info.value)
    assert "fix: pip install triton==3.8.0" in str(info.value) and info.value.exit_code == 2


@pytest.mark.unit
@pytest.mark.parametrize("version", ["3.5.0", "3.10.0"])
def test_cli_refuses_an_unsupported_triton(tinyproj, shared_cache, monkeypatch, capsys, version):
    monkeypatch.chdir(tinyproj)
    monkeypatch.setenv("XISA_CACHE_DIR", str(shared_cache))
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(xisa.compile.worker.toolchain, "triton_version", lambda: version)
    before = snapshot(tinyproj)
    with pytest.raises(SystemExit) as info:
        xisa.cli.main(["bless", "--arch", "gfx942"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"xisa: error: Triton {version} is not supported")
    assert snapshot(tinyproj) == before and not (tinyproj / "golden").exists()


# --- 7. determinism: shards and the Triton cache ------------------------------------------------------

def _fingerprints(outcome, key="sha256") -> dict[str, str]:
    data = json.loads(outcome.out)
    return {f"{c['kernel']}:{c['case']}@{c['target']}": c[key] for c in data["cells"]}


def test_sharded_and_unsharded_fingerprints_are_identical(run_xisa, tinyproj):
    whole = run_xisa("check", "--arch", "gfx942", "--arch", "gfx1100", "--format", "json", "--no-cache", "--jobs", "2",
                     cwd=tinyproj)
    assert whole.code == 1, whole.err                      # no goldens: every cell is `new`
    expected = _fingerprints(whole, "head_sha256")
    assert len(expected) == 6 and all(expected.values())
    union: dict[str, str] = {}
    for index in (1, 2):
        shard = run_xisa("check", "--arch", "gfx942", "--arch", "gfx1100", "--shard", f"{index}/2", "--format",
                         "json", "--no-cache", cwd=tinyproj)
        assert shard.code in (0, 1), shard.err
        part = _fingerprints(shard, "head_sha256")
        assert not set(part) & set(union)
        union.update(part)
    assert union == expected


def test_the_back_end_store_cold_and_warm_give_the_same_fingerprints(run_xisa, tinyproj, tmp_path):
    env = {"XISA_CACHE_DIR": str(tmp_path / "cache")}
    backend = tmp_path / "cache" / "backend"
    results = tmp_path / "cache" / "results"   # removed before each run, so the back-end store is what is tested
    cold = run_xisa("compile", "--json", "--arch", "gfx942", cwd=tinyproj, env=env)
    assert cold.code == 0, cold.err
    assert any(backend.rglob("*.json")), "the compile did not record into xisa's back-end store"
    assert not any(p.name.startswith("triton") for p in (tmp_path / "cache").iterdir())   # Triton's: one per run
    shutil.rmtree(results)
    warm = run_xisa("compile", "--json", "--arch", "gfx942", cwd=tinyproj, env=env)
    assert _fingerprints(warm) == _fingerprints(cold)
    assert all(not cell["cached"] for cell in json.loads(warm.out)["cells"])
    shutil.rmtree(backend)
    shutil.rmtree(results)
    emptied = run_xisa("compile", "--json", "--arch", "gfx942", cwd=tinyproj, env=env)
    assert _fingerprints(emptied) == _fingerprints(cold)
    fresh = run_xisa("compile", "--json", "--no-cache", "--arch", "gfx942", cwd=tinyproj, env=env)
    assert _fingerprints(fresh) == _fingerprints(cold)


# --- 8. security ------------------------------------------------------------------------------------

@pytest.mark.unit
def test_yaml_is_loaded_only_through_the_safe_loader(tmp_path):
    marker = tmp_path / "executed"
    for text in (f"name: !!python/object/apply:os.system ['touch {marker}']\n",
                 "x: !!python/object:xisa.errors.XisaError {}\n", "x: !!python/name:os.system\n"):
        with pytest.raises(SpecError) as info:
            parse_yaml(text, path="k.yaml", error=SpecError)
        assert "invalid YAML" in str(info.value) and "could not determine a constructor" in str(info.value)
    assert not marker.exists()


@pytest.mark.unit
@pytest.mark.parametrize("kernel,case,target", [("../evil", "c", "gfx942"), ("k", "a/b", "gfx942"),
                                                ("k", "..", "gfx942"), ("k", "c", "../../x"), ("k", "c", "gfx942/"),
                                                ("", "c", "gfx942"), ("k", "c\x00", "gfx942")])
def test_names_are_validated_before_they_become_paths(tmp_path, kernel, case, target):
    with pytest.raises(GoldenError) as info:
        golden_paths(tmp_path / "golden", kernel, case, target)
    assert "cannot become a path" in str(info.value)
    assert not (tmp_path / "golden").exists()


@pytest.mark.unit
@pytest.mark.parametrize("value", ["../x", "a/b", "a\\b", "..", "x..y", "", "c:\\x", 3, None])
def test_spec_names_refuse_path_characters(value):
    for pattern in (KERNEL_NAME, CASE_NAME):
        with pytest.raises(SpecError) as info:
            check_name("case", value, pattern, path="k.yaml", field="cases[0].name")
        assert "no path separators or '..'" in str(info.value)


@pytest.mark.unit
def test_bless_never_writes_outside_the_golden_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    result = _sample_result(kernel="..", case="escape", target="gfx942")
    with pytest.raises(XisaError):
        _bless([result], tmp_path / "golden")
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == []


@pytest.mark.unit
def test_refused_environment_variables():
    assert {"TRITON_KERNEL_OVERRIDE", "LLVM_PASS_PLUGIN_PATH", "TRITON_PASS_PLUGIN_PATH", "TRITON_SWAP_MIR",
            "TRITON_ENABLE_ASAN", "TRITON_INTERPRET"} <= set(REFUSED_ENV)
    for name, why in REFUSED_ENV.items():
        assert why and "\n" not in why
        with pytest.raises(ToolchainError) as info:
            check_environment({name: "1"})
        assert str(info.value).startswith(f"{name}: {name} is set") and info.value.exit_code == 2
    check_environment({name: "" for name in REFUSED_ENV})     # empty or "0" means unset
    check_environment({name: "0" for name in REFUSED_ENV})


def test_cache_folder_under_a_regular_file_is_one_clear_error(run_xisa, tinyproj, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    out = run_xisa("compile", "--arch", "gfx942", cwd=tinyproj, env={"XISA_CACHE_DIR": str(blocker / "cache")})
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert out.code == 2 and len(lines) == 1
    assert lines[0].startswith("xisa: error: XISA_CACHE_DIR: cannot use") and "fix: point XISA_CACHE_DIR" in lines[0]


# --- 7. YAML aliases, merge keys, names and matrices that cannot work ----------------------------------

@pytest.mark.unit
def test_nested_aliases_are_refused_before_they_expand(tmp_path):
    """The issue's 792-byte spec (nine levels: 387 million values) and a recursive alias: one line each."""
    text = "description:\n" + _nested_aliases(9)
    assert len(text.encode()) < 1000
    with pytest.raises(SpecError) as info:
        parse_yaml(text, path="kernels/laughs.yaml", error=SpecError)
    assert str(info.value).startswith("kernels/laughs.yaml: its aliases expand to more than")
    with pytest.raises(SpecError, match="an alias refers to the value that contains it"):
        parse_yaml("a: &x [1, *x]\n", path="k.yaml", error=SpecError)
    # Aliases that stay small are fine.
    assert parse_yaml("a: &x [1, 2]\nb: *x\n", path="k.yaml", error=SpecError) == {"a": [1, 2], "b": [1, 2]}


@pytest.mark.unit
def test_merge_keys_fill_in_and_the_mapping_overrides(tmp_path):
    """YAML 1.1 merge keys: the mapping's own keys win, then the merged mappings in the order given."""
    text = ("base: &base {x: 1, y: 2}\nother: &other {y: 9, z: 9}\n"
            "one:\n  <<: *base\n  y: 3\n"
            "two:\n  <<: [*base, *other]\n  w: 0\n")
    data = parse_yaml(text, path="k.yaml", error=SpecError)
    assert data["one"] == {"x": 1, "y": 3}
    assert data["two"] == {"x": 1, "y": 2, "z": 9, "w": 0}
    refused = {
        "x: 1\nx: 2\n": "duplicate key 'x' (line 2)",                                 # still a duplicate
        "b: &b {x: 1}\nc:\n  <<: *b\n  y: 1\n  y: 2\n": "duplicate key 'y' (line 5)",
        "b: &b {x: 1}\nc:\n  <<: *b\n  <<: *b\n": "duplicate key '<<' (line 4)",
        "b: &b [1]\nc:\n  <<: *b\n": "a merge key `<<` takes a mapping or a list of mappings",
        "{[1]: 2}\n": "a mapping key must be a plain value, not list",
    }
    for bad, needle in refused.items():
        with pytest.raises(SpecError) as info:
            parse_yaml(bad, path="k.yaml", error=SpecError)
        assert needle in str(info.value) and "\n" not in str(info.value), (bad, str(info.value))


@pytest.mark.unit
def test_merge_keys_in_a_spec_resolve_to_the_overridden_values(tmp_path):
    from xisa.spec.cases import build_cells, load_spec
    from xisa.spec.targets import load_targets, select_targets

    (tmp_path / "k.py").write_text("# kernel\n")
    spec_file = tmp_path / "k.yaml"
    spec_file.write_text("source: k.py\nfunction: kern\ntargets: [gfx942]\n"
                         "description: {common: &common {x_ptr: '*fp32', n: 4096}}\n"
                         "cases:\n  - name: c\n    args:\n      <<: *common\n      n: 1024\n")
    targets = select_targets(load_targets([REPO / "targets"]), ["gfx942"])
    (cell,) = build_cells([load_spec(spec_file)], targets)
    assert cell.args == {"x_ptr": "*fp32", "n": 1024}


@pytest.mark.unit
def test_a_matrix_too_large_is_refused_before_it_expands(tmp_path):
    from xisa.spec.cases import MAX_CASES_PER_SPEC, load_spec

    axes = 1
    while 2 ** axes <= MAX_CASES_PER_SPEC:
        axes += 1
    matrix = ", ".join(f"a{i}: {{x: {{}}, y: {{}}}}" for i in range(axes))
    (tmp_path / "k.py").write_text("# kernel\n")
    spec_file = tmp_path / "k.yaml"
    spec_file.write_text(f"source: k.py\nfunction: kern\ncases:\n  - name: m\n    matrix: {{{matrix}}}\n")
    with pytest.raises(SpecError) as info:
        load_spec(spec_file, display="kernels/k.yaml")
    message = str(info.value)
    assert message.startswith(f"kernels/k.yaml: cases[0] (m).matrix: expands to {2 ** axes} cases")
    assert f"more than the {MAX_CASES_PER_SPEC} a spec may have" in message and "fix: drop axes" in message


@pytest.mark.unit
def test_junit_holds_any_message_as_parseable_xml():
    from xml.etree import ElementTree as ET

    from xisa.render.review import render_junit
    from xisa.golden.verdict import CellVerdict, CheckReport

    message = "import failed: RuntimeError: boom \x01\x1b[31mred\x1b[0m \x00 \ufffe tab\there"
    report = CheckReport(verdicts=[CellVerdict(kernel="k", case="c", target="gfx942", verdict="error",
                                               message=message)],
                         toolchain={"triton": "3.8.0"}, golden_toolchains={}, scopes=[], problems=[message])
    suite = ET.fromstring(render_junit(report))
    errors = suite.findall("./testcase/error")
    assert len(errors) == 2 and suite.get("errors") == "2"
    for error in errors:
        assert error.get("message").startswith("import failed: RuntimeError: boom \\x01\\x1b[31mred")
        assert "tab\there" in error.text and "\\ufffe" in error.text
