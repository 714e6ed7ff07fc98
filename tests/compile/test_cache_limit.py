"""A bounded cache (issue 24, item 2): a size limit, least recently used entries removed first, never half an entry,
`xisa cache info`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support import compile_here, git, one_case_spec, write_files
from xisa.compile.incremental.cache import EntryStore, read_entry
from xisa.compile.incremental.cache_limit import LOW_WATER, RunCounts, cache_info, trim_cache
from xisa.errors import SpecError
from xisa.spec.project import DEFAULT_CACHE_SIZE, load_project


def _entries(cache: Path, count: int, size: int = 1000) -> list[str]:
    """`count` result entries of about `size` bytes, each last used one second after the one before."""
    cache.mkdir(mode=0o700, exist_ok=True)
    store = EntryStore(cache / "results")
    keys = [f"{index:02x}" * 32 for index in range(count)]
    for index, key in enumerate(keys):
        store.write(key, {"result": "x" * size, "dependencies": {}})
        os.utime(store.path(key), (1_000_000 + index, 1_000_000 + index))
    return keys


@pytest.mark.unit
def test_the_least_recently_used_entries_go_first_and_a_hit_counts_as_a_use(tmp_path):
    cache = tmp_path / "cache"
    keys = _entries(cache, 10)
    store = EntryStore(cache / "results")
    assert store.read(keys[0]) is not None          # the oldest, used now
    size = store.path(keys[0]).stat().st_size
    removed = trim_cache(cache, limit=6 * size)
    left = {key for key in keys if store.path(key).exists()}
    assert keys[0] in left and keys[1] not in left
    assert removed == 10 - len(left) and len(left) * size <= 6 * size * LOW_WATER
    assert left == {keys[0], *keys[10 - len(left) + 1:]}   # the most recently used, in order


@pytest.mark.unit
def test_a_cache_under_its_limit_is_left_alone_and_other_files_are_never_touched(tmp_path):
    cache = tmp_path / "cache"
    keys = _entries(cache, 3)
    (cache / "notes.txt").write_text("mine")
    (cache / "triton-5" / "abc").mkdir(parents=True)     # an older xisa's Triton cache: read by nothing now
    (cache / "triton-5" / "abc" / "k.amdgcn").write_text("...")
    assert trim_cache(cache, limit=10 ** 9) == 0
    assert all(EntryStore(cache / "results").path(key).exists() for key in keys)
    assert (cache / "notes.txt").read_text() == "mine" and not (cache / "triton-5").exists()


@pytest.mark.unit
def test_an_entry_removed_while_it_is_read_is_read_whole_or_missed(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    (key,) = _entries(cache, 1, size=200_000)
    store = EntryStore(cache / "results")
    path = store.path(key)
    whole = path.read_bytes()
    real_open = os.open

    def open_then_evicted(name, flags, *args):
        fd = real_open(name, flags, *args)
        if str(name) == str(path):
            trim_cache(cache, limit=1)                   # another run's trim, between the open and the read
        return fd

    monkeypatch.setattr(os, "open", open_then_evicted)
    assert read_entry(path) == whole                     # opened before: read whole
    assert not path.exists()
    assert store.read(key) is None                       # after: a miss


def test_a_run_over_the_limit_trims_and_the_next_run_is_still_right(tmp_path):
    root = write_files(tmp_path / "proj", {
        "pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n', "kernels/k.py": KERNEL,
        "kernels/k.yaml": one_case_spec("k", "source: k.py", "gfx942, gfx1100")})
    cache = tmp_path / "cache"
    first = compile_here(root, cache)
    one_entry = max(p.stat().st_size for p in (cache / "results").rglob("*.json"))
    from xisa.compile.runner import RunOptions, run_cells
    from xisa.api import Selection, open_workspace

    ws = open_workspace(cwd=root)
    _, cells = Selection().cells(ws)
    for path in (cache / "results").rglob("*.json"):
        path.unlink()                                    # the next run compiles, so it trims
    results = run_cells(cells, roots=list(ws.project.kernel_roots), cache_dir=cache,
                        options=RunOptions(jobs=1, cache_limit=2 * one_entry))
    held = sum(p.stat().st_size for folder in ("results", "backend") for p in (cache / folder).rglob("*.json"))
    assert held <= 2 * one_entry * LOW_WATER
    assert {c.id: r.analysis.code_sha256 for c, r in zip(cells, results)} == \
        {cell: r.analysis.code_sha256 for cell, r in first.items()}
    again = compile_here(root, cache)
    assert {cell: r.analysis.code_sha256 for cell, r in again.items()} == \
        {cell: r.analysis.code_sha256 for cell, r in first.items()}


KERNEL = """import triton
import triton.language as tl


