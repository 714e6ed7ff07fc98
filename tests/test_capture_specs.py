"""The specs `xisa capture` writes check green right away and survive a second capture: a target that refuses a case
is left out of it with the compiler's reason, a capture over existing specs appends new launches and keeps every hand
edit, comments carry no path of the capturing machine, and a kernel generated at run time (a module written into a
cache folder outside the project and imported under a hashed name, or `exec`'d) compiles from a kept copy of its text
after the cache is gone."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from xisa.errors import SpecError
from xisa.spec.capture_merge import append_cases
from xisa.spec.portable import portable_command, portable_text

TEMPLATE = """import triton
import triton.language as tl


@triton.jit
def {name}_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, {op}(tl.load(x_ptr + offs, mask=mask)), mask=mask)


def launch(x, out):
    {name}_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
"""

GENERATOR = '''
"""A tiny kernel generator, as FlagGems' pointwise_dynamic does it: the source written into a cache folder outside
the project and imported under a hashed module name kept out of sys.modules (or exec'd, its text in linecache), the
scalar function copied into the module after it ran."""
import hashlib
import importlib.util
import linecache
import os

import triton
import triton.language as tl

TEMPLATE = __TEMPLATE__


@triton.jit
def double(x):
    return x * 2


class Pointwise:
    def __init__(self, name, op, how):
        self.name, self.op, self.how = name, op, how

    def instantiate(self):
        text = TEMPLATE.format(name=self.name, op=self.op.__name__)
        key = hashlib.sha256(text.encode()).hexdigest()[:12]
        if self.how == "file":
            cache = os.environ["TINYGEN_CACHE"]
            os.makedirs(cache, exist_ok=True)
            path = os.path.join(cache, f"gen_{key}_{self.name}.py")
            with open(path, "w") as handle:
                handle.write(text)
            spec = importlib.util.spec_from_file_location(f"_gen_module_{key}_rank_1", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            scope = module.__dict__
        else:
            filename = f"<tinygen-{key}>"
            linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
            scope = {"__name__": f"tinygen_exec_{key}"}
            exec(compile(text, filename, "exec"), scope)
        scope[self.op.__name__] = self.op
        return scope["launch"]

    def __call__(self, x, out):
        self.instantiate()(x, out)
'''

GENERATOR = GENERATOR.replace("__TEMPLATE__", repr(TEMPLATE))

GENERATING_PROGRAM = '''
import torch
from tinygen import Pointwise, double

x = torch.arange(100, dtype=torch.float32)
out = torch.empty_like(x)
Pointwise("twice", double, "file")(x, out)
assert torch.equal(out, x * 2)
Pointwise("again", double, "exec")(x, out)
assert torch.equal(out, x * 2)
'''

# The generated text, written by hand into the project: the fingerprint the kept copy must compile to.
HAND = '''
name: twice_hand
source: twice_hand.py
function: twice_kernel
cases:
  - name: c
    args: {x_ptr: {tensor: fp32, shape: [100]}, out_ptr: {tensor: fp32, shape: [100]}, n: 100}
    constexprs: {BLOCK: 64}
'''

TARGETS = ("gfx942", "sm_90")


def _generated(name: str) -> str:
    return TEMPLATE.format(name=name, op="double")


@pytest.fixture(scope="module")
def generated(tmp_path_factory, shared_cache):
    """One capture of the generating program (its cache folder outside the project), then the cache deleted."""
    from support import xisa_process

    base = tmp_path_factory.mktemp("generated")
    root, cache = base / "project", base / "flaggems-like-cache"
    root.mkdir()
    (root / "pyproject.toml").write_text('[tool.xisa]\npythonpath = ["."]\n')   # the kept copies import tinygen
    (root / "tinygen.py").write_text(GENERATOR)
    (root / "run_gen.py").write_text(GENERATING_PROGRAM)
    (root / "twice_hand.py").write_text(_generated("twice") + "from tinygen import double\n")
    (root / "hand.yaml").write_text(HAND)
    # the script by its absolute path, as a path of this machine that must not reach the spec
    proc = xisa_process("capture", *(f"--targets={t}" for t in TARGETS), "--", sys.executable,
                        str(root / "run_gen.py"), cwd=root, cache=shared_cache,
                        env={"TRITON_INTERPRET": "1", "TINYGEN_CACHE": str(cache)})
    assert proc.code == 0, proc.out + proc.err
    assert cache.is_dir()
    shutil.rmtree(cache)
    return root, proc


def test_a_generated_module_is_named_by_a_kept_copy_of_its_text(generated):
    root, proc = generated
    for name, why in (("twice", "no importer finds a module named _gen_module_"), ("again", "the source was exec'd")):
        spec = yaml.safe_load((root / "captured" / f"{name}_kernel.yaml").read_text())
        assert spec["source"] == f"generated/{name}_kernel.py" and "module" not in spec
        kept = (root / "captured" / "generated" / f"{name}_kernel.py").read_text()
        assert kept.startswith(_generated(name))          # the text as generated: line numbers unchanged
        trailer = kept[len(_generated(name)):]
        assert why in trailer and "Launched from tinygen:Pointwise.__call__" in trailer
        assert "\nfrom tinygen import double\n" in trailer   # what the generator set in the module after it ran
        record = json.loads(trailer.rsplit("# xisa-kept: ", 1)[1])
        assert record["generator"]["file"] == "tinygen.py" and len(record["generator"]["sha256"]) == 64
    assert "kept captured/generated/twice_kernel.py" in proc.out


def test_the_kept_copy_compiles_after_the_cache_is_gone_to_the_generated_texts_code(generated, run_xisa):
    root, _ = generated
    result = run_xisa("compile", "--spec", "captured", "--spec", "hand.yaml", "--arch", ",".join(TARGETS), "--json",
                      cwd=root)
    assert result.code == 0, result.err
    cells = {(c["kernel"], c["target"]): c for c in json.loads(result.out)["cells"]}
    for target in TARGETS:
        assert cells[("twice_kernel", target)]["status"] == "ok"
        assert cells[("twice_kernel", target)]["sha256"] == cells[("twice_hand", target)]["sha256"]
        assert cells[("again_kernel", target)]["status"] == "ok"


def test_no_comment_carries_a_path_of_the_capturing_machine(generated):
    root, _ = generated
    home = os.path.expanduser("~")
    machine = {str(root.parent), sys.prefix, sys.executable, os.path.dirname(sys.executable), home, "/tmp/"}
    written = list((root / "captured").glob("*.yaml")) + list((root / "captured" / "generated").glob("*.py"))
    assert len(written) == 4
    for path in written:
        text = path.read_text()
        comments = [line for line in text.splitlines() if line.lstrip().startswith("#") or " # " in line]
        assert comments, path
        for line in comments:
            assert not any(part in line for part in machine), (path, line)
            assert not re.search(r"(?<![\w.~:/-])/(?:home|tmp|root|usr|work|opt)/", line), (path, line)
    assert "`xisa capture -- python run_gen.py`" in (root / "captured" / "twice_kernel.yaml").read_text()


def test_a_changed_generator_is_noted_by_check_and_refreshed_by_capture(generated, run_xisa, tmp_path):
    from support import xisa_process

    root = tmp_path / "copy"
    shutil.copytree(generated[0], root)
    assert run_xisa("bless", "--spec", "captured", "--arch", ",".join(TARGETS), cwd=root).code == 0
    with open(root / "tinygen.py", "a") as handle:
        handle.write("\n# the generator's next release\n")
    checked = run_xisa("check", "--spec", "captured", "--arch", ",".join(TARGETS), cwd=root)
    assert checked.code == 0, checked.err   # the kept copy is what compiles: the verdict stays
    noted = [line for line in checked.err.splitlines() if "generator" in line]
    assert len(noted) == 2 and all("tinygen:Pointwise.__call__ (tinygen.py) differs" in line and "re-run `xisa capture`"
                                   in line for line in noted)
    again = xisa_process("capture", "--no-check", "--", sys.executable, "run_gen.py", cwd=root,
                         env={"TRITON_INTERPRET": "1", "TINYGEN_CACHE": str(tmp_path / "cache")})
    assert again.code == 0, again.err
    assert "unchanged captured/twice_kernel.yaml" in again.out
    checked = run_xisa("check", "--spec", "captured", "--arch", ",".join(TARGETS), cwd=root)
    assert checked.code == 0 and "generator" not in checked.err


# ------------------------------------------------------------------ targets left out, a second capture

CUDA_ONLY = '''
import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice


@triton.jit
def fast_exp(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, libdevice.fast_expf(tl.load(x_ptr + offs, mask=mask)), mask=mask)
'''

# warm-up compiles: Triton's interpreter cannot run a CUDA libdevice call, a warm-up runs nothing
WARMUPS = '''
import sys
import torch
from cudaonly import fast_exp

for block in sys.argv[1:]:
    fast_exp.warmup(torch.float32, torch.float32, 64, BLOCK=int(block), grid=(1,))
'''


@pytest.fixture
def cuda_only(tmp_path, shared_cache):
    from support import xisa_process

    (tmp_path / "cudaonly.py").write_text(CUDA_ONLY)
    (tmp_path / "warm.py").write_text(WARMUPS)

    def capture(*blocks: int, check: bool = True):
        return xisa_process("capture", *((f"--targets={t}" for t in TARGETS) if check else ["--no-check"]), "--",
                            sys.executable, "warm.py", *map(str, blocks), cwd=tmp_path, cache=shared_cache,
                            env={"TRITON_INTERPRET": "1"})
    return tmp_path, capture


def test_a_target_that_refuses_a_case_is_left_out_with_the_reason_and_the_spec_checks_green(cuda_only, run_xisa):
    root, capture = cuda_only
    first = capture(64)
    assert first.code == 0, first.err
    assert "2 cells, 1 ok, 1 left out" in first.err and "left out captured/fast_exp.yaml: launch1 on gfx942" in first.err
    text = (root / "captured" / "fast_exp.yaml").read_text()
    (case,) = yaml.safe_load(text)["cases"]
    assert "gfx942" not in case["targets"] and {"sm_90", "gfx1100"} <= set(case["targets"])   # untried ones stay in
    assert re.search(r"# left out of gfx942 by capture's compile: .*__nv_fast_expf", text)
    assert "# Compiled once by capture for 2 targets (gfx942, sm_90)" in text
    assert run_xisa("bless", "--spec", "captured", "--arch", ",".join(TARGETS), cwd=root).code == 0
    checked = run_xisa("check", "--spec", "captured", "--arch", ",".join(TARGETS), cwd=root)
    assert checked.code == 0, checked.err


def test_a_second_capture_appends_new_launches_and_keeps_every_hand_edit(cuda_only):
    root, capture = cuda_only
    assert capture(64).code == 0
    spec = root / "captured" / "fast_exp.yaml"
    edited = spec.read_text().replace("name: fast_exp\n", "# my note on this kernel\nname: fast_exp\n")
    edited = re.sub(r"    targets: \[.*\]", "    targets: [sm_90]   # narrowed by hand\n"
                    "    expect: {sm_90: {registers: '<=255'}}", edited)
    spec.write_text(edited)
    second = capture(64, 128)
    assert second.code == 0, second.err
    assert "updated captured/fast_exp.yaml (1 new case appended)" in second.out
    text = spec.read_text()
    assert text.startswith(edited)   # every byte before the appended case, hand edits included
    cases = yaml.safe_load(text)["cases"]
    assert [c["name"] for c in cases] == ["launch1", "launch2"] and cases[1]["constexprs"] == {"BLOCK": 128}
    assert "added by a later `xisa capture -- python warm.py 64 128`" in text[len(edited):]
    third = capture(128, 64, check=False)
    assert third.code == 0 and "unchanged captured/fast_exp.yaml" in third.out
    assert spec.read_text() == text
    # a case whose values were edited no longer compiles the launch: the launch is a case again
    spec.write_text(text.replace("constexprs: {BLOCK: 128}", "constexprs: {BLOCK: 32}"))
    assert capture(128, check=False).code == 0
    cases = yaml.safe_load(spec.read_text())["cases"]
    assert [(c["name"], c["constexprs"]) for c in cases][1:] == [("launch2", {"BLOCK": 32}), ("launch3", {"BLOCK": 128})]


def test_defaults_that_would_change_a_new_launch_and_another_kernels_spec_are_refused(cuda_only):
    root, capture = cuda_only
    assert capture(64).code == 0
    spec = root / "captured" / "fast_exp.yaml"
    original = spec.read_text()
    spec.write_text(original.replace("cases:\n", "defaults:\n  options: {num_warps: 8}\ncases:\n"))
    refused = capture(128, check=False)
    lines = refused.err.strip().splitlines()
    assert refused.code == 2 and len(lines) == 1 and "captured/fast_exp.yaml" in lines[0] and "defaults" in lines[0]
    spec.write_text(original.replace("function: fast_exp", "function: other_kernel"))
    refused = capture(128, check=False)
    lines = refused.err.strip().splitlines()
    assert refused.code == 2 and len(lines) == 1 and "another kernel" in lines[0] and "--spec-name" in lines[0]


# ------------------------------------------------------------------ the pure parts

@pytest.mark.unit
def test_cases_are_appended_at_the_lists_own_indentation_and_nothing_else_moves():
    text = ("# top\nname: k\nsource: k.py\nfunction: k\ncases:\n- name: a   # mine\n  args: {n: 1}\n"
            "  expect:\n    '*': {instructions: '>0'}\n# after the cases\ndefaults: {}\n")
    block = ["  - name: launch1", "    # added", "    args:", "      n: 2"]
    merged = append_cases(text, [block], shown="k.yaml")
    assert merged == text.replace("'>0'}\n", "'>0'}\n- name: launch1\n  # added\n  args:\n    n: 2\n")
    assert [c["name"] for c in yaml.safe_load(merged)["cases"]] == ["a", "launch1"]
    with pytest.raises(SpecError, match="not a block list"):
        append_cases("name: k\ncases: [{name: a}]\n", [block], shown="k.yaml")


@pytest.mark.unit
def test_paths_are_shown_relative_to_the_project_site_packages_or_home_and_else_by_their_last_parts(tmp_path):
    import sysconfig

    root = tmp_path / "proj"
    site = sysconfig.get_paths()["purelib"]
    home = os.path.expanduser("~")
    text = (f"{root}/kernels/a.py failed; {site}/flag_gems/ops/add.py:12 and {home}/.flaggems/code_cache/g.py, "
            f"in /tmp/pytest-7/x/cache/gen_1.py (see https://example.org/a/b)")
    assert portable_text(text, root) == ("kernels/a.py failed; <site-packages>/flag_gems/ops/add.py:12 and "
                                         "~/.flaggems/code_cache/g.py, in …/cache/gen_1.py (see https://example.org/a/b)")
    assert portable_command([sys.executable, "-m", "pytest", f"{root}/tests", "-k", "x"], root) == \
        f"{os.path.basename(sys.executable)} -m pytest tests -k x"


LIBRARY_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
'''

LIBRARY_PROGRAM = '''
import sys
import torch

sys.path.insert(0, sys.argv[1])   # a folder the program adds at run time, as a code cache would be
from installed.ops import copy_kernel as installed_copy
from addedlater.ops import copy_kernel as added_copy

x = torch.arange(16, dtype=torch.float32)
installed_copy[(1,)](x, torch.empty_like(x), 16, BLOCK=16)
added_copy[(1,)](x, torch.empty_like(x), 16, BLOCK=16)
'''


def test_an_importable_module_outside_the_project_is_named_and_one_found_only_at_run_time_is_kept(tmp_path):
    """A package on the start-up sys.path (PYTHONPATH, site-packages) imports by name on any machine set up alike:
    `module:`; one that imports only through a folder the program put on sys.path is kept like a generated one."""
    from support import xisa_process

    root, outside = tmp_path / "project", tmp_path / "elsewhere"
    for folder, package in ((outside / "lib", "installed"), (outside / "cache", "addedlater")):
        (folder / package).mkdir(parents=True)
        (folder / package / "__init__.py").write_text("")
        (folder / package / "ops.py").write_text(LIBRARY_KERNEL)
    root.mkdir()
    (root / "run_lib.py").write_text(LIBRARY_PROGRAM)
    proc = xisa_process("capture", "--no-check", "--spec-name", "installed.ops:copy_kernel=installed_copy",
                        "--spec-name", "addedlater.ops:copy_kernel=added_copy", "--", sys.executable, "run_lib.py",
                        str(outside / "cache"), cwd=root,
                        env={"TRITON_INTERPRET": "1", "PYTHONPATH": str(outside / "lib")})
    assert proc.code == 0, proc.err
    named = yaml.safe_load((root / "captured" / "installed_copy.yaml").read_text())
    kept = yaml.safe_load((root / "captured" / "added_copy.yaml").read_text())
    assert named["module"] == "installed.ops" and "source" not in named
    assert kept["source"] == "generated/added_copy.py"
    assert (root / "captured" / "generated" / "added_copy.py").read_text().startswith(LIBRARY_KERNEL)
    assert not (root / "captured" / "generated" / "installed_copy.py").exists()
    assert "a folder the program put on sys.path at run time" in (root / "captured" / "added_copy.yaml").read_text()


@pytest.mark.unit
def test_a_kernel_of_a_package_installed_in_the_projects_own_venv_is_named_by_its_module(tmp_path):
    """Issue 38, item 2: with `.venv` in the project root, as the README's set-up makes it, every captured spec was
    written as `source: ../.venv/lib/python3.11/site-packages/...`, and a fresh clone of the project failed at once."""
    from xisa.spec.capture import CapturedKernel, kernel_source

    site = tmp_path / "proj" / ".venv" / "lib" / "python3.11" / "site-packages" / "fakelib"
    site.mkdir(parents=True)
    (site / "ops.py").write_text("# a kernel\n")
    kernel = CapturedKernel(function="kern", qualname="kern", module="fakelib.ops", file=str(site / "ops.py"),
                            wrapper=None, name="kern")
    kind, where, notes = kernel_source(kernel, tmp_path / "proj" / "captured", tmp_path / "proj")
    assert (kind, where) == ("module", "fakelib.ops") and "installed" in notes[0]
    own = tmp_path / "proj" / "src" / "mylib"
    own.mkdir(parents=True)
    (own / "ops.py").write_text("# a kernel\n")
    mine = CapturedKernel(function="kern", qualname="kern", module="mylib.ops", file=str(own / "ops.py"),
                          wrapper=None, name="kern")
    assert kernel_source(mine, tmp_path / "proj" / "captured", tmp_path / "proj")[:2] == ("source", "../src/mylib/ops.py")
