"""The DRA CEL dialect used by device selectors, on the cel-python evaluator.

An expression sees one variable, `device`, shaped as Kubernetes DRA shows it:
`device.driver`, `device.attributes[domain][id]` and `device.capacity[domain][id]`.
A key "domain/id" in a class is split at the first "/"; a bare key lives in the
device's driver domain. An unknown domain is an empty map (so `"x" in
device.attributes` is false); an unknown id is an error. Any evaluation error and any
non-bool result is a non-match. A syntax error, or a call to a function the dialect
does not have, is a compile error reported at validation time.

Cost: as Kubernetes does for DRA selectors, an expression is refused at compile time when a static
upper bound of its evaluation cost is over a budget (MAX_COST), and an evaluation that still runs past
the budget stops and is a non-match. A cost unit here is one step of celpy's evaluator (see `_Budget`).

Each distinct expression is compiled once, and each (expression, device kind) pair is
evaluated once per evaluator, so a fleet of thousands of pools with a handful of device
kinds costs a handful of evaluations; fleet/device_selectors.py keeps the answers on disk, so a
command that has seen them all does not load this module at all.
"""

from __future__ import annotations

import hashlib
import math
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import celpy
import celpy.celtypes as ct
import lark
from celpy import celparser
from celpy.evaluation import Evaluator, base_functions

from fleet.errors import ModelplaneError
from fleet.quantity import Quantity, QuantityError, is_quantity, parse_quantity
from fleet.semver import Semver, SemverError, is_semver, parse_semver
# what a selector sees of a device and the dialect's limits, apart from the interpreter (which validation and the
# planner load only for what fleet/device_selectors.py has not kept)
from fleet.device_facts import MAX_COST, MAX_LENGTH, MAX_OBJECT_COST, DeviceFacts, depth_bound  # noqa: F401


class CelCompileError(ModelplaneError, ValueError):
    pass


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


def _malformed_comprehension(tree: lark.Tree) -> str | None:
    """celpy evaluates a comprehension only as `r.<macro>(x, body)`: any other arity compiled, then failed on every
    device (a selector that silently matches nothing). CEL's three-argument `map(x, filter, body)` is one."""
    for node in tree.iter_subtrees_topdown():
        if node.data != "member_dot_arg" or str(node.children[1]) not in _COMPREHENSIONS:
            continue
        name, last = str(node.children[1]), node.children[-1]
        args = last.children if isinstance(last, lark.Tree) and last.data == "exprlist" else []
        variable = _descend(args[0]) if args else None
        named = isinstance(variable, lark.Token) and variable.type == "IDENT"
        if len(args) == 2 and named:
            continue
        if name == "map" and len(args) == 3:
            return ("`map(x, filter, body)`, the three-argument map, is not supported: write "
                    "`.filter(x, filter).map(x, body)`")
        given = "its first argument is not a variable name" if len(args) == 2 else f"it was given {len(args)} argument(s)"
        return f"`{name}` takes a variable and a body, `{name}(x, body)`: {given}"
    return None


# ---- cost: a static estimate at compile time, a step budget at evaluation -----------------------
#
# Kubernetes refuses a DRA selector whose estimated worst-case cost is over 1,000,000 cel-go units and
# stops an evaluation that runs past it. cel-go spends nanoseconds per unit; celpy walks the parse tree in
# Python, 3 to 10 microseconds per node, and evaluates each literal again at every step. So a unit here is
# one step of celpy's evaluator (one parse-tree node visited, one comprehension iteration begun, and string
# scans by length as Kubernetes charges them), and the limit is set from celpy's speed: 100,000 steps is
# at most about a second on one core (benchmarks/cel_bench.py), above any selector without comprehensions
# at the 10 KiB length cap (a list of 5,000 literals is about 51,000), and far below the 55 million of the
# 200-character nested-map selector that held a portal write for minutes.

