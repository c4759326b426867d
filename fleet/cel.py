"""The DRA CEL dialect used by device selectors, on the cel-python evaluator.

An expression sees one variable, `device`, shaped as Kubernetes DRA shows it:
`device.driver`, `device.attributes[domain][id]` and `device.capacity[domain][id]`.
A key "domain/id" in a class is split at the first "/"; a bare key lives in the
device's driver domain. An unknown domain is an empty map (so `"x" in
device.attributes` is false); an unknown id is an error. Any evaluation error and any
non-bool result is a non-match. A syntax error, or a call to a function the dialect
does not have, is a compile error reported at validation time.

Each distinct expression is compiled once, and each (expression, device kind) pair is
evaluated once per evaluator, so a fleet of thousands of pools with a handful of device
kinds costs a handful of evaluations.
"""

from __future__ import annotations

import hashlib
import io
import sys
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import celpy
import celpy.celtypes as ct
import lark
from celpy import celparser
from celpy.evaluation import base_functions

from fleet.disk_cache import DiskCache
from fleet.errors import ModelplaneError
from fleet.quantity import Quantity, QuantityError, is_quantity, parse_quantity
from fleet.semver import Semver, SemverError, is_semver, parse_semver


class CelCompileError(ModelplaneError, ValueError):
    pass


@dataclass(frozen=True)
class DeviceFacts:
    """What a selector can see of one device kind: hashable, so results can be cached.

    attributes: ((key, (type, value)), ...) with type one of string|version|bool|int.
    capacity:   ((key, quantity string), ...)
    """

    driver: str
    attributes: tuple[tuple[str, tuple[str, Any]], ...] = ()
    capacity: tuple[tuple[str, str], ...] = ()


# ---- functions of the dialect -------------------------------------------------------

def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return str(value)


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, (Quantity, Semver)):
        return a.compare_to(b)
    raise TypeError("compareTo needs a quantity or a semver")


def _semver_part(attr: str):
    def get(v: Any) -> ct.IntType:
        if not isinstance(v, Semver):
            raise TypeError(f"{attr} needs a semver")
        return ct.IntType(getattr(v, attr))

    return get


def _int_arg(value: Any) -> Any:
    return int(value) if isinstance(value, ct.IntType) else value


FUNCTIONS: dict[str, Any] = {
    "quantity": lambda s: Quantity(parse_quantity(_str(s))),
    "isQuantity": lambda s: ct.BoolType(is_quantity(_str(s))),
    "sign": lambda q: ct.IntType(q.sign()),
    "isInteger": lambda q: ct.BoolType(q.is_integer()),
    "asInteger": lambda q: ct.IntType(q.as_integer()),
    "asApproximateFloat": lambda q: ct.DoubleType(q.as_approximate_float()),
    "add": lambda q, o: q.add(_int_arg(o)),
    "sub": lambda q, o: q.sub(_int_arg(o)),
    "semver": lambda s, normalize=False: parse_semver(_str(s), bool(normalize)),
    "isSemver": lambda s, normalize=False: ct.BoolType(is_semver(_str(s), bool(normalize))),
    "major": _semver_part("major"),
    "minor": _semver_part("minor"),
    "patch": _semver_part("patch"),
    "compareTo": lambda a, b: ct.IntType(_compare(a, b)),
    "isGreaterThan": lambda a, b: ct.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: ct.BoolType(_compare(a, b) < 0),
}
_MACROS = {"has", "all", "exists", "exists_one", "map", "filter", "dyn"}
KNOWN_FUNCTIONS = frozenset(FUNCTIONS) | frozenset(base_functions) | _MACROS


# ---- the device view ----------------------------------------------------------------

