"""Golden files: one YAML per (kernel, case, target) and the normalized stream beside it.

Canonical YAML (sorted keys, no aliases, LF, no timestamps, no absolute paths), written through a
temp file in the same folder and `os.replace`. A corrupt or hand-broken golden is an error, never
silently regenerated. Layout: golden/<kernel>/<case>/<target>.yaml and <target>.isa

golden/ holds no links: git stores symlinks, so a pull request can plant one that leads outside the
project, and nothing here reads, writes or deletes through one (each is refused, naming the link).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xisa.analyze.model import Analysis
from xisa.errors import GoldenError, LockError
from xisa.fsio import refuse_link, write_temp
from xisa.names import CASE_NAME, KERNEL_NAME, TARGET_NAME, is_valid_name
from xisa.compile.result import CellResult
from xisa.yamlio import dump_yaml, parse_yaml

FORMAT = "xisa-golden/1"
# `generated_by` (the bless command) is no longer written: a golden is a function of its cell's result
# alone. Goldens that still carry it are read as before.
_REQUIRED = {"format": str, "toolchain": dict, "kernel": str, "case": str, "target": str,
             "binding": dict, "options": dict, "sha256": str, "instructions": int, "blocks": int, "isa": str,
             "histogram": dict, "base_histogram": dict, "classes": dict, "resources": dict}
_CONFLICT = re.compile(r"^(<{7}|={7}|>{7})( |$)", re.MULTILINE)
# The top-level `lines:` key and its block (items `- ` at column 0, their fields indented), as `dump_yaml` writes it.
_LINES_BLOCK = re.compile(r"^lines:.*\n(?:[ -].*\n)*", re.MULTILINE)
PENDING_SUFFIX = ".pending"


@dataclass
class Golden:
    path: Path
    data: dict[str, Any]              # everything but the source-line table
    stream_text: str | None
    # The `lines:` block's YAML text, parsed only when asked (`source_lines`): a changed cell's attribution
    # and bless need it, a byte-identical check does not, and parsing it would double a warm check's reads.
    lines_text: str | None = None
    display: str = ""
    _lines: list[dict[str, Any]] | None = field(default=None, repr=False)

    @property
    def toolchain(self) -> dict[str, str]:
        return self.data["toolchain"]

    def source_lines(self) -> list[dict[str, Any]] | None:
        """The golden's source-line table (`lines:`), or None when it has none (blessed before xisa recorded
        them). A malformed table is this golden's error."""
        if self._lines is None and self.lines_text is not None:
            rows = parse_yaml(self.lines_text, path=self.display, error=GoldenError).get("lines")
            if not _valid_lines(rows):
                raise GoldenError("not a list of source lines (loc, text, count, histogram: the histogram adding up "
                                  "to the count) (hand-edited?)", path=self.display, field="lines",
                                  fix="restore it from git, or delete the `lines:` block (it is optional)")
            self._lines = rows
        return self._lines

    def analysis(self) -> Analysis:
        return Analysis.from_record(self.data, self.stream_text or "")


def golden_paths(golden_dir: Path, kernel: str, case: str, target: str) -> tuple[Path, Path]:
    """The YAML and stream paths of a cell's golden; refused when a name cannot be a path or a link is on the way."""
    for kind, value, pattern in (("kernel", kernel, KERNEL_NAME), ("case", case, CASE_NAME),
                                 ("target", target, TARGET_NAME)):
        if not is_valid_name(value, pattern):
            raise GoldenError(f"{kind} name {value!r} cannot become a path", field=kind)
    folder = golden_dir / kernel / case
    yaml_path, stream_path = folder / f"{target}.yaml", folder / f"{target}.isa"
    for path in (golden_dir, folder.parent, folder, yaml_path, stream_path, _pending(yaml_path)):
        refuse_link(path)
    return yaml_path, stream_path


def _pending(yaml_path: Path) -> Path:
    return yaml_path.with_name(yaml_path.name + PENDING_SUFFIX)


# The keys of a golden that are not its cell's compile result: the layout (`format`, `stream`), the toolchain (judged
# on its own: another toolchain is an untrusted run, not a changed cell) and the side tables that explain a change
# without deciding one (`stages`, `lines`). Every other key is the cell: if it differs, bless would rewrite the
# golden, so check may not call the cell the same (`cell_differences`).
NOT_THE_CELL = frozenset({"format", "toolchain", "stream", "stages", "lines", "generated_by"})