_SATURATED = 10**18  # estimates stop growing here, so a deep nesting does not print a 300-digit number
_COMPREHENSIONS = frozenset({"map", "filter", "all", "exists", "exists_one"})
# Size bounds of what `device` holds (the estimate multiplies by them): the largest of Kubernetes' DRA
# limits and this project's API limits (a string attribute, a driver: 253 characters; 32 attributes and
# 32 capacities per device), so the bound holds for any device an InferenceClass can declare.
DEVICE_STRING_MAX = 253
DEVICE_MAP_MAX = 32
# A value whose size the estimate cannot follow (an unknown name, a conversion such as string(list)) is
# taken to be as long as the longest expression: everything it is built from is written in it.
UNKNOWN_SIZE = MAX_LENGTH


class CelCostExceeded(Exception):
    """An evaluation ran past its step budget. Not a CELEvalError, so no macro or operator swallows it."""


@dataclass(frozen=True)
class _Shape:
    """An upper bound on a value's size: characters of a string, elements of a list, entries of a map."""

    size: int = 0
    item: _Shape | None = None  # what iterating over it gives (list elements, map keys, characters)
    member: _Shape | None = None  # what x[k] or x.f gives (list elements, map values)
    fields: tuple[tuple[str, _Shape], ...] = ()  # named fields with their own bounds (the device)


_SCALAR = _Shape()


def _string(length: int) -> _Shape:
    return _Shape(length, item=_Shape(1))


def _device_map(values: _Shape) -> _Shape:
    """device.attributes / device.capacity: domains to ids to values, each map at most DEVICE_MAP_MAX long."""
    inner = _Shape(DEVICE_MAP_MAX, item=_string(DEVICE_STRING_MAX), member=values)
    return _Shape(DEVICE_MAP_MAX, item=_string(DEVICE_STRING_MAX), member=inner)


_DEVICE = _Shape(3, item=_string(10), fields=(
    ("driver", _string(DEVICE_STRING_MAX)),
    ("attributes", _device_map(_string(DEVICE_STRING_MAX))),
    ("capacity", _device_map(_SCALAR)),
))


def _size(shape: _Shape | None) -> int:
    return UNKNOWN_SIZE if shape is None else shape.size


def _join(a: _Shape | None, b: _Shape | None) -> _Shape | None:
    """A bound for a value that is one or the other (a list's elements, the branches of `?:`)."""
    if a is None or b is None:
        return None
    if a == b:
        return a
    return _Shape(max(a.size, b.size), _join(a.item, b.item), _join(a.member, b.member),
                  a.fields if a.fields == b.fields else ())


def _join_all(shapes: list[_Shape | None]) -> _Shape | None:
    out = shapes[0] if shapes else _SCALAR
    for shape in shapes[1:]:
        out = _join(out, shape)
    return out


def _tenths(length: int) -> int:
    """Kubernetes charges a string scan 0.1 unit per character."""
    return math.ceil(length / 10)


def _call_cost(name: str, lengths: list[int]) -> int:
    """What a call costs beyond its node, from its arguments' lengths (target first); the static estimate
    passes their bounds and the evaluation their actual lengths, so the two agree."""
    if name in ("contains", "startsWith", "endsWith", "quantity", "isQuantity", "semver", "isSemver"):
        return sum(_tenths(n) for n in lengths[:2])
    if name == "matches" and len(lengths) >= 2:  # Kubernetes: string scan times a quarter of the pattern length
        return max(1, _tenths(lengths[0])) * max(1, math.ceil(lengths[1] / 4))
    return 0


def _call_shape(name: str, args: list[_Shape | None]) -> _Shape | None:
    if name in ("dyn", "list", "map") and args:
        return args[0]
    if name in ("string", "bytes"):
        return _string(32) if args and args[0] is _SCALAR else None
    return _SCALAR if name in KNOWN_FUNCTIONS else None


def _literal_shape(token: Any) -> _Shape:
    text = str(token)
    if getattr(token, "type", "") in ("STRING_LIT", "MLSTRING_LIT", "BYTES_LIT"):
        return _string(len(text))  # the quotes and escapes only make this bound looser
    return _SCALAR


