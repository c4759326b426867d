"""`labelSelector` and `fieldSelector` of a list, parsed as the Kubernetes API server parses them (apimachinery's
labels.Parse and fields.ParseSelector): a selector it would refuse is a 400 here too, never silently ignored.

Label requirements, comma-separated: `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k>N`, `k<N`.
As in Kubernetes, `!=` and `notin` match an object without the label. Field selectors on a custom resource
take `metadata.name` and `metadata.namespace` only, with `=`, `==` or `!=`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from automation.portal.service import ApiError

NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
KEY = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{NAME}$")
VALUE = re.compile(rf"^({NAME})?$")
MAX_PREFIX = 253
FIELDS = {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace")}
TOKEN = re.compile(r"\s*(\(|\)|,|==|=|!=|!|>|<|[^\s(),=!<>]+)")

Match = Callable[[dict], bool]


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # exists, !, =, !=, in, notin, gt, lt
    values: tuple[str, ...] = ()

    def matches(self, labels: dict) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator in ("=", "in"):
            return present and value in self.values
        if self.operator in ("!=", "notin"):
            return not present or value not in self.values
        try:  # gt, lt: both sides integers, as Kubernetes compares them
            number = int(str(value))
        except ValueError:
            return False
        return number > int(self.values[0]) if self.operator == "gt" else number < int(self.values[0])


def bad(selector: str, why: str) -> ApiError:
    return ApiError(400, "BadRequest", f"unable to parse requirement: {why}" if selector else why)


def _tokens(text: str) -> list[str]:
    out, at = [], 0
    while at < len(text):
        if text[at:].strip() == "":
            break
        found = TOKEN.match(text, at)
        if found is None:  # nothing else can be left: every character is in some token
            raise bad(text, f"unexpected character at {at}")
        out.append(found.group(1))
        at = found.end()
    return out


def _checked_key(key: str) -> str:
    if not KEY.match(key) or ("/" in key and len(key.split("/", 1)[0]) > MAX_PREFIX):
        raise bad(key, f"invalid label key {key[:100]!r}: name part must consist of alphanumeric characters, '-', "
                       "'_' or '.', and must start and end with an alphanumeric character (at most 63)")
    return key


def _checked_value(value: str) -> str:
    if not VALUE.match(value):
        raise bad(value, f"invalid label value {value[:100]!r}: a valid label must be an empty string or consist "
                         "of alphanumeric characters, '-', '_' or '.' (at most 63)")
    return value


def parse_labels(text: str) -> list[Requirement]:
    tokens = _tokens(text)
    out: list[Requirement] = []
    at = 0

    def take() -> str:
        nonlocal at
        if at >= len(tokens):
            raise bad(text, "unexpected end of the selector")
        at += 1
        return tokens[at - 1]

    while at < len(tokens):
        token = take()
        if token == "!":
            out.append(Requirement(_checked_key(take()), "!"))
        else:
            key = _checked_key(token)
            following = tokens[at] if at < len(tokens) else ","
            if following == ",":
                out.append(Requirement(key, "exists"))
            elif following in ("=", "==", "!="):
                take()
                value = tokens[at] if at < len(tokens) and tokens[at] != "," else ""  # `k=` is the empty value
                if value:
                    take()
                out.append(Requirement(key, "!=" if following == "!=" else "=", (_checked_value(value),)))
            elif following in ("in", "notin"):
                take()
                if take() != "(":
                    raise bad(text, f"found '{tokens[at - 1]}', expected: '('")
                values: list[str] = []
                while True:
                    item = take()
                    if item == ")" and not values:
                        raise bad(text, f"for '{following}' operator, at least one value must be given")
                    if item in (",", ")"):
                        raise bad(text, f"found '{item}', expected: a value")
                    values.append(_checked_value(item))
                    closing = take()
                    if closing == ")":
                        break
                    if closing != ",":
                        raise bad(text, f"found '{closing}', expected: ',' or ')'")
                out.append(Requirement(key, following, tuple(values)))
            elif following in (">", "<"):
                take()
                number = take()
                if not re.fullmatch(r"-?[0-9]+", number):
                    raise bad(text, f"for 'Gt', 'Lt' operators, the value must be an integer, not {number[:50]!r}")
                out.append(Requirement(key, "gt" if following == ">" else "lt", (number,)))
            else:
                raise bad(text, f"found '{following}', expected: '=', '!=', '==', 'in', notin'")
        if at < len(tokens):
            if tokens[at] != ",":
                raise bad(text, f"found '{tokens[at]}', expected: ',' or 'end of string'")
            at += 1
            if at == len(tokens):
                raise bad(text, "found 'end of string', expected: identifier")
    return out


def parse_fields(text: str) -> list[tuple[tuple[str, str], bool, str]]:
    """(field path, must equal, value) per comma-separated term."""
    out = []
    for term in (t.strip() for t in text.split(",") if t.strip()):
        found = re.fullmatch(r"([^=!\s]+)\s*(==|=|!=)\s*(.*)", term)
        if found is None:
            raise ApiError(400, "BadRequest", f"invalid selector: '{term[:100]}'; can't understand '{term[:100]}'")
        field, operator, value = found.groups()
        if field not in FIELDS:
            raise ApiError(400, "BadRequest", f'field label not supported: {field[:100]}')
        out.append((FIELDS[field], operator != "!=", value.strip()))
    return out


def matcher(label_selector: str | None, field_selector: str | None) -> Match:
    """One test per object, or a 400 `Status` for a selector the API server would refuse."""
    labels = parse_labels(label_selector) if label_selector else []
    fields = parse_fields(field_selector) if field_selector else []

    def matches(obj: dict) -> bool:
        meta = obj.get("metadata") or {}
        own = meta.get("labels") or {}
        if not all(r.matches(own) for r in labels):
            return False
        return all(((meta.get(path[1]) or "") == value) == equal for path, equal, value in fields)

    return matches
