"""Verdicts: every selected cell against its golden, with scopes and expectations.

Pure: takes results and goldens read beforehand (`xisa.golden.store.GoldenSet`), returns a report object;
reading goldens, rendering and writing live elsewhere. One cell: `judge_cell`; a selection: `build_report`.
"""

from __future__ import annotations

import enum
import fnmatch
from dataclasses import dataclass, field
from typing import Any, ClassVar

from xisa.analyze import ANALYZER_VERSION
from xisa.analyze.backends import COMPARED_RESOURCES, backend_of_isa
from xisa.analyze.codeobject import changed_sections
from xisa.analyze.expect import Failure
from xisa.analyze.lines import LineChange, line_changes, total
from xisa.analyze.loops import LoopChange, analysis_loops, loop_changes
from xisa.analyze.stages import StageAttribution
from xisa.compile.worker.result import CellResult
from xisa.errors import EXIT_OK, EXIT_REGRESSION, EXIT_UNTRUSTED, GoldenError, ParseError, UsageError
from xisa.golden.record import Golden, cell_differences
from xisa.golden.store import GoldenEntry, GoldenSet
from xisa.names import CellKey, NamedByCell, closest
from xisa.spec.cases import matches_kernel_filter
from xisa.spec.shard import ShardPlan

# The version of every JSON document xisa prints (check, compile, device, targets, kernels); see docs/json-schema.md.
JSON_SCHEMA_VERSION = 1

class Verdict(enum.StrEnum):
    """What a cell's compile is against its golden. The members stand in the order every output lists them,
    worst first; the value is the JSON's (`"verdict"`), and each member carries its facts below."""

    ERROR = "error"                          # the cell cannot be judged: a compile error, an unreadable golden
    # One workgroup (block) of the cell exceeds a per-workgroup limit of its target file and the spec does not
    # say `launchable: false` for it: the kernel would raise OutOfResources there. A regression, whatever the scope.
    CANNOT_LAUNCH = "cannot-launch"
    EXPECT_FAILED = "expectation-failed"     # an expectation of the spec does not hold
    CHANGED = "changed"                      # the code object differs from the golden's
    NEW = "new"                              # a cell with no golden
    UNUSED = "unused"                        # a golden with no cell
    SAME = "same"                            # byte-identical

    @property
    def acceptable(self) -> bool:
        """`xisa bless` resolves it, by rewriting or removing goldens."""
        return self in (Verdict.CHANGED, Verdict.NEW, Verdict.UNUSED)

    @property
    def explained(self) -> bool:
        """Its message says what failed (outputs list it under their tables)."""
        return self in (Verdict.ERROR, Verdict.CANNOT_LAUNCH, Verdict.EXPECT_FAILED, Verdict.UNUSED)

    def scoped(self, judged_by_scope: bool) -> bool:
        """A change a scope may allow, and one outside every scope violates isolation: a changed cell; and
        against a base revision (a PR's gate) a new cell or a removed golden too."""
        return self is Verdict.CHANGED or (judged_by_scope and self in (Verdict.NEW, Verdict.UNUSED))

    @property
    def regression(self) -> bool:
        """A regression whatever the scope, where the scope does not judge it (exit 1)."""
        return self in (Verdict.NEW, Verdict.UNUSED, Verdict.EXPECT_FAILED, Verdict.CANNOT_LAUNCH)


SAME, CHANGED, NEW, UNUSED = Verdict.SAME, Verdict.CHANGED, Verdict.NEW, Verdict.UNUSED
ERROR, EXPECT_FAILED, CANNOT_LAUNCH = Verdict.ERROR, Verdict.EXPECT_FAILED, Verdict.CANNOT_LAUNCH
RESOURCE_DELTA_KEYS = COMPARED_RESOURCES      # a change of one of them alone is a changed cell


@dataclass(frozen=True)
class Scope:
    target: str
    kernel: str = "*"
    case: str = "*"

    @classmethod
    def parse(cls, text: str) -> "Scope":
        parts = text.split(":")
        if len(parts) > 3 or not all(parts):
            raise GoldenError(f"scope {text!r} is not TARGET[:KERNEL[:CASE]]", field="--scope",
                              fix="e.g. --scope 'gfx11*' or --scope gfx942:sparse_mla")
        return cls(*parts)

    def covers(self, kernel: str, case: str, target: str) -> bool:
        return (fnmatch.fnmatchcase(target, self.target) and fnmatch.fnmatchcase(kernel, self.kernel)
                and fnmatch.fnmatchcase(case, self.case))


