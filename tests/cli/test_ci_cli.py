"""What a CI workflow keys and sizes itself by: `xisa cache key` follows the configured specs, `pythonpath`
folders and pyproject.toml (a `src/` layout's helper too, which `hashFiles('kernels/**')` misses) and nothing
else; `xisa shards --max-seconds` gives the fewest shards that fit the budget. Nothing is compiled."""

from __future__ import annotations

import json

from support import copy_tinyproj, xisa_process


def _key(project) -> str:
    result = xisa_process("cache", "key", cwd=project)
    assert result.code == 0, result.err
    (line,) = result.out.split()
    assert len(line) == 64 and int(line, 16) >= 0
    return line


def test_the_cache_key_follows_the_configured_specs_and_sources(tmp_path):
    project = copy_tinyproj(tmp_path / "proj")
    (project / "src" / "mylib").mkdir(parents=True)
    (project / "src" / "mylib" / "helpers.py").write_text("SCALE = 2\n")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + 'pythonpath = ["src"]\n')
    (project / "README.md").write_text("readme\n")
    (project / "tests").mkdir()
    (project / "tests" / "test_x.py").write_text("def test(): pass\n")
    first = _key(project)
    assert _key(project) == first                                        # stable

    listed = xisa_process("cache", "key", "--list", cwd=project).out.splitlines()
    names = {line.split("  ", 1)[1] for line in listed if "  " in line}
    assert {"pyproject.toml", "kernels/scale.py", "kernels/scale.yaml", "kernels/dot.yaml",
            "src/mylib/helpers.py"} <= names
    assert not {n for n in names if n.startswith(("tests/", "README"))}
    assert any(line.startswith("triton=") for line in listed) and listed[-1] == first

    unrelated = [project / "README.md", project / "tests" / "test_x.py"]
    for path in unrelated:
        path.write_text(path.read_text() + "# edited\n")
    (project / "src" / "mylib" / "__pycache__").mkdir()
    (project / "src" / "mylib" / "__pycache__" / "helpers.cpython-311.pyc").write_bytes(b"\0")
    assert _key(project) == first                                        # edits elsewhere: the same key

    keys = {first}
    for path in (project / "src" / "mylib" / "helpers.py", project / "kernels" / "scale.py",
                 project / "kernels" / "dot.yaml", pyproject):
        path.write_text(path.read_text() + "\n# edited\n")
        keys.add(_key(project))
    assert len(keys) == 5                                                # each configured input moves it


def _shards(project, *args: str) -> dict:
    result = xisa_process("shards", *args, "--format", "json", cwd=project)
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_shards_sizes_a_matrix_for_a_wall_budget(tmp_path):
    project = copy_tinyproj(tmp_path / "proj")
    one = _shards(project, "1")
    ids = one["shards"][0]["cell_ids"]
    assert one["method"] == "hash" and one["count"] == 1 and one["cells"] == len(ids) == 8
    assert one["total_seconds"] == 8.0                  # nothing recorded: every cell weighs 1 s
    timings = tmp_path / "timings.json"
    timings.write_text(json.dumps({cid: 30.0 for cid in ids}))
    # 8 cells of 30 s on 2 cores: 2 cells a shard fit 30 s of wall, so 4 shards
    data = _shards(project, "--max-seconds", "30", "--cores", "2", "--timings", str(timings))
    assert data["method"] == "timings" and data["recorded_cells"] == 8
    assert data["count"] == 4 and data["matrix"] == [1, 2, 3, 4] and data["slowest_wall_seconds"] == 30.0
    assert sorted(c for s in data["shards"] for c in s["cell_ids"]) == sorted(ids)
    # one cell runs on one core: under 30 s no split does it
    refused = xisa_process("shards", "--max-seconds", "29", "--cores", "2", "--timings", str(timings), cwd=project)
    assert refused.code == 2 and "the slowest cell alone records 30 s" in refused.err
    both = xisa_process("shards", "3", "--max-seconds", "10", cwd=project)
    assert both.code == 2 and "not both or neither" in both.err
    not_json = xisa_process("shards", "2", "--timings", "/dev/null", cwd=project)
    assert not_json.code == 2 and "/dev/null: --timings: not a JSON file" in not_json.err
