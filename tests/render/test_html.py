"""`xisa report --html`: the page's data and escaping in Python, then the real page in headless Chromium."""

from __future__ import annotations

import json
import re
from html import unescape as html_unescape
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from support import REPO, gfx11_branch_change, git
from xisa.analyze.model import Analysis
from xisa.golden.record import Golden
from xisa.analyze.streamdiff import abstract_registers, stream_diff
from xisa.render.html import render_html, write_html
from xisa.compile.worker.result import CellResult
from xisa.golden.verdict import CHANGED, SAME, CellVerdict, CheckReport, compute_delta


SCREENSHOT = REPO / "test-output" / "report.png"


# ---------------------------------------------------------------- synthetic reports (no compile)

def _stream(n: int, twist: int = -1) -> str:
    lines = ["bb0:"] + [f"  v_add_f32 v{i}, v{i}, 1.0" if i != twist else f"  v_mul_f32 v{i}, v{i}, 3.0"
                        for i in range(n)]
    return "\n".join(lines) + "\n"


def _analysis(stream: str) -> Analysis:
    hist: dict[str, int] = {}
    for line in stream.splitlines()[1:]:
        hist[line.split()[0]] = hist.get(line.split()[0], 0) + 1
    import hashlib

    return Analysis(isa="amdgcn", sha256=hashlib.sha256(stream.encode()).hexdigest(), instructions=sum(hist.values()),
                    blocks=1, histogram=hist, base_histogram=dict(hist), classes={}, stream_text=stream,
                    resources={"vgprs": 16, "sgprs": 10, "vgpr_spills": 0, "lds_bytes": 0, "scratch_bytes": 0,
                               "occupancy": 16})


def _verdict(kernel: str, case: str, target: str, *, changed: bool, message: str = "") -> CellVerdict:
    base_stream = _stream(40)
    head_stream = _stream(40, twist=20) if changed else base_stream
    head = CellResult(kernel=kernel, case=case, target=target, status="ok", analysis=_analysis(head_stream))
    if changed:
        head.analysis.resources["vgprs"] = 24
    data = {**_analysis(base_stream).to_record(), "toolchain": {"triton": "3.8.0"}}
    base = Golden(path=Path("golden") / kernel / case / f"{target}.yaml", data=data, stream_text=base_stream)
    v = CellVerdict(kernel=kernel, case=case, target=target, verdict=CHANGED if changed else SAME, head=head, base=base,
                    golden_file=f"golden/{kernel}/{case}/{target}.yaml", message=message)
    if changed:
        v.delta = compute_delta(data, head)
    return v


def _report(verdicts: list[CellVerdict]) -> CheckReport:
    return CheckReport(verdicts=verdicts, toolchain={"triton": "3.8.0"}, golden_toolchains={}, scopes=[])


@pytest.mark.unit
def test_stream_diff_marks_the_changed_line_and_elides_the_rest():
    diff = stream_diff(_stream(40), _stream(40, twist=20), context=2)
    tags = [row[0] for row in diff["rows"]]
    assert tags == ["gap", "eq", "eq", "chg", "eq", "eq", "gap"]
    chg = diff["rows"][3]
    assert chg[1] == chg[3] == 22 and "v_add_f32 v20" in chg[2] and "v_mul_f32 v20" in chg[4]
    assert diff["added"] == diff["removed"] == 1 and diff["rows"][0][2] == "19 identical lines"
    assert stream_diff("a\n", "a\n")["rows"] == []


@pytest.mark.unit
def test_everything_is_escaped_and_nothing_is_fetched():
    evil = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"
    v = _verdict("k", "c", "gfx942", changed=True, message=evil)
    v.head.analysis.stream_text += f"  s_nop {evil}\n"
    page = render_html(_report([v, _verdict("k", "d", "gfx942", changed=False)]), title=f"t {evil}")
    assert evil not in page and "<img" not in page
    assert page.count("<script>") == 1                      # ours, at the end; the blobs are application/json
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page  # title and summary text, escaped
    assert "\\u003c/script\\u003e" in page                   # inside the JSON blob
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page), "no external assets"
    assert "<link" not in page and "@import" not in page


