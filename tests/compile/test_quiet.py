"""A normal run prints the report, not the deprecation notices of the libraries a compile runs through; the
JSON says which cells were read from the result cache."""

from __future__ import annotations

import json

from support import xisa_process

NOISY_IMPORTS = '''import warnings

# What Triton, NumPy or torch do when a kernel module (or Triton itself) uses an API on its way out.
warnings.warn("tl.foo is deprecated, use tl.bar", DeprecationWarning)
warnings.warn("numpy.find_common_type is deprecated", DeprecationWarning, stacklevel=1)
warnings.warn("the default of `x` will change", FutureWarning)
warnings.warn("tl.make_block_ptr is deprecated. Use TensorDescriptor instead.")   # Triton 3.8: a UserWarning
'''


def test_library_deprecation_notices_stay_out_of_a_run(tinyproj, tmp_path):
    source = tinyproj / "kernels" / "scale.py"
    source.write_text(NOISY_IMPORTS + source.read_text())
    # PYTHONWARNINGS=default shows every DeprecationWarning, as `python -X dev` and pytest do.
    out = xisa_process("compile", "--arch", "gfx942", "--kernel", "scale:small", cwd=tinyproj,
                       cache=tmp_path / "cache", env={"PYTHONWARNINGS": "default"})
    assert out.code == 0, out.err
    assert "scale:small" in out.out
    assert "Warning" not in out.err and "deprecated" not in out.err + out.out, out.err


def test_json_says_which_cells_came_from_the_cache(tinyproj, run_xisa):
    args = ("--arch", "gfx942", "--kernel", "scale:*")
    # A cache of its own: the session's may hold these cells already.
    env = {"XISA_CACHE_DIR": str(tinyproj.parent / "own-cache")}
    first = run_xisa("compile", *args, "--json", cwd=tinyproj, env=env)
    assert first.code == 0, first.err
    assert [c["cached"] for c in json.loads(first.out)["cells"]] == [False, False]
    source = tinyproj / "kernels" / "scale.py"
    assert run_xisa("bless", *args, cwd=tinyproj, env=env).code == 0
    source.write_text(source.read_text().replace("y = x * factor\n", "y = x * factor - 1.0\n"))
    check = run_xisa("check", *args, "--format", "json", cwd=tinyproj, env=env)
    cells = {c["case"]: c for c in json.loads(check.out)["cells"]}
    assert cells["small"]["verdict"] == "changed" and cells["small"]["cached"] is False   # the edit recompiled
    again = run_xisa("compile", *args, "--json", cwd=tinyproj, env=env)
    assert [c["cached"] for c in json.loads(again.out)["cells"]] == [True, True]


def test_torch_without_numpy_does_not_warn_in_a_run(tinyproj, tmp_path):
    """xisa's own install has no NumPy; torch then warns "Failed to initialize NumPy" on import (the README's
    main command printed it). A `numpy` that cannot import stands in for the missing one."""
    blocker = tmp_path / "no-numpy" / "numpy"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'numpy\'", name="numpy")\n')
    out = xisa_process("compile", "--arch", "gfx942", "--kernel", "scale:small", cwd=tinyproj,
                       cache=tmp_path / "cache", env={"PYTHONPATH": str(blocker.parent)})
    assert out.code == 0, out.err
    assert "NumPy" not in out.err and "Warning" not in out.err, out.err
