"""`xisa doctor`: the library's verdict on environments and goldens, and the command's text, JSON and exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import triton

from xisa.api.diagnose import diagnose
from xisa.golden.store import scan_golden_toolchains
from xisa.render.doctor import render_doctor_text
from xisa.compile.worker.toolchain import HARMLESS_ENV, REFUSED_ENV


def _project(root: Path, versions: list[str]) -> Path:
    (root / "kernels").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.xisa]\nspecs = ['kernels']\n")
    for i, version in enumerate(versions):
        folder = root / "golden" / "k" / f"c{i}"
        folder.mkdir(parents=True)
        (folder / "gfx942.yaml").write_text(f"format: xisa-golden/1\ntoolchain:\n  triton: {version}\n")
    return root


class _FakeTorch:
    """One MI300X as ROCm torch shows it."""

    version = SimpleNamespace(hip="6.4")

    class cuda:  # noqa: N801
        @staticmethod
        def is_available():
            return True

        @staticmethod
        def device_count():
            return 1

        @staticmethod
        def get_device_properties(index):
            return SimpleNamespace(name="AMD Instinct MI300X", gcnArchName="gfx942:sramecc+:xnack-")


def test_all_fine_exits_0_and_names_the_gpu(tmp_path):
    root = _project(tmp_path / "p", [triton.__version__] * 3)
    info = diagnose(cwd=root, environ={}, torch_module=_FakeTorch)
    assert info["schema"] == 1 and info["kind"] == "doctor"
    assert info["exit_code"] == 0, info["problems"]
    assert info["triton"]["version"] == triton.__version__ and info["triton"]["supported"]
    assert {"amd", "nvidia"} <= set(info["backends"])
    assert info["tools"]["ld.lld"]["found"] and info["tools"]["ptxas"]["found"]
    assert info["goldens"]["triton"] == {triton.__version__: 3} and info["goldens"]["matches"]
    assert info["devices"] == [{"index": 0, "name": "AMD Instinct MI300X", "backend": "hip", "arch": "gfx942",
                                "target": "gfx942"}]
    assert info["refused"] == {} and sorted(REFUSED_ENV) == info["refused_known"]
    text = render_doctor_text(info)
    assert "GPU 0: AMD Instinct MI300X (gfx942, target gfx942)" in text
    assert f"3 files in golden: Triton {triton.__version__} x3" in text and text.rstrip().endswith(
        "ok: results made here can be trusted and compared with the goldens")


def test_goldens_of_another_triton_exit_2_with_counts(tmp_path):
    root = _project(tmp_path / "p", ["3.6.0", "3.6.0", triton.__version__])
    info = diagnose(cwd=root, environ={}, probe_devices=False)
    assert info["exit_code"] == 2 and not info["goldens"]["matches"]
    assert info["goldens"]["triton"] == dict(sorted({"3.6.0": 2, triton.__version__: 1}.items()))
    assert "goldens were made with triton 3.6.0 (2 files)" in info["problems"][0]
    assert triton.__version__ in info["problems"][0]
    assert "DIFFERS from the installed" in render_doctor_text(info)


def test_refused_and_overridden_variables(tmp_path):
    root = _project(tmp_path / "p", [])
    env = {"TRITON_KERNEL_OVERRIDE": "1", "TRITON_INTERPRET": "0", "TRITON_DEBUG": "1", "TRITON_HIP_USE_ASYNC_COPY": "1"}
    info = diagnose(cwd=root, environ=env, probe_devices=False)
    assert list(info["refused"]) == ["TRITON_KERNEL_OVERRIDE"]          # "0" counts as unset
    assert info["exit_code"] == 2 and "unset TRITON_KERNEL_OVERRIDE" in info["problems"][0]
    assert info["overridden"] == {"TRITON_DEBUG": {"user": "1", "pinned": "0"},
                                  "TRITON_HIP_USE_ASYNC_COPY": {"user": "1", "pinned": None}}
    text = render_doctor_text(info)
    assert "TRITON_DEBUG='1' is ignored: xisa pins '0'" in text
    assert "TRITON_KERNEL_OVERRIDE is set" in text
    # only the overrides: still trustworthy
    assert diagnose(cwd=root, environ={"TRITON_DEBUG": "1"}, probe_devices=False)["exit_code"] == 0


def test_scan_counts_and_flags_unreadable_goldens(tmp_path):
    root = _project(tmp_path / "p", ["3.8.0"])
    (root / "golden" / "k" / "c0" / "gfx1100.yaml").write_text("<<<<<<< HEAD\n: :\n")
    scan = scan_golden_toolchains(root / "golden", display_root=root)
    assert scan["files"] == 2 and scan["triton"] == {"3.8.0": 1}
    assert scan["unreadable"] == ["golden/k/c0/gfx1100.yaml"]


@pytest.mark.parametrize("as_json", [False, True])
def test_command_exit_codes_and_output(run_xisa, tmp_path, as_json):
    root = _project(tmp_path / "p", [triton.__version__])
    args = ["doctor", "--json"] if as_json else ["doctor"]
    ok = run_xisa(*args, cwd=root)
    assert ok.code == 0, ok.out + ok.err
    bad = run_xisa(*args, cwd=root, env={"LLVM_PASS_PLUGIN_PATH": "/tmp/x.so"})
    assert bad.code == 2
    if as_json:
        info = json.loads(bad.out)
        assert info["schema"] == 1 and list(info["refused"]) == ["LLVM_PASS_PLUGIN_PATH"]
        assert bad.err == ""                                              # JSON only on stdout, nothing else
    else:
        assert "LLVM_PASS_PLUGIN_PATH is set" in bad.out and "untrusted:" in bad.out
        assert "xisa: doctor: LLVM_PASS_PLUGIN_PATH is set" in bad.err


def test_a_tool_from_an_environment_path_is_named_as_such(tmp_path, monkeypatch):
    """A cuobjdump wrapper on TRITON_CUOBJDUMP_PATH (one that could replay old SASS) is shown for what it is."""
    root = _project(tmp_path / "p", [triton.__version__])
    wrapper = tmp_path / "cuobjdump"
    wrapper.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("TRITON_CUOBJDUMP_PATH", str(wrapper))
    info = diagnose(cwd=root, probe_devices=False)
    tool = info["tools"]["cuobjdump"]
    assert tool["path"] == str(wrapper) and tool["note"].startswith("from TRITON_CUOBJDUMP_PATH")
    assert "from the Triton wheel" not in tool["note"]
    assert info["tools"]["nvdisasm"]["note"] == "from the Triton wheel"
    assert info["exit_code"] == 2 and "TRITON_CUOBJDUMP_PATH" in info["refused"]
    assert "from the Triton wheel" not in [line for line in render_doctor_text(info).splitlines()
                                           if line.startswith("cuobjdump")][0]


def test_unknown_harmless_and_pinned_variables_are_each_reported(tmp_path, monkeypatch):
    root = _project(tmp_path / "p", [triton.__version__])
    monkeypatch.delitem(HARMLESS_ENV, "TRITON_CACHE_AUTOTUNING")        # as if a new Triton had added it
    env = {"TRITON_CACHE_AUTOTUNING": "1", "TRITON_PRINT_AUTOTUNING": "1", "TRITON_HIP_USE_COEXEC_SCHEDULER": "1"}
    info = diagnose(cwd=root, environ=env, probe_devices=False)
    assert info["unclassified"] == ["TRITON_CACHE_AUTOTUNING"] and info["exit_code"] == 2
    assert "TRITON_CACHE_AUTOTUNING is set: the installed Triton reads it" in info["problems"][0]
    assert info["harmless"] == {"TRITON_PRINT_AUTOTUNING": HARMLESS_ENV["TRITON_PRINT_AUTOTUNING"]}
    assert info["overridden"] == {"TRITON_HIP_USE_COEXEC_SCHEDULER": {"user": "1", "pinned": None}}
    text = render_doctor_text(info)
    assert "TRITON_CACHE_AUTOTUNING is set: Triton reads it, xisa cannot vouch for it" in text
    assert "TRITON_PRINT_AUTOTUNING is set: autotuning" in text
    assert "TRITON_HIP_USE_COEXEC_SCHEDULER='1' is ignored: xisa pins unset" in text
