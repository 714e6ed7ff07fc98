"""Accept the current compile as the goldens of a selection. Never in CI; never a half-written file."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

from xisa.errors import GoldenError, UsageError
from xisa.golden.material import MaterialStore, lines_digest
from xisa.golden.record import Golden
from xisa.golden.store import (golden_lock, golden_paths, list_goldens, read_golden, recover_pending, remove_golden,
                         render_golden, write_golden)
from xisa.compile.worker.result import CellResult
from xisa.names import display_path
from xisa.golden.verdict import matches_filters


@dataclass
class BlessOutcome:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    skipped_errors: list[str] = field(default_factory=list)
    # `--record-stages`: goldens given stage fingerprints and source lines (their cell unchanged), and the cells it left
    # alone because they changed, are new, or their golden is unused (a plain bless would write them).
    stages_recorded: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    # Goldens of unchanged cells rewritten in the project's layout (`golden_layout`): the same record and
    # fingerprints, the stream and source lines kept in the file or named by fingerprint.
    migrated: list[str] = field(default_factory=list)


def refuse_in_ci(environ: dict[str, str] | None = None) -> None:
    env = os.environ if environ is None else environ
    if env.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        raise UsageError("refusing to write goldens: the CI variable is set, and CI never writes",
                         field="CI", fix="run `xisa bless` locally and commit the goldens")


# Older xisa kept its lock as a file in the golden folder, where it got committed; the lock is now
# the folder itself, so a leftover file of that name is removed by the next bless.
OLD_LOCK_FILE = ".xisa.lock"


def bless(results: list[CellResult], *, golden_dir: Path, display_root: Path, toolchains: dict[str, dict[str, str]],
          stream_files: bool, selected_targets: set[str], kernel_filters: list[str] | None,
          lock_timeout: float = 30.0, record_stages: bool = False, layout: str = "full",
          material: MaterialStore | None = None) -> BlessOutcome:
    """Write the goldens of `results`. `toolchains` maps each target to the toolchain facts of its backend
    (`describe_toolchain(backends={backend})`): a golden records those and nothing about the command or
    the other targets blessed with it, so an unchanged cell is never rewritten.

    A golden's stage fingerprints (`stages:`) and source-line table (`lines:`) do not make its cell changed: a
    golden that differs from the compile in them alone (a source line moved) is left as it is (an old golden
    without them too). `record_stages` writes the current ones into exactly those goldens and touches nothing
    else: no changed, new or unused cell is blessed.

    `layout` is the layout written ("compact" or "full"); an unchanged cell's golden in the other layout is
    rewritten in this one with the same record, stage fingerprints and source lines (`migrated`), and its
    stream and lines go to `material`, so this machine's review keeps them."""
    refuse_in_ci()
    outcome = BlessOutcome()

    def show(path: Path) -> str:
        return display_path(path, display_root)

    try:
        with golden_lock(golden_dir, timeout=lock_timeout):
            _bless_locked(results, outcome, show, golden_dir=golden_dir, toolchains=toolchains,
                          stream_files=stream_files, selected_targets=selected_targets, kernel_filters=kernel_filters,
                          record_stages=record_stages, layout=layout, material=material)
    except OSError as exc:  # a full disk, a read-only or non-folder golden path: every golden stays old or new
        where = show(Path(exc.filename)) if exc.filename else show(golden_dir)
        reason = ("a regular file is in the way of a folder" if exc.errno in (errno.EEXIST, errno.ENOTDIR)
                  else exc.strerror or str(exc))
        raise GoldenError(f"cannot write goldens: {reason} ({len(outcome.written) + len(outcome.migrated)} written "
                          "before the failure, every other golden left as it was)", path=where,
                          fix="free disk space or fix the folder's permissions, then run `xisa bless` again") from None
    return outcome


def _as_it_is(result: CellResult, golden: Golden, *, toolchain: dict[str, str], stream_files: bool,
              layout: str) -> str:
    """The golden `result` gets in `layout` with the golden's own stage fingerprints and source lines (or their
    absence) kept: equal to the golden's text exactly when its cell is unchanged and it is in `layout` already."""
    stages = golden.data.get("stages") or {}
    if layout == "compact":
        digest = golden.data.get("lines_sha256") if golden.compact else \
            (lines_digest(golden.source_lines() or []) if golden.source_lines() else "")
        return render_golden(result, toolchain=toolchain, stream_file=False, layout=layout, stages=stages,
                             lines_sha256=digest or "")[0]
    return render_golden(result, toolchain=toolchain, stream_file=stream_files, layout=layout, stages=stages,
                         lines=golden.source_lines() or [])[0]


