"""Strict YAML in (safe loader, duplicate keys refused, aliases bounded) and canonical YAML out (no aliases,
sorted keys)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from xisa.errors import XisaError


# libyaml's parser when PyYAML has it (goldens are read by the hundred); constructors stay the safe ones.
_SafeBase = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# Aliases are shared, not copied, while loading, but a spec's values are later copied and serialized
# (cache keys, reports), so a few hundred bytes of nested aliases ("billion laughs") would become
# gigabytes. Real specs and goldens expand to a few thousand nodes at most.
MAX_EXPANDED_NODES = 100_000

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(_SafeBase):
    """A safe loader that refuses duplicate mapping keys instead of keeping the last one."""


def _merge_sources(key_node: yaml.Node, value_node: yaml.Node) -> list[yaml.MappingNode]:
    """The mappings a `<<` key merges, highest priority first (YAML 1.1: `<<: *a` or `<<: [*a, *b]`)."""
    sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
    if not all(isinstance(source, yaml.MappingNode) for source in sources):
        mark = key_node.start_mark
        raise yaml.constructor.ConstructorError(
            None, None, f"a merge key `<<` takes a mapping or a list of mappings (line {mark.line + 1})", mark)
    return sources


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    """A mapping whose own keys must be unique. `<<` merge keys fill in the keys it does not set (YAML 1.1:
    the mapping's own keys win, then the merged mappings in the order given), merged keys first as PyYAML does."""
    own: dict = {}
    merged: list[dict] | None = None
    for key_node, value_node in node.value:
        mark = key_node.start_mark
        if key_node.tag == "tag:yaml.org,2002:value":  # a plain `=` key is the string "=" (as PyYAML reads it)
            key_node.tag = "tag:yaml.org,2002:str"
        if key_node.tag == _MERGE_TAG:
            if merged is not None:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key '<<' (line {mark.line + 1})", mark)
            merged = [loader.construct_object(source, deep=True) for source in _merge_sources(key_node, value_node)]
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in own
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, f"a mapping key must be a plain value, not {type(key).__name__} (line {mark.line + 1})",
                mark) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r} (line {mark.line + 1})", mark)
        own[key] = loader.construct_object(value_node, deep=deep)
    if not merged:
        return own
    mapping: dict = {}
    for source in merged:
        for key, value in source.items():
            mapping.setdefault(key, value)
    mapping.update(own)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _expanded_size(root: yaml.Node) -> int | None:
    """How many nodes the document has with every alias written out; None when a node contains itself.
    Each distinct node is visited once (sizes are memoized), so this is cheap however large the answer."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(child)] for child in _children(node))
            continue
        if key in size:
            continue
        if key in on_path:
            return None
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in on_path:
                return None
            if id(child) not in size:
                stack.append((child, False))
    return size[id(root)]


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
    loader = _StrictLoader(text)  # a strict subclass of (C)SafeLoader: no Python tags
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        # No anchor, no alias: the document is no larger than its text (and goldens, read by the hundred, skip this).
        expanded = _expanded_size(node) if "&" in text else 0
        if expanded is None:
            raise error("invalid YAML: an alias refers to the value that contains it", path=path,
                        fix="write the value out instead of the recursive alias")
        if expanded > MAX_EXPANDED_NODES:
            raise error(f"its aliases expand to more than {MAX_EXPANDED_NODES} YAML values (nested aliases?)",
                        path=path, fix="write the values out, or use fewer nested aliases")
        return loader.construct_document(node)
    except RecursionError:
        raise error("invalid YAML: nested too deeply", path=path, fix="flatten the structure") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"invalid YAML: {where}{problem}", path=path, fix="correct the YAML syntax") from None
    finally:
        loader.dispose()


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
