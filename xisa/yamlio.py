"""Strict YAML in (safe loader, duplicate keys refused) and canonical YAML out (no aliases, sorted keys)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from xisa.errors import XisaError


# libyaml's parser when PyYAML has it (goldens are read by the hundred); constructors stay the safe ones.
_SafeBase = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_SafeBase):
    """A safe loader that refuses duplicate mapping keys instead of keeping the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    mapping: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in mapping:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (line {mark.line + 1})", mark
            )
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _CanonicalDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:  # aliases make goldens unreadable in review
        return True


def _str_presenter(dumper: yaml.SafeDumper, data: str):
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_CanonicalDumper.add_representer(str, _str_presenter)


def parse_yaml(text: str, *, path: str, error: type[XisaError]) -> Any:
    """Parse YAML text; any problem becomes `error` naming the file and line."""
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip(" ")
        if stripped.startswith("\t"):
            raise error(f"line {lineno} is indented with a tab", path=path, fix="indent with spaces")
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - strict subclass of (C)SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"invalid YAML: {where}{problem}", path=path, fix="correct the YAML syntax") from None


def load_yaml(path: Path, *, error: type[XisaError], display: str | None = None) -> Any:
    shown = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error("file not found", path=shown) from None
    except UnicodeDecodeError:
        raise error("not UTF-8 text", path=shown, fix="save the file as UTF-8") from None
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror}", path=shown) from None
    return parse_yaml(text, path=shown, error=error)


def dump_yaml(data: Any) -> str:
    text = yaml.dump(
        data,
        Dumper=_CanonicalDumper,
        sort_keys=True,
        default_flow_style=False,
        allow_unicode=False,
        width=100,
        line_break="\n",
    )
    return text if text.endswith("\n") else text + "\n"