class _DomainMap(ct.MapType):
    """A map of domains in which an unknown domain reads as an empty map."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return ct.MapType({})


def _attribute_value(kind: str, value: Any) -> Any:
    if kind == "string":
        return ct.StringType(value)
    if kind == "version":
        return parse_semver(value)
    if kind == "bool":
        return ct.BoolType(value)
    if kind == "int":
        return ct.IntType(value)
    raise ValueError(f"attribute has no value of a known type ({kind})")


def _split_key(key: str, driver: str) -> tuple[str, str]:
    domain, sep, ident = key.partition("/")
    return (domain, ident) if sep else (driver, key)


def device_activation(device: DeviceFacts) -> dict[str, Any]:
    """Build the CEL activation for one device kind; raises if the device is malformed."""
    attributes: dict[str, dict] = {}
    for key, (kind, value) in device.attributes:
        domain, ident = _split_key(key, device.driver)
        attributes.setdefault(domain, {})[ct.StringType(ident)] = _attribute_value(kind, value)
    capacity: dict[str, dict] = {}
    for key, value in device.capacity:
        domain, ident = _split_key(key, device.driver)
        capacity.setdefault(domain, {})[ct.StringType(ident)] = Quantity(parse_quantity(value))
    return {
        "device": ct.MapType(
            {
                ct.StringType("driver"): ct.StringType(device.driver),
                ct.StringType("attributes"): _DomainMap(
                    {ct.StringType(d): ct.MapType(v) for d, v in attributes.items()}
                ),
                ct.StringType("capacity"): _DomainMap(
                    {ct.StringType(d): ct.MapType(v) for d, v in capacity.items()}
                ),
            }
        )
    }


# ---- compile and evaluate -----------------------------------------------------------

ORDERING = {"relation_lt": "<", "relation_le": "<=", "relation_gt": ">", "relation_ge": ">="}
ORDERING_HINT = ("Kubernetes' DRA CEL has no ordering operators on quantities or semantic versions: use "
                 "compareTo (x.compareTo(quantity(\"20Gi\")) >= 0) or isGreaterThan / isLessThan")


def _is_quantity_or_semver(tree: Any) -> bool:
    """Is this operand's value a quantity or semver: a quantity()/semver() call, a device capacity, or add/sub on one?
    (A method result such as compareTo(...) is an int, and fine to order.)"""
    node = tree
    while isinstance(node, lark.Tree) and len(node.children) == 1 and node.data not in ("primary",):
        node = node.children[0]
    if not isinstance(node, lark.Tree):
        return False
    if node.data == "member_dot_arg":  # a method call: quantity arithmetic keeps a quantity, the rest do not
        return str(node.children[1]) in ("add", "sub") and _is_quantity_or_semver(node.children[0])
    if node.data == "primary":
        inner = node.children[0]
        return isinstance(inner, lark.Tree) and inner.data == "ident_arg" and str(inner.children[0]) in ("quantity", "semver")
    if node.data in ("member_dot", "member_index"):
        return any(n.data == "member_dot" and len(n.children) > 1 and str(n.children[1]) == "capacity"
                   for n in node.iter_subtrees())
    return False


def _ordered_quantities(tree: lark.Tree) -> str | None:
    """The first `<`, `<=`, `>` or `>=` applied to a quantity or semver (Kubernetes refuses those), if any."""
    for node in tree.iter_subtrees_topdown():
        if node.data != "relation" or len(node.children) != 2 or not isinstance(node.children[0], lark.Tree):
            continue
        op = node.children[0]
        if op.data in ORDERING and any(_is_quantity_or_semver(side) for side in (op.children[0], node.children[1])):
            return ORDERING[op.data]
    return None


def _caret(expression: str, column: int | None) -> str:
    """The expression on one line with a marker where the parser stopped."""
    if not column:
        return expression
    at = max(0, min(column - 1, len(expression)))
    return f"{expression[:at]} ^ {expression[at:]}".strip()


def _called_functions(tree: lark.Tree) -> Iterable[str]:
    for node in tree.iter_subtrees():
        if node.data == "ident_arg":
            yield str(node.children[0])
        elif node.data == "member_dot_arg":
            yield str(node.children[1])


@dataclass
class CelEvaluator:
    """Compiles each expression once and caches each (expression, device) result."""

    environment: celpy.Environment = field(default_factory=celpy.Environment)
    programs: dict[str, Any] = field(default_factory=dict)
    results: dict[tuple[str, DeviceFacts], bool] = field(default_factory=dict)
    errors: dict[tuple[str, DeviceFacts], str] = field(default_factory=dict)  # why an evaluation failed (a non-match)
    activations: dict[DeviceFacts, dict | None] = field(default_factory=dict)
    evaluations: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def compile(self, expression: str) -> Any:
        program = self.programs.get(expression)
        if program is not None:
            return program
        if not isinstance(expression, str) or not expression.strip():
            raise CelCompileError("expression is empty")
        try:
            tree = self.environment.compile(expression)
        except Exception as exc:  # celpy raises CELParseError and sometimes lark errors
            column = getattr(exc, "column", None)
            where = f" at column {column}" if column else ""
            raise CelCompileError(f"CEL syntax error{where}: {_caret(expression, column)}") from None
        unknown = sorted({f for f in _called_functions(tree) if f not in KNOWN_FUNCTIONS})
        if unknown:
            raise CelCompileError(f"unknown function {unknown[0]!r}")
        ordered = _ordered_quantities(tree)
        if ordered:
            raise CelCompileError(f"`{ordered}` on a quantity or semver: {ORDERING_HINT}")
        with self._lock:
            program = self.environment.program(tree, functions=FUNCTIONS)
            self.programs[expression] = program
        return program

    def matches(self, expression: str, device: DeviceFacts) -> bool:
        """True iff the expression evaluates to the bool true for this device."""
        key = (expression, device)
        cached = self.results.get(key)
        if cached is not None:
            return cached
        result = self._evaluate(expression, device)
        self.results[key] = result
        return result

    def matches_all(self, expressions: Iterable[str], device: DeviceFacts) -> bool:
        return all(self.matches(e, device) for e in expressions)

    def _evaluate(self, expression: str, device: DeviceFacts) -> bool:
        program = self.compile(expression)
        if device not in self.activations:
            try:
                self.activations[device] = device_activation(device)
            except (ValueError, QuantityError, SemverError):
                self.activations[device] = None
        activation = self.activations[device]
        if activation is None:
            return False
        self.evaluations += 1
        try:
            value = program.evaluate(activation)
        except Exception as exc:  # any evaluation error is a non-match, by definition of the dialect; remember why
            self.errors[(expression, device)] = _error_text(exc)
            return False
        if not isinstance(value, ct.BoolType):
            self.errors[(expression, device)] = f"the selector gives a {type(value).__name__}, not a bool"
            return False
        return bool(value)

    def error(self, expressions: Iterable[str], device: DeviceFacts) -> str | None:
        """Why the selectors could not be evaluated on this device (None: they were, and did not match)."""
        return next((self.errors[(e, device)] for e in expressions if (e, device) in self.errors), None)


def _error_text(exc: Exception) -> str:
    """celpy wraps the cause as (message, type, args): say the cause's own words."""
    args: tuple[Any, ...] = tuple(exc.args)
    if len(args) >= 3 and args[2]:
        cause = args[2][0] if isinstance(args[2], tuple) else args[2]
        return str(cause)[:160]
    if args and isinstance(args[0], str):
        return args[0][:160]
    return (str(exc) or type(exc).__name__)[:160]


