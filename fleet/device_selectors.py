"""Device selectors as validation and the planner ask about them, answered once per content and kept on disk.

The interpreter (fleet/cel.py, on celpy, Lark and pendulum) is about a tenth of a command's start-up. Two kinds
of answer are kept: validation's of an expression (its compile error, its static cost, its literals that never
parse, the attributes it reads) and a selector's on a device kind (fleet/device_facts.py: whether it matches,
and why not when its evaluation failed). Each is a function of its inputs and of the dialect's code alone, so
they are kept in one entry of the cache folder, keyed by a digest of that code (fleet/cel.py,
fleet/device_facts.py, fleet/quantity.py, fleet/semver.py, this module, and the installed celpy and Lark by their
files' sizes and times) and read and written as fleet/disk_cache.py says: only in the user's own folder,
authenticated. A command whose selectors and device kinds were all seen before never loads the interpreter; a
miss asks it (loading it then), and what was learnt is written back when the process ends (the portal's replan
worker, which ends with os._exit, writes nothing back). An answer that depends on how deep the interpreter's
stack was (a recursion limit reached) is never kept. A planner given an interpreter of its own (other limits:
tests, benchmarks) asks it directly.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import json
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, NamedTuple, Protocol

from fleet.device_facts import MAX_COST, MAX_LENGTH, MAX_OBJECT_COST, DeviceFacts, depth_bound  # noqa: F401
from fleet.disk_cache import DiskCache

if TYPE_CHECKING:
    from fleet.cel import CelEvaluator

ENTRY = "cel-answers.json"
KEPT = 20_000  # answers of each kind kept, in the entry and in memory (see _Answers)


class ExpressionFacts(NamedTuple):
    """Validation's answers about one expression."""

    error: str | None  # why it does not compile (None: it does)
    cost: int  # its static cost estimate (0 when it does not parse)
    literal_problems: tuple[str, ...]  # quantity("...") and semver("...") literals that never parse
    attributes: frozenset[str]  # the attributes it reads, as <domain>/<id> (or a bare id)


class SelectorEvaluator(Protocol):
    """What the planner asks of selectors (fleet/matching.py)."""

    evaluations: int

    def matches_all(self, expressions: Iterable[str], device: DeviceFacts) -> bool: ...

    def error(self, expressions: Iterable[str], device: DeviceFacts) -> str | None: ...


def _code_digest() -> str:
    """The dialect's code: this project's CEL modules by content, celpy's and Lark's files by size and time."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256(sys.version.encode())
    for name in ("cel.py", "device_facts.py", "quantity.py", "semver.py", "device_selectors.py"):
        digest.update(name.encode() + b"\0" + (here / name).read_bytes())
    folders: set[str] = set()
    for package in ("celpy", "lark", "re2", "pendulum"):  # the interpreter, its parser, regexes, times
        spec = importlib.util.find_spec(package)  # found, not imported
        for folder in list(spec.submodule_search_locations or []) if spec is not None else []:
            folders.add(str(Path(folder).parent))
            for entry in sorted(os.scandir(folder), key=lambda e: e.name):
                if entry.name.endswith((".py", ".lark")):
                    info = entry.stat()
                    digest.update(f"{package}/{entry.name} {info.st_size} {info.st_mtime_ns}\0".encode())
    for folder in sorted(folders):  # each installed distribution's list of files: any reinstall changes it
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.name.endswith(".dist-info") and entry.name.split("-")[0].lower() in DISTRIBUTIONS:
                try:
                    info = os.stat(Path(entry.path) / "RECORD")
                except OSError:
                    continue
                digest.update(f"{entry.name} {info.st_size} {info.st_mtime_ns}\0".encode())
    return digest.hexdigest()


DISTRIBUTIONS = frozenset({"cel_python", "lark", "google_re2", "pendulum"})


def _device_key(expression: str, device: DeviceFacts) -> str | None:
    """The answer's key, or None for facts JSON cannot hold (such an answer is asked, never kept)."""
    try:
        return json.dumps([expression, device.driver, device.attributes, device.capacity])
    except (TypeError, ValueError):  # ValueError: an integer of more digits than Python converts to text
        return None


def _facts(value: object) -> ExpressionFacts:
    """An entry's facts about an expression, of the types they have (ValueError otherwise)."""
    if not (isinstance(value, list) and len(value) == 4 and (value[0] is None or isinstance(value[0], str))
            and type(value[1]) is int and isinstance(value[2], list) and isinstance(value[3], list)
            and all(isinstance(x, str) for x in value[2] + value[3])):
        raise ValueError("not an expression's facts")
    return ExpressionFacts(value[0], value[1], tuple(value[2]), frozenset(value[3]))


def _result(value: object) -> tuple[bool, str | None]:
    if not (isinstance(value, list) and len(value) == 2 and type(value[0]) is bool
            and (value[1] is None or isinstance(value[1], str))):
        raise ValueError("not a selector's result")
    return value[0], value[1]


