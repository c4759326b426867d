"""Kubernetes resource quantities ("20Gi", "500m", "1e3") as exact decimals.

Semantics follow the reference system's DRA CEL library: the value is the number of
base units, rounded up (away from zero) to nano precision; binary-suffixed values of
magnitude >= 2**63 saturate to +/-(2**63 - 1). Unlike upstream Kubernetes, a bare
suffix, a capital `K`, commas and surrounding whitespace are rejected rather than
read as zero.
"""

from __future__ import annotations

import re
from decimal import ROUND_UP, Context, Decimal, InvalidOperation
from functools import total_ordering

from fleet.errors import ModelplaneError

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
_CTX = Context(prec=60)
_NANO = Decimal("1e-9")

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_NUMBER = r"[+-]?(?:\d+\.?\d*|\.\d+)"
_BINARY_RE = re.compile(rf"^({_NUMBER})(Ki|Mi|Gi|Ti|Pi|Ei)$")
_EXPONENT_RE = re.compile(rf"^({_NUMBER})[eE]([+-]?\d+)$")
_SUFFIX_RE = re.compile(rf"^({_NUMBER})([numkMGTPE]?)$")


class QuantityError(ModelplaneError, ValueError):
    pass


def parse_quantity(text: str) -> Decimal:
    """Return the quantity's value in base units, or raise QuantityError."""
    if not isinstance(text, str) or text == "":
        raise QuantityError("quantity must be a non-empty string")
    if text != text.strip():
        raise QuantityError(f"quantity {text!r} has surrounding whitespace")
    try:
        if m := _BINARY_RE.match(text):
            value = _CTX.multiply(Decimal(m.group(1)), Decimal(_BINARY[m.group(2)]))
            value = _round(value)
            if value >= INT64_MAX:
                return Decimal(INT64_MAX)
            if value <= -INT64_MAX:
                return Decimal(-INT64_MAX)
            return value
        if m := _EXPONENT_RE.match(text):
            return _round(_CTX.scaleb(Decimal(m.group(1)), int(m.group(2))))
        if m := _SUFFIX_RE.match(text):
            return _round(_CTX.scaleb(Decimal(m.group(1)), _DECIMAL.get(m.group(2), 0)))
    except (InvalidOperation, ValueError) as exc:  # pragma: no cover - regexes prevent it
        raise QuantityError(f"invalid quantity {text!r}") from exc
    raise QuantityError(f"invalid quantity {text!r}")


def is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _round(value: Decimal) -> Decimal:
    return value.quantize(_NANO, rounding=ROUND_UP, context=_CTX).normalize(_CTX) + 0


@total_ordering
class Quantity:
    """A parsed quantity; the CEL functions of the DRA dialect are its methods."""

    __slots__ = ("value",)

    def __init__(self, value: Decimal | int | str):
        self.value = parse_quantity(value) if isinstance(value, str) else Decimal(value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Quantity({self.value})"

    def sign(self) -> int:
        return (self.value > 0) - (self.value < 0)

    def is_integer(self) -> bool:
        return self.value == self.value.to_integral_value() and INT64_MIN <= self.value <= INT64_MAX

    def as_integer(self) -> int:
        if not self.is_integer():
            raise QuantityError(f"{self.value} is not an integer in int64 range")
        return int(self.value)

    def as_approximate_float(self) -> float:
        return float(self.value)

    def add(self, other: Quantity | int) -> Quantity:
        return Quantity(_CTX.add(self.value, _operand(other)))

    def sub(self, other: Quantity | int) -> Quantity:
        return Quantity(_CTX.subtract(self.value, _operand(other)))

    def compare_to(self, other: Quantity) -> int:
        if not isinstance(other, Quantity):
            raise QuantityError("compareTo needs a quantity")
        return (self.value > other.value) - (self.value < other.value)


def _operand(other: Quantity | int) -> Decimal:
    if isinstance(other, Quantity):
        return other.value
    if isinstance(other, int) and not isinstance(other, bool):
        return Decimal(other)
    raise QuantityError("add/sub need a quantity or an integer")
