"""Variants of the pull-request flow that the scenario of issue 12 does not list: ways a PR could pass the
gate against its base with a cell outside its scope changed or gone, or get an answer it cannot act on.
Each runs in a user's own scratch repository (the `repo` of test_pr_gate.py: one kernel on gfx1100, gfx942
and sm_90, goldens blessed and committed on main)."""

from __future__ import annotations

import json
import os

from pathlib import Path

import pytest

from xisa.analyze import ANALYZER_VERSION
from test_pr_gate import KERNEL, MODULE_KERNEL, PYPROJECT, SPEC, _one_line, edit, git, repo  # noqa: F401 (repo: a fixture)
from support import REPO



def _leak_out_of_scope(run_xisa, repo: Path) -> None:
    """A PR whose edit of the shared helper changes every target, blessed wholesale and committed."""
    git(repo, "checkout", "-qb", "leaky")
    edit(repo / "kernels" / "scale.py", "return x * factor", "return x * factor * 0.5")
    assert "3 written" in run_xisa("bless", "-j", "2", cwd=repo).out
    git(repo, "commit", "-qam", "tune gfx11 (and everything else)")


def test_arch_and_kernel_filters_cannot_narrow_the_gate(run_xisa, run_xisa_in_process, repo, tmp_path):
    """`--arch gfx1100` with `--base` compiled gfx1100 only and passed (exit 0) while gfx942 and sm_90
    had changed: the cells left out of a filter were never judged."""
    _leak_out_of_scope(run_xisa, repo)
    env = {"XISA_CACHE_DIR": str(tmp_path / "cold")}
    for args in (["check", "--base", "main", "--scope", "gfx11*", "--arch", "gfx1100"],
                 ["diff", "--base", "main", "--scope", "gfx11*", "--arch", "gfx11*"],
                 ["check", "--base", "main", "--scope", "gfx11*", "--kernel", "scale", "--arch", "gfx1100"],
                 ["check", "--base", "main", "--compile-base", "--scope", "gfx11*", "--kernel", "scale:small"]):
        line = _one_line(run_xisa_in_process(*args, cwd=repo, env=env), "cannot narrow the gate against a base")
        assert ("--arch" if "--arch" in args else "--kernel") in line and "would not be judged" in line
    assert not (tmp_path / "cold" / "results").exists()         # refused before anything compiled
    assert run_xisa("check", "--base", "main", "--scope", "gfx11*", "-j", "2", cwd=repo).code == 1


CUSTOM_TARGET = "mi300c"


def _with_custom_target(run_xisa, repo: Path) -> None:
    """main gains a project target (a copy of gfx942 under another name) that the kernel runs on."""
    (repo / "targets").mkdir()
    text = (REPO / "targets" / "gfx942.yaml").read_text()
    (repo / "targets" / f"{CUSTOM_TARGET}.yaml").write_text(text.replace("name: gfx942", f"name: {CUSTOM_TARGET}"))
    edit(repo / "kernels" / "scale.yaml", "targets: [gfx1100, gfx942, sm_90]",
         f"targets: [gfx1100, gfx942, sm_90, {CUSTOM_TARGET}]")
    assert "1 written" in run_xisa("bless", "-j", "2", cwd=repo).out
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a project target")


def test_a_target_dropped_from_the_project_is_judged_as_removed(run_xisa, repo):
    """Deleting a project target file (and its name from the spec) made its cells vanish from the gate:
    the base's goldens of a target unknown here were skipped, exit 0."""
    _with_custom_target(run_xisa, repo)
    git(repo, "checkout", "-qb", "drop-target")
    git(repo, "rm", "-q", f"targets/{CUSTOM_TARGET}.yaml")
    edit(repo / "kernels" / "scale.yaml", f", {CUSTOM_TARGET}]", "]")
    git(repo, "commit", "-qam", "no more mi300c")
    out = run_xisa("check", "--base", "main", "-q", "-j", "2", cwd=repo)
    assert out.code == 1, out.out + out.err
    assert f"unused: scale:small@{CUSTOM_TARGET}: removed since main (its golden there has no cell here), " \
           "outside the declared scope" in out.out
    # Declared, the removal passes: a scope may name a target that only the base has.
    assert run_xisa("check", "--base", "main", "--scope", CUSTOM_TARGET, "-q", "-j", "2", cwd=repo).code == 0