class _Answers:
    """The process's answers: read from the cache folder on first use (the folder of that moment is the one
    written back to), and what this process learnt written back at exit, merged with what another process wrote
    meanwhile. In memory at most KEPT of each kind are held (the portal lives for months): past that, they are
    dropped with the interpreter's own caches, and asked again when needed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loaded = False
        self.digest = ""
        self.cache = DiskCache()
        self.expressions: dict[str, ExpressionFacts] = {}
        self.results: dict[str, tuple[bool, str | None]] = {}
        # what this process learnt, as it is written back
        self.new_expressions: dict[str, ExpressionFacts] = {}
        self.new_results: dict[str, tuple[bool, str | None]] = {}
        self.saving = False
        self.engine: CelEvaluator | None = None

    def load(self) -> None:
        if self.loaded:
            return
        with self.lock:
            if self.loaded:
                return
            self.digest = _code_digest()
            self.cache = DiskCache()
            self.expressions, self.results = self._read()
            self.loaded = True

    def _read(self) -> tuple[dict[str, ExpressionFacts], dict[str, tuple[bool, str | None]]]:
        content = self.cache.read(ENTRY)
        try:
            data = json.loads(content) if content is not None else {}
            if not isinstance(data, dict) or data.get("code") != self.digest:
                return {}, {}
            return ({e: _facts(f) for e, f in data["expressions"].items() if isinstance(e, str)},
                    {k: _result(r) for k, r in data["results"].items() if isinstance(k, str)})
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # another shape: start afresh
            return {}, {}

    def learning(self) -> None:
        """An answer is being asked of the interpreter: what is learnt is written back at exit."""
        with self.lock:
            if not self.saving:
                atexit.register(self.save)
                self.saving = True

    def interpreter(self) -> CelEvaluator:
        """The planner's interpreter (validation's questions go to fleet/cel.py's own)."""
        self.learning()
        with self.lock:
            if self.engine is None:
                from fleet.cel import CelEvaluator  # loads celpy: only when an answer is missing

                self.engine = CelEvaluator()
            return self.engine

    def keep_facts(self, expression: str, facts: ExpressionFacts) -> None:
        if len(expression) > MAX_LENGTH or depth_bound(facts.error):  # refused by its length, or by the stack
            return
        self._bound()
        self.expressions[expression] = self.new_expressions[expression] = facts

    def keep_result(self, key: str, result: tuple[bool, str | None]) -> None:
        if depth_bound(result[1]):
            return
        self._bound()
        self.results[key] = self.new_results[key] = result

    def _bound(self) -> None:
        if len(self.expressions) < KEPT and len(self.results) < KEPT:
            return
        with self.lock:
            self.expressions, self.results = {}, {}
            if len(self.new_expressions) >= KEPT or len(self.new_results) >= KEPT:
                self.new_expressions, self.new_results = {}, {}
            self.engine = None  # and the interpreter's compiled programs and results with it

    def save(self) -> None:
        """Best effort: what this process learnt, merged with the entry as it is now (which is dropped when the
        two together would be over KEPT), authenticated."""
        with self.lock:
            learnt_expressions, learnt_results = dict(self.new_expressions), dict(self.new_results)
            if not learnt_expressions and not learnt_results:
                return
            expressions, results = self._read()
            if len(expressions) + len(learnt_expressions) > KEPT or len(results) + len(learnt_results) > KEPT:
                expressions, results = {}, {}
            expressions.update(learnt_expressions)
            results.update(learnt_results)
            self.cache.write(ENTRY, json.dumps({
                "code": self.digest,
                "expressions": {e: [f.error, f.cost, list(f.literal_problems), sorted(f.attributes)]
                                for e, f in expressions.items()},
                "results": {k: list(r) for k, r in results.items()}}))


ANSWERS = _Answers()


def expression_facts(expression: str) -> ExpressionFacts:
    ANSWERS.load()
    found = ANSWERS.expressions.get(expression)
    if found is None:
        ANSWERS.learning()
        from fleet import cel  # loads celpy: only when an answer is missing

        error = cel.check_expression(expression)
        found = ExpressionFacts(error, cel.selector_cost(expression), cel.literal_problems(expression),
                                cel.referenced_attributes(expression))
        ANSWERS.keep_facts(expression, found)
    return found


def check_expression(expression: str) -> str | None:
    """A compile error message, or None if the expression compiles."""
    return expression_facts(expression).error


def selector_cost(expression: str) -> int:
    """The static estimate of one selector (0 for one that does not parse: that is its own error)."""
    return expression_facts(expression).cost


def literal_problems(expression: str) -> tuple[str, ...]:
    return expression_facts(expression).literal_problems


def referenced_attributes(expression: str) -> frozenset[str]:
    return expression_facts(expression).attributes


class KeptEvaluator:
    """The planner's selectors, answered from what was kept (`ANSWERS`), else by the interpreter: the same answers
    as fleet/cel.py's CelEvaluator with its default limits, and the same errors told (`error` tells those of the
    selectors `matches_all` asked, as the interpreter's evaluator does of those it evaluated: each list stops
    at its first non-match). `evaluations`: those the interpreter ran for it."""

    def __init__(self) -> None:
        self.evaluations = 0
        self.asked: set[tuple[str, DeviceFacts]] = set()

    def _result(self, expression: str, device: DeviceFacts) -> tuple[bool, str | None]:
        key = _device_key(expression, device)
        found = ANSWERS.results.get(key) if key is not None else None
        if found is None:
            engine = ANSWERS.interpreter()
            before = engine.evaluations
            matched = engine.matches(expression, device)
            self.evaluations += engine.evaluations - before
            found = (matched, engine.error([expression], device))
            if key is not None:
                ANSWERS.keep_result(key, found)
        return found

    def matches_all(self, expressions: Iterable[str], device: DeviceFacts) -> bool:
        ANSWERS.load()
        for expression in expressions:
            self.asked.add((expression, device))
            if not self._result(expression, device)[0]:
                return False
        return True

    def error(self, expressions: Iterable[str], device: DeviceFacts) -> str | None:
        """Why the selectors could not be evaluated on this device (None: they were, and did not match)."""
        return next((error for e in expressions
                     if (e, device) in self.asked and (error := self._result(e, device)[1]) is not None), None)
