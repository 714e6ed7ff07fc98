"""What loading a kernel module costs that is a function of source text alone, kept across runs (issue 24, item 1).

A library whose `__init__` imports every op (fla: ~250 modules, ~340 kernels) is loaded whole by a worker's first
load after any edit in it: every module is compiled from its source (`loader.from_source` never trusts a
__pycache__ entry, whose check is an mtime and a size) and every `@triton.jit` asks `inspect.getsourcelines`, which
tokenizes its function. Both answers depend on the text they are given and on the interpreter alone, so they are
kept here by the SHA-256 of exactly that: a module's code object by its path (the code's `co_filename`), its source
bytes, the interpreter's bytecode magic and optimization level; a function's source block by the lines it was given
and the interpreter's version. An edit changes the text and so the key: never trusted by a time or a size.

Entries are `cache.EntryStore` files (`loads/<xx>/<key>.json`), bounded with the rest of the cache. A code object
is marshalled, as a .pyc holds it; the cache folder is private to its user (`cache.check_private`), as it must be
for results too. `--no-cache` writes entries and reads none.
"""

from __future__ import annotations

import base64
import marshal
import types
from pathlib import Path

from xisa.compile.incremental.cache import LOADS, EntryStore
from xisa.compile.incremental.keys import load_block_key, load_code_key


class LoadStore:
    """Code objects by source text, and `inspect.getblock` answers by lines, in memory for the process and on disk."""

    def __init__(self, cache_dir: Path | None, *, lookup: bool = True):
        self.entries = EntryStore(cache_dir / LOADS) if cache_dir is not None else None
        self.lookup = lookup
        self._codes: dict[str, types.CodeType] = {}
        self._blocks: dict[str, int] = {}

    def code(self, path: str, data: bytes, compile_source) -> types.CodeType:
        """`compile_source(data, path)`'s code object, compiled once per text."""
        key = load_code_key(path, data)
        code = self._codes.get(key)
        if code is None:
            code = self._read_code(key)
            if code is None:
                code = compile_source(data, path)
                self._write(key, {"code": base64.b64encode(marshal.dumps(code)).decode("ascii")})
            self._codes[key] = code
        return code

    def block_length(self, lines: list[str], getblock) -> int:
        """How many of `lines` `getblock(lines)` answers (it answers a prefix: the function's block)."""
        key = load_block_key(lines)
        length = self._blocks.get(key)
        if length is None:
            length = self._read_length(key)
            if length is None:
                length = len(getblock(lines))
                self._write(key, {"lines": length})
            self._blocks[key] = length
        return length

    def _read_code(self, key: str) -> types.CodeType | None:
        body = self._read(key)
        try:
            code = marshal.loads(base64.b64decode(body["code"], validate=True)) if body is not None else None
        except (KeyError, TypeError, ValueError, EOFError):
            return None   # corrupt: compile again
        return code if isinstance(code, types.CodeType) else None

    def _read_length(self, key: str) -> int | None:
        body = self._read(key)
        length = body.get("lines") if body is not None else None
        return length if isinstance(length, int) and not isinstance(length, bool) and length >= 0 else None

    def _read(self, key: str) -> dict | None:
        return self.entries.read(key) if self.entries is not None and self.lookup else None

    def _write(self, key: str, body: dict) -> None:
        if self.entries is not None:
            self.entries.write(key, body)

