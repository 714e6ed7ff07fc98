"""Kernel modules import as the user's code does (issue 14, item 3): `[tool.xisa] pythonpath`, `module:` of an
installed package (its files key the result cache), a failing parent package named in one line, and the GPU
queries a module makes at import answered for the target the load is for."""

from __future__ import annotations

import os
import py_compile
import sys
from pathlib import Path

import pytest

from support import count_as_installed, forget_installed, one_case_spec, write_files
from xisa.errors import SpecError

KERNEL = """import triton
import triton.language as tl
{imports}


@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.load(x_ptr + r) * SCALE)
"""

def _pyproject(**settings: list[str]) -> str:
    lines = ['[tool.xisa]', 'specs = ["kernels"]']
    lines += [f"{key} = [{', '.join(repr(v).replace(chr(39), chr(34)) for v in values)}]"
              for key, values in settings.items()]
    return "\n".join(lines) + "\n"


def _compile(root: Path, cache: Path, *, use_cache: bool = True) -> dict[str, tuple]:
    """(status, cached, fingerprint, error) per cell, through the same calls `xisa compile` makes."""
    from xisa.api import Selection, open_workspace
    from xisa.compile.runner import RunOptions, run_cells

    ws = open_workspace(cwd=root)
    _, cells = Selection().cells(ws)
    results = run_cells(cells, roots=list(ws.project.kernel_roots), cache_dir=cache,
                        options=RunOptions(jobs=1, use_cache=use_cache))
    return {cell.id: (r.status, r.cached, r.analysis.sha256 if r.analysis else None, r.error)
            for cell, r in zip(cells, results)}


def _load(root: Path, cwd: Path, target_name: str | None = None):
    """The kernel function of the project's only spec, loaded with `cwd` as the working folder."""
    from xisa.api import open_workspace
    from xisa.compile.launch.loader import load_kernel_function

    saved = os.getcwd()
    os.chdir(cwd)
    try:
        ws = open_workspace(cwd=root)
        spec = ws.specs[0]
        target = ws.targets[target_name] if target_name else None
        return spec, load_kernel_function(spec, roots=list(ws.project.kernel_roots), target=target)
    finally:
        os.chdir(saved)


# --- a. [tool.xisa] pythonpath ---------------------------------------------------------------------------

def _src_vendor_project(root: Path) -> Path:
    return write_files(root, {
        "pyproject.toml": _pyproject(pythonpath=["src", "vendor"]),
        "src/mylib/__init__.py": "", "src/which.py": "WHERE = 'src'\n", "vendor/which.py": "WHERE = 'vendor'\n",
        "vendor/vlib.py": "import triton.language as tl\n\nSCALE = tl.constexpr(2.0)\n",
        "src/mylib/kern.py": KERNEL.format(imports="from vlib import SCALE\nfrom which import WHERE"),
        "kernels/k.yaml": one_case_spec("k", "module: mylib.kern", "gfx942"),
    })


def test_pythonpath_loads_the_same_from_any_folder_in_order(tmp_path):
    root = _src_vendor_project(tmp_path / "proj")
    before = list(sys.path)
    seen = set()
    for cwd in (root, root / "src", root / "kernels", tmp_path):
        spec, fn = _load(root, cwd)
        seen.add((fn.fn.__globals__["__file__"], fn.fn.__globals__["WHERE"]))
        assert sys.path == before                      # the folders are on sys.path only during the load
    assert seen == {(str(root / "src" / "mylib" / "kern.py"), "src")}   # src before vendor, from every folder


def test_a_spec_of_a_src_layout_does_not_load_without_pythonpath(tmp_path):
    root = _src_vendor_project(tmp_path / "proj")
    (root / "pyproject.toml").write_text(_pyproject())
    with pytest.raises(SpecError, match="cannot import module 'mylib.kern'.*pythonpath"):
        _load(root, tmp_path)


@pytest.mark.unit
@pytest.mark.parametrize("entry, needle", [("vendor2", "no such folder"), ("../outside", "outside the project"),
                                           ("/abs", "outside the project"), ("linked", "goes through the link")])