def check_scopes(scopes: list[str], *, targets: list[str], cases: dict[str, list[str]]) -> list[Scope]:
    """Each --scope parsed, and refused when a part matches nothing the project knows (a typo would
    otherwise allow nothing and say so nowhere): `cases` maps each kernel to its case names."""
    parsed = []
    for text in scopes:
        scope = Scope.parse(text)
        parsed.append(scope)
        kernels = [k for k in sorted(cases) if fnmatch.fnmatchcase(k, scope.kernel)]
        if not any(fnmatch.fnmatchcase(t, scope.target) for t in targets):
            part, known, what = scope.target, sorted(targets), "target"
        elif not kernels:
            part, known, what = scope.kernel, sorted(cases), "kernel"
        elif not any(fnmatch.fnmatchcase(c, scope.case) for k in kernels for c in cases[k]):
            part, known, what = scope.case, sorted({c for k in kernels for c in cases[k]}), f"case of {', '.join(kernels)}"
        else:
            continue
        near = closest(part, known)
        if what == "target" and text == scope.target and any(fnmatch.fnmatchcase(k, text) for k in cases):
            near = f"*:{text}"    # a kernel's name alone: the first part of a scope is always the target
        raise UsageError(f"scope {text!r}: {part!r} matches no {what}", field="--scope",
                         fix=f"did you mean {near!r}?" if near else "see `xisa kernels` and `xisa targets`")
    return parsed


@dataclass
class Delta:
    instructions: tuple[int, int]
    histogram: list[tuple[str, int, int]]            # (mnemonic, base, head), largest change first
    resources: dict[str, tuple[Any, Any]]
    # (field, base, head) for each launch fact that differs: `signature.x_ptr`, `constexprs.BLOCK`,
    # `attrs.x_ptr`, `options.num_warps`; a value absent on one side is None.
    binding: list[tuple[str, Any, Any]] = field(default_factory=list)
    # The loops whose counts differ (`xisa.analyze.loops`), found only for a cell whose stream changed.
    loops: list[LoopChange] = field(default_factory=list)
    # The keys of the cell's record that differ (`record.cell_differences`): any one makes the cell changed.
    fields: list[str] = field(default_factory=list)
    # The parts of the code object whose digests differ (`codeobject.changed_sections`: sections, `(header)`).
    code_sections: list[str] = field(default_factory=list)

    def unseen_change(self) -> str:
        """What changed that the instruction stream does not show, in words ("" when the stream changed)."""
        if "sha256" in self.fields:
            return ""
        if self.code_sections or "code_sha256" in self.fields:
            where = f" ({', '.join(self.code_sections)})" if self.code_sections else ""
            return f"the printed stream is the same, the code bytes are not{where}"
        if self.binding:
            return "the printed stream is the same, the launch is not (" + ", ".join(
                f"{k}: {b!r} -> {h!r}" for k, b, h in self.binding) + ")"
        return f"the printed stream is the same, the record is not ({', '.join(self.fields)})"

    @property
    def binding_changed(self) -> bool:
        return bool(self.binding)


@dataclass
class CellVerdict(NamedByCell):
    kernel: str
    case: str
    target: str
    verdict: Verdict
    in_scope: bool = False
    message: str = ""
    golden_file: str = ""
    head: CellResult | None = None
    base: Golden | None = None
    delta: Delta | None = None
    expectations: list[Failure] = field(default_factory=list)
    # Against a base revision (a PR's gate) a new cell or a removed golden is a change like any other,
    # allowed inside the scope; against a tree's own goldens it is always a regression (bless it).
    judged_by_scope: bool = False
    # A changed cell's two compiles stage by stage: where the change started (`stage_attribution`).
    stages: StageAttribution | None = None
    # A changed cell's instruction changes by kernel source line, edited lines first (`source_line_changes`);
    # None where a side has no source-line table (a golden blessed before xisa recorded them).
    lines: list[LineChange] | None = None
    # Why a changed cell's review shows no stream diff, loops or source lines, and how to get them (a compact
    # golden whose stream this machine never compiled: `Golden.missing_material`); None where nothing is missing.
    review_note: str | None = None

    @property
    def violates_isolation(self) -> bool:
        return Verdict(self.verdict).scoped(self.judged_by_scope) and not self.in_scope

    @property
    def is_regression(self) -> bool:
        verdict = Verdict(self.verdict)
        return not self.in_scope if verdict.scoped(self.judged_by_scope) else verdict.regression

    @property
    def launch(self):
        """The head's `Launch` (whether a workgroup fits the target), None where nothing compiled."""
        return self.head.launch if self.head is not None else None