def check_expression(expression: str, evaluator: CelEvaluator | None = None) -> str | None:
    """Return a compile error message, or None if the expression compiles."""
    try:
        (evaluator or DEFAULT).compile(expression)
    except CelCompileError as exc:
        return str(exc)
    return None


def _build_parser_through_cache() -> None:
    """celpy's parser, kept in the cache folder: celpy analyses the CEL grammar in every process (about 70 ms of
    each command's start-up), and Lark can save the analysed parser and load it back.

    The entry is keyed by celpy's grammar and parser module, Lark's version and Python's. Lark loads it with
    pickle, which runs code, so it is read only as fleet/disk_cache.py reads: from a folder no other user can
    change, from a file this user owns, authenticated with the key made in that folder. A file planted, edited,
    copied from elsewhere, or cut short by a crash is never loaded, only rebuilt. celpy builds the parser itself
    whenever there is no good entry."""
    if celparser.CELParser.CEL_PARSER is not None:
        return
    here = Path(celparser.__file__).parent
    key = hashlib.sha256((here / "cel.lark").read_bytes() + Path(celparser.__file__).read_bytes()
                         + f"{lark.__version__} {sys.version}".encode()).hexdigest().encode()
    cache = DiskCache()
    kept = cache.read("cel-grammar.lark")
    if kept is not None and kept.startswith(key + b"\n"):
        try:
            celparser.CELParser.CEL_PARSER = lark.Lark.load(io.BytesIO(kept[len(key) + 1:]))
            return
        except Exception:  # noqa: BLE001 - an entry this Lark cannot load is built again
            celparser.CELParser.CEL_PARSER = None
    celparser.CELParser()
    built: lark.Lark | None = getattr(celparser.CELParser, "CEL_PARSER")  # set just now (typed as read at the top)
    if built is None:
        return
    saved = io.BytesIO()
    built.save(saved)
    cache.write("cel-grammar.lark", key + b"\n" + saved.getvalue())