def test_a_bad_pythonpath_entry_is_one_line_naming_the_setting(tmp_path, entry, needle):
    from xisa.api import open_workspace

    root = _src_vendor_project(tmp_path / "proj")
    (tmp_path / "outside").mkdir()
    (root / "linked").symlink_to(tmp_path / "outside")
    (root / "pyproject.toml").write_text(_pyproject(pythonpath=["src", entry]))
    with pytest.raises(SpecError) as caught:
        open_workspace(cwd=root)
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    assert message.startswith("pyproject.toml: tool.xisa.pythonpath[1]: ") and needle in message
    assert "(fix: " in message


# --- b. `module:` of an installed package; its files key the result cache --------------------------------

FAKE = {"fakelib/__init__.py": "", "fakelib/consts.py": "import triton.language as tl\n\nSCALE = tl.constexpr(2.0)\n",
        "fakelib/ops.py": KERNEL.format(imports="from fakelib.consts import SCALE")}


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A site folder holding `fakelib`, counted as installed (like site-packages) and on sys.path."""
    site = write_files(tmp_path / "site", FAKE)
    count_as_installed(monkeypatch, site)
    yield site
    forget_installed()


def _installed_project(root: Path, **settings) -> Path:
    return write_files(root, {"pyproject.toml": _pyproject(**settings),
                         "kernels/k.yaml": one_case_spec("k", "module: fakelib.ops", "gfx942")})


def test_an_installed_kernel_package_loads_and_its_files_are_dependencies(installed, tmp_path):
    from xisa.compile.launch.loader import kernel_dependencies
    from xisa.compile.incremental.reads import in_environment

    root = _installed_project(tmp_path / "proj")
    spec, fn = _load(root, root)
    assert in_environment(str(installed / "fakelib" / "ops.py"))    # outside the project, installed
    depends = kernel_dependencies(spec)
    for name in ("__init__.py", "consts.py", "ops.py"):
        assert str(installed / "fakelib" / name) in depends


def test_an_edited_installed_kernel_recompiles_and_an_unchanged_one_is_a_hit(installed, tmp_path):
    root = _installed_project(tmp_path / "proj")
    cache = tmp_path / "cache"
    first = _compile(root, cache)["k:c@gfx942"]
    assert first[0] == "ok" and not first[1], first
    again = _compile(root, cache)["k:c@gfx942"]
    assert again[:3] == ("ok", True, first[2])                      # unchanged: answered from the cache
    consts = installed / "fakelib" / "consts.py"
    consts.write_text(consts.read_text().replace("2.0", "3.0"))
    edited = _compile(root, cache)["k:c@gfx942"]
    assert edited[0] == "ok" and not edited[1] and edited[2] != first[2]
    assert _compile(root, cache, use_cache=False)["k:c@gfx942"][2] == edited[2]


def test_a_stale_bytecode_of_an_installed_kernel_is_never_what_compiles(installed, tmp_path):
    """A .pyc trusted without its source (unchecked hash) holding other code: a load compiles the source, so the
    cached answer and a cold compile agree, and both are the source's."""
    root = _installed_project(tmp_path / "proj")
    cache = tmp_path / "cache"
    first = _compile(root, cache)["k:c@gfx942"]
    consts = installed / "fakelib" / "consts.py"
    original = consts.read_text()
    consts.write_text(original.replace("2.0", "5.0"))
    py_compile.compile(str(consts), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    consts.write_text(original)
    warm = _compile(root, cache)["k:c@gfx942"]
    cold = _compile(root, cache, use_cache=False)["k:c@gfx942"]
    assert warm[:3] == ("ok", True, first[2]) and cold[2] == first[2]


def test_a_copy_of_the_package_appearing_earlier_on_the_path_recompiles(installed, tmp_path):
    """The same package put in a pythonpath folder (vendored over the installed one) is what a load imports now:
    the entry keyed on the installed files must not answer."""
    root = _installed_project(tmp_path / "proj", pythonpath=["vendor"])
    (root / "vendor").mkdir()
    cache = tmp_path / "cache"
    first = _compile(root, cache)["k:c@gfx942"]
    write_files(root / "vendor", {**FAKE, "fakelib/consts.py": FAKE["fakelib/consts.py"].replace("2.0", "4.0")})
    shadowed = _compile(root, cache)["k:c@gfx942"]
    assert shadowed[0] == "ok" and not shadowed[1] and shadowed[2] != first[2]


# --- c. a parent package whose __init__ fails -------------------------------------------------------------

def test_an_installed_parent_package_that_fails_is_one_line_naming_it(installed, tmp_path):
    (installed / "fakelib" / "__init__.py").write_text(
        "raise OSError('libfake.so.1: cannot open shared object file: No such file or directory')\n")
    root = _installed_project(tmp_path / "proj")
    with pytest.raises(SpecError) as caught:
        _load(root, root)
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    assert message.startswith("kernels/k.yaml: module: cannot import module 'fakelib.ops': its parent package "
                              f"'fakelib' ({installed / 'fakelib' / '__init__.py'}) failed: ")
    assert "(fix: " in message


# --- d, i. GPU queries at import answered for the load's target; import hooks -----------------------------

@pytest.fixture
def gpu_project(tmp_path) -> Path:
    import shutil

    from support import FIXTURES

    return Path(shutil.copytree(FIXTURES / "imports", tmp_path / "proj"))


def _load_for(root: Path, kernel: str, target: str):
    from xisa.api import open_workspace
    from xisa.compile.launch.loader import load_kernel_function

    ws = open_workspace(cwd=root)
    spec = next(s for s in ws.specs if s.name == kernel)
    return load_kernel_function(spec, roots=list(ws.project.kernel_roots), target=ws.targets[target])


def test_the_current_target_at_import_is_the_loads_and_each_target_loads_its_own(gpu_project):
    from triton.runtime.driver import driver

    maxima = {name: _load_for(gpu_project, "fp8", name).fn.__globals__["FP8_MAX"].value for name in ("gfx942", "gfx950")}
    assert maxima == {"gfx942": 240.0, "gfx950": 448.0}
    assert driver._active is None                    # the machine's driver is back as it was (none chosen)


def test_a_module_that_never_asks_the_target_loads_once_for_every_target(gpu_project):
    write_files(gpu_project, {"kernels/plain.py": KERNEL.format(imports="SCALE = tl.constexpr(2.0)"),
                         "kernels/plain.yaml": one_case_spec("plain", "module: x", "gfx942, gfx950")
                         .replace("module: x", "source: plain.py")})
    assert _load_for(gpu_project, "plain", "gfx942") is _load_for(gpu_project, "plain", "gfx950")


def test_an_import_time_platform_constant_compiles_as_the_per_target_override(gpu_project, tmp_path):
    results = _compile(gpu_project, tmp_path / "cache")
    sha = {cell: result[2] for cell, result in results.items() if cell.startswith("fp8:")}
    assert all(sha.values()), results
    for target in ("gfx942", "gfx950"):
        assert sha[f"fp8:from_import@{target}"] == sha[f"fp8:per_target@{target}"]
    assert sha["fp8:from_import@gfx942"] != sha["fp8:ocp@gfx942"]      # the constant decides the code
    assert sha["fp8:from_import@gfx950"] == sha["fp8:ocp@gfx950"]
    again = _compile(gpu_project, tmp_path / "cache")
    assert {cell: r[:3] for cell, r in again.items() if cell.startswith("fp8:")} == \
        {cell: ("ok", True, sha[cell]) for cell in sha}                # per-target loads are cached per target


def test_torch_cuda_at_import_is_answered_from_the_target_file_without_a_hook(gpu_project):
    """props.py sizes its kernel from torch.cuda at import: each target's load gets its reference product's SMs."""
    import torch

    sms = {name: _load_for(gpu_project, "props", name).fn.__globals__["NUM_SMS"] for name in ("gfx942", "sm_90")}
    assert sms == {"gfx942": 304, "sm_90": 132}                      # MI300X, H200 (targets/*.yaml device:)
    assert torch.cuda.is_available() is False and torch.version.cuda is None   # answered for the load only


def test_an_import_hook_answers_torch_cuda_for_the_target_and_is_undone(gpu_project, tmp_path, monkeypatch):
    import torch

    from xisa.compile.worker.state import WORKER

    (gpu_project / "pyproject.toml").write_text(_pyproject(import_hooks=["tests/xisa_stubs.py"]))
    sms = {name: _load_for(gpu_project, "props", name).fn.__globals__["NUM_SMS"] for name in ("gfx942", "sm_90")}
    assert sms == {"gfx942": 228, "sm_90": 114}                      # the hook's answers win over the target file's
    assert torch.cuda.is_available() is False                        # the stub ends with the load
    # compile workers fork from this process: start them without its loads, as `xisa check` starts them
    monkeypatch.setattr(WORKER, "loaded", {})
    results = _compile(gpu_project, tmp_path / "cache")
    assert results["props:c@gfx942"][0] == results["props:c@sm_90"][0] == "ok", results
    hook = gpu_project / "tests" / "xisa_stubs.py"
    hook.write_text(hook.read_text().replace('"gfx942": 228', '"gfx942": 304'))
    edited = _compile(gpu_project, tmp_path / "cache")
    assert not edited["props:c@gfx942"][1] and edited["props:c@gfx942"][2] != results["props:c@gfx942"][2]


def test_a_hook_without_the_context_manager_is_one_line(gpu_project):
    (gpu_project / "tests" / "xisa_stubs.py").write_text("X = 1\n")
    (gpu_project / "pyproject.toml").write_text(_pyproject(import_hooks=["tests/xisa_stubs.py"]))
    with pytest.raises(SpecError, match=r"^pyproject.toml: tool.xisa.import_hooks: xisa_stubs.py defines no "
                                        r"xisa_import_hook\(target\) \(fix: "):
        _load_for(gpu_project, "fp8", "gfx942")


def test_while_a_cell_binds_and_compiles_the_current_target_is_the_cells(gpu_project):
    """A heuristic or launch helper calling a tutorial's is_hip() while the cell binds gets the cell's target."""
    import triton
    from triton.runtime.driver import driver

    from xisa.api import open_workspace
    from xisa.compile.incremental.reads import compiling

    ws = open_workspace(cwd=gpu_project)
    spec = next(s for s in ws.specs if s.name == "fp8")
    for name in ("gfx942", "gfx950"):
        _load_for(gpu_project, "fp8", name)
        with compiling(spec, ws.targets[name]):
            assert triton.runtime.driver.active.get_current_target() == ws.targets[name].gpu_target()
    assert driver._active is None


def test_a_regular_package_appearing_over_an_installed_namespace_package_recompiles(installed, tmp_path):
    """`fakens` is a namespace package (no __init__.py) in the site folder; a regular `fakens` put anywhere on the
    path wins over every namespace portion: the entry keyed on the namespace's files must not answer."""
    write_files(installed, {"fakens/ops.py": FAKE["fakelib/ops.py"].replace("fakelib.consts", "fakens.consts"),
                       "fakens/consts.py": FAKE["fakelib/consts.py"]})
    root = write_files(tmp_path / "proj", {"pyproject.toml": _pyproject(pythonpath=["vendor"]),
                                      "kernels/k.yaml": one_case_spec("k", "module: fakens.ops", "gfx942")})
    (root / "vendor").mkdir()
    cache = tmp_path / "cache"
    first = _compile(root, cache)["k:c@gfx942"]
    assert first[0] == "ok", first
    write_files(root / "vendor", {"fakens/__init__.py": "", "fakens/ops.py": FAKE["fakelib/ops.py"].replace(
        "fakelib.consts", "fakens.consts"), "fakens/consts.py": FAKE["fakelib/consts.py"].replace("2.0", "6.0")})
    shadowed = _compile(root, cache)["k:c@gfx942"]
    assert shadowed[0] == "ok" and not shadowed[1] and shadowed[2] != first[2]


def test_an_installed_namespace_subpackage_asking_the_target_loads_for_each_target(installed, tmp_path):
    """An installed package whose `__init__` imports from a namespace subpackage (Liger's `liger_kernel.ops` and
    `ops/experimental/`) and whose kernel module asks the target at import: it loads once per target, and the
    second load must still judge the namespace's folders (recomputed from a parent package that the first
    load's clean-up took out of sys.modules)."""
    asks = "_ARCH = triton.runtime.driver.active.get_current_target().arch\nSCALE = tl.constexpr(2.0)"
    write_files(installed, {"fakeops/__init__.py": "", "fakeops/ops/__init__.py": "from fakeops.ops.experimental import extra\n",
                       "fakeops/ops/experimental/extra.py": "VALUE = 1\n", "fakeops/ops/kern.py": KERNEL.format(imports=asks)})
    root = write_files(tmp_path / "proj", {"pyproject.toml": _pyproject(),
                                           "kernels/k.yaml": one_case_spec("k", "module: fakeops.ops.kern", "gfx942, gfx950")})
    results = _compile(root, tmp_path / "cache")
    assert {cell: result[0] for cell, result in results.items()} == {"k:c@gfx942": "ok", "k:c@gfx950": "ok"}, results


def test_a_variable_the_load_sets_itself_does_not_defeat_the_cache_and_one_the_user_sets_does(tmp_path, monkeypatch):
    """torch's inductor sets TORCHINDUCTOR_CACHE_DIR when a module imports it: the load's dependency is the value
    it found (absent), so the next run is a hit; a value the user sets before the run is a miss."""
    monkeypatch.delenv("XISA_TEST_SETDEFAULT", raising=False)
    imports = 'import os\nos.environ.setdefault("XISA_TEST_SETDEFAULT", "/tmp/x")\nSCALE = tl.constexpr(2.0)'
    root = write_files(tmp_path / "proj", {"pyproject.toml": _pyproject(), "kernels/k.py": KERNEL.format(imports=imports),
                                      "kernels/k.yaml": one_case_spec("k", "module: x", "gfx942")
                                      .replace("module: x", "source: k.py")})
    cache = tmp_path / "cache"
    first = _compile(root, cache)["k:c@gfx942"]
    assert first[0] == "ok" and not first[1], first
    assert "XISA_TEST_SETDEFAULT" not in os.environ            # the load's setting was undone
    assert _compile(root, cache)["k:c@gfx942"][1]             # cached
    monkeypatch.setenv("XISA_TEST_SETDEFAULT", "/elsewhere")
    assert not _compile(root, cache)["k:c@gfx942"][1]         # the load now finds another value


def test_a_new_namespace_portion_earlier_on_the_path_recompiles(tmp_path):
    """Issue 36, finding 2: `nsp` is a namespace package (src/nsp); `vendor/nsp/helpers.py` appearing in a folder
    earlier on the path is where `from nsp.helpers import SCALE` now imports from: warm check 0, `--no-cache` 1."""
    root = write_files(tmp_path / "proj", {
        "pyproject.toml": _pyproject(pythonpath=["vendor", "src"]),
        "src/nsp/helpers.py": "import triton.language as tl\nSCALE = tl.constexpr(2.0)\n",
        "src/mylib/__init__.py": "", "src/mylib/kern.py": KERNEL.format(imports="from nsp.helpers import SCALE"),
        "kernels/k.yaml": one_case_spec("k", "module: mylib.kern", "gfx942")})
    (root / "vendor").mkdir()
    cache = tmp_path / "cache"
    first = _compile(root, cache)["k:c@gfx942"]
    assert first[0] == "ok", first
    write_files(root, {"vendor/nsp/helpers.py": "import triton.language as tl\nSCALE = tl.constexpr(6.0)\n"})
    warm = _compile(root, cache)["k:c@gfx942"]
    cold = _compile(root, tmp_path / "cold", use_cache=False)["k:c@gfx942"]
    assert cold[2] != first[2]                       # the new portion's helpers are what a launch imports
    assert not warm[1] and warm[2] == cold[2]