def cell_record(result: CellResult) -> dict[str, Any]:
    """What a golden of `result` records about the cell itself: the golden's data minus `NOT_THE_CELL`, with
    values as its YAML reads back (lists, not tuples)."""
    return {k: _as_read_back(v) for k, v in _cell_fields(result).items() if k not in NOT_THE_CELL}


def _cell_fields(result: CellResult) -> dict[str, Any]:
    analysis = result.analysis
    assert analysis is not None
    return {"kernel": result.kernel, "case": result.case, "target": result.target,
            "binding": result.binding, "options": result.options, **analysis.to_record()}


def _as_read_back(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_as_read_back(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _as_read_back(v) for k, v in value.items()}
    return value


def cell_differences(golden_data: Mapping[str, Any], result: CellResult) -> list[str]:
    """The keys of the cell's record in which a golden and a compile differ (sorted): empty exactly when bless would
    leave the golden's cell as it is."""
    head = cell_record(result)
    base = {k: v for k, v in golden_data.items() if k not in NOT_THE_CELL}
    return sorted(k for k in set(head) | set(base) if head.get(k) != base.get(k))


def render_golden(result: CellResult, *, toolchain: dict[str, str], stream_file: bool,
                  stages: Mapping[str, str] | None = None,
                  lines: list[Mapping[str, Any]] | None = None) -> tuple[str, str | None]:
    """The golden's text: a function of the cell's result and the toolchain facts of its backend only
    (`describe_toolchain(backends={backend})`), so re-blessing an unchanged cell changes no byte.
    `stages`: the stage fingerprints to write instead of the result's (`{}`: none, as a golden made
    before xisa recorded them), so `bless` can tell whether a golden differs in anything else; `lines` the same
    for the source-line table (`[]`: none)."""
    analysis = result.analysis
    assert analysis is not None
    record = _cell_fields(result)
    record.pop("stages", None)
    record.pop("lines", None)
    stages = analysis.stages if stages is None else stages
    if stages:
        record["stages"] = dict(stages)
    lines = analysis.lines if lines is None else lines
    if lines:
        record["lines"] = [dict(row) for row in lines]
    data = {"format": FORMAT, "toolchain": dict(toolchain), **record,
            "stream": f"{result.target}.isa" if stream_file else None}
    return dump_yaml(data), analysis.stream_text if stream_file else None


def read_golden(path: Path, stream_path: Path, *, display: str) -> Golden:
    """Read and validate a golden. A bless killed between its two renames left the new YAML as
    `<name>.pending` beside a new stream: that pair is read as the new golden (and `bless` finishes it)."""
    pending = _pending(path)
    if os.path.lexists(pending):
        try:
            return _read_golden(pending, stream_path, display=display)
        except GoldenError:
            pass
    return _read_golden(path, stream_path, display=display)


def _read_golden(path: Path, stream_path: Path, *, display: str) -> Golden:
    refuse_link(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise GoldenError("not UTF-8 text: corrupt golden", path=display, fix="restore it from git or re-bless") from None
    except OSError as exc:
        raise GoldenError(f"cannot read: {exc.strerror}", path=display) from None
    conflict = _CONFLICT.search(text)
    if conflict:
        line = text.count("\n", 0, conflict.start()) + 1
        raise GoldenError(f"merge conflict markers at line {line}", path=display,
                          fix="resolve the conflict, or run `xisa bless` for this cell and review the result")
    blocks = _LINES_BLOCK.findall(text)
    if len(blocks) > 1:
        raise GoldenError("duplicate key `lines`", path=display, field="lines", fix="restore it from git or re-bless")
    lines_text = blocks[0] if blocks else None
    data = parse_yaml(_LINES_BLOCK.sub("", text) if blocks else text, path=display, error=GoldenError)
    if not isinstance(data, dict):
        raise GoldenError("not a golden mapping (truncated or hand-edited?)", path=display, fix="restore it or re-bless")
    if data.get("format") != FORMAT:
        raise GoldenError(f"format {data.get('format')!r} is not {FORMAT!r}", path=display, field="format",
                          fix="re-bless with this xisa version")
    for key, kind in _REQUIRED.items():
        value = data.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise GoldenError(f"missing or not a {kind.__name__} (truncated or hand-edited?)", path=display,
                              field=key, fix="restore it from git or re-bless")
    if not re.fullmatch(r"[0-9a-f]{64}", data["sha256"]):
        raise GoldenError("not a SHA-256", path=display, field="sha256")
    # Absent in goldens of analyzer 1: `check` reports those as made by another analyzer.
    if data.get("code_sha256") is not None and not re.fullmatch(r"[0-9a-f]{64}", str(data["code_sha256"])):
        raise GoldenError("not a SHA-256", path=display, field="code_sha256")
    sections = data.get("code_sections")   # absent in goldens of analyzer 1 and 2
    if sections is not None and not (isinstance(sections, dict) and all(
            isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[0-9a-f]+", v) for k, v in sections.items())):
        raise GoldenError("not a mapping of code-object sections to digests (hand-edited?)", path=display,
                          field="code_sections", fix="restore it from git or re-bless")
    analyzer = data.get("analyzer", 1)
    if not isinstance(analyzer, int) or isinstance(analyzer, bool) or analyzer < 1:
        raise GoldenError("not a positive integer (hand-edited?)", path=display, field="analyzer",
                          fix="restore it from git or re-bless")
    stages = data.get("stages")   # absent in goldens blessed before xisa recorded stage fingerprints
    if stages is not None and not (isinstance(stages, dict) and stages and all(
            isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) for k, v in stages.items())):
        raise GoldenError("not a mapping of stage names to SHA-256 fingerprints (hand-edited?)", path=display,
                          field="stages", fix="restore it from git, or delete the `stages:` block (it is optional)")
    if sum(v for v in data["histogram"].values() if isinstance(v, int)) != data["instructions"]:
        raise GoldenError("histogram does not add up to `instructions` (hand-edited?)", path=display,
                          field="histogram", fix="restore it from git or re-bless")
    stream_text = None
    if data.get("stream"):
        stream_display = str(Path(display).with_name(stream_path.name))
        refuse_link(stream_path)
        try:
            stream_text = stream_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise GoldenError("stream file is missing", path=stream_display, fix="restore it or re-bless") from None
        except (OSError, UnicodeDecodeError):
            raise GoldenError("stream file cannot be read", path=stream_display) from None
        if hashlib.sha256(stream_text.encode("utf-8")).hexdigest() != data["sha256"]:
            raise GoldenError(f"stream file disagrees with the SHA-256 in {Path(display).name}", path=stream_display,
                              fix="restore both files from git or re-bless")
    return Golden(path=path, data=data, stream_text=stream_text, lines_text=lines_text, display=display)


def _valid_lines(rows: Any) -> bool:
    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    return isinstance(rows, list) and all(
        isinstance(row, dict) and isinstance(row.get("loc"), str) and isinstance(row.get("text"), str)
        and count(row.get("count")) and isinstance(row.get("histogram"), dict)
        and all(isinstance(k, str) and count(v) for k, v in row["histogram"].items())
        and sum(row["histogram"].values()) == row["count"] for row in rows
    )


_TOOLCHAIN_BLOCK = re.compile(r"^toolchain:\n((?:  [a-z_]+: .*\n)+)", re.MULTILINE)


def read_golden_toolchain(path: Path) -> dict[str, str] | None:
    """The `toolchain` of a golden, read without parsing the whole file (a check reads it for every cell
    before compiling, and a full parse of 120 goldens costs more than a warm check); None when the
    golden cannot be read or has none, which its full read then reports."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    block = _TOOLCHAIN_BLOCK.search(text)
    try:
        data = parse_yaml(block.group(0) if block else text, path=str(path), error=GoldenError)
    except GoldenError:
        return None
    toolchain = data.get("toolchain") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in toolchain.items()} if isinstance(toolchain, dict) else None


def _golden_files(golden_dir: Path) -> Iterator[Path]:
    """Every file in golden/<kernel>/<case>/, sorted. A link anywhere on the way is refused, never followed:
    a kernel folder linked outside the project would otherwise be listed, its files removed as unused."""
    refuse_link(golden_dir)
    if not golden_dir.is_dir():
        return
    for kernel_dir in sorted(golden_dir.iterdir()):
        refuse_link(kernel_dir)
        if not kernel_dir.is_dir():
            continue
        for case_dir in sorted(kernel_dir.iterdir()):
            refuse_link(case_dir)
            if not case_dir.is_dir():
                continue
            for path in sorted(case_dir.iterdir()):
                refuse_link(path)
                yield path


def list_goldens(golden_dir: Path) -> list[tuple[str, str, str]]:
    """(kernel, case, target) of every golden YAML on disk."""
    return [(path.parent.parent.name, path.parent.name, path.stem) for path in _golden_files(golden_dir)
            if path.suffix == ".yaml" and path.is_file()]


def golden_set_digest(golden_dir: Path) -> str:
    """SHA-256 over every golden's YAML and stream (relative path and bytes): which goldens a check compared with."""
    digest = hashlib.sha256()
    for path in _golden_files(golden_dir):
        if path.suffix in (".yaml", ".isa") and path.is_file():
            relative = path.relative_to(golden_dir).as_posix()
            digest.update(f"{relative}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()


def pending_files(golden_dir: Path) -> list[Path]:
    return [path for path in _golden_files(golden_dir) if path.name.endswith(PENDING_SUFFIX)]


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT/SIGTERM/SIGHUP wait until a golden's two files are both replaced."""
    if hasattr(signal, "pthread_sigmask"):
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
    else:  # pragma: no cover
        yield


def write_golden(yaml_path: Path, stream_path: Path, yaml_text: str, stream_text: str | None) -> None:
    """Replace a golden atomically. The new YAML waits as `<name>.pending` until the stream is in place,
    so even a SIGKILL between the two renames leaves something `recover_pending` completes."""
    yaml_path.parent.mkdir(parents=True, exist_ok=True)
    pending = _pending(yaml_path)
    tmp_yaml = tmp_stream = None
    try:
        tmp_yaml = write_temp(yaml_path, yaml_text, mode=0o666, fsync=True)
        tmp_stream = write_temp(stream_path, stream_text, mode=0o666, fsync=True) if stream_text is not None else None
        with _signals_deferred():
            os.replace(tmp_yaml, pending)
            try:
                if tmp_stream is not None:
                    os.replace(tmp_stream, stream_path)
                elif stream_path.exists():
                    stream_path.unlink()
            except BaseException:  # the old stream is still there: the new YAML must not be finished later
                with contextlib.suppress(OSError):
                    pending.unlink()
                raise
            os.replace(pending, yaml_path)
            _fsync_dir(yaml_path.parent)
    finally:
        for leftover in (tmp_yaml, tmp_stream):
            if leftover is not None and leftover.exists():
                leftover.unlink()


def remove_golden(yaml_path: Path, stream_path: Path) -> None:
    with _signals_deferred():
        for path in (yaml_path, stream_path):
            if path.exists():
                path.unlink()
        for folder in (yaml_path.parent, yaml_path.parent.parent):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty


def recover_pending(golden_dir: Path) -> list[Path]:
    """Finish a bless that was killed between a golden's renames; drop stray temp files."""
    finished = []
    for pending in pending_files(golden_dir):
        target = pending.with_name(pending.name[: -len(PENDING_SUFFIX)])
        os.replace(pending, target)
        finished.append(target)
    for tmp in _golden_files(golden_dir):
        if tmp.name.startswith(".") and tmp.name.endswith(".tmp"):
            tmp.unlink()
    return finished


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def golden_lock(golden_dir: Path, *, timeout: float = 30.0) -> Iterator[None]:
    """Serialize writers of one golden folder (two `bless` runs at once).

    The lock is the folder itself (flock on its descriptor), not a file inside it, so nothing that
    could be committed is ever left in the golden folder, and two checkouts never share a lock."""
    refuse_link(golden_dir)
    golden_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(golden_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise LockError(f"another xisa bless is writing this golden folder for more than {timeout:g} s",
                                    path=str(golden_dir), fix="wait for it to finish, or stop it") from None
                time.sleep(0.1)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
