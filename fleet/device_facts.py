"""What a device selector can see of a device kind, and the DRA CEL dialect's limits: shared by the interpreter
(fleet/cel.py), the answers kept of it (fleet/device_selectors.py) and the inventory, with nothing to load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_COST = 100_000  # evaluator steps, for the static estimate and the evaluation budget alike
MAX_LENGTH = 10_240  # characters, as Kubernetes' CELSelectorExpressionMaxLength (also the API's field cap)
MAX_OBJECT_COST = MAX_COST  # the sum over one object's selectors: one object costs at most about a second a device


@dataclass(frozen=True)
class DeviceFacts:
    """What a selector can see of one device kind: hashable, so results can be cached.

    attributes: ((key, (type, value)), ...) with type one of string|version|bool|int.
    capacity:   ((key, quantity string), ...)
    """

    driver: str
    attributes: tuple[tuple[str, tuple[str, Any]], ...] = ()
    capacity: tuple[tuple[str, str], ...] = ()


def depth_bound(error: str | None) -> bool:
    """Whether a selector's error says the interpreter ran out of stack (celpy recurses per node): an answer of
    where it was asked from, not of the selector, so neither the interpreter nor the kept answers remember it."""
    return error is not None and ("recursion" in error or "nested too deeply" in error)