def _bless_one(result: CellResult, outcome: BlessOutcome, show, *, golden_dir: Path, toolchain: dict[str, str],
               stream_files: bool, record_stages: bool, layout: str, material: MaterialStore | None) -> None:
    yaml_path, stream_path = golden_paths(golden_dir, result.kernel, result.case, result.target)
    yaml_text, stream_text = render_golden(result, toolchain=toolchain, stream_file=stream_files, layout=layout)
    unchanged_cell = migrating = False
    golden: Golden | None = None
    if yaml_path.exists():
        try:
            current = yaml_path.read_text(encoding="utf-8")
            golden = read_golden(yaml_path, stream_path, display=show(yaml_path),  # corrupt ones get rewritten
                                 material=material)
            # Byte for byte, the golden's own stage fingerprints (or their absence) kept: a golden in an
            # older layout (with the bless command) is rewritten once.
            kept = _as_it_is(result, golden, toolchain=toolchain, stream_files=stream_files, layout=layout)
            unchanged_cell = current == kept and (stream_text is not None) == stream_path.exists()
            if not unchanged_cell and golden.compact != (layout == "compact"):
                # The same cell in its own layout: only the layout differs.
                migrating = current == _as_it_is(result, golden, toolchain=toolchain,
                                                 stream_files=bool(golden.data.get("stream")),
                                                 layout="compact" if golden.compact else "full")
        except (OSError, GoldenError):
            pass
    if unchanged_cell and not (record_stages and current != yaml_text):
        outcome.unchanged.append(show(yaml_path))
        return
    if migrating and golden is not None and not record_stages:
        # The same cell in the other layout: rewritten with the golden's own side tables, its material kept here.
        _keep_material(golden, material)
        write_golden(yaml_path, stream_path, kept, stream_text if layout == "full" else None)
        outcome.migrated.append(show(yaml_path))
        return
    if record_stages and not unchanged_cell:
        outcome.left.append(result.id)
        return
    write_golden(yaml_path, stream_path, yaml_text, stream_text)
    if material is not None and result.analysis is not None and result.analysis.lines:
        material.put_lines(result.analysis.lines)   # the table its `lines_sha256` names, for this machine's reviews
    (outcome.stages_recorded if record_stages else outcome.written).append(show(yaml_path))


def _keep_material(golden: Golden, material: MaterialStore | None) -> None:
    """A full golden's stream and source lines into the material store, before its stream file goes."""
    if material is None:
        return
    stream, rows = golden.review_stream(), golden.source_lines()
    if stream:
        material.put_stream(stream)
    if rows:
        material.put_lines(rows)


def _bless_locked(results: list[CellResult], outcome: BlessOutcome, show, *, golden_dir: Path,
                  toolchains: dict[str, dict[str, str]], stream_files: bool, selected_targets: set[str],
                  kernel_filters: list[str] | None, record_stages: bool, layout: str,
                  material: MaterialStore | None) -> None:
    outcome.recovered = [show(p) for p in recover_pending(golden_dir)]
    old_lock = golden_dir / OLD_LOCK_FILE
    if old_lock.is_file() and not old_lock.is_symlink():
        old_lock.unlink()
        outcome.removed.append(show(old_lock))
    seen = set()
    for result in results:
        seen.add((result.kernel, result.case, result.target))
        if not result.ok:
            outcome.skipped_errors.append(result.id)
            continue
        _bless_one(result, outcome, show, golden_dir=golden_dir, toolchain=toolchains[result.target],
                   stream_files=stream_files, record_stages=record_stages, layout=layout, material=material)
    # Unused goldens go only when the selection is complete: every selected cell compiled.
    if not outcome.skipped_errors and not record_stages:
        for key in list_goldens(golden_dir):
            if key in seen or not matches_filters(*key, selected_targets, kernel_filters):
                continue
            yaml_path, stream_path = golden_paths(golden_dir, *key)
            remove_golden(yaml_path, stream_path)
            outcome.removed.append(show(yaml_path))