@dataclass
class CheckReport:
    """Every cell's verdict and what the run was judged against; its JSON is `xisa.golden.report_json`'s."""

    kind: ClassVar[str] = "check"              # the report's kind: its JSON's `kind`, its renderers' key
    verdicts: list[CellVerdict]
    toolchain: dict[str, str]
    golden_toolchains: dict[str, list[str]]     # triton version -> golden files made with it
    scopes: list[str]
    problems: list[str] = field(default_factory=list)   # whole-run reasons not to trust the result
    shard: tuple[int, int] | None = None
    base: dict[str, Any] | None = None                  # the revision a PR gate judged against (xisa.golden.gate)
    stale_goldens: list[CellVerdict] = field(default_factory=list)   # head goldens the head compile disagrees with
    selection: dict[str, Any] | None = None   # what the run covers (xisa.golden.selection), for `xisa merge`

    @property
    def isolation_violations(self) -> list[CellVerdict]:
        return [v for v in self.verdicts if v.violates_isolation]

    @property
    def exit_code(self) -> int:
        if self.problems or any(v.verdict == ERROR for v in (*self.verdicts, *self.stale_goldens)):
            return EXIT_UNTRUSTED
        if any(v.is_regression for v in self.verdicts) or self.stale_goldens:
            return EXIT_REGRESSION
        return EXIT_OK

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for v in self.verdicts:
            counts[v.verdict] = counts.get(v.verdict, 0) + 1
        return dict(sorted(counts.items()))


def compute_delta(base: dict[str, Any], head_result: CellResult) -> Delta:
    head = head_result.analysis
    assert head is not None
    names = set(base["histogram"]) | set(head.histogram)
    hist = [(m, int(base["histogram"].get(m, 0)), int(head.histogram.get(m, 0))) for m in names]
    hist = [row for row in hist if row[1] != row[2]]
    hist.sort(key=lambda row: (-abs(row[2] - row[1]), row[0]))
    resources = {}
    for key in RESOURCE_DELTA_KEYS:
        b, h = base["resources"].get(key), head.resources.get(key)
        if b != h and (b is not None or h is not None):
            resources[key] = (b, h)
    return Delta(instructions=(base["instructions"], head.instructions), histogram=hist, resources=resources,
                 binding=binding_differences(base, head_result), fields=cell_differences(base, head_result),
                 code_sections=changed_sections(dict(base.get("code_sections") or {}), head.code_sections))


def stage_attribution(base: dict[str, Any], head_result: CellResult) -> StageAttribution:
    """Which stage a golden (`base`, its data) and a compile first differ at, in the backend's stage order."""
    head = head_result.analysis
    assert head is not None
    return StageAttribution(base=dict(base.get("stages") or {}), head=dict(head.stages),
                            order=backend_of_isa(head.isa).fingerprinted_stages)


def source_line_changes(golden: Golden, head_result: CellResult) -> list[LineChange] | None:
    """A golden's and a compile's instruction changes by source line (`line_changes`' order); None when either
    has no source-line table, or the golden's is malformed or does not add up to its instructions (hand-edited,
    another analyzer's: a side table, never compared, so not an error; `bless` rewrites it)."""
    head = head_result.analysis
    assert head is not None
    try:
        base_lines = golden.source_lines()
    except GoldenError:
        return None
    if not base_lines or not head.lines or total(base_lines) != golden.data["instructions"]:
        return None
    handler = backend_of_isa(head.isa)
    return line_changes(list(base_lines), list(head.lines),
                        is_filler=lambda mnemonic: handler.classify(mnemonic) in handler.filler_classes)


