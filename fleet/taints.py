"""Taints and tolerations, with the reference's matching rules.

A toleration matches a taint when its effect is empty or equal, and then for `Exists`
its key is empty or equal, for `Equal` its key and value are equal (a missing value is "").
NoSchedule and NoExecute both block new placement; only NoExecute drains kept replicas.
"""

from __future__ import annotations

from typing import Iterable


def tolerates(toleration, taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.operator == "Exists":
        return not toleration.key or toleration.key == taint.key
    return toleration.key == taint.key and (toleration.value or "") == (taint.value or "")


def untolerated(taints: Iterable, tolerations: Iterable, effects: tuple[str, ...]) -> list:
    tolerations = list(tolerations)
    return [t for t in taints if t.effect in effects and not any(tolerates(tol, t) for tol in tolerations)]


def describe(taint) -> str:
    value = f"={taint.value}" if taint.value else ""
    return f"{taint.key}{value}:{taint.effect}"
