"""The pull-request flow in a user's own repository: goldens blessed and committed on main, a branch,
and the gate against main (`xisa diff --base` / `xisa check --base`), as issue 12 tells it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from support import git
from xisa.compile.worker.toolchain import describe_toolchain

KERNEL = '''import triton
import triton.language as tl


@triton.jit
def _scaled(x, factor):
    return x * factor


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr, GFX11_PATH: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if GFX11_PATH:
        y = _scaled(x, factor) + 1.0
    else:
        y = _scaled(x, factor)
    tl.store(y_ptr + offsets, y, mask=mask)
'''

SPEC = '''name: scale
source: scale.py
function: scale_kernel
targets: [gfx1100, gfx942, sm_90]
defaults:
  args:
    x_ptr: {tensor: fp32, shape: [4096]}
    y_ptr: {tensor: fp32, shape: [4096]}
    n: 4096
    factor: 2.0
  constexprs: {GFX11_PATH: false, BLOCK: 256}
  overrides:
    'gfx11*': {constexprs: {GFX11_PATH: true}}
cases:
  - name: small
'''

PYPROJECT = '''[project]
name = "myproj"
version = "0"

[tool.xisa]
specs = ["kernels"]
golden = "golden"
'''

CELLS = ["scale:small@gfx1100", "scale:small@gfx942", "scale:small@sm_90"]


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


@pytest.fixture
def repo(tmp_path, run_xisa) -> Path:
    """A user's repository: one kernel on three targets, its goldens blessed and committed on main."""
    root = tmp_path / "myproj"
    (root / "kernels").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "kernels" / "scale.py").write_text(KERNEL)
    (root / "kernels" / "scale.yaml").write_text(SPEC)
    git(root, "init", "-q", "-b", "main")
    blessed = run_xisa("bless", cwd=root)
    assert blessed.code == 0 and "3 written, 0 unchanged, 0 removed" in blessed.out, blessed.out + blessed.err
    git(root, "add", "-A")
    git(root, "commit", "-qm", "kernel and goldens")
    return root


def test_the_gate_fails_naming_out_of_scope_cells_until_the_bless_is_narrowed(run_xisa, repo):
    git(repo, "checkout", "-qb", "gfx11-tweak")
    kernel = repo / "kernels" / "scale.py"
    # Meant for gfx11, but the edit is in the helper every path calls; then a wholesale bless and a commit.
    edit(kernel, "return x * factor", "return x * factor * 0.5")
    assert "3 written" in run_xisa("bless", cwd=repo).out
    git(repo, "commit", "-qam", "tune gfx11")

    # The goldens are the author's own now: the plain check agrees with all of them.
    assert run_xisa("check", "--scope", "gfx11*", cwd=repo).code == 0
    gate = run_xisa("diff", "--base", "main", "--scope", "gfx11*", cwd=repo)
    assert gate.code == 1, gate.err
    assert "**isolation violated**: `scale:small@gfx942`, `scale:small@sm_90`" in gate.out
    main = git(repo, "rev-parse", "main").strip()
    assert f"judged against `main` (`{main[:12]}`, its goldens), scope `gfx11*`" in gate.out
    as_check = run_xisa("check", "--base", "main", "--scope", "gfx11*", "--format", "json", cwd=repo)
    report = json.loads(as_check.out)
    assert as_check.code == 1 and report["isolation_violated"] == ["scale:small@gfx942", "scale:small@sm_90"]
    assert report["base"] == {"revision": "main", "commit": main, "compared": "goldens"}
    assert report["scopes"] == ["gfx11*"] and report["stale_goldens"] == []

    # The author keeps the change on the gfx11 path and restores main's goldens, but forgets to bless:
    git(repo, "checkout", "main", "--", "kernels", "golden")
    edit(kernel, "y = _scaled(x, factor) + 1.0", "y = _scaled(x, factor) * 0.5 + 1.0")
    stale = run_xisa("check", "--base", "main", "--scope", "gfx11*", "-q", cwd=repo)
    assert stale.code == 1
    assert "stale golden: scale:small@gfx1100: golden/scale/small/gfx1100.yaml disagrees" in stale.out
    # ... then blesses the scope only, and commits: the gate passes.
    narrowed = run_xisa("bless", "--arch", "gfx11*", cwd=repo)
    assert "1 written, 0 unchanged, 0 removed" in narrowed.out
    git(repo, "commit", "-qam", "tune gfx11, on its path")
    passed = run_xisa("diff", "--base", "main", "--scope", "gfx11*", "--format", "text", cwd=repo)
    assert passed.code == 0, passed.out + passed.err
    assert "gfx1100: 1 changed; byte-identical: gfx942, sm_90 (2 cells)" in passed.out
    assert "isolation violated" not in passed.out and "stale" not in passed.out