def test_a_scope_may_name_a_case_or_kernel_only_the_base_has(run_xisa, repo):
    """Renaming a case: the old name was refused as a scope (`'small' matches no case`, exit 2), so the
    rename could only be declared as `--scope '*'`."""
    git(repo, "checkout", "-qb", "rename")
    edit(repo / "kernels" / "scale.yaml", "  - name: small\n", "  - name: tiny\n")
    assert "3 written, 0 unchanged, 3 removed" in run_xisa("bless", "-j", "2", cwd=repo).out
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "rename the case")
    both = run_xisa("check", "--base", "main", "--scope", "*:scale:small", "--scope", "*:scale:tiny", "-q",
                    "-j", "2", cwd=repo)
    assert both.code == 0, both.out + both.err
    assert run_xisa("check", "--base", "main", "--scope", "*:scale:tiny", "-q", "-j", "2", cwd=repo).code == 1
    _one_line(run_xisa("check", "--base", "main", "--scope", "*:scale:smal", cwd=repo),
              "'smal' matches no case of scale", "did you mean 'small'?")


def test_moved_goldens_are_read_where_the_base_keeps_them(run_xisa, repo):
    """A PR moving golden/ (`[tool.xisa] golden = ...`) made the gate read the new folder at the base, where
    there is none: every cell `new since main`, exit 1."""
    git(repo, "checkout", "-qb", "move")
    git(repo, "mv", "golden", "isa-golden")
    edit(repo / "pyproject.toml", 'golden = "golden"', 'golden = "isa-golden"')
    git(repo, "commit", "-qam", "move the goldens")
    out = run_xisa("check", "--base", "main", "-j", "2", cwd=repo)
    assert out.code == 0, out.out + out.err
    assert "byte-identical: gfx1100, gfx942, sm_90 (3 cells)" in out.out
    # The goldens of this tree are still held to its compile, in their new place.
    edit(repo / "kernels" / "scale.py", "y = _scaled(x, factor) + 1.0", "y = _scaled(x, factor) + 2.0")
    stale = run_xisa("check", "--base", "main", "--scope", "gfx11*", "-q", "-j", "2", cwd=repo)
    assert stale.code == 1 and "stale golden: scale:small@gfx1100: isa-golden/scale/small/gfx1100.yaml" in stale.out


def test_goldens_marked_export_ignore_at_the_base_are_still_read(run_xisa, repo):
    """`golden/** export-ignore` in .gitattributes (goldens kept out of release tarballs) emptied the base
    that `git archive` read: a tarfile traceback, exit 1."""
    (repo / ".gitattributes").write_text("golden/** export-ignore\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-qm", "no goldens in tarballs")
    git(repo, "checkout", "-qb", "unchanged")
    out = run_xisa("diff", "--base", "main", "--format", "text", "-j", "2", cwd=repo)
    assert out.code == 0 and "byte-identical: gfx1100, gfx942, sm_90 (3 cells)" in out.out, out.out + out.err


def test_a_base_without_goldens_is_one_line(run_xisa_in_process, repo, tmp_path):
    """A base that has no golden folder gave every cell as `new since ...`: nothing was compared."""
    git(repo, "checkout", "-qb", "bare")
    git(repo, "rm", "-rq", "golden")
    git(repo, "commit", "-qm", "no goldens")
    git(repo, "checkout", "-q", "main")
    env = {"XISA_CACHE_DIR": str(tmp_path / "cold")}
    _one_line(run_xisa_in_process("check", "--base", "bare", cwd=repo, env=env), "bare has no goldens in golden/",
              "--compile-base")
    assert not (tmp_path / "cold" / "results").exists()


