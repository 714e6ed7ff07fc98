"""Which function renders which report in which format: one table keyed by (report kind, format).

A report's kind is its class's `kind` (`check` for `xisa check`, `check --base` and `diff`; `ab` for `xisa ab`);
a format is a `--format` value. Every renderer takes the report and the same keyword arguments and returns
the text; `xisa.cli.check.emit_report` looks it up here and writes it where it is asked to.
"""

from __future__ import annotations

from io import StringIO
from typing import Callable

from rich.console import Console

from xisa.golden.ab import AbReport
from xisa.golden.report_json import report_text
from xisa.golden.verdict import CheckReport
from xisa.render.comment import MARKDOWN_MAX_CHARS, bounded_markdown
from xisa.render.review import render_check_text, render_junit

Renderer = Callable[..., str]     # (report, *, counts, title, quiet, accept, max_chars) -> text


def _text(report: CheckReport, *, counts: list[str], title: str, quiet: bool, accept: list[str] | None,
          max_chars: int) -> str:
    """Plain text for a file: as on a terminal, without colour, 200 columns wide."""
    buffer = StringIO()
    render_check_text(Console(file=buffer, width=200, no_color=True), report, counts=counts, quiet=quiet, accept=accept)
    return buffer.getvalue()


def _json(report: CheckReport, *, counts: list[str], title: str, quiet: bool, accept: list[str] | None,
          max_chars: int) -> str:
    return report_text(report, accept=accept)


def _markdown(report: CheckReport, *, counts: list[str], title: str, quiet: bool, accept: list[str] | None,
              max_chars: int) -> str:
    """The PR comment: never over `max_chars` (GitHub refuses a comment over 65,536 characters)."""
    return bounded_markdown(report, counts=counts, title=title, accept=accept, max_chars=max_chars)


def _junit(report: CheckReport, *, counts: list[str], title: str, quiet: bool, accept: list[str] | None,
           max_chars: int) -> str:
    return render_junit(report)


RENDERERS: dict[tuple[str, str], Renderer] = {
    (kind, fmt): renderer
    for kind in (CheckReport.kind, AbReport.kind)
    for fmt, renderer in (("text", _text), ("json", _json), ("markdown", _markdown), ("junit", _junit))
}


def render_report(report: CheckReport, fmt: str, *, counts: list[str], title: str, quiet: bool,
                  accept: list[str] | None = None, max_chars: int = MARKDOWN_MAX_CHARS) -> str:
    """The report in `fmt` (a `--format` value), as text; markdown held to `max_chars` characters."""
    return RENDERERS[(report.kind, fmt)](report, counts=counts, title=title, quiet=quiet, accept=accept,
                                         max_chars=max_chars)