def _outcome(page: str) -> str:
    match = re.search(r'<p class="outcome exit-(\d)" id="outcome">(.*?)</p>', page)
    assert match and page.count('id="outcome"') == 1
    return f"{match.group(1)} " + re.sub(r"<[^>]+>", "", match.group(2))


@pytest.mark.unit
def test_one_header_line_says_the_outcome_and_why():
    changed = [_verdict("k", f"c{i}", "gfx942", changed=True) for i in range(13)]
    elsewhere = [_verdict("k", "c0", "gfx90a", changed=True), _verdict("k", "c1", "sm_90", changed=True)]
    same = [_verdict("k", "c0", "gfx950", changed=False)]
    for v in changed:
        v.in_scope = True
    scoped = CheckReport(verdicts=[*changed, *same], toolchain={"triton": "3.8.0"}, golden_toolchains={},
                         scopes=["gfx942"])
    assert _outcome(render_html(scoped)) == "0 pass: 13 changed cells, all in scope gfx942"
    leaked = CheckReport(verdicts=[*changed, *elsewhere, *same], toolchain={"triton": "3.8.0"}, golden_toolchains={},
                         scopes=["gfx942"])
    page = render_html(leaked)
    assert _outcome(page) == ("1 fail: 2 cells changed outside the declared scope gfx942: "
                              "k:c0@gfx90a, k:c1@sm_90")
    assert "isolation violated" not in page and "(pass)" not in page
    # The same cells against a base revision: the gate fails them as `xisa diff` does (one verdict, every renderer).
    leaked.base = {"revision": "origin/main", "commit": "0" * 40, "compared": "goldens"}
    assert _outcome(render_html(leaked)) == ("1 fail: 2 cells changed outside the declared scope gfx942: "
                                             "k:c0@gfx90a, k:c1@sm_90")
    assert _outcome(render_html(_report(same * 1))) == "0 pass: 1 cell byte-identical"
    assert _outcome(render_html(_report([*same, _verdict("k", "c1", "gfx950", changed=False)]))) == \
        "0 pass: all 2 cells byte-identical"
    broken = _verdict("k", "c2", "gfx950", changed=False)
    broken.verdict, broken.message = "error", "CompilationError: no"
    assert _outcome(render_html(_report([*same, broken]))) == "2 untrusted: 1 cell could not be judged (error)"
    many = [_verdict("k", f"c{i}", "gfx90a", changed=True) for i in range(20)]
    assert _outcome(render_html(_report(many))).endswith("k:c11@gfx90a and 8 more")


@pytest.mark.unit
def test_a_thousand_cells_stay_light(tmp_path):
    targets = [f"gfx{n}" for n in (942, 950, 1100, 1200, 1201)]
    verdicts = [_verdict(f"k{i // 20}", f"c{i % 20}", t, changed=(i % 50 == 0 and t == "gfx1100"))
                for i in range(200) for t in targets]
    assert len(verdicts) == 1000
    start = time.perf_counter()
    page = render_html(_report(verdicts))
    assert time.perf_counter() - start < 5
    assert len(page) < 3_000_000, len(page)                 # identical cells carry no streams
    assert page.count('class="cell-detail"') == 1000 and page.count('class="cell v-changed"') == 4
    out = tmp_path / "big.html"
    write_html(out, page)
    assert out.read_text() == page and not list(tmp_path.glob(".big.html.*"))


def _renumbered(n: int, *, shift: int, twists: tuple[int, ...] = (), unroll: bool = False) -> str:
    """A stream whose registers are all renumbered by `shift`, with the instructions at `twists` changed;
    `unroll`: every line the same but for its registers (an unrolled loop)."""
    lines = ["bb0:"]
    for i in range(n):
        op = "v_mul_f32" if i in twists else "v_add_f32"
        lines.append(f"  {op} v{i + shift}, s[{2 * i + shift}:{2 * i + shift + 1}], {1.0 if unroll else i}")
    return "\n".join(lines) + "\n"


