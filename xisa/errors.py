"""Typed domain errors. The CLI turns each into one line on stderr and an exit code."""

from __future__ import annotations

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_UNTRUSTED = 2


class XisaError(Exception):
    """Base of every error xisa reports to a user. `str()` is the one-line message."""

    exit_code = EXIT_UNTRUSTED

    def __init__(self, message: str, *, path: str | None = None, field: str | None = None, fix: str | None = None):
        self.path = path
        self.field = field
        self.fix = fix
        self.detail = message
        super().__init__(message)

    def __str__(self) -> str:
        where = ""
        if self.path:
            where = f"{self.path}"
            if self.field:
                where += f": {self.field}"
            where += ": "
        elif self.field:
            where = f"{self.field}: "
        text = f"{where}{self.detail}"
        if self.fix:
            text += f" (fix: {self.fix})"
        return text


class SpecError(XisaError):
    """A kernel spec (YAML) or project setting is wrong."""


class TargetError(XisaError):
    """A target file is wrong or a target name is unknown."""


class ToolchainError(XisaError):
    """The installed toolchain or environment cannot give trustworthy results."""


class GoldenError(XisaError):
    """A golden file is corrupt, hand-broken or of another format."""


class BindError(XisaError):
    """A case's arguments do not fit the kernel's parameters."""


class HeuristicError(BindError):
    """A kernel's @triton.heuristics cannot compute, on a case's arguments, what its captured launch computed: it
    fails on them, or gives another value (`error_kind` "heuristic": capture's own compile reports these)."""


class ParseError(XisaError):
    """Assembly could not be parsed; names the line."""


class UsageError(XisaError):
    """The command line asks for something impossible."""


class LockError(XisaError):
    """Another xisa process holds the golden lock."""


def interrupted(exc: BaseException) -> bool:
    """Whether `exc` is Ctrl-C, also as the cause of another error: one that lands in a class's creation comes out
    as `RuntimeError: Error calling __set_name__ ...` (a dataclass's fields), its cause the KeyboardInterrupt."""
    return in_chain(exc, KeyboardInterrupt) is not None


def in_chain(exc: BaseException | None, kind: type) -> BaseException | None:
    """The first exception of `kind` in `exc`, its cause or context, and theirs (a loop in the chain ends it)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None