def _node_count(tree: Any) -> int:
    return sum(1 for _ in tree.iter_subtrees()) if isinstance(tree, lark.Tree) else 0


def _estimate(node: lark.Tree, scope: dict[str, _Shape | None]) -> tuple[int, _Shape | None]:
    """(an upper bound of the evaluator steps this node takes, a bound of its value's size).

    One step per parse-tree node, as celpy visits each node of an evaluated subtree at most once, except
    that a comprehension's body is evaluated once per element of what it iterates over."""
    data, children = node.data, node.children
    if data in ("member_dot_arg", "ident_arg"):
        return _estimate_call(node, scope)
    parts = [_estimate(c, scope) for c in children if isinstance(c, lark.Tree)]
    cost = 1 + sum(c for c, _ in parts)
    shapes = [s for _, s in parts]
    shape: _Shape | None = shapes[0] if len(shapes) == 1 else _SCALAR  # a single child passes its value up
    if data == "literal":
        shape = _literal_shape(children[0]) if children else _SCALAR
    elif data == "ident":
        name = str(children[0])
        shape = scope[name] if name in scope else _DEVICE if name == "device" else None
    elif data == "exprlist":
        shape = _Shape(len(shapes), _join_all(shapes), _join_all(shapes))
    elif data == "mapinits":
        keys, values = shapes[0::2], shapes[1::2]
        shape = _Shape(len(keys), _join_all(keys), _join_all(values))
    elif data in ("list_lit", "map_lit") and not shapes:
        shape = _Shape(0)
    elif data == "member_dot":
        base = shapes[0]
        shape = dict(base.fields).get(str(children[1]), base.member) if base else None
    elif data == "member_index":
        shape = shapes[0].member if shapes[0] else None
    elif data in ("member_object", "dot_ident"):
        shape = None
    elif data == "relation" and len(shapes) == 2:
        op = children[0].data if isinstance(children[0], lark.Tree) else ""
        if op in ("relation_eq", "relation_ne", "relation_in"):  # comparing or searching scans the values
            cost += _tenths(max(_size(shapes[0]), _size(shapes[1]))) + (_size(shapes[1]) if op == "relation_in" else 0)
    elif data == "addition" and len(shapes) == 2:
        left, right = shapes
        concatenates = isinstance(children[0], lark.Tree) and children[0].data == "addition_add" and (
            left is None or right is None or left.size > 0 or right.size > 0)
        if concatenates:  # strings or lists: the result is as long as both
            cost += _tenths(_size(left) + _size(right))
            shape = _Shape(_size(left) + _size(right), _join(left.item, right.item) if left and right else None,
                           _join(left.member, right.member) if left and right else None)
    elif data == "expr" and len(shapes) == 3:
        shape = _join(shapes[1], shapes[2])
    return min(_SATURATED, cost), shape


def _estimate_call(node: lark.Tree, scope: dict[str, _Shape | None]) -> tuple[int, _Shape | None]:
    """A function or method call, or a comprehension (`r.map(x, body)`)."""
    children = node.children
    method = node.data == "member_dot_arg"
    name = str(children[1] if method else children[0])
    target = _estimate(children[0], scope) if method else (0, _SCALAR)
    exprlist = children[-1] if isinstance(children[-1], lark.Tree) and children[-1].data == "exprlist" else None
    args = exprlist.children if exprlist is not None else []
    if method and name in _COMPREHENSIONS and len(args) == 2:
        # r once, then the body once per element of r, each begun with a fresh activation
        range_cost, range_shape = target
        variable = _descend(args[0])  # down to the IDENT token of `x`
        bound = str(variable) if isinstance(variable, lark.Token) else ""
        body_cost, body_shape = _estimate(args[1], {**scope, bound: range_shape.item if range_shape else None})
        count = _size(range_shape)
        cost = 3 + range_cost + _node_count(args[0]) + count * (body_cost + 1)
        if name == "map":
            return min(_SATURATED, cost), _Shape(count, item=body_shape, member=body_shape)
        return min(_SATURATED, cost), range_shape if name == "filter" else _SCALAR
    estimated = [_estimate(a, scope) for a in args if isinstance(a, lark.Tree)]
    shapes = ([target[1]] if method else []) + [s for _, s in estimated]
    cost = 1 + target[0] + (1 if exprlist is not None else 0) + sum(c for c, _ in estimated)
    cost += _call_cost(name, [_size(s) for s in shapes])
    return min(_SATURATED, cost), _call_shape(name, shapes)


