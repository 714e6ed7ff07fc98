"""The compact golden layout (`xisa-golden/2`, the default; issue 24, item 3): small goldens that judge exactly as
strictly as the full layout, migrated by one `xisa bless`, reviewed with the stream diff where this machine has
the golden's stream and with a line saying how to get it where not; never half-written."""

from __future__ import annotations

import copy
import hashlib
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from xisa.golden.bless import bless
from xisa.golden.material import MaterialStore
from xisa.golden.record import FORMAT, FORMAT_COMPACT, NOT_THE_CELL
from xisa.golden.store import GoldenSet, golden_paths, read_golden
from xisa.golden.verdict import build_report

from support import RECORD_BASE as BASE, RECORD_MUTATIONS as MUTATIONS, RECORD_TOOLCHAIN as TOOLCHAIN, git

LAYOUT_LINE = 'golden_layout = "full"\n'


@pytest.fixture(autouse=True)
def _bless_writes(monkeypatch):
    """These tests bless in this process: CI's own CI variable would refuse every write (as it must for users)."""
    monkeypatch.delenv("CI", raising=False)
PER_CELL_BOUND = 8 * 1024      # issue 24: committed bytes per cell on a fresh adoption


def _compact(project: Path) -> Path:
    """tinyproj as a new repository configures it: no layout line, so the default (compact) layout."""
    config = project / "pyproject.toml"
    config.write_text(config.read_text().replace(LAYOUT_LINE, ""))
    return project


def _records(golden_dir: Path) -> dict[str, dict]:
    return {str(p.relative_to(golden_dir)): yaml.safe_load(p.read_text()) for p in sorted(golden_dir.rglob("*.yaml"))}


def _judged(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in NOT_THE_CELL}


# --- size and strictness ---------------------------------------------------------------------------------

def test_a_fresh_adoption_commits_one_small_file_per_cell_with_every_judged_field(run_xisa, tinyproj, tmp_path):
    full = tinyproj
    assert run_xisa("bless", cwd=full).code == 0                     # the full layout, same compile (cached)
    compact = tmp_path / "compact"
    shutil.copytree(tinyproj, compact, ignore=shutil.ignore_patterns("golden"))
    _compact(compact)
    out = run_xisa("bless", cwd=compact)
    assert out.code == 0, out.err
    files = [p for p in (compact / "golden").rglob("*") if p.is_file()]
    cells = [p for p in files if p.suffix == ".yaml"]
    assert len(cells) == 8 and len(files) == len(cells)              # no stream files
    assert sum(p.stat().st_size for p in files) / len(cells) <= PER_CELL_BOUND
    full_records, compact_records = _records(full / "golden"), _records(compact / "golden")
    assert full_records.keys() == compact_records.keys()
    for name, record in compact_records.items():
        assert record["format"] == FORMAT_COMPACT and "lines" not in record and "stream" not in record
        # Every field a verdict judges, byte for byte the full golden's: sha256, code_sha256, sections, counts...
        assert _judged(record) == _judged(full_records[name]), name
        assert record["stages"] == full_records[name]["stages"]
        assert len(record["lines_sha256"]) == 64


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_compact_golden_is_as_strict_as_a_full_one(tmp_path, mutation):
    """Whatever field of the record differs (the code object alone, a section, an option, ...), the compact
    golden calls the cell changed, as the full one does."""
    verdicts = {}
    for layout in ("full", "compact"):
        golden = tmp_path / layout
        common = dict(selected_targets={"gfx942"}, kernel_filters=None, toolchains={"gfx942": TOOLCHAIN},
                      stream_files=True, layout=layout, display_root=tmp_path)
        bless([BASE], golden_dir=golden, **common)
        goldens = GoldenSet.for_results(golden, [MUTATIONS[mutation]], display_root=tmp_path)
        report = build_report([MUTATIONS[mutation]], {}, goldens=goldens, scopes=[], toolchain=TOOLCHAIN,
                              selected_targets={"gfx942"}, kernel_filters=None)
        verdicts[layout] = report.verdicts[0]
    assert verdicts["full"].verdict == verdicts["compact"].verdict == "changed"
    assert verdicts["full"].delta.fields == verdicts["compact"].delta.fields