@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.load(x_ptr + r) * 2.0)
"""


def test_cache_info_says_size_limit_entries_and_the_last_runs_hit_rate(run_xisa, tmp_path):
    root = write_files(tmp_path / "proj", {
        "pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\ncache_size = "300MB"\n', "kernels/k.py": KERNEL,
        "kernels/k.yaml": one_case_spec("k", "source: k.py", "gfx942, gfx1100")})
    env = {"XISA_CACHE_DIR": str(tmp_path / "cache")}
    assert run_xisa("compile", cwd=root, env=env).code == 0
    assert run_xisa("compile", cwd=root, env=env).code == 0
    info = run_xisa("cache", "info", "--json", cwd=root, env=env)
    assert info.code == 0, info.err
    data = json.loads(info.out)
    assert data["kind"] == "cache" and data["limit"] == 300 * 1024 ** 2 and data["results"] == 2
    assert data["backend"] == 2 and data["front_end"] == 2 and data["loads"] > 0 and data["size"] > 0
    assert data["last_run"] == {"cells": 2, "results": 2, "backend": 0, "front_end": 0, "compiled": 0, "errors": 0}
    text = run_xisa("cache", "info", cwd=root, env=env)
    assert "hit rate 100%" in text.out and "300.0 MiB limit" in text.out, text.out
    assert "2 results, 2 back-end, 2 front-end, " in text.out, text.out


@pytest.mark.unit
def test_the_limit_comes_from_the_environment_then_pyproject_then_the_default(tmp_path, monkeypatch):
    root = write_files(tmp_path / "proj", {"pyproject.toml": '[tool.xisa]\ncache_size = "1.5GiB"\n'})
    monkeypatch.delenv("XISA_CACHE_SIZE", raising=False)
    assert load_project(cwd=root).cache_limit == int(1.5 * 1024 ** 3)
    monkeypatch.setenv("XISA_CACHE_SIZE", "750M")
    assert load_project(cwd=root).cache_limit == 750 * 1024 ** 2
    monkeypatch.delenv("XISA_CACHE_SIZE")
    assert load_project(cwd=tmp_path).cache_limit == DEFAULT_CACHE_SIZE


@pytest.mark.unit
@pytest.mark.parametrize("value", ['"lots"', '"-5MB"', "0", "true"])
def test_a_bad_limit_is_one_line_naming_the_field(tmp_path, monkeypatch, value):
    monkeypatch.delenv("XISA_CACHE_SIZE", raising=False)
    root = write_files(tmp_path / "proj", {"pyproject.toml": f"[tool.xisa]\ncache_size = {value}\n"})
    with pytest.raises(SpecError) as info:
        load_project(cwd=root)
    assert "tool.xisa.cache_size" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.unit
def test_the_run_counts_say_where_each_cell_came_from():
    from xisa.compile.worker.result import CellResult

    def result(**fields):
        return CellResult(kernel="k", case="c", target="gfx942", status=fields.pop("status", "ok"), **fields)

    counts = RunCounts.of([result(cached=True), result(reused_backend=True), result(), result(status="error"),
                           result(reused_backend=True, skipped_front_end=True)])
    assert counts == RunCounts(cells=5, results=1, backend=2, front_end=1, compiled=1, errors=1)
    assert cache_info(Path("/nonexistent/xisa-cache"), 10).size == 0


@pytest.mark.unit
def test_the_review_store_counts_towards_the_limit_and_a_reviewed_stream_is_a_use(tmp_path):
    """Compact goldens keep their streams in the cache's review store: it is trimmed with the rest, least recently
    used first, and a stream read for a review counts as a use."""
    from xisa.golden.material import MaterialStore

    cache = tmp_path / "cache"
    keys = _entries(cache, 4)
    review = MaterialStore.in_cache(cache)
    streams = [review.put_stream(f"bb0:\n  v_add_f32 v{index}, v0, v1\n" + "x" * 1000) for index in range(4)]
    for index, digest in enumerate(streams):
        path = cache / "review" / "streams" / digest[:2] / f"{digest}.isa"
        os.utime(path, (2_000_000 + index, 2_000_000 + index))      # newer than every result entry
    assert review.stream(streams[0]) is not None                    # reviewed now: the newest of all
    removed = trim_cache(cache, limit=4000)
    left = [digest for digest in streams if review.stream(digest) is not None]
    assert removed > 0 and streams[0] in left and streams[1] not in left
    assert not any(EntryStore(cache / "results").path(key).exists() for key in keys)   # the oldest went first


@pytest.mark.parametrize("commands", [[("bless",), ("check", "--no-cache")], [("bless",), ("report", "--html", "r.html")]])
def test_a_command_ends_with_its_cache_within_the_limit_review_writes_included(run_xisa, tmp_path, commands):
    """The review store's streams, lines and parsed goldens are written after the compile's own trim (by the
    verdicts, by bless): the command trims again at its end, so no command leaves the cache over its limit."""
    root = write_files(tmp_path / "proj", {
        "pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\ncache_size = "4KB"\n', "kernels/k.py": KERNEL,
        "kernels/k.yaml": one_case_spec("k", "source: k.py", "gfx942, gfx1100, sm_90")})
    cache = tmp_path / "cache"
    env = {"XISA_CACHE_DIR": str(cache)}
    for command in commands:
        done = run_xisa(*command, cwd=root, env=env, process=True)
        assert done.code in (0, 1), done.err
        info = cache_info(cache, 4 * 1024)
        assert info.size <= 4 * 1024, f"{command}: {info.size} bytes in the cache, over its limit"
        assert (cache / "review").is_dir()      # there was review material to trim
    assert run_xisa("bless", cwd=root, env=env).code == 0
    again = run_xisa("check", cwd=root, env=env)   # what eviction left answers right
    assert again.code == 0 and "byte-identical" in again.out, again.out + again.err


def test_a_gate_whose_base_sets_a_larger_limit_leaves_the_shared_cache_within_the_tree_s(run_xisa, tmp_path):
    """`check --base REV --compile-base`: the base revision's workspace compiles into the same cache folder under
    the base's own limit (here the default) and writes the review material first; the command still ends within
    the smallest limit of the workspaces that wrote the folder (the tree's)."""
    kernels = {f"kernels/k{i}.yaml": one_case_spec(f"k{i}", f"source: k{i}.py", "gfx942") for i in range(4)}
    kernels.update({f"kernels/k{i}.py": KERNEL.replace("* 2.0", f"* {i + 2}.0") for i in range(4)})
    root = write_files(tmp_path / "proj", {"pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n', **kernels})
    cache = tmp_path / "cache"
    env = {"XISA_CACHE_DIR": str(cache)}
    git(root, "init", "-q", "-b", "main")
    assert run_xisa("bless", cwd=root, env=env).code == 0
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    with (root / "pyproject.toml").open("a") as handle:
        handle.write('cache_size = "150KB"\n')
    for i in range(4):
        source = root / "kernels" / f"k{i}.py"
        source.write_text(source.read_text().replace(f"* {i + 2}.0", f"* {i + 10}.0"))
    git(root, "commit", "-qam", "head")
    for command in [("check",), ("check",)] + [("check", "--base", "HEAD~1", "--compile-base")] * 3:
        done = run_xisa(*command, cwd=root, env=env, process=True)
        assert done.code in (0, 1), done.err
        assert cache_info(cache, LIMIT).size <= LIMIT, command


LIMIT = 150 * 1024