def test_base_goldens_of_another_analyzer_or_toolchain_point_at_compile_base(run_xisa, repo):
    """After an xisa upgrade the PR re-blesses every golden; the base's are of the old analyzer, and the
    gate said `re-bless with xisa bless`, which the PR had done and which cannot change the base."""
    git(repo, "checkout", "-qb", "old-analyzer")
    for path in (repo / "golden").rglob("*.yaml"):
        edit(path, f"analyzer: {ANALYZER_VERSION}\n", "analyzer: 1\n")
    git(repo, "commit", "-qam", "goldens of analyzer 1")
    git(repo, "checkout", "-qb", "upgrade")
    assert "3 written" in run_xisa("bless", "-j", "2", cwd=repo).out
    git(repo, "commit", "-qam", "re-bless with the new analyzer")
    out = run_xisa("check", "--base", "old-analyzer", "-q", "-j", "2", cwd=repo)
    assert out.code == 2
    [line] = [line for line in out.out.splitlines() if line.startswith("untrusted:")]
    assert "the goldens of old-analyzer were made by xisa's analyzer 1" in line and "--compile-base" in line
    assert "re-bless" not in line
    compiled = run_xisa("check", "--base", "old-analyzer", "--compile-base", "-q", "-j", "2", cwd=repo)
    assert compiled.code == 0, compiled.out + compiled.err
    # This tree's goldens of the old analyzer (xisa upgraded, nothing re-blessed): they were listed as
    # `stale golden: scale:small@gfx1100: ` with no reason, and the reason was nowhere.
    git(repo, "checkout", "-q", "old-analyzer")
    head_old = run_xisa("check", "--base", "old-analyzer", "--compile-base", "-q", "-j", "2", cwd=repo)
    assert head_old.code == 2
    assert (f"untrusted: goldens were made by xisa's analyzer 1, this xisa is {ANALYZER_VERSION}: "
            "re-bless with `xisa bless`") in head_old.out
    stale = [line for line in head_old.out.splitlines() if line.startswith("stale golden:")]
    assert len(stale) == 3 and all("golden/scale/small/" in line and "analyzer 1" in line for line in stale), stale
    git(repo, "checkout", "-q", "upgrade")

    import triton

    other = "3.9.0" if not triton.__version__.startswith("3.9") else "3.6.0"
    git(repo, "checkout", "-qb", "old-triton", "main")
    for path in (repo / "golden").rglob("*.yaml"):
        edit(path, f"triton: {triton.__version__}", f"triton: {other}")
    git(repo, "commit", "-qam", "goldens of another Triton")
    git(repo, "checkout", "-q", "upgrade")
    _one_line(run_xisa("check", "--base", "old-triton", cwd=repo), f"made with Triton {other}",
              "--compile-base")


def test_a_corrupt_base_golden_is_named_as_the_bases(run_xisa, repo):
    """A base golden with conflict markers was reported as `golden/scale/small/gfx942.yaml`, the file of
    this tree (which is fine), with the advice to bless it here."""
    git(repo, "checkout", "-qb", "broken-base")
    with (repo / "golden" / "scale" / "small" / "gfx942.yaml").open("a") as handle:
        handle.write("<<<<<<< HEAD\n")
    git(repo, "commit", "-qam", "a conflict committed")
    git(repo, "checkout", "-q", "main")
    out = run_xisa("check", "--base", "broken-base", "-q", "-j", "2", cwd=repo)
    assert out.code == 2
    assert "error: scale:small@gfx942: corrupt golden: broken-base:golden/scale/small/gfx942.yaml: merge conflict " \
           "markers" in out.out


def test_the_gate_says_how_to_bless_stale_goldens_and_that_command_clears_them(run_xisa, repo):
    git(repo, "checkout", "-qb", "stale")
    edit(repo / "kernels" / "scale.py", "y = _scaled(x, factor) + 1.0", "y = _scaled(x, factor) + 2.0")
    out = run_xisa("check", "--base", "main", "--scope", "gfx11*", "-q", "-j", "2", cwd=repo)
    assert out.code == 1
    [command] = [line[len("to accept: "):] for line in out.out.splitlines() if line.startswith("to accept: ")]
    assert command == "xisa bless --arch gfx1100"
    assert run_xisa(*command.split()[1:], "-j", "2", cwd=repo).code == 0
    assert run_xisa("check", "--base", "main", "--scope", "gfx11*", "-q", "-j", "2", cwd=repo).code == 0


def _project_without_goldens(root: Path, specs: list[str]) -> None:
    """Two `module:` kernels and no goldens (the --compile-base kind of repository)."""
    (root / "kernels").mkdir(parents=True)
    (root / "mykern").mkdir()
    (root / "mykern" / "__init__.py").write_text("")
    (root / "mykern" / "ops.py").write_text(MODULE_KERNEL)
    for name in ("ops", "ops2"):
        (root / "kernels" / f"{name}.yaml").write_text(
            f"name: {name}\nmodule: mykern.ops\nfunction: add_kernel\ntargets: [gfx942]\ncases:\n  - name: c\n"
            "    args: {x_ptr: '*fp32', y_ptr: '*fp32'}\n    constexprs: {BLOCK: 128}\n")
    listed = ", ".join(f'"{s}"' for s in specs)
    (root / "pyproject.toml").write_text(PYPROJECT.replace('specs = ["kernels"]\ngolden = "golden"\n',
                                                           f"specs = [{listed}]\n"))


