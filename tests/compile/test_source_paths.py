"""Where a source-line table's paths are shown from: never an absolute path, so a moved checkout, a moved or
re-created virtual environment or another Python version changes no golden."""

from __future__ import annotations

import sys

from xisa.compile.cell import SourceFiles


def test_project_files_are_project_relative_and_installed_ones_package_relative(tmp_path, monkeypatch):
    project = tmp_path / "proj"
    venv_site = project / ".venv" / "lib" / "python3.11" / "site-packages"   # a venv inside the checkout
    other_site = tmp_path / "usr" / "lib" / "python3" / "dist-packages"
    monkeypatch.setattr(sys, "path", [str(project / "kernels"), str(venv_site), str(other_site), ""])
    files = SourceFiles([project / "kernels", project])
    assert files.path_of(str(project / "kernels" / "decode.py")) == "kernels/decode.py"
    assert files.path_of(str(venv_site / "liger_kernel" / "ops" / "softmax.py")) == "liger_kernel/ops/softmax.py"
    assert files.path_of(str(other_site / "triton" / "language" / "standard.py")) == "triton/language/standard.py"
    assert files.path_of("/nowhere/else/k.py") == "k.py"
    assert files.path_of("<string>") == "<string>"


def test_line_texts_are_read_stripped_and_a_missing_file_or_line_is_empty(tmp_path):
    source = tmp_path / "k.py"
    source.write_text("import triton\n\n    x = tl.load(p)  \n")
    files = SourceFiles([tmp_path])
    assert files.text_of(str(source), 3) == "x = tl.load(p)"
    assert files.text_of(str(source), 4) == "" and files.text_of(str(source), 0) == ""
    assert files.text_of(str(tmp_path / "gone.py"), 1) == ""
