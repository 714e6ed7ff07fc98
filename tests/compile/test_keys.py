"""One home for the cache keys' parts (`xisa.compile.incremental.keys`): every part a partial key holds reaches the
result key (the whole compile) or names what of it stands for the part, and each input moves every key it must."""
import ast
import dataclasses
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import xisa
from xisa.compile.incremental import keys

PACKAGE = Path(xisa.__file__).resolve().parent


@pytest.mark.unit
def test_every_part_of_a_partial_key_reaches_the_result_key():
    result = keys.parts_of("result")
    for kind in keys.KINDS:
        for part in keys.parts_of(kind) - result:
            assert part in keys.COVERED_BY, f"keys.PARTS: {part} reaches the {kind} key but not the result key"
    for part, covers in keys.COVERED_BY.items():
        assert part not in result, f"keys.COVERED_BY names {part}, which the result key holds itself"
        assert set(covers) <= result | {"depfile"}, (part, set(covers) - result)


@pytest.mark.unit
def test_a_key_of_other_parts_than_its_kind_is_refused():
    parts = {name: 0 for name in keys.parts_of("load_block")}
    keys.digest("load_block", parts)
    with pytest.raises(KeyError, match="new_part"):
        keys.digest("load_block", {**parts, "new_part": 1})
    with pytest.raises(KeyError, match="text"):
        keys.digest("load_block", {k: v for k, v in parts.items() if k != "text"})
    assert keys.digest("load_block", parts) != keys.digest("load_code", {n: 0 for n in keys.parts_of("load_code")}
                                                           | {n: 0 for n in parts if n in keys.parts_of("load_code")})


def _cell(tmp_path):
    target = SimpleNamespace(summary=lambda: {"name": "gfx942", "arch": "gfx942"})
    kernel = SimpleNamespace(name="k", function="f", spec_file=tmp_path / "k.yaml", source_file=tmp_path / "k.py",
                             module=None, pythonpath=[], import_hooks=[])
    return SimpleNamespace(kernel=kernel, target=target, case="c", args={}, constexprs={}, options={}, config=None,
                           heuristics={})


def _all_keys(cell):
    bound = SimpleNamespace(target=SimpleNamespace(backend="hip", arch="gfx942", warp_size=64),
                            options=SimpleNamespace(num_warps=4))
    context = keys.compile_context(cell, bound, {"groups": {}})
    return {"result": keys.result_key(cell, ()), "backend": keys.backend_key(context, "ttir", {}, {"groups": {}}),
            "front_end": keys.front_end_key(context, "record")}


@pytest.mark.parametrize("input_name", ["xisa_identity", "toolchain_identity", "interpreter"])
def test_a_shared_input_moves_every_key_of_the_compile(tmp_path, monkeypatch, input_name):
    cell = _cell(tmp_path)
    before = _all_keys(cell)
    monkeypatch.setattr(keys, input_name, lambda: "another")
    after = _all_keys(cell)
    assert [kind for kind in before if before[kind] == after[kind]] == []


@pytest.mark.parametrize("variable", ["TRITON_SOMETHING_NEW", "AMDGCN_NEW_FLAG", "LLVM_NEW_OPTION"])
def test_a_toolchain_variable_moves_every_key_of_the_compile(tmp_path, monkeypatch, variable):
    cell = _cell(tmp_path)
    before = _all_keys(cell)
    monkeypatch.setenv(variable, "1")
    after = _all_keys(cell)
    assert [kind for kind in before if before[kind] == after[kind]] == []


def test_the_target_moves_every_key_of_the_compile(tmp_path):
    cell = _cell(tmp_path)
    other = dataclasses.replace(cell) if dataclasses.is_dataclass(cell) else SimpleNamespace(**vars(cell))
    other.target = SimpleNamespace(summary=lambda: {"name": "gfx942", "arch": "gfx942", "cu_count": 80})
    before, after = _all_keys(cell), _all_keys(other)
    assert [kind for kind in before if before[kind] == after[kind]] == []


@pytest.mark.unit
def test_the_interpreter_and_its_optimization_level_are_in_the_result_key(tmp_path, monkeypatch):
    cell = _cell(tmp_path)
    before = keys.result_key(cell, ())
    monkeypatch.setattr(sys, "flags", SimpleNamespace(**{**{n: getattr(sys.flags, n) for n in dir(sys.flags)
                                                            if not n.startswith("_") and not callable(getattr(sys.flags, n))},
                                                         "optimize": 2}))
    assert keys.result_key(cell, ()) != before


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("xisa"):
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("xisa")}
    return found


def _file_of(module: str) -> Path | None:
    base = PACKAGE.parent / module.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


@pytest.mark.unit
def test_xisa_identity_holds_every_module_a_compile_imports():
    """A module of xisa that the compile runs (imported from compile/, at any depth, by any path) is part of
    `xisa_identity`: an edit to it is a miss. Found by the imports, not by a list of folders."""
    hashed = set(keys.identity_files())
    todo = sorted((PACKAGE / "compile").rglob("*.py"))
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo += [f for f in map(_file_of, _imports(path)) if f is not None]
        for parent in path.relative_to(PACKAGE.parent).parents:
            init = PACKAGE.parent / parent / "__init__.py"
            if init.exists():
                todo.append(init)
    assert sorted(str(p.relative_to(PACKAGE)) for p in seen - hashed) == []