@pytest.mark.unit
def test_code_that_changed_with_identical_counts_fails_the_compact_check(tmp_path):
    """Two instructions swapped: every count, resource and the code object's size the same, only the stream's
    sha256 and the code object's code_sha256 differ; no material store either (nothing to diff)."""
    stream = "bb0:\n  s_nop 0\n  s_endpgm\n"
    base = copy.deepcopy(BASE)
    base.analysis = replace(base.analysis, stream_text=stream, sha256=hashlib.sha256(stream.encode()).hexdigest(),
                            histogram={"s_nop": 1, "s_endpgm": 1}, base_histogram={"s_nop": 1, "s_endpgm": 1},
                            instructions=2)
    swapped = "bb0:\n  s_endpgm\n  s_nop 0\n"
    head = copy.deepcopy(base)
    head.analysis = replace(base.analysis, stream_text=swapped, sha256=hashlib.sha256(swapped.encode()).hexdigest(),
                            code_sha256="f" * 64)
    common = dict(selected_targets={"gfx942"}, kernel_filters=None)
    bless([base], golden_dir=tmp_path / "golden", display_root=tmp_path, toolchains={"gfx942": TOOLCHAIN},
          stream_files=False, layout="compact", **common)
    goldens = GoldenSet.for_results(tmp_path / "golden", [head], display_root=tmp_path)
    verdict = build_report([head], {}, goldens=goldens, scopes=[], toolchain=TOOLCHAIN, **common).verdicts[0]
    assert verdict.verdict == "changed" and verdict.delta.fields == ["code_sha256", "sha256"]
    assert verdict.delta.histogram == [] and verdict.delta.instructions == (2, 2)
    assert "--compile-base" in verdict.review_note


@pytest.mark.unit
def test_a_hand_edited_compact_golden_is_refused(tmp_path):
    bless([BASE], golden_dir=tmp_path / "golden", display_root=tmp_path, toolchains={"gfx942": TOOLCHAIN},
          stream_files=True, layout="compact", selected_targets={"gfx942"}, kernel_filters=None)
    yaml_path, stream_path = golden_paths(tmp_path / "golden", "k", "c", "gfx942")
    text = yaml_path.read_text()
    for broken, field in ((text.replace("lines_sha256: ", "lines_sha256: x"), "lines_sha256"),
                          (text + "stream: gfx942.isa\n", "stream")):
        yaml_path.write_text(broken)
        entry = GoldenSet.read(tmp_path / "golden", [("k", "c", "gfx942")], display_root=tmp_path).entry(("k", "c", "gfx942"))
        assert entry.golden is None and entry.error is not None and entry.error.field == field


# --- migration --------------------------------------------------------------------------------------------

def test_an_old_layout_checks_then_one_bless_migrates_it_changing_no_fingerprint(run_xisa, tinyproj):
    assert run_xisa("bless", cwd=tinyproj).code == 0                 # the full layout, as before
    before = _records(tinyproj / "golden")
    assert list((tinyproj / "golden").rglob("*.isa"))
    _compact(tinyproj)
    check = run_xisa("check", cwd=tinyproj)                           # the old layout checks as it is
    assert check.code == 0, check.out + check.err
    out = run_xisa("bless", cwd=tinyproj)
    assert out.code == 0, out.err
    assert "migrated 8 goldens to the compact layout" in out.out and "0 written, 8 migrated, 0 unchanged" in out.out
    assert not list((tinyproj / "golden").rglob("*.isa"))
    after = _records(tinyproj / "golden")
    assert after.keys() == before.keys()
    for name in before:
        assert after[name]["format"] == FORMAT_COMPACT and before[name]["format"] == FORMAT
        assert _judged(after[name]) == _judged(before[name])         # sha256, code_sha256, ... unchanged
        assert after[name]["stages"] == before[name]["stages"]
    again = run_xisa("bless", cwd=tinyproj)
    assert "0 written, 8 unchanged, 0 removed" in again.out
    assert run_xisa("check", cwd=tinyproj).code == 0


