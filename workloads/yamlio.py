"""Plain YAML out: no &anchors, keys in the order objects were built."""

from __future__ import annotations

import re
from functools import lru_cache

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

_TAG = "tag:yaml.org,2002:"
_RESOLVER = yaml.resolver.Resolver()


class _NoAliases(yaml.SafeDumper):
    """An object that appears twice is written twice, never as an &anchor (readers and diffs stay simple).
    A string of several lines (a config file in a ConfigMap) is a literal block, as people write it."""

    def ignore_aliases(self, data) -> bool:
        return True

    def represent_str(self, data):
        return self.represent_scalar(_TAG + "str", data, style="|" if "\n" in data else None)


_NoAliases.add_representer(str, _NoAliases.represent_str)


_WIDTH = 2**31 - 1  # lines are never folded: libyaml and PyYAML fold quoted strings differently


def dump(obj) -> str:
    return yaml.dump(obj, Dumper=_NoAliases, sort_keys=False, width=_WIDTH)



@lru_cache(maxsize=1 << 16)
def _scalar_tag(value: str, implicit: tuple[bool, bool]) -> str:
    return _RESOLVER.resolve(ScalarNode, value, implicit)


class _FastNoAliases(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """The same YAML as `_NoAliases` for plain data (dicts, lists, strings, numbers, booleans, null), written by
    libyaml's emitter, with the nodes built directly and each scalar's implicit tag looked up once: about 1.3x faster
    than libyaml behind PyYAML's generic representer, and 7x faster than the pure-Python emitter."""

    def ignore_aliases(self, data) -> bool:
        return True

    def resolve(self, kind, value, implicit):
        if kind is ScalarNode:
            return _scalar_tag(value, implicit)
        return super().resolve(kind, value, implicit)

    def represent_data(self, data):
        kind = type(data)
        if kind is str:
            return ScalarNode(_TAG + "str", data, style="|" if "\n" in data else None)
        if kind is dict:
            node = self.represent_data
            return MappingNode(_TAG + "map", [(node(k), node(v)) for k, v in data.items()], flow_style=False)
        if kind is list:
            node = self.represent_data
            return SequenceNode(_TAG + "seq", [node(v) for v in data], flow_style=False)
        if kind is bool:
            return ScalarNode(_TAG + "bool", "true" if data else "false")
        if kind is int:
            return ScalarNode(_TAG + "int", str(data))
        if data is None:
            return ScalarNode(_TAG + "null", "null")
        return super().represent_data(data)


def _libyaml(obj) -> str:
    return yaml.dump(obj, Dumper=_FastNoAliases, sort_keys=False, width=_WIDTH)


def dump_fast(obj) -> str:
    """The same text as `dump` (tests hold them to it on generated fleets and on random data), 20x faster.

    Kubernetes objects are block mappings and sequences of a few thousand distinct scalars. Their layout is
    written here; each distinct scalar is written once by libyaml (whose quoting and block-literal rules are
    the reference's; keys by the reference itself) and its text reused. Anything else (a keep-chomped literal,
    which ends the document with `...`; a key written as a complex key; a type of value other than JSON's) is
    written by the reference whole."""
    if type(obj) is not dict or not obj:
        return dump(obj)
    out: list[str] = []
    try:
        _mapping(obj, 0, out, None)
    except _Unusual:
        return dump(obj)
    return "".join(out)


class _Unusual(Exception):
    """Something the layout here does not write as libyaml would: libyaml writes the whole object."""


def _mapping(data: dict, indent: int, out: list[str], first: str | None) -> None:
    """`first`: what starts the first key's line (a sequence item's dash), else the indent."""
    pad = " " * indent
    start = pad if first is None else first
    append, keys, strings = out.append, _KEYS.get, _STRINGS.get
    for key, value in data.items():
        if type(key) is not str:
            raise _Unusual
        kind = type(value)
        if kind is str:  # most values: looked up in the strings' cache directly
            head, body = strings(value) or _string(value)
            append(f"{start}{keys(key) or _key(key)}: {head}\n")
            if body:
                _body(body, indent, out)
        elif kind is dict and value:
            append(f"{start}{keys(key) or _key(key)}:\n")
            _mapping(value, indent + 2, out, None)
        elif kind is list and value:
            append(f"{start}{keys(key) or _key(key)}:\n")
            _sequence(value, indent, out, None)  # a sequence in a mapping is not indented, as libyaml writes it
        else:
            head, body = _scalar(value)
            append(f"{start}{keys(key) or _key(key)}: {head}\n")
            if body:
                _body(body, indent, out)
        start = pad


def _sequence(items: list, indent: int, out: list[str], first: str | None) -> None:
    dash = " " * indent + "- "
    start = dash if first is None else first + "- "
    append, strings = out.append, _STRINGS.get
    for item in items:
        kind = type(item)
        if kind is dict and item:
            _mapping(item, indent + 2, out, start)
        elif kind is list and item:
            _sequence(item, indent + 2, out, start)
        else:
            head, body = (strings(item) or _string(item)) if kind is str else _scalar(item)
            append(f"{start}{head}\n")
            if body:
                _body(body, indent, out)
        start = dash


def _body(lines: tuple[str, ...], indent: int, out: list[str]) -> None:
    """A block literal's lines, written 2 deeper than its parent (as libyaml wrote them); blank lines stay blank."""
    pad = " " * indent
    for line in lines:
        out.append(f"{pad}{line}\n" if line else "\n")


def _scalar(value) -> tuple[str, tuple[str, ...]]:
    kind = type(value)
    if kind is str:
        return _string(value)
    if kind is bool:
        return ("true" if value else "false"), ()
    if kind is int:
        return str(value), ()
    if value is None:
        return "null", ()
    if kind is float:
        return _string_of(value)
    if kind is dict and not value:
        return "{}", ()
    if kind is list and not value:
        return "[]", ()
    raise _Unusual


# A word of letters, digits and `._/=-` (and `:` inside), starting with a letter or digit after at most a `/` or
# two dashes (a path, a command-line flag `--pool-name=x`): libyaml writes it plain wherever it stands, unless it
# would read back as something else (yes, 1e3, -1, 2026-12-01), which the resolver says. Three dashes start a
# document, and one dash before a space a sequence item, so neither is a word here.
_PLAIN_WORD = re.compile(r"(?:/|--?)?[A-Za-z0-9](?:[A-Za-z0-9._/=:-]*[A-Za-z0-9._/=-])?\Z")


# Each distinct key's and string's text, as written: plain dicts, read inline by the writer (a bounded lru_cache's
# call was a tenth of writing 43,820 objects). A process that writes for long forgets them all at the limit.
_REMEMBERED = 1 << 16
_KEYS: dict[str, str] = {}
_STRINGS: dict[str, tuple[str, tuple[str, ...]]] = {}


def _remember(cache: dict, value: str, text):
    if len(cache) >= _REMEMBERED:
        cache.clear()
    cache[value] = text
    return text


def _string(value: str) -> tuple[str, tuple[str, ...]]:
    found = _STRINGS.get(value)
    if found is not None:
        return found
    if _PLAIN_WORD.match(value) and _scalar_tag(value, (True, False)) == _TAG + "str":
        return _remember(_STRINGS, value, (value, ()))  # names, images, paths: most scalars, without asking libyaml
    return _remember(_STRINGS, value, _string_of(value))


def _string_of(value) -> tuple[str, tuple[str, ...]]:
    """How libyaml writes the scalar as a block sequence's item: the text after `- `, and a literal's lines."""
    lines = _libyaml([value]).split("\n")[:-1]
    if lines[-1] == "..." or not lines[0].startswith("- "):
        raise _Unusual
    return lines[0][2:], tuple(lines[1:])


def _key(key: str) -> str:
    found = _KEYS.get(key)
    return found if found is not None else _remember(_KEYS, key, _key_text(key))


def _key_text(key: str) -> str:
    if len(key) < 120 and _PLAIN_WORD.match(key) and _scalar_tag(key, (True, False)) == _TAG + "str":
        return key  # a plain word well within the 128 characters of a simple key: written as it is (Programs have 100,000s)
    text = dump({key: None})  # the pure-Python writer: libyaml writes an empty key as a simple key, it does not
    if text.startswith("? ") or not text.endswith(": null\n") or text.count("\n") != 1:
        raise _Unusual
    return text[:-len(": null\n")]