def test_new_cells_and_removed_goldens_are_judged_by_the_scope(run_xisa, repo):
    git(repo, "checkout", "-qb", "reshape")
    spec = repo / "kernels" / "scale.yaml"
    edit(spec, "targets: [gfx1100, gfx942, sm_90]", "targets: [gfx1100, gfx942]")          # sm_90 dropped
    edit(spec, "  - name: small\n", "  - name: small\n  - name: big\n    constexprs: {BLOCK: 1024}\n")
    blessed = run_xisa("bless", cwd=repo)
    assert "2 written, 2 unchanged, 1 removed" in blessed.out, blessed.out
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a big case; no sm_90")

    out = run_xisa("diff", "--base", "main", "--scope", "gfx11*", "--format", "json", cwd=repo)
    report = json.loads(out.out)
    assert out.code == 1
    verdicts = {f"{c['kernel']}:{c['case']}@{c['target']}": (c["verdict"], c["in_scope"]) for c in report["cells"]}
    assert verdicts == {"scale:big@gfx1100": ("new", True), "scale:big@gfx942": ("new", False),
                        "scale:small@gfx1100": ("same", True), "scale:small@gfx942": ("same", False),
                        "scale:small@sm_90": ("unused", False)}
    assert report["isolation_violated"] == ["scale:big@gfx942", "scale:small@sm_90"]
    text = run_xisa("diff", "--base", "main", "--scope", "gfx11*", "--format", "text", "-q", cwd=repo)
    assert "new: scale:big@gfx942: new since main (no golden there), outside the declared scope" in text.out
    assert "unused: scale:small@sm_90: removed since main (its golden there has no cell here)" in text.out
    wider = run_xisa("diff", "--base", "main", "--scope", "gfx*:scale:big", "--scope", "sm_90", "--format", "text",
                     cwd=repo)
    assert wider.code == 0, wider.out


def test_reblessing_an_unchanged_tree_writes_nothing(run_xisa, repo):
    assert "0 written, 3 unchanged, 0 removed" in run_xisa("bless", cwd=repo).out
    # AMD goldens once gained or lost a `ptxas` line depending on the targets blessed with them.
    assert "0 written, 1 unchanged, 0 removed" in run_xisa("bless", "--arch", "gfx1100", cwd=repo).out
    assert "0 written, 1 unchanged, 0 removed" in run_xisa("bless", "--arch", "sm_90", cwd=repo).out
    assert git(repo, "status", "--porcelain") == ""
    assert [p for p in git(repo, "ls-files", "golden").split() if not p.endswith((".yaml", ".isa"))] == []
    for target, backend in (("gfx942", "hip"), ("sm_90", "cuda")):
        data = yaml.safe_load((repo / "golden" / "scale" / "small" / f"{target}.yaml").read_text())
        assert "generated_by" not in data
        assert data["toolchain"] == describe_toolchain(backends={backend})
    # A lock file an older xisa left (and committed) in the golden folder goes with the next bless.
    (repo / "golden" / ".xisa.lock").write_text("")
    cleaned = run_xisa("bless", "--arch", "gfx942", cwd=repo)
    assert "removed golden/.xisa.lock" in cleaned.out and "0 written, 1 unchanged, 1 removed" in cleaned.out
    assert not (repo / "golden" / ".xisa.lock").exists()


def _one_line(out, *needles: str) -> str:
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert out.code == 2 and out.out == "" and len(lines) == 1, (out.code, out.out, out.err)
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_goldens_of_another_toolchain_are_refused_before_anything_compiles(run_xisa, repo, tmp_path):
    import triton

    installed = triton.__version__
    other = "3.9.0" if not installed.startswith("3.9") else "3.6.0"
    git(repo, "checkout", "-qb", "old-toolchain")
    for path in (repo / "golden").rglob("*.yaml"):
        edit(path, f"triton: {installed}", f"triton: {other}")
    git(repo, "commit", "-qam", "goldens of another Triton")
    cold = tmp_path / "cold-cache"
    env = {"XISA_CACHE_DIR": str(cold)}
    for args in (["check"], ["check", "-q"], ["diff", "--base", "main"]):
        out = run_xisa(*args, cwd=repo, env=env)
        _one_line(out, "golden/scale/small/gfx1100.yaml: toolchain: 3 goldens of this selection were made with "
                       f"Triton {other} but {installed} is installed", f"fix: pip install triton=={other}")
    git(repo, "checkout", "-q", "main")
    out = run_xisa("check", "--base", "old-toolchain", cwd=repo, env=env)
    _one_line(out, f"old-toolchain:golden/scale/small/gfx1100.yaml: toolchain: 3 goldens of this selection were "
                   f"made with Triton {other}")
    assert not (cold / "results").exists()      # nothing was compiled