def test_a_migration_interrupted_at_any_step_leaves_every_golden_old_or_new(tmp_path, monkeypatch):
    """Each rename or removal of the migration raising in turn (a crash there): every golden reads back, in the
    old layout with its stream or the new one, with the same fingerprints, and the next bless finishes."""
    common = dict(display_root=tmp_path, toolchains={"gfx942": TOOLCHAIN}, stream_files=True,
                  selected_targets={"gfx942"}, kernel_filters=None)
    results = [BASE, replace(copy.deepcopy(BASE), case="d")]
    steps = 0
    while True:
        golden = tmp_path / f"golden{steps}"
        bless(results, golden_dir=golden, layout="full", **common)
        calls = {"n": 0}
        real_replace, real_unlink = os.replace, Path.unlink

        def crash_at(real):
            def call(*args, **kwargs):
                calls["n"] += 1
                if calls["n"] == steps + 1:
                    raise KeyboardInterrupt
                return real(*args, **kwargs)
            return call

        monkeypatch.setattr(os, "replace", crash_at(real_replace))
        monkeypatch.setattr(Path, "unlink", crash_at(real_unlink))
        try:
            bless(results, golden_dir=golden, layout="compact", **common)
            finished = True
        except KeyboardInterrupt:
            finished = False
        monkeypatch.undo()
        monkeypatch.delenv("CI", raising=False)   # undone with the crash points
        for case in ("c", "d"):
            read = read_golden(*golden_paths(golden, "k", case, "gfx942"), display=case)
            assert read.data["sha256"] == BASE.analysis.sha256 and read.data["code_sha256"] == BASE.analysis.code_sha256
            assert read.compact or read.stream_text == BASE.analysis.stream_text
        outcome = bless(results, golden_dir=golden, layout="compact", **common)
        assert not outcome.written
        assert not list(golden.rglob("*.isa")) and not list(golden.rglob("*.pending")) and not list(golden.rglob(".*.tmp"))
        if finished:
            break
        steps += 1
    assert steps >= 4        # each golden: its pending rename, its stream's removal, its final rename


# --- review ----------------------------------------------------------------------------------------------

def _edit(project: Path) -> None:
    source = project / "kernels" / "scale.py"
    source.write_text(source.read_text().replace("        y = x * factor\n", "        y = x * factor * 1.5 - x\n"))


def test_the_review_shows_the_stream_diff_from_this_machines_cache(run_xisa, tinyproj, tmp_path):
    _compact(tinyproj)
    assert run_xisa("bless", "--arch", "gfx942", cwd=tinyproj).code == 0
    _edit(tinyproj)
    out = run_xisa("check", "--arch", "gfx942", cwd=tinyproj)
    assert out.code == 1 and "scale:big@gfx942: by source line:" in out.out and "no stream diff" not in out.out
    page = tmp_path / "page.html"
    run_xisa("report", "--html", str(page), "--arch", "gfx942", cwd=tinyproj)
    text = page.read_text()
    assert '"diff":{' in text and "no stream diff" not in text


def test_without_the_golden_stream_the_review_says_how_to_get_it_never_a_wrong_diff(run_xisa, tinyproj, tmp_path):
    _compact(tinyproj)
    own = tmp_path / "own-cache"      # its store is damaged below: not the session's
    assert run_xisa("bless", "--arch", "gfx942", cwd=tinyproj, env={"XISA_CACHE_DIR": str(own)}).code == 0
    golden, small = (read_golden(*golden_paths(tinyproj / "golden", "scale", case, "gfx942"), display="g")
                     for case in ("big", "small"))
    _edit(tinyproj)
    fresh = {"XISA_CACHE_DIR": str(tmp_path / "fresh-clone-cache")}
    for env in (fresh, None):
        if env is None:   # this machine's store, the golden's stream in it replaced by another stream's text
            env = {"XISA_CACHE_DIR": str(own)}
            store = MaterialStore.in_cache(own)
            for sha in (golden.data["sha256"], small.data["sha256"]):
                (store.folder / "streams" / sha[:2] / f"{sha}.isa").write_text("bb0:\n  s_nop 0\n")
        out = run_xisa("check", "--arch", "gfx942", cwd=tinyproj, env=env)
        assert out.code == 1, out.err                                # changed, never an error
        assert ("scale:big@gfx942: no stream diff: this machine has not compiled the compact golden's stream "
                f"(sha256 {golden.data['sha256'][:12]})") in out.out.replace("\n", "")
        assert "`xisa diff --base HEAD --compile-base`" in out.out.replace("\n", "")
        md = run_xisa("check", "--arch", "gfx942", "--format", "markdown", cwd=tinyproj, env=env)
        assert "no stream diff" in md.out and "instructions" in md.out
        page = tmp_path / "page.html"
        run_xisa("report", "--html", str(page), "--arch", "gfx942", cwd=tinyproj, env=env)
        assert '"diff":{' not in page.read_text() and "no stream diff" in page.read_text()


