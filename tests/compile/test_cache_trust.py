"""The result cache answers only for what a compile used, and only from a cache no one else could write.

Issue 11, items 2, 3, 6 and 12, and the `module:` spec whose parent package is missing (item 13).
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import os
import py_compile
import shutil
import subprocess
from pathlib import Path

import pytest

from support import FIXTURES, one_case_spec, write_files
from xisa.compile.incremental.cache import EntryStore, ResultCache, triton_cache_class, write_private
from xisa.compile.worker.result import CellResult

HELPER = """import triton


@triton.jit
def f(x):
    return x * 2.0
"""

KERNEL = """import triton
import triton.language as tl
{imports}


@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, f(tl.load(x_ptr + r)))
"""

def _edit_helper(path: Path) -> None:
    path.write_text(path.read_text().replace("x * 2.0", "x * 3.0"))


def _verdicts(outcome) -> dict[str, tuple[str, str]]:
    return {f"{c['kernel']}:{c['case']}@{c['target']}": (c["verdict"], c["head_sha256"])
            for c in json.loads(outcome.out)["cells"]}


# --- item 2: two spec folders with a helper of the same name ------------------------------------------

def test_same_named_helpers_in_two_spec_folders_never_share_a_module(run_xisa, tmp_path):
    files = {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels/ka", "kernels/kb"]\n'}
    for name in ("ka", "kb"):
        files[f"kernels/{name}/common.py"] = HELPER
        files[f"kernels/{name}/k.py"] = KERNEL.format(imports="from common import f")
        files[f"kernels/{name}/{name}.yaml"] = one_case_spec(name, "source: k.py")
    root = write_files(tmp_path / "proj", files)
    env = {"XISA_CACHE_DIR": str(tmp_path / "cache")}
    assert run_xisa("bless", "--no-cache", "--jobs", "1", cwd=root, env=env).code == 0
    for jobs in ("1", "2"):
        assert run_xisa("check", "--no-cache", "--jobs", jobs, cwd=root, env=env).code == 0
    _edit_helper(root / "kernels" / "kb" / "common.py")
    for jobs in ("1", "2"):   # a worker that compiled ka first must still compile kb against kb/common.py
        out = run_xisa("check", "--no-cache", "--jobs", jobs, "--format", "json", cwd=root, env=env)
        assert out.code == 1, (jobs, out.err)
        verdicts = _verdicts(out)
        assert verdicts["kb:c@gfx942"][0] == "changed" and verdicts["ka:c@gfx942"][0] == "same", jobs


SELF_REPLACING = """import sys

import triton.language as tl


class _Config:
    SCALE = tl.constexpr({scale})