@pytest.mark.unit
def test_register_abstracted_diff_shows_only_the_changed_instructions():
    base, head = _renumbered(200, shift=0), _renumbered(200, shift=3, twists=(50, 150))
    exact = stream_diff(base, head)
    aligned = stream_diff(base, head, key=abstract_registers)
    assert exact["removed"] == exact["added"] == 200                      # every line differs as written
    assert aligned["removed"] == aligned["added"] == 2 and aligned["renamed"] == 198
    changed = [row for row in aligned["rows"] if row[0] == "chg"]
    assert [(row[1], row[3]) for row in changed] == [(52, 52), (152, 152)]
    assert "v_add_f32 v50," in changed[0][2] and "v_mul_f32 v53," in changed[0][4]
    # An unrolled loop (lines equal but for registers): still two lines each way, not 200.
    unrolled = stream_diff(_renumbered(200, shift=0, unroll=True), _renumbered(200, shift=3, twists=(50, 150),
                                                                             unroll=True), key=abstract_registers)
    assert unrolled["removed"] == unrolled["added"] == 2
    assert abstract_registers("  v_add_f32 v12, s[4:5], a[0:15]") == "  v_add_f32 vN, s[N:N+1], a[N:N+15]"
    assert abstract_registers("  @P0 HMMA.16816.F32 R12, UR4, RZ, UP1, PT") == "  @PN HMMA.16816.F32 RN, URN, RZ, UPN, PT"
    v = _verdict("k", "c", "gfx942", changed=True)
    v.base.stream_text, v.head.analysis.stream_text = base, head
    page = render_html(_report([v]))
    blob = json.loads(re.search(r'class="cell-data">(.*?)</script>', page).group(1))
    assert blob["register_diff"]["removed"] == 2 and blob["diff"]["removed"] == 200
    # Without renumbering there is nothing to abstract: one diff only.
    assert json.loads(re.search(r'class="cell-data">(.*?)</script>', render_html(
        _report([_verdict("k", "c", "gfx942", changed=True)]))).group(1))["register_diff"] is None


@given(st.lists(st.sampled_from("abcd"), max_size=40), st.lists(st.sampled_from("abcd"), max_size=40))
@settings(max_examples=300, deadline=None)
def test_diff_opcodes_rebuild_the_head_and_keep_at_least_difflibs_matches(base, head):
    from xisa.analyze.streamdiff import diff_opcodes

    rebuilt, i, j = [], 0, 0
    for tag, i1, i2, j1, j2 in diff_opcodes(base, head):
        assert (i1, j1) == (i, j)
        if tag == "equal":
            assert base[i1:i2] == head[j1:j2]
        rebuilt += head[j1:j2]
        i, j = i2, j2
    assert (i, j) == (len(base), len(head)) and rebuilt == head
    import difflib

    kept = sum(i2 - i1 for tag, i1, i2, _, _ in diff_opcodes(base, head) if tag == "equal")
    assert kept >= sum(block.size for block in difflib.SequenceMatcher(None, base, head, autojunk=False)
                       .get_matching_blocks())


@pytest.mark.unit
def test_binding_differences_are_shown():
    v = _verdict("k", "c", "gfx942", changed=True)
    v.base.data.update(binding={"signature": {"x_ptr": "*fp16"}, "constexprs": {"BLOCK": 64}, "attrs": {}},
                       options={"num_warps": 4})
    v.head.binding = {"signature": {"x_ptr": "*bf16"}, "constexprs": {"BLOCK": 64}, "attrs": {}}
    v.head.options = {"num_warps": 8}
    v.delta = compute_delta(v.base.data, v.head)
    blob = json.loads(re.search(r'class="cell-data">(.*?)</script>', render_html(_report([v]))).group(1))
    assert blob["binding"] == [["signature.x_ptr", "*fp16", "*bf16"], ["options.num_warps", 4, 8]]