def test_the_suggested_command_compiles_the_base_and_shows_the_diff(run_xisa, tinyproj, tmp_path):
    _compact(tinyproj)
    fresh = {"XISA_CACHE_DIR": str(tmp_path / "fresh-clone-cache")}
    assert run_xisa("bless", "--arch", "gfx942", cwd=tinyproj).code == 0
    git(tinyproj, "init", "-q")
    git(tinyproj, "add", "-A")
    git(tinyproj, "commit", "-q", "-m", "base")
    _edit(tinyproj)
    out = run_xisa("check", "--base", "HEAD", "--compile-base", cwd=tinyproj, env=fresh)
    assert "scale:big@gfx942: by source line:" in out.out and "no stream diff" not in out.out, out.out + out.err


def test_the_gate_against_compact_base_goldens_compiles_the_changed_cells_there_for_their_streams(
        run_xisa, tinyproj, tmp_path):
    """A fresh CI clone: no cache, the base's goldens compact. The gate compiles the changed cells at the base
    (those alone) and its comment shows their source lines and loops; a cell the base cannot give a stream
    for keeps the note."""
    _compact(tinyproj)
    fresh = {"XISA_CACHE_DIR": str(tmp_path / "fresh-clone-cache")}
    assert run_xisa("bless", cwd=tinyproj).code == 0
    git(tinyproj, "init", "-q")
    git(tinyproj, "add", "-A")
    git(tinyproj, "commit", "-q", "-m", "base")
    _edit(tinyproj)
    out = run_xisa("check", "--base", "HEAD", "--scope", "*:scale", cwd=tinyproj, env=fresh)
    assert out.code == 1, out.out + out.err                           # stale goldens: bless them
    assert "scale:big@gfx942: by source line:" in out.out and "no stream diff" not in out.out, out.out
    md = run_xisa("diff", "--base", "HEAD", "--scope", "*:scale", cwd=tinyproj, env=fresh)
    assert "kernels/scale.py:13" in md.out and "no stream diff" not in md.out


@pytest.mark.unit
def test_full_layout_again_migrates_back_with_the_lines_this_machine_kept(tmp_path):
    store = MaterialStore(tmp_path / "review")
    store.remember([BASE])
    common = dict(display_root=tmp_path, toolchains={"gfx942": TOOLCHAIN}, stream_files=True,
                  selected_targets={"gfx942"}, kernel_filters=None, material=store)
    golden = tmp_path / "golden"
    assert bless([BASE], golden_dir=golden, layout="full", **common).written
    full_text = (golden / "k" / "c" / "gfx942.yaml").read_text()
    assert bless([BASE], golden_dir=golden, layout="compact", **common).migrated
    back = bless([BASE], golden_dir=golden, layout="full", **common)
    assert back.migrated and not back.written
    assert (golden / "k" / "c" / "gfx942.yaml").read_text() == full_text       # byte for byte, lines included
    assert (golden / "k" / "c" / "gfx942.isa").read_text() == BASE.analysis.stream_text


@pytest.mark.unit
def test_a_damaged_store_entry_is_replaced_by_the_next_compile_of_its_stream(tmp_path):
    store = MaterialStore(tmp_path / "review")
    store.remember([BASE])
    sha = BASE.analysis.sha256
    path = store.folder / "streams" / sha[:2] / f"{sha}.isa"
    path.write_text("damaged\n")
    assert store.stream(sha) is None                          # never shown: it does not hash to its name
    store.remember([BASE])
    assert store.stream(sha) == BASE.analysis.stream_text


# --- goldens' YAML parsed once: the parse of the same text, from the cache's review store --------------------