def changed_loops(golden: Golden, head_result: CellResult) -> list[LoopChange]:
    """The loops that differ between a golden's stream and a compile's. A stream text that is no stream
    (written by hand, not by xisa: its sha256 was checked against the golden's) has no loops to show;
    the verdict does not depend on them."""
    head = head_result.analysis
    assert head is not None
    try:
        return loop_changes(analysis_loops(golden.analysis()), analysis_loops(head), backend_of_isa(head.isa))
    except ParseError:
        return []


BINDING_SECTIONS = ("signature", "constexprs", "attrs")


def binding_differences(base: dict[str, Any], head_result: CellResult) -> list[tuple[str, Any, Any]]:
    """What a launch would bind differently: signature, constexprs, attrs, then launch options."""
    pairs = [(section, (base.get("binding") or {}).get(section) or {}, head_result.binding.get(section) or {})
             for section in BINDING_SECTIONS]
    pairs.append(("options", base.get("options") or {}, head_result.options or {}))
    changes = []
    for section, old, new in pairs:
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                changes.append((f"{section}.{key}", old.get(key), new.get(key)))
    return changes


def matches_filters(kernel: str, case: str, target: str, targets: set[str], kernel_filters: list[str] | None) -> bool:
    """Whether a (kernel, case, target) lies inside a selection: used to find unused goldens."""
    return target in targets and (not kernel_filters or any(matches_kernel_filter(f, kernel, case)
                                                            for f in kernel_filters))


def other_analyzer(golden: Golden) -> int | None:
    """The version of xisa's analyzer that made `golden`, when it is not this one (None: this one)."""
    made_by = golden.data.get("analyzer", 1)
    return made_by if made_by != ANALYZER_VERSION else None


def judge_cell(result: CellResult, entry: GoldenEntry, *, failures: list[Failure], in_scope: bool,
               launches: bool = True, owner: str = "") -> CellVerdict:
    """One cell's compile against its golden (`entry`: the golden, none, or why it cannot be read). No I/O but
    a compact golden's stream and lines, looked up when the cell changed. `launches=False` compares with the
    golden only (no `cannot-launch` verdict); `owner` names the revision the golden was read from."""
    verdict = CellVerdict(kernel=result.kernel, case=result.case, target=result.target, verdict=SAME,
                          golden_file=entry.display, head=result, in_scope=in_scope, base=entry.golden)
    golden = entry.golden
    if entry.error is not None:
        verdict.verdict, verdict.message = ERROR, f"corrupt golden: {entry.error}"
        return verdict
    if not result.ok:
        verdict.verdict, verdict.message = ERROR, result.error or "compile failed"
        return verdict
    if golden is not None and other_analyzer(golden) is not None:
        # Counted or normalized another way: a difference would not be a kernel change. Not
        # compared; the one line in the report's `problems` says why and what to do.
        verdict.verdict = ERROR
        return verdict
    verdict.expectations = failures
    if golden is None:
        verdict.verdict, verdict.message = NEW, "no golden (run `xisa bless` to record it)"
    else:
        _compare(verdict, golden, result, owner=owner)
    if verdict.expectations:
        verdict.verdict = EXPECT_FAILED
        verdict.message = "; ".join(str(f) for f in verdict.expectations)
    if launches and result.launch is not None and result.launch.unexpected:
        # Whatever its code did, the cell would not run there: that is said first.
        verdict.verdict = CANNOT_LAUNCH
        verdict.message = "; ".join([f"cannot launch: {result.launch.reason()}",
                                     *(str(f) for f in verdict.expectations)])
    return verdict


def _compare(verdict: CellVerdict, golden: Golden, result: CellResult, *, owner: str = "") -> None:
    """A compile against its golden: changed when any field of the cell's record differs, with what explains it."""
    delta = compute_delta(golden.data, result)
    if not delta.fields:
        return
    verdict.verdict, verdict.delta = CHANGED, delta
    verdict.message = "changed in scope" if verdict.in_scope else "changed outside the declared scope"
    unseen = delta.unseen_change()
    if unseen:
        verdict.message += f": {unseen}"
    verdict.stages = stage_attribution(golden.data, result)
    if "sha256" in delta.fields and golden.review_stream():
        delta.loops = changed_loops(golden, result)
    verdict.lines = source_line_changes(golden, result)
    missing = golden.missing_material() if golden.compact else None
    if missing:
        revision = owner or "HEAD"
        verdict.review_note = (f"{missing}; the verdict stands on the counts and fingerprints; for the stream diff, "
                               f"loops and lines: `xisa diff --base {revision} --compile-base`")