def estimated_cost(tree: lark.Tree) -> int:
    """An upper bound of the steps celpy's evaluator takes on this parsed expression, for any device."""
    return _estimate(tree, {})[0] + 1  # the evaluation's own activation


def cost_problem(tree: lark.Tree, limit: int = MAX_COST) -> str | None:
    """Why the expression is too costly to accept, or None."""
    try:
        cost = estimated_cost(tree)
    except RecursionError:  # celpy's evaluator, which recurses deeper per node, could not evaluate it either
        return "the selector is nested too deeply to be evaluated"
    if cost <= limit:
        return None
    shown = f"over {_SATURATED:,}" if cost >= _SATURATED else f"{cost:,}"
    return (f"the selector is too costly: its estimated cost is {shown}, over the limit of {limit:,} "
            "(map, filter, all, exists and exists_one multiply their body's cost by the size of what they "
            "iterate over)")


@lru_cache(maxsize=4096)
def selector_cost(expression: str) -> int:
    """The static estimate of one selector (0 for one that does not parse: that is its own error)."""
    tree = _parse(expression)
    try:
        return estimated_cost(tree) if tree is not None else 0
    except RecursionError:
        return 0


class _Budget:
    """Steps an evaluation may still take.

    celpy has no cost hook, so the hook is its tree-walking Evaluator (the InterpretedRunner's): every node
    it evaluates goes through `visit` or `visit_children`, every comprehension iteration starts with
    `set_activation` on an evaluator made by `sub_evaluator`, and every call through `function_eval` or
    `method_eval`; all four are public methods of the class. Counting there charges what celpy really does,
    in the units of the static estimate, and is deterministic: unlike a wall clock it does not depend on the
    machine's load, so a result is the same every time and can be cached and tested."""

    __slots__ = ("left",)

    def __init__(self, limit: int) -> None:
        self.left = limit

    def charge(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise CelCostExceeded


def _length(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, dict)) else 0


class _BudgetedEvaluator(Evaluator):
    def __init__(self, ast: lark.Tree, activation: Any, budget: _Budget) -> None:
        super().__init__(ast, activation)
        self.budget = budget

    # visit and visit_children run for every node: charged inline, a call each would cost a third more
    def visit(self, tree: lark.Tree) -> Any:
        budget = self.budget
        budget.left -= 1
        if budget.left < 0:
            raise CelCostExceeded
        return super().visit(tree)

    def visit_children(self, tree: lark.Tree) -> Any:
        budget = self.budget
        for child in tree.children:
            if isinstance(child, lark.Tree):
                budget.left -= 1
        if budget.left < 0:
            raise CelCostExceeded
        return super().visit_children(tree)

    def set_activation(self, values: Any) -> Any:
        self.budget.charge(1)
        return super().set_activation(values)

    def sub_evaluator(self, ast: lark.Tree) -> Any:
        return _BudgetedEvaluator(ast, self.activation, self.budget)

    def function_eval(self, name_token: Any, exprlist: Any = None) -> Any:
        args = exprlist if isinstance(exprlist, list) else []
        self.budget.charge(_call_cost(str(name_token), [_length(a) for a in args]))
        return super().function_eval(name_token, exprlist)

    def method_eval(self, object: Any, method_ident: Any, exprlist: Any = None) -> Any:
        args = exprlist if isinstance(exprlist, list) else []
        self.budget.charge(_call_cost(str(method_ident), [_length(a) for a in [object, *args]]))
        return super().method_eval(object, method_ident, exprlist)


