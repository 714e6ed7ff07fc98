"""Capture over specs that exist already: which launches are cases already, and the new ones appended as text.

The rule (README, "Capture"):
- The file capture would write must be this kernel's: the same `source:` (or `module:`) and `function:`
  as capture writes; another kernel's file of that name is a one-line error (`--spec-name`, `--out`).
- A launch is *the same* as an existing case when that case compiles what the launch compiled: equal
  `args`, `constexprs`, `options`, `config` and `heuristics` on every target of the project, after
  `defaults`, `matrix`, `config: all` and `overrides` are merged (`cases.case_values`). Names, comments,
  `expect`, `targets`, `description` do not count. A case whose values were edited by hand no longer
  compiles that launch, so a later capture adds the launch again, as a new case.
- New launches are appended at the end of the `cases:` list, named `launch<N>` after the highest such
  name; nothing else in the file changes: every line around them stays byte for byte (comments, hand-added
  expectations, a target removed by hand). No existing case is ever changed or removed.
- When the file's `defaults:` would change what a new launch compiles (a default value the launch did not
  set), capture refuses in one line: appending the case would compile another launch than the program's.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import yaml

from xisa.errors import SpecError
from xisa.spec.cases import ConfigLister, case_values, spec_from_data

IDENTITY_MODULE = "xisa_capture_identity"   # stands in for `source:` while values are compared: nothing is imported
LAUNCH_NAME = re.compile(r"^launch(\d+)$")


def parse_existing(text: str, *, shown: str) -> dict:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"invalid YAML: {str(exc).splitlines()[0]}", path=shown,
                        fix="repair the file, or capture into another folder (--out DIR)") from None
    if not isinstance(data, dict):
        raise SpecError("is not a spec (a mapping with `cases:`)", path=shown, fix="capture into another folder (--out DIR)")
    return data


def check_same_kernel(data: dict, *, key: str, where: str, function: str, shown: str) -> None:
    """The existing file names the kernel capture would name: the same source/module and function."""
    theirs = ("source", data["source"]) if "source" in data else ("module", data.get("module"))
    if theirs != (key, where) or data.get("function") != function:
        raise SpecError(f"a spec of that name already exists for another kernel ({theirs[0]}: {theirs[1]}, function: "
                        f"{data.get('function')}; capture has {key}: {where}, function: {function})", path=shown,
                        fix="capture into another folder (--out DIR), or rename the kernel (--spec-name FUNCTION=NEW_NAME)")


def _values_only(data: dict, cases: list, *, keep_defaults: bool) -> dict:
    """A copy of a spec's data that loads without its source file: only what decides the cases' values."""
    loaded = {"name": data.get("name", "captured"), "module": IDENTITY_MODULE, "function": data.get("function", "f"),
              "cases": copy.deepcopy(cases)}
    if keep_defaults and "defaults" in data:
        loaded["defaults"] = copy.deepcopy(data["defaults"])
    return loaded


def identities(data: dict, spec_file: Path, *, shown: str, target_names: list[str], keep_defaults: bool = True,
               list_configs: ConfigLister | None = None) -> list[str]:
    """Each case's identity (after matrix and `config: all` expansion): what it compiles on every target."""
    spec = spec_from_data(_values_only(data, data.get("cases") or [], keep_defaults=keep_defaults), spec_file,
                          shown=shown, list_configs=list_configs)
    return [json.dumps([[name, case_values(case, name)] for name in target_names], sort_keys=True, default=repr)
            for case in spec.cases]


def launch_identity(block: list[str], data: dict | None, spec_file: Path, *, shown: str, target_names: list[str],
                    keep_defaults: bool) -> str:
    """The identity of one rendered case block, alone or under the existing file's `defaults`."""
    probe = dict(data or {}, cases=yaml.safe_load("\n".join(line[2:] for line in block)))
    (identity,) = identities(probe, spec_file, shown=shown, target_names=target_names, keep_defaults=keep_defaults)
    return identity


def defaults_change(block: list[str], data: dict, spec_file: Path, *, shown: str, target_names: list[str],
                    case: str) -> None:
    """Refuse a new case that the file's `defaults:` would compile differently from its launch."""
    if "defaults" not in data:
        return
    alone = launch_identity(block, data, spec_file, shown=shown, target_names=target_names, keep_defaults=False)
    merged = launch_identity(block, data, spec_file, shown=shown, target_names=target_names, keep_defaults=True)
    if alone != merged:
        raise SpecError(f"the file's defaults would change what the captured launch {case} compiles (a value the "
                        "launch did not set)", path=shown, field="defaults",
                        fix="move that value from `defaults:` into the cases that need it, or capture into another "
                            "folder (--out DIR)")


def next_names(data: dict | None, count: int) -> list[str]:
    """`launch<N>` names after the highest one the file uses."""
    used = [int(m.group(1)) for case in (data or {}).get("cases") or [] if isinstance(case, dict)
            for m in [LAUNCH_NAME.match(str(case.get("name", "")))] if m]
    start = max(used, default=0) + 1
    return [f"launch{index}" for index in range(start, start + count)]


def append_cases(text: str, blocks: list[list[str]], *, shown: str) -> str:
    """`text` with the case blocks (rendered at two spaces: `  - name: ...`) appended after its last case,
    re-indented to the list's own indentation; every other line unchanged."""
    root = yaml.compose(text)
    cases = next((value for key, value in root.value if key.value == "cases"), None)
    if not isinstance(cases, yaml.SequenceNode) or cases.flow_style or not cases.value:
        raise SpecError("`cases:` is not a block list (`- name: ...` lines): capture cannot add cases without "
                        "rewriting it", path=shown, field="cases",
                        fix="write `cases:` as a block list, or capture into another folder (--out DIR)")
    lines = text.splitlines(keepends=True)
    first = cases.value[0]
    content = first.start_mark.column
    dash = lines[first.start_mark.line].rfind("-", 0, content)
    if dash < 0:
        raise SpecError("cannot tell where the cases' `-` items start", path=shown, field="cases",
                        fix="capture into another folder (--out DIR)")
    last = _last_line(cases.value[-1])
    if not lines[last].endswith("\n"):
        lines[last] += "\n"
    added = [_reindent(line, dash=dash, content=content) + "\n" for block in blocks for line in block]
    return "".join(lines[:last + 1] + added + lines[last + 1:])


def _reindent(line: str, *, dash: int, content: int) -> str:
    """A rendered line (item dash at column 2, contents from column 4) at the list's own columns."""
    if line.startswith("  - "):
        return " " * dash + "-" + " " * (content - dash - 1) + line[4:]
    return " " * content + line[4:] if line.startswith("    ") else line


def _last_line(node: Any) -> int:
    """The last line a node's own text is on (a block collection's end mark is the next token's start)."""
    if isinstance(node, yaml.ScalarNode):
        end = node.end_mark
        return end.line - 1 if end.column == 0 and end.line > node.start_mark.line else end.line
    if getattr(node, "flow_style", False):
        return node.end_mark.line
    children = node.value if isinstance(node, yaml.SequenceNode) else [part for pair in node.value for part in pair]
    return max((_last_line(child) for child in children), default=node.start_mark.line)