def test_a_bad_base_is_one_line_before_anything_compiles(run_xisa, repo, tmp_path):
    cold = tmp_path / "cold-cache"
    env = {"XISA_CACHE_DIR": str(cold)}
    for args in (["diff", "--base", "no-such-branch"], ["check", "--base", "no-such-branch", "--compile-base"]):
        _one_line(run_xisa(*args, cwd=repo, env=env), "--base: unknown revision 'no-such-branch'",
                  "fetch-depth: 0")
    # the fix names what exists here, never the revision that just failed
    said = _one_line(run_xisa("diff", "--base", "origin/main", cwd=repo, env=env), "unknown revision 'origin/main'")
    assert "e.g. --base main (branches here: main)" in said and "--base origin/main" not in said
    assert "git fetch" not in said                          # no remote called origin here
    git(repo, "remote", "add", "origin", str(repo))
    said = _one_line(run_xisa("diff", "--base", "origin/main", cwd=repo, env=env), "unknown revision 'origin/main'")
    assert "or fetch it first: git fetch origin main" in said
    assert "e.g. --base main" in _one_line(run_xisa("diff", "--base", "-x", cwd=repo, env=env), "not a git revision")
    (repo / ".git").rename(repo / "not-git")
    _one_line(run_xisa("diff", "--base", "main", cwd=repo, env=env), "is not inside a git repository")
    assert not (cold / "results").exists()


MODULE_KERNEL = '''import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets) + 1.0)
'''

MODULE_SPEC = '''name: ops
module: mykern.ops
function: add_kernel
targets: [gfx942]
cases:
  - name: c
    args: {x_ptr: '*fp32', y_ptr: '*fp32'}
    constexprs: {BLOCK: 128}
'''


def test_compile_base_compiles_a_module_spec_at_the_base_revision(run_xisa, tmp_path):
    """A `module:` spec once resolved to the working tree for the base too (HEAD against HEAD), and a base
    cell that did not compile was shown as `new`, exit 0. A repository without goldens."""
    root = tmp_path / "modproj"
    (root / "kernels").mkdir(parents=True)
    (root / "mykern").mkdir()
    (root / "mykern" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text(PYPROJECT.replace('golden = "golden"\n', ""))
    (root / "kernels" / "ops.yaml").write_text(MODULE_SPEC)
    ops = root / "mykern" / "ops.py"
    ops.write_text(MODULE_KERNEL.replace("tl.load(x_ptr + offsets)", "tl.load(x_ptr + offsets, no_such_arg=1)"))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "a kernel that does not compile")
    ops.write_text(MODULE_KERNEL)
    git(root, "commit", "-qam", "it compiles")
    edit(ops, "+ 1.0)", "* 3.0 + 1.0)")
    git(root, "commit", "-qam", "it changes")

    out = run_xisa("diff", "--base", "HEAD~1", "--compile-base", "--format", "json", cwd=root)
    report = json.loads(out.out)
    [cell] = report["cells"]
    assert out.code == 1 and cell["verdict"] == "changed" and cell["base_sha256"] != cell["head_sha256"]
    assert report["base"]["compared"] == "compiled" and report["isolation_violated"] == ["ops:c@gfx942"]
    assert report["stale_goldens"] == []                     # no goldens in this repository: none to hold
    assert run_xisa("diff", "--base", "HEAD~1", "--compile-base", "--scope", "gfx942", cwd=root).code == 0

    broken = run_xisa("diff", "--base", "HEAD~2", "--compile-base", "--format", "json", cwd=root)
    [cell] = json.loads(broken.out)["cells"]
    assert broken.code == 2 and cell["verdict"] == "error"
    assert cell["message"].startswith("the cell does not compile at HEAD~2") and "no_such_arg" in cell["message"]