class _BudgetedRunner(celpy.InterpretedRunner):
    """celpy's interpreter with a step budget per evaluation (`step_limit`, set when the program is made)."""

    step_limit: int = MAX_COST

    def evaluate(self, context: Any) -> Any:
        return _BudgetedEvaluator(self.ast, self.new_activation(), _Budget(self.step_limit)).evaluate(context)


@dataclass
class CelEvaluator:
    """Compiles each expression once and caches each (expression, device) result."""

    environment: celpy.Environment = field(default_factory=lambda: celpy.Environment(runner_class=_BudgetedRunner))
    cost_limit: int = MAX_COST  # the static estimate's limit, checked at compile
    runtime_limit: int = MAX_COST  # the steps one evaluation may take
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
        if len(expression) > MAX_LENGTH:
            raise CelCompileError(f"the selector is {len(expression):,} characters long, over the limit of {MAX_LENGTH:,}")
        try:
            tree = self.environment.compile(expression)
        except Exception as exc:  # celpy raises CELParseError and sometimes lark errors
            column = getattr(exc, "column", None)
            where = f" at column {column}" if column else ""
            raise CelCompileError(f"CEL syntax error{where}: {_caret(expression, column)}") from None
        unknown = sorted({f for f in _called_functions(tree) if f not in KNOWN_FUNCTIONS})
        if unknown:
            raise CelCompileError(f"unknown function {unknown[0]!r}")
        if malformed := _malformed_comprehension(tree):
            raise CelCompileError(malformed)
        ordered = _ordered_quantities(tree)
        if ordered:
            raise CelCompileError(f"`{ordered}` on a quantity or semver: {ORDERING_HINT}")
        if too_costly := cost_problem(tree, self.cost_limit):
            raise CelCompileError(too_costly)
        with self._lock:
            program = self.environment.program(tree, functions=FUNCTIONS)
            if isinstance(program, _BudgetedRunner):  # an environment given with another runner has no budget
                program.step_limit = self.runtime_limit
            self.programs[expression] = program
        return program

    def matches(self, expression: str, device: DeviceFacts) -> bool:
        """True iff the expression evaluates to the bool true for this device."""
        key = (expression, device)
        cached = self.results.get(key)
        if cached is not None:
            return cached
        self.errors.pop(key, None)  # one left by an evaluation that ran out of stack
        result = self._evaluate(expression, device)
        if not depth_bound(self.errors.get(key)):  # out of stack where it was asked: asked again next time
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
        except CelCostExceeded:  # the estimate is a bound for the devices the API allows; this one is larger
            self.errors[(expression, device)] = f"the selector exceeded its cost budget of {self.runtime_limit:,} steps"
            return False
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


TABLES = Path(__file__).with_name("cel_tables.py")


def grammar_key() -> str:
    """What celpy's parser is made from: its grammar, its parser module (Lark's options are set there) and Lark's
    version (its tables' format)."""
    here = Path(celparser.__file__).parent
    return hashlib.sha256((here / "cel.lark").read_bytes() + Path(celparser.__file__).read_bytes()
                          + lark.__version__.encode()).hexdigest()


def _callbacks() -> dict[str, Any]:
    """The options celpy's parser is made with that are code, not data: given again when the tables are loaded."""
    return {"lexer_callbacks": {"IDENT": celparser.CELParser.ambiguous_literals}, "tree_class": lark.Tree}


