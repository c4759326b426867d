"""Autoscaling a replica's copies with KEDA, asked for by ModelDeployment annotations.

Two axes, on purpose: `spec.replicas` is the fleet axis (how many clusters serve the model;
the scheduler places them, and `kubectl scale`-style tools or the portal change it), while
KEDA scales `copies` inside each placed replica on its own cluster, within the bounds
below, from a Prometheus query on that cluster.

    modelplane.ai/autoscaling: keda                  turn it on
    modelplane.ai/autoscaling-max-copies: "4"        required: the most copies per replica
    modelplane.ai/autoscaling-min-copies: "1"        default 1 (0 allows scale to zero)
    modelplane.ai/autoscaling-threshold: "5"         default 5: target value per copy
    modelplane.ai/autoscaling-query: <PromQL>        default: waiting requests of the replica's vLLM pods

Capacity is planned for the maximum: the scheduler reserves devices for max copies, so
scaling up never lands on a node that is not there.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "modelplane.ai/autoscaling"


@dataclass(frozen=True)
class Autoscaling:
    min_copies: int
    max_copies: int
    threshold: str
    query: str | None


def parse(annotations: dict[str, str] | None) -> tuple[Autoscaling | None, list[tuple[str, str]]]:
    """(settings or None when off, errors as (annotation key, message))."""
    annotations = annotations or {}
    keys = {k for k in annotations if k.startswith(PREFIX)}
    if not keys:
        return None, []
    errors = []
    mode = annotations.get(PREFIX)
    if mode != "keda":
        return None, [(PREFIX, f"must be 'keda' to turn autoscaling on (found {mode!r})" if mode
                       else f"set {PREFIX}: keda to use the other {PREFIX}-* annotations")]
    known = {PREFIX, f"{PREFIX}-max-copies", f"{PREFIX}-min-copies", f"{PREFIX}-threshold", f"{PREFIX}-query"}
    for key in sorted(keys - known):
        errors.append((key, "unknown autoscaling annotation"))

    def integer(key: str, default: int | None, low: int) -> int | None:
        raw = annotations.get(key)
        if raw is None:
            if default is None:
                errors.append((key, "required when autoscaling is on"))
            return default
        if not raw.isdigit() or int(raw) < low or int(raw) > 64:
            errors.append((key, f"must be a whole number from {low} to 64 (found {raw!r})"))
            return default
        return int(raw)

    max_copies = integer(f"{PREFIX}-max-copies", None, 1)
    min_copies = integer(f"{PREFIX}-min-copies", 1, 0)
    threshold = annotations.get(f"{PREFIX}-threshold", "5")
    try:
        if float(threshold) <= 0:
            raise ValueError
    except ValueError:
        errors.append((f"{PREFIX}-threshold", f"must be a positive number (found {threshold!r})"))
    if max_copies is not None and min_copies is not None and min_copies > max_copies:
        errors.append((f"{PREFIX}-min-copies", "is larger than the max copies"))
    if errors or max_copies is None or min_copies is None:  # a missing value was reported as an error
        return None, errors
    return Autoscaling(min_copies, max_copies, threshold, annotations.get(f"{PREFIX}-query")), []
