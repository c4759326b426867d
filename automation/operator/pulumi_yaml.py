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
    """The parts of a string: (literal text before, the property access or None for trailing text)."""
    parts: list[tuple[str, list | None]] = []
    text: list[str] = []
    while value:
        if value.startswith("$$"):
            text.append("$")
            value = value[2:]
        elif value.startswith("${"):
            value, access = _property_access(value[2:])
            parts.append(("".join(text), access))
            text = []
        else:
            text.append(value[0])
            value = value[1:]
    if text:
        parts.append(("".join(text), None))
    return parts


def _property_access(access: str) -> tuple[str, list]:
    accessors: list = []
    while access:
        head = access[0]
        if head == "}":
            return access[1:], accessors
        if head == ".":
            access = access[1:]
        elif head == "[":
            if len(access) > 1 and access[1] == '"':
                key, i = [], 2
                while True:
                    if i >= len(access):
                        raise Malformed("missing closing quote in property name")
                    if access[i] == '"':
                        i += 1
                        break
                    if access[i] == "\\" and i + 1 < len(access) and access[i + 1] == '"':
                        key.append('"')
                        i += 2
                    else:
                        key.append(access[i])
                        i += 1
                if i >= len(access) or access[i] != "]":
                    raise Malformed("missing closing bracket in property access")
                accessors.append("".join(key))
                access = access[i + 1:]
            else:
                close = access.find("]")
                if close == -1:
                    raise Malformed("missing closing bracket in list index")
                try:
                    index = int(access[1:close], 10)
                except ValueError:
                    raise Malformed("invalid list index") from None
                if not accessors:
                    raise Malformed("the root property must be a string subscript or a name")
                accessors.append(index)
                access = access[close + 1:]
        else:
            i = 0
            while i < len(access) and access[i] not in ".[}":
                i += 1
            accessors.append(access[:i])
            access = access[i:]
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


def escaped(value):
    """`value` as a Program must hold it to mean exactly `value`: every `$` doubled (`$$` reads as `$`, so no `${`
    is left to start an access), in keys too, which are expressions as well. A `Fn::` key would be read as a
    built-in (Fn::ReadFile, Fn::StackReference, ...) whatever is done to it, so it is refused."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, list):
        return [escaped(v) for v in value]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if isinstance(key, str) and key.startswith(RESERVED):
                raise NotLiteral(f"the key {key[:80]!r}: Pulumi YAML reads a key starting {RESERVED!r} as a "
                                 "function, so it cannot be written into a Program")
            out[escaped(key) if isinstance(key, str) else key] = escaped(item)
        return out
    return value


def references(value) -> set[str]:
    """The root names a value's interpolations read (`${name.outputs["x"]}` reads `name`); raises Malformed."""
    found: set[str] = set()
    if isinstance(value, str):
        for _, access in parse_interpolation(value):
            if access:
                found.add(str(access[0]))
    elif isinstance(value, list):
        for v in value:
            found |= references(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            found |= references(k) | references(v)
    return found
