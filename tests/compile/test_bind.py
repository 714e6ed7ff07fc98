"""Binding: xisa's stand-ins must give exactly what Triton's launch binder gives for real tensors."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from triton.compiler import make_backend
from triton.runtime.jit import create_function_from_signature

from xisa.compile.launch.standins import StandInTensor, make_standin
from xisa.errors import SpecError


@triton.jit
def probe_kernel(x_ptr, y_ptr, i_a, i_b, i_c, i_d, f, flag, N: tl.constexpr):
    pass


@triton.jit(do_not_specialize=["i_b"])
def probe_nospec_kernel(x_ptr, i_a, i_b, N: tl.constexpr):
    pass


def _launch_binding(fn, backend_target, args, kwargs):
    """What JITFunction.run computes before compiling (signature, constexprs, attrs)."""
    backend = make_backend(backend_target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    launch_kwargs = {**kwargs, "debug": False, "instrumentation_mode": ""}
    bound, specialization, options = binder(*args, **launch_kwargs)
    _, signature, constexprs, attrs = fn._pack_args(backend, launch_kwargs, bound, specialization, options)
    return signature, constexprs, attrs


TARGETS = [triton.backends.compiler.GPUTarget("hip", "gfx942", 64),
           triton.backends.compiler.GPUTarget("hip", "gfx1100", 32),
           triton.backends.compiler.GPUTarget("cuda", 90, 32)]


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: str(t.arch))
def test_standins_bind_like_real_tensors(target):
    x = torch.empty(64, dtype=torch.float16)
    y = torch.empty(33, dtype=torch.bfloat16)
    real = (x, y, 1, 16, 17, 2**40, 0.5, True)
    stand = (make_standin({"tensor": "fp16", "shape": [64]}, path="t", field="x"),
             make_standin({"tensor": "bfloat16", "shape": [33]}, path="t", field="y"),
             1, 16, 17, 2**40, 0.5, True)
    assert x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0  # torch's CPU allocator aligns to 64
    got = _launch_binding(probe_kernel, target, stand, {"N": 32})
    want = _launch_binding(probe_kernel, target, real, {"N": 32})
    assert got == want
    signature, constexprs, attrs = got
    assert signature["i_a"] == "constexpr"           # an int equal to 1 becomes a constexpr
    assert signature["i_d"] == "i64"                 # 2**40 needs 64 bits
    assert ["tt.divisibility", 16] in attrs[(3,)]    # 16 is divisible by 16
    assert attrs[(4,)] == []                         # 17 is not
    if target.backend == "hip":
        assert ["tt.pointer_range", 32] in attrs[(0,)]
    else:
        assert ["tt.pointer_range", 32] not in attrs[(0,)]


def test_misaligned_tensor_loses_divisibility_like_a_real_view():
    target = TARGETS[0]
    base = torch.empty(80, dtype=torch.float32)
    view = base[2:]  # 8 bytes past a 64-byte aligned address
    assert view.data_ptr() % 16 == 8
    real = _launch_binding(probe_kernel, target, (view, base, 1, 16, 17, 3, 0.5, False), {"N": 32})
    stand = _launch_binding(probe_kernel, target, (
        make_standin({"tensor": "fp32", "shape": [78], "align": 8}, path="t", field="x"),
        make_standin({"tensor": "fp32", "shape": [80]}, path="t", field="y"), 1, 16, 17, 3, 0.5, False), {"N": 32})
    assert real == stand
    assert ["tt.divisibility", 16] not in real[2][(0,)]


def test_large_tensor_has_no_pointer_range_on_amd():
    target = TARGETS[0]
    big = make_standin({"tensor": "bf16", "large": True}, path="t", field="x")
    small = make_standin({"tensor": "bf16", "shape": [1024]}, path="t", field="y")
    assert isinstance(big, StandInTensor) and big.ptr_range() > 2**31 - 1
    _, _, attrs = _launch_binding(probe_kernel, target, (big, small, 1, 16, 17, 3, 0.5, False), {"N": 32})
    assert ["tt.pointer_range", 32] not in attrs[(0,)]
    assert ["tt.pointer_range", 32] in attrs[(1,)]
    # a meta tensor over 2 GiB is what a real launch would see: the same attrs
    meta = torch.empty(2**31, dtype=torch.bfloat16, device="meta")
    _, _, meta_attrs = _launch_binding(probe_kernel, target, (meta, small, 1, 16, 17, 3, 0.5, False), {"N": 32})
    assert meta_attrs[(0,)] == attrs[(0,)]


def test_do_not_specialize_is_honoured():
    target = TARGETS[0]
    x = make_standin("*fp32", path="t", field="x")
    signature, constexprs, attrs = _launch_binding(probe_nospec_kernel, target, (x, 1, 1), {"N": 16})
    assert signature["i_a"] == "constexpr"
    assert signature["i_b"] == "i32"                 # 1 stays a runtime int under do_not_specialize


def test_bad_standins_name_the_field():
    with pytest.raises(SpecError, match="unknown dtype 'bf17'.*did you mean 'bf16'"):
        make_standin({"tensor": "bf17"}, path="k.yaml", field="cases[0].args.x")
    with pytest.raises(SpecError, match="over 2 GiB"):
        make_standin({"tensor": "fp32", "shape": [2**30], "large": False}, path="k.yaml", field="x")
    with pytest.raises(SpecError, match="align"):
        make_standin({"tensor": "fp32", "align": 3}, path="k.yaml", field="x")


# --- a kernel file inside a package folder loads as that package's submodule --------------------------

HELPER = """import triton

