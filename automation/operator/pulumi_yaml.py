"""How Pulumi YAML reads a Program's values, as strictly as its parser (pulumi-yaml pkg/pulumiyaml/ast:
interpolation.go, property.go, expr.go; its behaviour since v1.0, rebuilt from it): what a value in a Program
means. `escaped` writes any value so that this reading gives it back unchanged; `references` is what a Program
reads (the export checks every one is declared); tests read exported Programs back with `literal`.

- A string is an interpolation: `$$` is one literal `$`, `${` starts a property access that ends at `}`
  (`name`, `.name`, `["quoted \\" key"]`, `[0]`), and every other character is itself. A string with no
  access is the literal text with `$$` read as `$`.
- An object's keys are parsed the same way (they are expressions too).
- A one-key object whose key is a built-in (`Fn::Invoke`, `Fn::ReadFile`, `Fn::StackReference`, ...) is a
  function call, and a key naming an asset or archive (`Fn::StringAsset`, ...) makes one; every other `Fn::` key
  is reserved (a warning).

`literal(value)` is the value as a Program would use it when it holds no expression, and raises `Expression`
naming the first interpolation or function it finds; `Malformed` is what the parser itself refuses.
"""

from __future__ import annotations

BUILTINS = frozenset({"Fn::Invoke", "Fn::Join", "Fn::ToJSON", "Fn::ToBase64", "Fn::FromBase64", "Fn::Select",
                      "Fn::Split", "Fn::StackReference", "Fn::AssetArchive", "Fn::Secret", "Fn::ReadFile"})
ASSETS = frozenset({"Fn::StringAsset", "Fn::FileAsset", "Fn::RemoteAsset", "Fn::FileArchive", "Fn::RemoteArchive"})


class Malformed(ValueError):
    """The parser's own diagnostics (an unterminated interpolation, a bad index)."""


class Expression(ValueError):
    """The value is not a literal: it reads configuration, a resource, another stack or a file."""


def parse_interpolation(value: str) -> list[tuple[str, list | None]]:
    """The parts of a string: (literal text before, the property access or None for trailing text). Read from left
    to right as the parser reads it, jumping from one `$` to the next (a Program holds strings of megabytes: CRDs,
    config files)."""
    parts: list[tuple[str, list | None]] = []
    text: list[str] = []
    i, end = 0, len(value)
    while i < end:
        dollar = value.find("$", i)
        if dollar == -1:
            text.append(value[i:])
            break
        text.append(value[i:dollar])
        if value.startswith("$$", dollar):
            text.append("$")
            i = dollar + 2
        elif value.startswith("${", dollar):
            i, access = _property_access(value, dollar + 2)
            parts.append(("".join(text), access))
            text = []
        else:
            text.append("$")
            i = dollar + 1
    trailing = "".join(text)
    if trailing:
        parts.append((trailing, None))
    return parts


def _property_access(value: str, start: int) -> tuple[int, list]:
    """The accessors of the access starting at `value[start]` (after its `${`), and where the text after its `}`
    starts."""
    accessors: list = []
    i, end = start, len(value)
    while i < end:
        head = value[i]
        if head == "}":
            return i + 1, accessors
        if head == ".":
            i += 1
        elif head == "[":
            if i + 1 < end and value[i + 1] == '"':
                key, i = [], i + 2
                while True:
                    if i >= end:
                        raise Malformed("missing closing quote in property name")
                    if value[i] == '"':
                        i += 1
                        break
                    if value[i] == "\\" and i + 1 < end and value[i + 1] == '"':
                        key.append('"')
                        i += 2
                    else:
                        key.append(value[i])
                        i += 1
                if i >= end or value[i] != "]":
                    raise Malformed("missing closing bracket in property access")
                accessors.append("".join(key))
                i += 1
            else:
                close = value.find("]", i)
                if close == -1:
                    raise Malformed("missing closing bracket in list index")
                try:
                    index = int(value[i + 1:close], 10)
                except ValueError:
                    raise Malformed("invalid list index") from None
                if not accessors:
                    raise Malformed("the root property must be a string subscript or a name")
                accessors.append(index)
                i = close + 1
        else:
            name = i
            while i < end and value[i] not in ".[}":
                i += 1
            accessors.append(value[name:i])
    raise Malformed("unterminated interpolation")


def literal_string(value: str) -> str:
    parts = parse_interpolation(value)
    accesses = [access for _, access in parts if access is not None]
    if accesses:
        raise Expression(f"{value!r} interpolates {accesses[0]!r}")
    return "".join(text for text, _ in parts)


def literal(value):
    if isinstance(value, str):
        return literal_string(value)
    if isinstance(value, list):
        return [literal(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)) in BUILTINS:
            raise Expression(f"{next(iter(value))} is a function call")
        out = {}
        for key, item in value.items():
            key = literal_string(key) if isinstance(key, str) else key
            if key in ASSETS:  # matched on the key as read (`$$` already one `$`), unlike a built-in's raw key
                raise Expression(f"{key} makes an asset")
            out[key] = literal(item)
        return out
    return value


RESERVED = "Fn::"  # a key with this prefix is a function, an asset or reserved: it cannot be written as a literal


class NotLiteral(ValueError):
    """A value that no escaping can make literal (a key starting `Fn::`)."""


_SCALARS = (int, float, bool, type(None))  # written as they are


def escaped(value):
    """`value` as a Program must hold it to mean exactly `value`: every `$` doubled (`$$` reads as `$`, so no `${`
    is left to start an access), in keys too, which are expressions as well. A `Fn::` key would be read as a
    built-in (Fn::ReadFile, Fn::StackReference, ...) whatever is done to it, so it is refused. (Leaves are handled
    in their container's loop: a Program holds millions of them at fleet scale.)"""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, list):
        return [item.replace("$", "$$") if type(item) is str else item if type(item) in _SCALARS else escaped(item)
                for item in value]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if isinstance(key, str):
                if key.startswith(RESERVED):
                    raise NotLiteral(f"the key {key[:80]!r}: Pulumi YAML reads a key starting {RESERVED!r} as a "
                                     "function, so it cannot be written into a Program")
                key = key.replace("$", "$$")
            kind = type(item)
            out[key] = item.replace("$", "$$") if kind is str else item if kind in _SCALARS else escaped(item)
        return out
    return value


def references(value) -> set[str]:
    """The root names a value's interpolations read (`${name.outputs["x"]}` reads `name`); raises Malformed."""
    found: set[str] = set()
    _references(value, found)
    return found


def _references(value, found: set[str]) -> None:
    if isinstance(value, str):
        if "$" in value:  # most strings: nothing to read
            found.update(str(access[0]) for _, access in parse_interpolation(value) if access)
    elif isinstance(value, list):
        for item in value:
            if type(item) is not str or "$" in item:
                _references(item, found)
    elif isinstance(value, dict):
        for key, item in value.items():
            if type(key) is not str or "$" in key:
                _references(key, found)
            if type(item) is not str or "$" in item:
                _references(item, found)