def unused_goldens(goldens: GoldenSet, seen: set[tuple[str, str, str]], *, selected_targets: set[str],
                   kernel_filters: list[str] | None, shard: tuple[int, int] | None,
                   shard_plan: ShardPlan | None = None) -> list[CellVerdict]:
    """The goldens inside the selection (and shard: `shard_plan`'s, else the cell-hash split) that no cell has."""
    unused = []
    plan = shard_plan or (ShardPlan(count=shard[1]) if shard is not None else None)
    for key in goldens.keys():
        if key in seen or not matches_filters(*key, selected_targets, kernel_filters):
            continue
        if shard is not None and plan.shard_of(str(CellKey(*key))) != shard[0] - 1:   # type: ignore[union-attr]
            continue
        unused.append(CellVerdict(kernel=key[0], case=key[1], target=key[2], verdict=UNUSED,
                                  golden_file=goldens.display(key),
                                  message="golden with no cell (run `xisa bless` to remove it)"))
    return unused


def golden_problems(golden_toolchains: dict[str, list[str]], golden_analyzers: dict[int, list[str]], *,
                    installed: str | None, owner: str) -> list[str]:
    """Why goldens cannot be compared with this compile: made with another Triton, or by another analyzer."""
    problems = []
    others = {v: files for v, files in golden_toolchains.items() if v != installed}
    if others:
        version, files = next(iter(sorted(others.items())))
        problems.append(f"goldens were made with Triton {version} ({len(files)} files, e.g. {files[0]}) but Triton "
                        f"{installed} is installed: fingerprints cannot be compared (fix: install triton=={version} "
                        f"or re-bless with {installed})")
    for version in sorted(golden_analyzers):
        if owner:
            problems.append(f"the goldens of {owner} were made by xisa's analyzer {version}, this xisa is "
                            f"{ANALYZER_VERSION}: they cannot be compared with this compile (fix: judge against "
                            f"{owner} compiled by this xisa, --compile-base)")
        else:
            problems.append(f"goldens were made by xisa's analyzer {version}, this xisa is {ANALYZER_VERSION}: "
                            "re-bless with `xisa bless`")
    return problems


def build_report(results: list[CellResult], failures: dict[str, list[Failure]], *, goldens: GoldenSet,
                 selected_targets: set[str], kernel_filters: list[str] | None, scopes: list[str],
                 toolchain: dict[str, str], shard: tuple[int, int] | None = None,
                 selection: dict[str, Any] | None = None, launches: bool = True,
                 shard_plan: ShardPlan | None = None) -> CheckReport:
    """Every result against its golden in `goldens` (read beforehand), and the goldens of the selection no
    cell has. No I/O. `launches=False` compares with the goldens only (no `cannot-launch` verdict)."""
    parsed_scopes = [Scope.parse(s) for s in scopes]
    verdicts: list[CellVerdict] = []
    golden_toolchains: dict[str, list[str]] = {}
    golden_analyzers: dict[int, list[str]] = {}   # analyzer version -> golden files made by another one
    for result in results:
        key = (result.kernel, result.case, result.target)
        entry = goldens.entry(key)
        verdict = judge_cell(result, entry, failures=failures.get(result.id, []), launches=launches,
                             in_scope=any(s.covers(*key) for s in parsed_scopes), owner=goldens.owner)
        verdicts.append(verdict)
        if entry.golden is not None:
            golden_toolchains.setdefault(entry.golden.toolchain.get("triton", "?"), []).append(entry.display)
            if result.ok and other_analyzer(entry.golden) is not None:
                golden_analyzers.setdefault(other_analyzer(entry.golden), []).append(entry.display)
    seen = {(r.kernel, r.case, r.target) for r in results}
    verdicts += unused_goldens(goldens, seen, selected_targets=selected_targets, kernel_filters=kernel_filters,
                               shard=shard, shard_plan=shard_plan)
    problems = golden_problems(golden_toolchains, golden_analyzers, installed=toolchain.get("triton"),
                               owner=goldens.owner)
    verdicts.sort(key=lambda v: (v.target, v.kernel, v.case))
    return CheckReport(verdicts=verdicts, toolchain=toolchain, golden_toolchains=golden_toolchains, scopes=scopes,
                       problems=problems, shard=shard, selection=selection)