SCALE = {scale}


@triton.jit
def f(x):
    return x * {scale}
"""

PACKAGE_KERNEL = """import triton
import triton.language as tl

from {up} import helper


@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, helper.f(tl.load(x_ptr + r)))
"""

PACKAGE_SPEC = """name: {name}
source: {source}
function: kern
targets: [gfx942]
cases:
  - name: c
    args: {{x_ptr: '*fp32', y_ptr: '*fp32'}}
    constexprs: {{BLOCK: 64}}
"""


def _package_project(root, *, scale="2.0", init=""):
    """A project whose spec folder `kernels` is a package: k.py and nested/k2.py import kernels/helper.py relatively."""
    files = {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels", "kernels/nested"]\n', "kernels/__init__.py": init,
             "kernels/helper.py": HELPER.format(scale=scale), "kernels/k.py": PACKAGE_KERNEL.format(up="."),
             "kernels/k.yaml": PACKAGE_SPEC.format(name="k", source="k.py"),
             "kernels/nested/__init__.py": "", "kernels/nested/k2.py": PACKAGE_KERNEL.format(up=".."),
             "kernels/nested/k2.yaml": PACKAGE_SPEC.format(name="k2", source="k2.py")}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _load(root, spec_file):
    from xisa.compile.launch.loader import load_kernel_function
    from xisa.spec.cases import load_spec

    spec = load_spec(root / spec_file)
    return spec, load_kernel_function(spec, roots=[root, root / "kernels"])


def _package_modules() -> dict:
    import sys

    return {name: module for name, module in sys.modules.items() if name == "kernels" or name.startswith("kernels.")}


def test_a_source_in_a_package_imports_its_helpers_relatively(tmp_path):
    from xisa.compile.launch.loader import kernel_dependencies

    root = _package_project(tmp_path / "proj")
    before = _package_modules()
    for spec_file, module_name in (("kernels/k.yaml", "kernels.k"), ("kernels/nested/k2.yaml", "kernels.nested.k2")):
        spec, fn = _load(root, spec_file)
        assert fn.fn.__module__ == module_name
        assert fn.fn.__globals__["helper"].__file__ == str(root / "kernels" / "helper.py")
        depends = kernel_dependencies(spec)   # the package's __init__.py and the helper are part of the load
        assert {str(root / "kernels" / name) for name in ("__init__.py", "helper.py")} <= set(depends)
    assert str(root / "kernels" / "nested" / "__init__.py") in depends
    assert _package_modules() == before   # nothing of the loads is left under the package's name


def test_two_projects_with_a_kernels_package_each_get_their_own_helper(tmp_path, monkeypatch):
    """One process loads project a's then project b's `kernels` package (the pytest plugin; --compile-base),
    while the user's own `kernels` package is imported: each load sees its own helper, the user keeps theirs."""
    import importlib
    import sys

    from xisa.compile.launch.loader import kernel_dependencies

    users = _package_project(tmp_path / "users", scale="5.0")
    monkeypatch.syspath_prepend(str(users))
    for name in list(_package_modules()):
        monkeypatch.delitem(sys.modules, name)
    own = importlib.import_module("kernels.helper")
    try:
        scales = {}
        for project, scale in (("a", "2.0"), ("b", "3.0")):
            root = _package_project(tmp_path / project, scale=scale)
            spec, fn = _load(root, "kernels/k.yaml")
            scales[project] = fn.fn.__globals__["helper"].SCALE
            assert str(root / "kernels" / "helper.py") in kernel_dependencies(spec)
            assert str(users / "kernels" / "helper.py") not in kernel_dependencies(spec)
        assert scales == {"a": 2.0, "b": 3.0}
        assert sys.modules["kernels.helper"] is own and "kernels.k" not in sys.modules
    finally:
        for name in list(_package_modules()):
            del sys.modules[name]