sys.modules[__name__] = _Config()   # the module-level-attributes idiom: the module is an object now
"""


def test_a_helper_that_replaces_itself_in_sys_modules_is_not_shared(run_xisa, tmp_path):
    """ka/cfg.py and kb/cfg.py each put an object in sys.modules in their place: not a module, so it stayed
    after ka's load and kb's `from cfg import SCALE` got ka's (with -j 1; -j 2 was right)."""
    files = {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels/ka", "kernels/kb"]\n'}
    for name, scale in (("ka", "2.0"), ("kb", "3.0")):
        files[f"kernels/{name}/cfg.py"] = SELF_REPLACING.format(scale=scale)
        files[f"kernels/{name}/k.py"] = SCALED_KERNEL.format(prelude="from cfg import SCALE", scale="SCALE")
        files[f"kernels/{name}/{name}.yaml"] = one_case_spec(name, "source: k.py")
    root = write_files(tmp_path / "proj", files)
    out = run_xisa("compile", "--jobs", "1", "--no-cache", "--json", cwd=root, env={"XISA_CACHE_DIR": str(tmp_path / "c")})
    assert out.code == 0, out.err
    cells = {c["kernel"]: c for c in json.loads(out.out)["cells"]}
    assert cells["ka"]["sha256"] != cells["kb"]["sha256"]   # x * 2.0 and x * 3.0


SETS_CODEGEN = {  # a kernel module that changes how Triton compiles, for every kernel after it in the process
    "environment-variable": "import os\n\nos.environ['AMDGCN_USE_BUFFER_OPS'] = '0'",
    "knob-set-in-code": "triton.knobs.amd.use_buffer_ops = False",
}


@pytest.mark.parametrize("setting", sorted(SETS_CODEGEN))
def test_a_load_that_changes_how_triton_compiles_is_refused_and_undone(run_xisa, tmp_path, setting):
    """ka's module turns buffer ops off at import; kb, compiled after it in the same worker (-j 1), compiled
    with global loads: its verdict depended on the job count and order."""
    redirect = tmp_path / "proj" / "elsewhere"
    quiet = f"import os\n\nos.environ['TRITON_CACHE_DIR'] = {str(redirect)!r}\n" + SETS_CODEGEN[setting]
    root = write_files(tmp_path / "proj", {
        "pyproject.toml": '[tool.xisa]\nspecs = ["kernels/ka", "kernels/kb"]\n',
        "kernels/ka/k.py": KERNEL.format(imports=quiet + "\n\n\n@triton.jit\ndef f(x):\n    return x * 2.0"),
        "kernels/ka/ka.yaml": one_case_spec("ka", "source: k.py"),
        "kernels/kb/common.py": HELPER, "kernels/kb/k.py": KERNEL.format(imports="from common import f"),
        "kernels/kb/kb.yaml": one_case_spec("kb", "source: k.py")})
    out = run_xisa("compile", "--jobs", "1", "--no-cache", "--json", cwd=root, env={"XISA_CACHE_DIR": str(tmp_path / "c")})
    assert out.code == 2, out.err
    cells = {c["kernel"]: c for c in json.loads(out.out)["cells"]}
    assert cells["ka"]["status"] == "error" and "AMDGCN_USE_BUFFER_OPS" in cells["ka"]["error"]
    assert "kernels/ka/ka.yaml: source: " in cells["ka"]["error"] and "fix: " in cells["ka"]["error"]
    assert cells["kb"]["status"] == "ok"
    assert any(name.startswith("buffer_load") for name in cells["kb"]["histogram"]), cells["kb"]["histogram"]
    assert not redirect.exists()         # the variable the load set was undone before anything compiled


# --- item 3: the cache key covers every file the kernel's load imported -------------------------------

def _src_layout(root: Path) -> dict[str, str]:
    write_files(root, {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n', "src/mylib/__init__.py": "",
                  "src/mylib/helpers.py": HELPER,
                  "kernels/k.py": KERNEL.format(imports="from mylib.helpers import f"),
                  "kernels/k.yaml": one_case_spec("k", "source: k.py")})
    path = os.pathsep.join(p for p in (str(root / "src"), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path}


def _relative_import_in_module(root: Path) -> dict[str, str]:
    write_files(root, {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n', "pkg/__init__.py": "",
                  "pkg/sub/__init__.py": "", "pkg/sub/helpers.py": HELPER,
                  "pkg/kern.py": KERNEL.format(imports="from .sub import helpers\n\nf = helpers.f"),
                  "kernels/k.yaml": one_case_spec("k", "module: pkg.kern")})
    return {}


def _vendored(root: Path) -> dict[str, str]:
    vendoring = ("import os\nimport sys\n\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), '_vendor'))\n"
                 "from vlib import f  # noqa: E402")
    write_files(root, {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n',
                  "kernels/_vendor/vlib/__init__.py": "from vlib.helpers import f  # noqa: F401\n",
                  "kernels/_vendor/vlib/helpers.py": HELPER, "kernels/k.py": KERNEL.format(imports=vendoring),
                  "kernels/k.yaml": one_case_spec("k", "source: k.py")})
    return {}


def _loaded_by_path(root: Path) -> dict[str, str]:
    by_path = ("import importlib.util\nimport os\n\n"
               "_spec = importlib.util.spec_from_file_location('byhand', os.path.join(os.path.dirname(__file__), "
               "'lib', 'helpers.py'))\n_helpers = importlib.util.module_from_spec(_spec)\n"
               "_spec.loader.exec_module(_helpers)\nf = _helpers.f")
    write_files(root, {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n', "kernels/lib/helpers.py": HELPER,
                  "kernels/k.py": KERNEL.format(imports=by_path),
                  "kernels/k.yaml": one_case_spec("k", "source: k.py")})
    return {}


LAYOUTS = {  # layout -> (builder, the helper the kernel imports)
    "helper-loaded-by-path": (_loaded_by_path, "kernels/lib/helpers.py"),
    "src-layout-on-pythonpath": (_src_layout, "src/mylib/helpers.py"),
    "relative-import-in-module-spec": (_relative_import_in_module, "pkg/sub/helpers.py"),
    "vendored-package": (_vendored, "kernels/_vendor/vlib/helpers.py"),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_warm_check_sees_an_edited_helper(run_xisa, tmp_path, layout):
    build, helper = LAYOUTS[layout]
    root = tmp_path / "proj"
    env = {"XISA_CACHE_DIR": str(tmp_path / "cache"), **build(root)}
    assert run_xisa("bless", "--jobs", "1", cwd=root, env=env).code == 0    # the cell is now cached
    _edit_helper(root / helper)
    warm = run_xisa("check", "--jobs", "1", "--format", "json", cwd=root, env=env)
    cold = run_xisa("check", "--jobs", "1", "--format", "json", "--no-cache", cwd=root, env=env)
    assert warm.code == cold.code == 1, warm.err
    assert _verdicts(warm) == _verdicts(cold) and _verdicts(warm)["k:c@gfx942"][0] == "changed"


# What the compile used beyond the files its module imports: a table a constexpr function reads (outside
# Triton's own cache key), a file read while compiling, an environment variable read at import.

SCALED_KERNEL = """import triton
import triton.language as tl
{prelude}


@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.load(x_ptr + r) * {scale})
"""


def _replace(path: Path, old: str, new: str) -> None:
    path.write_text(path.read_text().replace(old, new))


def _table_read_by_a_constexpr_function(root: Path) -> dict[str, str]:
    prelude = ("from tables import TABLE\n\n\n@triton.constexpr_function\ndef scale():\n"
               "    return TABLE[\"scale\"]")
    write_files(root, {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n', "kernels/tables.py": 'TABLE = {"scale": 2.0}\n',
                  "kernels/k.py": SCALED_KERNEL.format(prelude=prelude, scale="scale()"),
                  "kernels/k.yaml": one_case_spec("k", "source: k.py")})
    return {}


def _edit_table(root: Path) -> dict[str, str]:
    _replace(root / "kernels" / "tables.py", "2.0", "3.0")
    return {}


def _file_read_while_compiling(root: Path) -> dict[str, str]:
    prelude = ("import json\nimport os\n\n\nclass Tuning:\n    def __init__(self):\n"
               "        with open(os.path.join(os.path.dirname(__file__), 'tuning.json')) as handle:\n"
               "            self.scale = json.load(handle)['scale']\n\n\n"
               "@triton.constexpr_function\ndef scale():\n    return Tuning().scale")
    write_files(root, {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n', "kernels/tuning.json": '{"scale": 2.0}\n',
                  "kernels/k.py": SCALED_KERNEL.format(prelude=prelude, scale="scale()"),
                  "kernels/k.yaml": one_case_spec("k", "source: k.py")})
    return {}


def _edit_tuning_file(root: Path) -> dict[str, str]:
    _replace(root / "kernels" / "tuning.json", "2.0", "3.0")
    return {}


def _environment_read_at_import(root: Path) -> dict[str, str]:
    prelude = "import os\n\nSCALE = tl.constexpr(float(os.environ.get('KERNEL_SCALE', '2.0')))"
    write_files(root, {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n',
                  "kernels/k.py": SCALED_KERNEL.format(prelude=prelude, scale="SCALE"),
                  "kernels/k.yaml": one_case_spec("k", "source: k.py")})
    return {}


def _set_the_variable(root: Path) -> dict[str, str]:
    return {"KERNEL_SCALE": "3.0"}


def _file_assembled_by_inline_asm(root: Path) -> dict[str, str]:
    prelude = ("import os\n\nINCLUDE = tl.constexpr('.include \"' + os.path.join(os.path.dirname(os.path.abspath("
               "__file__)), 'extra.s') + '\"')\n\n\n@triton.jit\ndef nops(x):\n"
               "    return tl.inline_asm_elementwise(INCLUDE + '\\nv_mov_b32 $0, $1', '=v,v', [x], dtype=tl.float32, "
               "is_pure=True, pack=1)")
    write_files(root, {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n', "kernels/extra.s": "s_nop 0\n",
                  "kernels/k.py": SCALED_KERNEL.format(prelude=prelude, scale="0.0 + nops(tl.load(x_ptr + r))"),
                  "kernels/k.yaml": one_case_spec("k", "source: k.py")})
    return {}


def _edit_assembled_file(root: Path) -> dict[str, str]:
    (root / "kernels" / "extra.s").write_text("s_nop 0\ns_nop 1\n")
    return {}


USED = {  # what the compile used -> (builder, the change: files edited, variables set for the checks)
    "file-assembled-by-inline-asm": (_file_assembled_by_inline_asm, _edit_assembled_file),
    "table-read-by-a-constexpr-function": (_table_read_by_a_constexpr_function, _edit_table),
    "file-read-while-compiling": (_file_read_while_compiling, _edit_tuning_file),
    "environment-variable-read-at-import": (_environment_read_at_import, _set_the_variable),
}


@pytest.mark.parametrize("used", sorted(USED))
def test_warm_check_sees_a_change_to_what_the_compile_used(run_xisa, tmp_path, used):
    build, change = USED[used]
    root, cache = tmp_path / "proj", tmp_path / "cache"
    env = {"XISA_CACHE_DIR": str(cache), **build(root)}
    assert run_xisa("bless", "--jobs", "1", cwd=root, env=env).code == 0   # results and the back-end store now warm
    env.update(change(root))
    warm = run_xisa("check", "--jobs", "1", "--format", "json", cwd=root, env=env)
    assert warm.code == 1 and _verdicts(warm)["k:c@gfx942"][0] == "changed", warm.err
    shutil.rmtree(cache / "results")     # the back-end store alone must not answer for the old files either
    triton_only = run_xisa("check", "--jobs", "1", "--format", "json", cwd=root, env=env)
    assert triton_only.code == 1 and _verdicts(triton_only) == _verdicts(warm), triton_only.err


def test_an_edit_under_a_stale_bytecode_cache_is_compiled(run_xisa, tmp_path):
    """A __pycache__ entry is trusted by its source's mtime and size: an edit that keeps both (a restored mtime,
    a checkout in the same second) must still be what the kernel compiles with, even with --no-cache."""
    root = write_files(tmp_path / "proj", {
        "pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n', "kernels/consts.py": "import triton.language as tl\n\n"
        "SCALE = tl.constexpr(2.0)\n", "kernels/k.py": SCALED_KERNEL.format(prelude="from consts import SCALE",
                                                                          scale="SCALE"),
        "kernels/k.yaml": one_case_spec("k", "source: k.py")})
    env = {"XISA_CACHE_DIR": str(tmp_path / "cache")}
    assert run_xisa("bless", "--jobs", "1", cwd=root, env=env).code == 0
    consts = root / "kernels" / "consts.py"
    py_compile.compile(str(consts), cfile=importlib.util.cache_from_source(str(consts)))   # as any import leaves it
    before = consts.stat()
    _replace(consts, "2.0", "3.0")
    os.utime(consts, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert consts.stat().st_size == before.st_size
    out = run_xisa("check", "--jobs", "1", "--no-cache", "--format", "json", cwd=root, env=env)
    assert out.code == 1 and _verdicts(out)["k:c@gfx942"][0] == "changed", out.err


def test_a_triton_from_outside_its_wheel_is_part_of_the_key(run_xisa, tmp_path):
    """A Triton source checkout on PYTHONPATH in front of the installed wheel (whose RECORD says nothing of
    the checkout's files): after an edit to it, a warm check must not answer from what it compiled before."""
    import triton

    checkout = tmp_path / "triton-src"
    shutil.copytree(Path(triton.__file__).parent, checkout / "triton", copy_function=os.symlink,
                    ignore=shutil.ignore_patterns("__pycache__"))
    root = write_files(tmp_path / "proj", {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n',
                                      "kernels/common.py": HELPER, "kernels/k.py": KERNEL.format(imports="from common import f"),
                                      "kernels/k.yaml": one_case_spec("k", "source: k.py")})
    path = os.pathsep.join(p for p in (str(checkout), os.environ.get("PYTHONPATH")) if p)
    env = {"XISA_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": path}
    assert run_xisa("bless", "--jobs", "1", cwd=root, env=env).code == 0
    compiler = checkout / "triton" / "backends" / "amd" / "compiler.py"
    text = compiler.read_text()
    assert "    num_warps: int = 4\n" in text
    compiler.unlink()                     # the developer's edit: AMD kernels now default to 8 warps
    compiler.write_text(text.replace("    num_warps: int = 4\n", "    num_warps: int = 8\n"))
    out = run_xisa("check", "--jobs", "1", "--format", "json", cwd=root, env=env)
    assert out.code == 1 and _verdicts(out)["k:c@gfx942"][0] == "changed", out.err


def _sample_result() -> CellResult:
    from xisa.analyze.amdgcn import analyze_amdgcn

    analysis, _ = analyze_amdgcn((FIXTURES / "asm" / "scale_gfx942.amdgcn").read_text())
    return CellResult(kernel="k", case="c", target="gfx942", status="ok", analysis=analysis)


@pytest.mark.unit
def test_an_entry_is_a_hit_only_while_its_depfile_holds(tmp_path):
    helper = tmp_path / "helper.py"
    helper.write_text("a = 1\n")
    absent = tmp_path / "pkg" / "__init__.py"    # a namespace package's: it must stay absent
    dependencies = {str(helper): hashlib.sha256(b"a = 1\n").hexdigest(), str(absent): None}
    folder = tmp_path / "cache"
    folder.mkdir()
    ResultCache(folder).put("ab" * 32, _sample_result(), dependencies)
    assert ResultCache(folder).get("ab" * 32).analysis.sha256 == _sample_result().analysis.sha256
    helper.write_text("a = 2\n")
    assert ResultCache(folder).get("ab" * 32) is None            # an imported file changed
    helper.write_text("a = 1\n")
    absent.parent.mkdir()
    absent.write_text("")
    assert ResultCache(folder).get("ab" * 32) is None            # a file that was absent appeared
    absent.unlink()
    assert ResultCache(folder).get("ab" * 32) is not None
    ResultCache(folder).put("cd" * 32, _sample_result(), {})       # no depfile: never kept
    assert ResultCache(folder).get("cd" * 32) is None


# --- item 13: a `module:` spec whose parent package is missing ----------------------------------------

def test_module_with_a_missing_parent_package_is_one_line(run_xisa, tmp_path):
    root = write_files(tmp_path / "proj", {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n',
                                      "kernels/k.yaml": one_case_spec("k", "module: no_such_pkg.kernels")})
    out = run_xisa("compile", "--jobs", "1", "--json", cwd=root, env={"XISA_CACHE_DIR": str(tmp_path / "c")})
    assert out.code == 2 and "Traceback" not in out.err
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error k:c@gfx942: kernels/k.yaml: module: ")
    assert "cannot import module 'no_such_pkg.kernels'" in lines[0]
    assert "its parent package 'no_such_pkg' was not found" in lines[0] and "fix: add no_such_pkg/__init__.py" in lines[0]


# --- item 6: a cache someone else could write is refused; --no-cache and `cache clear` start from nothing

def _one_line_error(out, *needles: str) -> None:
    assert out.code == 2, out.out + out.err
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("xisa: error: "), out.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


SCALE_SMALL = ("--arch", "gfx942", "--kernel", "scale:small")


def test_cache_folder_writable_by_others_is_refused(run_xisa, tinyproj, tmp_path):
    cache = tmp_path / "cache"
    env = {"XISA_CACHE_DIR": str(cache)}
    assert run_xisa("compile", *SCALE_SMALL, cwd=tinyproj, env=env).code == 0
    for folder in (cache, cache / "results", next((cache / "results").iterdir())):
        folder.chmod(0o777)
        _one_line_error(run_xisa("check", *SCALE_SMALL, cwd=tinyproj, env=env), str(folder),
                        "writable by group or others", f"fix: chmod go-w {folder}")
        folder.chmod(0o700)
    assert run_xisa("compile", *SCALE_SMALL, cwd=tinyproj, env=env).code == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_cache_of_another_user_is_refused(run_xisa, tinyproj, tmp_path):
    cache = tmp_path / "cache"
    env = {"XISA_CACHE_DIR": str(cache)}
    assert run_xisa("compile", *SCALE_SMALL, cwd=tinyproj, env=env).code == 0
    entry = next((cache / "results").rglob("*.json"))
    os.chown(entry, 4242, 4242)         # a planted entry under the right key
    _one_line_error(run_xisa("check", *SCALE_SMALL, cwd=tinyproj, env=env), str(entry), "another user (uid 4242)")
    os.chown(entry, 0, 0)
    entry.chmod(0o666)
    _one_line_error(run_xisa("check", *SCALE_SMALL, cwd=tinyproj, env=env), str(entry), "writable by group or others")
    entry.chmod(0o600)
    os.chown(cache, 4242, 4242)          # a cache folder pre-created by someone else
    _one_line_error(run_xisa("check", *SCALE_SMALL, cwd=tinyproj, env=env), str(cache), "another user (uid 4242)",
                    "fix: point XISA_CACHE_DIR at a folder of your own")
    _one_line_error(run_xisa("cache", "clear", cwd=tinyproj, env=env), str(cache), "another user")
    assert entry.exists()                # refused, not emptied


def _backend_entries(cache: Path) -> dict[Path, dict]:
    return {p: {"key": p.stem, **EntryStore(p.parent.parent).read(p.stem)} for p in (cache / "backend").rglob("*.json")}


def test_no_cache_and_cache_clear_never_reuse_the_back_end_store(run_xisa, tinyproj, tmp_path):
    cache = tmp_path / "cache"
    env = {"XISA_CACHE_DIR": str(cache)}
    assert run_xisa("bless", *SCALE_SMALL, cwd=tinyproj, env=env).code == 0
    (old,) = _backend_entries(cache).values()
    source = tinyproj / "kernels" / "scale.py"
    source.write_text(source.read_text().replace("        y = x * factor\n", "        y = x * factor * factor\n"))
    assert run_xisa("compile", *SCALE_SMALL, cwd=tinyproj, env=env).code == 0
    (swapped,) = [path for path, data in _backend_entries(cache).items() if data["key"] != old["key"]]
    body = {k: v for k, v in old.items() if k not in ("key", "digest")}
    EntryStore(swapped.parent.parent).write(swapped.stem, body)   # the edited kernel's entry says the blessed one
    assert run_xisa("check", *SCALE_SMALL, "--no-cache", cwd=tinyproj, env=env).code == 1
    cleared = run_xisa("cache", "clear", cwd=tinyproj, env=env)
    assert cleared.code == 0 and sorted(p.name for p in cache.iterdir()) == []
    assert run_xisa("check", *SCALE_SMALL, cwd=tinyproj, env=env).code == 1


# --- item 12: a cache that cannot be written only costs speed -----------------------------------------

def _full_disk(monkeypatch, folder: Path) -> None:
    """Every rename into `folder` fails as on a full disk (the temp file is already written by then)."""
    real = os.replace

    def replace(src, dst, **kwargs):
        if str(dst).startswith(str(folder)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return real(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.unit
def test_result_and_timing_writes_on_a_full_disk_leave_nothing(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    folder.mkdir()
    _full_disk(monkeypatch, folder)
    ResultCache(folder).put("ab" * 32, _sample_result(), {str(tmp_path): None})
    assert not write_private(folder / "timings.json", "{}")
    assert [p for p in folder.rglob("*") if p.is_file()] == []


def test_tritons_cache_writes_fall_back_on_a_full_disk(tmp_path, monkeypatch):
    primary, fallback = tmp_path / "cache", tmp_path / "fallback"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(primary))
    _full_disk(monkeypatch, primary)
    manager = triton_cache_class(str(fallback))("KEY")
    path = manager.put(b"\x7fELF code", "k.hsaco")
    group = manager.put_group("k.json", {"k.hsaco": path})
    assert Path(path).read_bytes() == b"\x7fELF code" and Path(path).is_relative_to(fallback)
    assert json.loads(Path(group).read_text()) == {"child_paths": {"k.hsaco": path}}
    entry = manager.key   # "KEY", salted with the installed code the process holds (installed_digest)
    assert [p for p in primary.rglob("*") if p.name != entry] == []   # no tmp.pid_* left behind


@pytest.mark.unit
def test_a_signal_during_a_cache_write_leaves_no_temp_file(tmp_path, monkeypatch):
    """SIGTERM/SIGHUP/SIGINT unwind as KeyboardInterrupt: one that lands between a cache entry's temp file and
    its rename left `.tmp-*.json` behind in results/ (only OSError was cleaned up)."""
    folder = tmp_path / "cache"
    folder.mkdir()

    def interrupted(src, dst, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ResultCache(folder).put("ab" * 32, _sample_result(), {str(tmp_path): None})
    with pytest.raises(KeyboardInterrupt):
        write_private(folder / "timings.json", "{}")
    assert [p for p in folder.rglob("*") if p.is_file()] == []


@pytest.fixture
def full_tmpfs(tmp_path):
    """A real file system with no free space, holding an empty cache folder (skipped where mount is denied)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        (disk / "cache").mkdir(mode=0o700)
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)
        yield disk / "cache"
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_full_disk_in_the_cache_folder_only_costs_speed(run_xisa, tinyproj, full_tmpfs):
    env = {"XISA_CACHE_DIR": str(full_tmpfs)}
    for _ in range(2):
        out = run_xisa("compile", *SCALE_SMALL, "--json", cwd=tinyproj, env=env)
        assert out.code == 0, out.err
        assert [c["status"] for c in json.loads(out.out)["cells"]] == ["ok"]
    leftovers = [p for p in full_tmpfs.rglob("*") if p.name.startswith((".tmp-", "tmp.pid_"))]
    assert leftovers == []