def tables_text() -> str:
    """fleet/cel_tables.py's text: celpy's grammar analysed by Lark, with celpy's options, into its LALR(1) tables,
    as plain data. The tables are Lark's integer ones (celpy asks for `debug`, whose tables are keyed by item sets and
    cannot be written as data; debug changes no parse, it prints a stack dump to stdout when a callback fails)."""
    import pprint
    from importlib.metadata import version

    saved = celparser.CELParser.CEL_PARSER
    celparser.CELParser.CEL_PARSER = None
    try:
        celparser.CELParser()
        options = dict(getattr(celparser.CELParser, "CEL_PARSER").options.options)
    finally:
        celparser.CELParser.CEL_PARSER = saved
    options = {name: value for name, value in options.items() if name not in _callbacks() and name != "_plugins"}
    options.update(debug=False, g_regex_flags=int(options["g_regex_flags"]))
    grammar = (Path(celparser.__file__).parent / "cel.lark").read_text()
    data, memo = lark.Lark(grammar, **options).memo_serialize([lark.lexer.TerminalDef, lark.grammar.Rule])
    data["parser"]["parser"] = _numbered_alike(data["parser"]["parser"])
    data["options"] = {name: value for name, value in data["options"].items() if name not in _callbacks()}
    return (f'"""celpy {version("cel-python")}\'s CEL grammar, analysed by Lark {lark.__version__} into its parser tables '
            '(fleet/cel.py, `tables_text`).\n\nGenerated by `make cel-tables`; do not edit. Loaded when KEY is the\n'
            'installed grammar\'s (`grammar_key`), else celpy analyses its grammar itself."""\n\n'
            f"KEY = {grammar_key()!r}\n\n"
            f"DATA = {pprint.pformat(data, width=120, compact=True, sort_dicts=False)}\n\n"
            f"MEMO = {pprint.pformat(memo, width=120, compact=True, sort_dicts=False)}\n")


def _numbered_alike(table: dict[str, Any]) -> dict[str, Any]:
    """Lark's serialized parse table, its symbols and states numbered the same whatever order the analysis met them
    in (it differs from process to process): symbols by name, states in the order a walk from the start states
    meets them, each state's moves taken by symbol name. The parses are the same; the file is the same every time."""
    names = table["tokens"]  # number -> symbol name
    symbols = {old: new for new, old in enumerate(sorted(names, key=lambda number: names[number]))}
    states: dict[int, int] = {}
    walk = [table["start_states"][start] for start in sorted(table["start_states"])]
    while walk:
        state = walk.pop(0)
        if state in states:
            continue
        states[state] = len(states)
        moves = table["states"][state]
        walk += [arg for symbol, (action, arg) in sorted(moves.items(), key=lambda move: names[move[0]]) if action == 0]
    if len(states) != len(table["states"]):
        raise ValueError("a state of the CEL parser's table is not reached from its start")
    return {"tokens": {symbols[number]: name for number, name in sorted(names.items(), key=lambda item: item[1])},
            "states": {states[old]: {symbols[symbol]: (action, states[arg] if action == 0 else arg)
                                     for symbol, (action, arg) in sorted(table["states"][old].items(),
                                                                         key=lambda move: names[move[0]])}
                       for old in sorted(states, key=states.__getitem__)},
            "start_states": {start: states[state] for start, state in sorted(table["start_states"].items())},
            "end_states": {start: states[state] for start, state in sorted(table["end_states"].items())}}


def write_tables() -> None:
    TABLES.write_text(tables_text())


def _install_parser() -> None:
    """celpy's parser, from the tables analysed in advance (fleet/cel_tables.py): celpy analyses its grammar in every
    process otherwise, about 0.18 s of each command's start-up. The tables are plain data in this package, so
    nothing is loaded from outside it (an earlier round kept them in the cache folder, where Lark can only save them
    with pickle). If the installed celpy or Lark is not the one they were made from, celpy builds the parser itself
    (`make cel-tables` writes them again; a test fails until then)."""
    if celparser.CELParser.CEL_PARSER is not None:
        return
    from fleet import cel_tables

    if cel_tables.KEY == grammar_key():
        celparser.CELParser.CEL_PARSER = lark.Lark._load_from_dict(cel_tables.DATA, cel_tables.MEMO, **_callbacks())
    else:
        celparser.CELParser()


_install_parser()
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