_build_parser_through_cache()
DEFAULT = CelEvaluator()


# ---- what a selector refers to (for validate's warnings) -----------------------------------------

def _descend(node: Any) -> Any:
    while isinstance(node, lark.Tree) and len(node.children) == 1:
        node = node.children[0]
    return node


def _literal_string(node: Any) -> str | None:
    node = _descend(node)
    if isinstance(node, lark.Token) and node.type in ("STRING_LIT", "MLSTRING_LIT") or (
            isinstance(node, lark.Token) and str(node).startswith(('"', "'"))):
        text = str(node)
        return text[1:-1] if len(text) >= 2 else None
    return None


def _parse(expression: str) -> lark.Tree | None:
    try:
        return DEFAULT.environment.compile(expression)
    except Exception:  # syntax errors are validate's errors already
        return None


@lru_cache(maxsize=4096)
def referenced_attributes(expression: str) -> frozenset[str]:
    """Attribute ids a selector reads as device.attributes[<domain>].<id> (qualified as `<domain>/<id>`).
    Cached per expression: a fleet repeats a handful of selectors thousands of times, and parsing is the cost."""
    tree = _parse(expression)
    found: set[str] = set()
    for node in tree.iter_subtrees() if tree is not None else ():
        if node.data != "member_dot" or len(node.children) < 2:
            continue
        index = _descend(node.children[0])
        if not isinstance(index, lark.Tree) or index.data != "member_index":
            continue
        base = _descend(index.children[0])
        if isinstance(base, lark.Tree) and base.data == "member_dot" and str(base.children[1]) == "attributes":
            domain = _literal_string(index.children[1]) if len(index.children) > 1 else None
            found.add(f"{domain}/{node.children[1]}" if domain else str(node.children[1]))
    return frozenset(found)


@lru_cache(maxsize=4096)
def literal_problems(expression: str) -> tuple[str, ...]:
    """quantity("...") and semver("...") literals that do not parse: such a selector can never match (cached)."""
    tree = _parse(expression)
    out = []
    for node in tree.iter_subtrees() if tree is not None else ():
        if node.data != "ident_arg" or str(node.children[0]) not in ("quantity", "semver") or len(node.children) < 2:
            continue
        literal = _literal_string(node.children[1])
        if literal is None:
            continue
        try:
            parse_quantity(literal) if str(node.children[0]) == "quantity" else parse_semver(literal)
        except (QuantityError, SemverError) as exc:
            out.append(f'{node.children[0]}("{literal}") is not valid ({exc}): the selector never matches')
    return tuple(out)