def test_the_page_stays_bounded_with_many_changed_cells(tmp_path):
    """116 changed cells, renumbered with a third of their instructions changed: both diffs of every
    cell reach the per-cell cap, so the page budget runs out; later cells get a note instead."""
    from xisa.analyze.streamdiff import MAX_DIFF_ROWS
    from xisa.render.html import PAGE_DIFF_ROWS

    verdicts = []
    for i in range(116):
        v = _verdict(f"k{i // 8}", f"c{i % 8}", "gfx942", changed=True)
        v.base.stream_text = _renumbered(3 * MAX_DIFF_ROWS, shift=0)
        v.head.analysis.stream_text = _renumbered(3 * MAX_DIFF_ROWS, shift=2, twists=tuple(range(0, 3 * MAX_DIFF_ROWS, 3)))
        verdicts.append(v)
    assert 116 * 2 * MAX_DIFF_ROWS > PAGE_DIFF_ROWS
    page = render_html(_report(verdicts))
    blobs = [json.loads(b) for b in re.findall(r'class="cell-data">(.*?)</script>', page)]
    rows = sum(len(b["diff"]["rows"]) + len((b["register_diff"] or {"rows": []})["rows"]) for b in blobs if b["diff"])
    assert 0 < rows <= PAGE_DIFF_ROWS
    left_out = [b for b in blobs if b["diff"] is None]
    assert left_out and all("diff left out" in b["diff_note"] and f"--kernel {b['id'].split('@')[0]}" in b["diff_note"]
                            for b in left_out)
    # Every cell keeps its histogram and resources; the size is the diffs' budget, not the cells' streams.
    assert all(b["histogram"] and b["resources"] for b in blobs)
    assert len(page) < PAGE_DIFF_ROWS * 200 + 116 * 10_000, len(page)


def test_report_against_a_git_revision(run_xisa, tinyproj, tmp_path):
    assert run_xisa("bless", cwd=tinyproj).code == 0
    git(tinyproj, "init", "-q")
    git(tinyproj, "add", "-A")
    git(tinyproj, "commit", "-qm", "base")
    gfx11_branch_change(tinyproj)
    assert run_xisa("bless", "--arch", "gfx1100", cwd=tinyproj).code == 0
    page = tmp_path / "diff.html"
    against_golden = run_xisa("report", "--html", str(page), cwd=tinyproj)
    assert against_golden.code == 0 and "byte-identical: gfx1100, gfx1201, gfx942 (8 cells)" in against_golden.out
    out = run_xisa("report", "--html", str(page), "--base", "HEAD", "--scope", "gfx1100", cwd=tinyproj)
    assert out.code == 0, out.err                            # like `xisa diff`: the change is in its scope
    text = page.read_text()
    assert "<title>xisa: ISA against HEAD</title>" in text
    assert 'class="cell v-changed in-scope" data-cell="scale:big@gfx1100"' in text
    assert '<p class="outcome exit-0" id="outcome">pass: 2 changed cells, all in scope gfx1100</p>' in text
    # Out of scope the cells violate isolation: the page fails them as `xisa diff --base HEAD` does (exit 1), in
    # one line (it was a green "pass: ..., reported and not failed" while the gate exited 1).
    out = run_xisa("report", "--html", str(page), "--base", "HEAD", cwd=tinyproj)
    text = page.read_text()
    assert out.code == 1 and "isolation violated" not in text
    assert re.search(r'<p class="outcome exit-1" id="outcome">fail: 2 cells changed and no scope is declared: '
                     r'<span id="isolation"><a href="#open=scale:big@gfx1100">scale:big@gfx1100</a>, ', text)
    assert text.count('class="outcome') == 1 and 'class="problem"' not in text
    assert re.search(r'exit code <b id="exit-code">1</b> ·', text)
    assert "reported and not failed" not in text
    bad = run_xisa("report", "--html", str(page), "--base", "no-such-rev", cwd=tinyproj)
    assert bad.code == 2 and "no-such-rev" not in page.read_text()


# ---------------------------------------------------------------- the real page in headless Chromium

def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")   # on PATH and executable
    if not found:
        pytest.skip("chromium is not installed (apt-get install -y chromium chromium-driver; .ci/run does this)")
    return found


def _browse(chromium: str, url: str, profile: Path, *extra: str) -> str:
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={profile}",
               "--virtual-time-budget=5000", *extra, url]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _detail(dom: str, cell_id: str) -> str:
    match = re.search(r'<details class="cell-detail"[^>]*data-cell="' + re.escape(cell_id) + r'".*?</details>', dom,
                      re.S)
    assert match, f"no details for {cell_id}"
    return match.group(0)