def test_compile_base_compiles_what_the_base_configures(run_xisa, tmp_path):
    """--compile-base compiled the base with this tree's spec list: a PR dropping a spec from
    `[tool.xisa] specs` made that kernel vanish on both sides, exit 0."""
    root = tmp_path / "nogoldens"
    _project_without_goldens(root, ["kernels/ops.yaml", "kernels/ops2.yaml"])
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "two kernels")
    git(root, "checkout", "-qb", "fewer")
    edit(root / "pyproject.toml", ', "kernels/ops2.yaml"', "")
    git(root, "commit", "-qam", "one kernel")
    out = run_xisa("diff", "--base", "main", "--compile-base", "--format", "json", cwd=root)
    report = json.loads(out.out)
    assert out.code == 1, out.err
    assert {c["kernel"]: c["verdict"] for c in report["cells"]} == {"ops": "same", "ops2": "unused"}
    assert report["isolation_violated"] == ["ops2:c@gfx942"]


def test_compile_base_in_a_project_below_the_repository_root(run_xisa, tmp_path):
    """A project in a subfolder of its git repository (`gpu/` of a monorepo): --compile-base looked for
    the specs at the root of the base worktree (`.../tree/kernels: no such file or folder`, exit 2)."""
    repo_root = tmp_path / "mono"
    project = repo_root / "gpu"
    _project_without_goldens(project, ["kernels"])
    git(repo_root, "init", "-q", "-b", "main")
    git(repo_root, "add", "-A")
    git(repo_root, "commit", "-qm", "kernels in gpu/")
    same = run_xisa("diff", "--base", "main", "--compile-base", "--format", "text", cwd=project)
    assert same.code == 0 and "byte-identical: gfx942 (2 cells)" in same.out, same.out + same.err
    edit(project / "mykern" / "ops.py", "+ 1.0)", "* 3.0 + 1.0)")
    changed = run_xisa("diff", "--base", "main", "--compile-base", "--format", "json", cwd=project)
    assert changed.code == 1 and json.loads(changed.out)["isolation_violated"] == ["ops:c@gfx942", "ops2:c@gfx942"]


@pytest.mark.unit
def test_a_scope_naming_a_kernel_alone_says_how_to_write_it():
    """`--scope scale` reads as a target: it said `'scale' matches no target (fix: did you mean 'sm_90'?)`,
    pointing at a target, where the user meant the kernel on every target."""
    from xisa.errors import UsageError
    from xisa.golden.verdict import check_scopes

    with pytest.raises(UsageError) as info:
        check_scopes(["scale"], targets=["gfx1100", "gfx942", "sm_90"], cases={"scale": ["small"]})
    assert "'scale' matches no target" in str(info.value) and "did you mean '*:scale'?" in str(info.value)


SRC_HELPER = """import triton


@triton.jit
def scaled(x, factor):
    return x * factor
"""


def test_a_helper_outside_the_kernel_folders_is_seen_by_the_gate(run_xisa, tmp_path):
    """A src-layout helper (`src/mylib/helpers.py` on PYTHONPATH) edited in a PR: the gate answered the
    head's cells from the cache entries of main's compile (the example workflow restores them), and
    --compile-base answered the base's cells from the head's: byte-identical, exit 0, both ways."""
    root = tmp_path / "srcproj"
    (root / "kernels").mkdir(parents=True)
    (root / "src" / "mylib").mkdir(parents=True)
    (root / "src" / "mylib" / "__init__.py").write_text("")
    (root / "src" / "mylib" / "helpers.py").write_text(SRC_HELPER)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "kernels" / "scale.py").write_text(KERNEL.replace("@triton.jit\ndef _scaled(x, factor):\n    return x * factor"
                                                              "\n\n\n", "from mylib.helpers import scaled as _scaled\n\n\n"))
    (root / "kernels" / "scale.yaml").write_text(SPEC.replace("[gfx1100, gfx942, sm_90]", "[gfx942]"))
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(root / "src"), os.environ.get("PYTHONPATH")])),
           "XISA_CACHE_DIR": str(tmp_path / "cache")}
    git(root, "init", "-q", "-b", "main")
    assert run_xisa("bless", cwd=root, env=env).code == 0
    git(root, "add", "-A")
    git(root, "commit", "-qm", "goldens")
    git(root, "checkout", "-qb", "helper")
    edit(root / "src" / "mylib" / "helpers.py", "return x * factor", "return x * factor * 0.5")
    git(root, "commit", "-qam", "the helper")
    assert run_xisa("check", "--base", "main", cwd=root, env=env).code == 1
    assert run_xisa("check", "--base", "main", "--compile-base", cwd=root, env=env).code == 1