@pytest.mark.unit
def test_a_golden_text_is_parsed_from_the_store_only_when_it_is_the_same_text(tmp_path, monkeypatch):
    from xisa import yamlio
    from xisa.errors import GoldenError
    from xisa.golden import material as material_module
    from xisa.golden.material import MaterialStore

    store = MaterialStore(tmp_path / "review")
    parses = []
    real = yamlio.parse_yaml
    monkeypatch.setattr(material_module, "parse_yaml", lambda text, **kw: parses.append(text) or real(text, **kw))
    text = "format: x\nhistogram:\n  v_add_f32: 3\nratio: 0.5\nflag: true\nnone: null\n"
    first = store.parse(text, path="g.yaml", error=GoldenError)
    assert store.parse(text, path="g.yaml", error=GoldenError) == first and len(parses) == 1   # from the store
    edited = text.replace("v_add_f32: 3", "v_add_f32: 4")
    assert store.parse(edited, path="g.yaml", error=GoldenError)["histogram"] == {"v_add_f32": 4}   # parsed anew
    typed = store.parse(text, path="g.yaml", error=GoldenError)
    assert [type(typed[k]) for k in ("ratio", "flag", "none")] == [float, bool, type(None)]
    int_keys = "lines:\n  3: a\n"       # JSON would give "3": never kept, parsed each time
    assert store.parse(int_keys, path="g.yaml", error=GoldenError) == {"lines": {3: "a"}}
    assert store.parse(int_keys, path="g.yaml", error=GoldenError) == {"lines": {3: "a"}}
    assert parses.count(int_keys) == 2
    with pytest.raises(GoldenError, match="duplicate"):   # a bad text is refused as ever, and stays refused
        store.parse("a: 1\na: 2\n", path="g.yaml", error=GoldenError)
    with pytest.raises(GoldenError, match="duplicate"):
        store.parse("a: 1\na: 2\n", path="g.yaml", error=GoldenError)
    monkeypatch.setattr(material_module, "_parser_identity", lambda: "another parser")   # xisa's loader changed
    store.parse(text, path="g.yaml", error=GoldenError)
    assert parses.count(text) == 2     # an old parse is never another parser's answer


@pytest.mark.unit
def test_a_parsed_golden_is_never_read_through_a_link(tmp_path):
    import hashlib

    from xisa.errors import GoldenError
    from xisa.golden.material import MaterialStore

    from xisa.golden.material import _parser_identity

    store = MaterialStore(tmp_path / "review")
    text = "a: 1\n"
    digest = hashlib.sha256(f"{_parser_identity()}\0{text}".encode()).hexdigest()
    planted = tmp_path / "elsewhere.json"
    planted.write_text('{"parsed": {"a": 2}}')
    folder = tmp_path / "review" / "parsed" / digest[:2]
    folder.mkdir(parents=True)
    (folder / f"{digest}.json").symlink_to(planted)
    assert store.parse(text, path="g.yaml", error=GoldenError) == {"a": 1}


@pytest.mark.unit
def test_a_rewritten_parsed_golden_is_never_the_goldens_parse(tmp_path):
    """Issue 36, finding 3: the store's parse of a golden text was trusted by its file name; one rewritten entry (a
    forged `code_sha256`) made a changed kernel exit 0 in `check --no-cache` and the PR gate."""
    import json

    from xisa.errors import GoldenError
    from xisa.golden.material import MaterialStore

    store = MaterialStore(tmp_path / "review")
    text = "code_sha256: aaaa\nsha256: bbbb\n"
    assert store.parse(text, path="g.yaml", error=GoldenError) == {"code_sha256": "aaaa", "sha256": "bbbb"}
    [entry] = (tmp_path / "review" / "parsed").rglob("*.json")
    kept = json.loads(entry.read_text())
    kept["parsed"]["code_sha256"] = "cccc"   # the head's fingerprint: the golden would say "same"
    entry.write_text(json.dumps(kept))
    assert MaterialStore(tmp_path / "review").parse(text, path="g.yaml", error=GoldenError)["code_sha256"] == "aaaa"


@pytest.mark.unit
def test_a_review_store_someone_else_can_write_is_refused_as_the_result_cache_is(tmp_path):
    from xisa.errors import GoldenError, ToolchainError
    from xisa.golden.material import MaterialStore

    store = MaterialStore(tmp_path / "review")
    store.parse("a: 1\n", path="g.yaml", error=GoldenError)
    (tmp_path / "review" / "parsed").chmod(0o777)
    with pytest.raises(ToolchainError, match=r"review/parsed: the cache folder is writable by group or others"):
        MaterialStore(tmp_path / "review").parse("a: 1\n", path="g.yaml", error=GoldenError)