def test_a_failing_package_init_is_one_line_naming_the_file(tmp_path):
    root = _package_project(tmp_path / "proj", init="raise RuntimeError('no GPU here')\n")
    with pytest.raises(SpecError) as caught:
        _load(root, "kernels/k.yaml")
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    assert "kernels/k.yaml: source: " in message and "kernels/__init__.py" in message and "no GPU here" in message


def test_warm_check_sees_an_edited_helper_of_a_package(run_xisa, tmp_path):
    import json

    root = _package_project(tmp_path / "proj")
    env = {"XISA_CACHE_DIR": str(tmp_path / "cache")}
    assert run_xisa("bless", "--jobs", "1", cwd=root, env=env).code == 0    # the cells are now cached
    helper = root / "kernels" / "helper.py"
    helper.write_text(helper.read_text().replace("2.0", "3.0"))
    verdicts = {}
    for mode in ("warm", "cold"):
        out = run_xisa("check", "--jobs", "1", "--format", "json", *(["--no-cache"] if mode == "cold" else []),
                       cwd=root, env=env)
        assert out.code == 1, out.err
        verdicts[mode] = {c["kernel"]: (c["verdict"], c["head_sha256"]) for c in json.loads(out.out)["cells"]}
    assert verdicts["warm"] == verdicts["cold"]
    assert {kernel: verdict for kernel, (verdict, _) in verdicts["warm"].items()} == {"k": "changed", "k2": "changed"}


def test_a_package_served_from_elsewhere_is_refused(tmp_path, monkeypatch):
    """An import hook ahead of sys.path (an editable install's finder) hands out another folder's `kernels`:
    the load refuses rather than compile the other folder's files."""
    import importlib.util
    import sys

    other = _package_project(tmp_path / "other")

    class Elsewhere:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name != "kernels":
                return None
            return importlib.util.spec_from_file_location(name, other / "kernels" / "__init__.py",
                                                          submodule_search_locations=[str(other / "kernels")])

    monkeypatch.setattr(sys, "meta_path", [Elsewhere, *sys.meta_path])
    root = _package_project(tmp_path / "proj")
    with pytest.raises(SpecError) as caught:
        _load(root, "kernels/k.yaml")
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and "kernels/k.yaml: source: " in message
    assert str(other / "kernels" / "__init__.py") in message and "fix: " in message