def test_report_page_in_headless_chromium(run_xisa, tinyproj, tmp_path):
    chromium = _chromium()
    assert run_xisa("bless", cwd=tinyproj).code == 0
    gfx11_branch_change(tinyproj)
    page = tmp_path / "out" / "report.html"
    out = run_xisa("report", "--html", str(page), cwd=tinyproj)
    assert out.code == 1, out.err                            # same verdict as `xisa check`: isolation violated
    assert "gfx1100: 2 changed, 1 byte-identical" in out.out and f"wrote {page}" in out.err
    text = page.read_text()
    assert "<script src" not in text and "http" not in text.replace("http-equiv", "")

    url = page.as_uri()
    profile = tmp_path / "chromium-profile"
    plain = _browse(chromium, url, profile, "--dump-dom")
    assert 'data-ready="1"' in plain, "the page's script did not run"
    # The matrix: three kernel:case rows by three targets, the gfx11 cells coloured as changed.
    matrix = re.search(r'<table id="matrix".*?</table>', plain, re.S).group(0)
    assert re.findall(r'<tr data-key="([^"]+)"', matrix) == ["dot:f16_32", "scale:big", "scale:small"]
    assert [h for h in re.findall(r"<th>(gfx\w+)</th>", matrix)] == ["gfx1100", "gfx1201", "gfx942"]
    changed = re.findall(r'class="cell v-changed"[^>]*data-cell="([^"]+)"', matrix)
    assert changed == ["scale:big@gfx1100", "scale:small@gfx1100"]
    assert len(re.findall(r'class="cell v-same"', matrix)) == 6
    # The two changed cells are few enough to be open: their side-by-side diff is rendered by the script.
    big = _detail(plain, "scale:big@gfx1100")
    assert 'data-rendered="1"' in big and '<table class="diff">' in big
    changed_rows = re.findall(r'<tr class="chg">(.*?)</tr>', big, re.S)
    assert changed_rows and any("v_fma_f32" in r and "v_dual_fmaak_f32" in r for r in changed_rows)
    assert "histogram: golden vs head" in big and 'class="bar head"' in big
    # The page says how to accept the change, with the command `xisa check` prints.
    assert re.search(r'<div class="accept" id="accept">to accept these goldens: <pre>xisa bless --arch gfx1100 '
                     r'--kernel scale</pre></div>', plain)
    assert re.search(r'<p class="outcome exit-1" id="outcome">fail: 2 cells changed and no scope is declared: '
                     r'<span id="isolation"><a href="#open=scale:big@gfx1100">', plain)
    assert re.search(r'<b id="exit-code">1</b>', plain)
    # Identical cells are lazy: nothing rendered until opened ...
    same_id = "scale:small@gfx942"
    assert "data-rendered" not in _detail(plain, same_id)
    # ... and `#open=<cell>` opens and renders one on load.
    opened = _browse(chromium, url + "#open=" + same_id, profile, "--dump-dom")
    detail = _detail(opened, same_id)
    assert "open" in detail.split(">", 1)[0] and 'data-rendered="1"' in detail
    assert "byte-identical to the golden" in detail and "<td>vgprs</td>" in detail
    # The filter (driven by the fragment as a user would type it) hides the rows without a change.
    filtered = _browse(chromium, url + "#verdict=changed", profile, "--dump-dom")
    hidden = re.findall(r'<tr data-key="([^"]+)" data-verdicts="[^"]*" class="hidden"', filtered)
    assert hidden == ["dot:f16_32"], hidden
    assert "2 rows, 2 cells shown" in filtered

    SCREENSHOT.parent.mkdir(exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    _browse(chromium, url, profile, f"--screenshot={SCREENSHOT}", "--window-size=1400,1000")
    data = SCREENSHOT.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_register_diff_and_binding_render_in_chromium(tmp_path):
    """A renumbered stream with two changed instructions: the abstracted diff is the first tab and
    shows two changed rows; the exact one (every line) is a click away; the binding table shows."""
    chromium = _chromium()
    v = _verdict("k", "c", "gfx942", changed=True)
    v.base.stream_text = _renumbered(200, shift=0)
    v.head.analysis.stream_text = _renumbered(200, shift=3, twists=(50, 150))
    v.base.data.update(binding={"signature": {"x_ptr": "*fp16"}, "constexprs": {}, "attrs": {}}, options={})
    v.head.binding = {"signature": {"x_ptr": "*bf16"}, "constexprs": {}, "attrs": {}}
    v.delta = compute_delta(v.base.data, v.head)
    page = tmp_path / "renumbered.html"
    write_html(page, render_html(_report([v])))
    dom = _browse(chromium, page.as_uri(), tmp_path / "profile", "--dump-dom")
    detail = _detail(dom, "k:c@gfx942")
    tabs = re.findall(r'<button class="tab( active)?" type="button" data-view="(\w+)">([^<]*)</button>', detail)
    assert [(bool(active), view) for active, view, _ in tabs] == [(True, "registers"), (False, "exact")]
    assert tabs[0][2].startswith("registers abstracted: 2 lines removed, 2 added")
    views = dict(re.findall(r'<div class="diff-wrap( hidden)?" data-view="(\w+)">(.*?)</table>', detail, re.S)[i][1:]
                 for i in range(2))
    exact_rows = [row for row in stream_diff(v.base.stream_text, v.head.analysis.stream_text)["rows"] if row[0] == "chg"]
    assert views["registers"].count('<tr class="chg">') == 2
    assert views["exact"].count('<tr class="chg">') == len(exact_rows) > 100      # every line, up to the cap
    assert 'class="diff-wrap hidden" data-view="exact"' in detail
    assert re.search(r"<td>signature.x_ptr</td><td>\"\*fp16\"</td><td>\"\*bf16\"</td>", detail)
    SCREENSHOT.parent.mkdir(exist_ok=True)
    shot = SCREENSHOT.with_name("report-register-diff.png")
    _browse(chromium, page.as_uri() + "#open=k:c@gfx942&scroll=0", tmp_path / "profile", f"--screenshot={shot}",
            "--window-size=1400,1200")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_thousand_cell_page_loads_and_filters_in_chromium(tmp_path):
    chromium = _chromium()
    targets = [f"gfx{n}" for n in (942, 950, 1100, 1200, 1201)]
    verdicts = [_verdict(f"k{i // 20}", f"c{i % 20}", t, changed=(i % 50 == 0 and t == "gfx1100"))
                for i in range(200) for t in targets]
    page = tmp_path / "big.html"
    write_html(page, render_html(_report(verdicts)))
    start = time.perf_counter()
    dom = _browse(chromium, page.as_uri() + "#verdict=changed&filter=k1", tmp_path / "profile", "--dump-dom")
    assert time.perf_counter() - start < 60
    assert 'data-ready="1"' in dom
    # i % 50 == 0 changes k0:c0, k2:c10, k5:c0, k7:c10 on gfx1100; `k1` (k1, k10..k19) matches none of them.
    assert "0 rows, 0 cells shown" in dom
    dom = _browse(chromium, page.as_uri() + "#verdict=changed", tmp_path / "profile", "--dump-dom")
    assert "4 rows, 4 cells shown" in dom
    assert dom.count('data-rendered="1"') == 4               # the 4 changed cells are open; the rest stay lazy


@pytest.mark.unit
def test_the_pages_css_and_js_are_package_data_a_wheel_carries():
    """`page.css` and `page.js` are files of the `xisa.render` package: hatch's wheel (`packages = ["xisa"]`)
    takes every file of the package that git does not ignore, so an installed, non-editable xisa has them."""
    from importlib import resources

    for name in ("page.css", "page.js"):
        assert resources.files("xisa.render").joinpath(name).read_text(encoding="utf-8").strip()
        ignored = subprocess.run(["git", "check-ignore", "-q", f"xisa/render/{name}"], cwd=REPO)
        assert ignored.returncode == 1, f"{name} is ignored by git, so a wheel would leave it out"
    assert 'packages = ["xisa"]' in (REPO / "pyproject.toml").read_text()


# ---------------------------------------------------------------- no element over another, at every width

TARGETS_13 = ["gfx1100", "gfx1151", "gfx1200", "gfx1201", "gfx90a", "gfx942", "gfx950",
              "sm_100", "sm_120", "sm_80", "sm_86", "sm_89", "sm_90"]

# Measures, once the page's script has rendered the open cells, every pair of sibling panels (the header's
# lines, a cell's columns, its source-line table beside its stream diff) and whether a panel's table or block
# of text runs out of a panel that does not clip it; the findings go into `data-overlaps` for --dump-dom.
MEASURE = """<script>
window.addEventListener("load", function(){ setTimeout(function(){
  var bad = [];
  function box(e){ return e.getBoundingClientRect(); }
  function name(e){ return e.tagName.toLowerCase() + (e.className ? "." + String(e.className).split(" ").join(".") : ""); }
  document.querySelectorAll("header, .cols, .side-by-side").forEach(function(parent){
    var kids = Array.prototype.filter.call(parent.children, function(k){ var b = box(k); return b.width > 0 && b.height > 0; });
    for (var i = 0; i < kids.length; i++) {
      var a = box(kids[i]);
      for (var j = i + 1; j < kids.length; j++) {
        var b = box(kids[j]);
        if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1)
          bad.push(name(kids[i]) + " over " + name(kids[j]));
      }
      if (getComputedStyle(kids[i]).overflowX !== "visible") continue;   // it scrolls what it cannot hold
      kids[i].querySelectorAll("table, pre").forEach(function(t){
        if (box(t).right > a.right + 1) bad.push(name(t) + " out of " + name(kids[i]) + " by " + Math.round(box(t).right - a.right) + "px");
      });
    }
  });
  document.body.dataset.panels = document.querySelectorAll(".side-by-side > *").length;
  document.body.dataset.overlaps = JSON.stringify(bad);
}, 500); });
</script>
"""


def _thirteen_target_change() -> CheckReport:
    """One kernel case on 13 targets, changed on gfx942: its source-line table has a column per target."""
    verdicts = []
    for target in TARGETS_13:
        v = _verdict("attention", "decode_fp8_long_case_name", target, changed=target == "gfx942")
        v.head.analysis.lines = [{"loc": f"vendor/fla/ops/attention/decode.py:{100 + i}", "count": 10 + i,
                                  "text": f"acc += tl.dot(q_tile_{i}, tl.trans(k_tile_{i}), out_dtype=tl.float32)"}
                                 for i in range(30)]
        verdicts.append(v)
    return _report(verdicts)


@pytest.mark.parametrize("width", [1280, 1400, 1920, 2600])
def test_no_element_overlaps_another_in_headless_chromium(tmp_path, width):
    chromium = _chromium()
    page = tmp_path / "report.html"
    html = render_html(_thirteen_target_change())
    write_html(page, html.replace("</body>", MEASURE + "</body>"))
    dom = _browse(chromium, page.as_uri(), tmp_path / "profile", "--dump-dom", f"--window-size={width},1000")
    assert 'data-ready="1"' in dom, "the page's script did not run"
    panels = re.search(r'data-panels="(\d+)"', dom)
    assert panels and int(panels.group(1)) >= 2               # the source-line table and the stream diff, measured
    found = json.loads(html_unescape(re.search(r'data-overlaps="([^"]*)"', dom).group(1)))
    assert found == [], f"at {width} px: {found}"


@pytest.mark.unit
def test_what_each_target_resolved_is_shown_with_the_targets_that_bound_it():
    """A reviewer sees gfx942 bind 304 SMs where sm_90 binds 132, and which config each target's autotuner kept."""
    cells = [_verdict("persist", "a", target, changed=False) for target in ("gfx942", "gfx942-mi308x", "sm_90")]
    facts = {"gfx942": 304, "gfx942-mi308x": 80, "sm_90": 132}
    for v in cells:
        v.head.resolved = {"config": "config 1 (BLOCK=64)" if v.target != "sm_90" else "config 3 (BLOCK=128)",
                           "platform": {"multiprocessor_count": facts[v.target]}}
    cells[1].head.resolved["notes"] = ["kpack=2 compiles as 1, as a launch does"]
    page = html_unescape(re.sub(r"<[^>]+>", "", render_html(_report(cells)).split('id="resolved"')[1]
                                .split("</section>")[0]))
    assert "persist:aconfigconfig 1 (BLOCK=64) (gfx942, gfx942-mi308x) · config 3 (BLOCK=128) (sm_90)" in page
    assert "multiprocessor_count132 (sm_90) · 304 (gfx942) · 80 (gfx942-mi308x)" in page
    assert "persist:a@gfx942-mi308x: kpack=2 compiles as 1" in page
    assert 'id="resolved"' not in render_html(_report([_verdict("plain", "a", "gfx942", changed=False)]))
