"""Facts about Triton's cache key that `xisa export` stands on, each measured on the installed Triton.

- xisa's pins are the knobs' defaults, yet set in the environment they change Triton's key: a default launch's
  key is made with them unset (`default_launch_environ`).
- A kernel's source hash holds its source and starting line, not its file's path.
- On AMD the options' hash holds the paths of the bitcode libraries inside Triton's folder; on NVIDIA it hashes
  the library's bytes: an AMD entry is found only where Triton is installed in the same folder.
- `launch_key` restates a key from its parts with Triton's own `get_cache_key`; each part changes it.
- A group file relocated to another cache folder is what Triton's `put_group` writes there.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from xisa.compile.export.launch_cache import default_launch_environ, launch_key, relocate_group
from xisa.compile.worker.toolchain import PINNED_ENV, REFUSED_ENV


def _knob_descriptors():
    from triton import knobs

    for group in vars(knobs).values():
        if isinstance(group, knobs.base_knobs):
            for attribute, descriptor in group.knob_descriptors.items():
                yield group, attribute, descriptor


def test_each_pinned_value_is_its_knobs_default(monkeypatch):
    checked = 0
    for group, attribute, descriptor in _knob_descriptors():
        pinned = PINNED_ENV.get(descriptor.key)
        if pinned is None:
            continue
        monkeypatch.delenv(descriptor.key, raising=False)
        unset = getattr(group, attribute)
        monkeypatch.setenv(descriptor.key, pinned)
        assert getattr(group, attribute) == unset, f"{descriptor.key}={pinned} is not its default {unset!r}"
        monkeypatch.delenv(descriptor.key)
        checked += 1
    assert checked >= 4   # TRITON_DEFAULT_FP_FUSION, AMDGCN_USE_BUFFER_OPS, DISABLE_PTXAS_OPT, ...


def test_pins_set_in_the_environment_change_tritons_key_and_a_launch_has_none(monkeypatch):
    from triton._C.libtriton import get_cache_invalidating_env_vars

    for name in list(os.environ):
        if name in PINNED_ENV or name in REFUSED_ENV:
            monkeypatch.delenv(name)
    assert get_cache_invalidating_env_vars() == {}
    for name, value in PINNED_ENV.items():
        if value is not None:
            monkeypatch.setenv(name, value)
    pinned = get_cache_invalidating_env_vars()
    assert "AMDGCN_USE_BUFFER_OPS" in pinned and "TRITON_DEFAULT_FP_FUSION" in pinned   # xisa's compiles: other keys
    launch = default_launch_environ(dict(os.environ))
    assert not set(launch) & (set(PINNED_ENV) | set(REFUSED_ENV))
    for name in set(os.environ) - set(launch):   # the environment an export's workers compile in
        monkeypatch.delenv(name)
    assert get_cache_invalidating_env_vars() == {}


_KERNEL = '''import triton
import triton.language as tl
{padding}

@triton.jit
def kern(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.arange(0, BLOCK))
'''


def _load(path: Path, padding: str = ""):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_KERNEL.format(padding=padding))
    spec = importlib.util.spec_from_file_location(f"probe_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kern


def test_source_hash_holds_the_starting_line_not_the_path(tmp_path):
    here, there = _load(tmp_path / "a" / "k.py"), _load(tmp_path / "elsewhere" / "deeper" / "k.py")
    lower = _load(tmp_path / "b" / "k.py", padding="\n")
    assert here.cache_key == there.cache_key
    assert here.cache_key != lower.cache_key


def _parts(target, **options):
    return {"source_hash": "0" * 64, "gpu_target": target, "launch_options": {"debug": False, **options}}


def test_amd_options_hash_holds_tritons_folder_and_nvidia_hashes_library_bytes(tmp_path):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    folder = str(Path(triton.__file__).parent)
    amd = make_backend(GPUTarget("hip", "gfx942", 64)).parse_options({})
    assert any(folder in str(path) for _, path in amd.extern_libs)   # in `HIPOptions.hash()`'s text
    nvidia = make_backend(GPUTarget("cuda", 90, 32))
    default = nvidia.parse_options({})
    (name, library), = default.extern_libs
    moved = tmp_path / "libdevice.10.bc"
    moved.write_bytes(Path(library).read_bytes())
    assert nvidia.parse_options({"extern_libs": {name: str(moved)}}).hash() == default.hash()


@pytest.mark.parametrize("target", [["hip", "gfx942", 64], ["hip", "gfx1100", 32], ["cuda", 90, 32]])
def test_each_part_of_the_key_changes_it(target):
    base = launch_key(_parts(target))
    assert base["key"] == launch_key(_parts(target))["key"]
    assert launch_key({**_parts(target), "source_hash": "1" * 64})["key"] != base["key"]
    assert launch_key(_parts(target, num_warps=8))["key"] != base["key"]
    assert launch_key(_parts(target), environ_vars={"TRITON_DEFAULT_FP_FUSION": "true"})["key"] != base["key"]
    other = ["hip", "gfx950", 64] if target[0] == "hip" else ["cuda", 100, 32]
    assert launch_key({**_parts(target), "gpu_target": other})["backend_hash"] != base["backend_hash"]


def test_a_relocated_group_is_what_put_group_writes_there(tmp_path, monkeypatch):
    from triton import knobs
    from triton.runtime.cache import FileCacheManager

    groups = {}
    for root in ("built", "deployed"):
        monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / root))
        manager = FileCacheManager("ENTRY")
        paths = {name: manager.put(b"x", name) for name in ("k.source", "k.hsaco", "k.json")}
        groups[root] = Path(manager.put_group("k.json", paths)).read_text()
    assert groups["built"] != groups["deployed"]
    assert relocate_group(groups["built"], tmp_path / "built", tmp_path / "deployed") == groups["deployed"]
    assert json.loads(groups["deployed"])["child_paths"]["k.hsaco"] == str(tmp_path / "deployed" / "ENTRY" / "k.hsaco")
