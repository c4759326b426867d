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


# ---- the fleet axis: spec.replicas, driven by KEDA on the control plane -------------------------------------
#
#    modelplane.ai/fleet-autoscaling: keda                   turn it on
#    modelplane.ai/fleet-autoscaling-max-replicas: "4"       required: the most replicas (clusters), 1..10
#    modelplane.ai/fleet-autoscaling-min-replicas: "1"       default 1; 0 parks it when idle (a query that sees
#                                                            demand with no replica running wakes it: below)
#    modelplane.ai/fleet-autoscaling-threshold: "10"         default 10: target value per replica
#    modelplane.ai/fleet-autoscaling-query: <PromQL>         default: waiting requests summed over every cluster
#
# A KEDA ScaledObject in the control-plane cluster scales the ModelDeployment itself through the scale subresource
# of the portal's aggregated API (docs/portal.md); the fleet's Prometheus (one that sees every workload cluster)
# is the InferenceGateway's `modelplane.ai/fleet-prometheus` annotation. Both axes can be on at once.
#
# From zero: KEDA itself scales a target at 0 to max(min, 1) once the query's value is above 0 (its activation), and
# the HPA it makes takes over from 1. The default query reads the deployment's own pods, so at 0 it reads nothing and
# never wakes it: with min-replicas 0 and no query, validation warns (`zero_without_demand`).

FLEET_PREFIX = "modelplane.ai/fleet-autoscaling"
FLEET_PROMETHEUS = "modelplane.ai/fleet-prometheus"  # on the InferenceGateway: the fleet-wide Prometheus' URL
MAX_REPLICAS = 10  # spec.replicas' bound


@dataclass(frozen=True)
class FleetAutoscaling:
    min_replicas: int
    max_replicas: int
    threshold: str
    query: str | None


def parse_fleet(annotations: dict[str, str] | None) -> tuple[FleetAutoscaling | None, list[tuple[str, str]]]:
    """(settings or None when off, errors as (annotation key, message)), as `parse` for the copies axis."""
    annotations = annotations or {}
    keys = {k for k in annotations if k.startswith(FLEET_PREFIX)}
    if not keys:
        return None, []
    mode = annotations.get(FLEET_PREFIX)
    if mode != "keda":
        return None, [(FLEET_PREFIX, f"must be 'keda' to turn fleet autoscaling on (found {mode!r})" if mode
                       else f"set {FLEET_PREFIX}: keda to use the other {FLEET_PREFIX}-* annotations")]
    errors = [(key, "unknown fleet autoscaling annotation") for key in sorted(keys - {
        FLEET_PREFIX, f"{FLEET_PREFIX}-max-replicas", f"{FLEET_PREFIX}-min-replicas", f"{FLEET_PREFIX}-threshold",
        f"{FLEET_PREFIX}-query"})]

    def replicas(key: str, default: int | None, low: int, bound: str) -> int | None:
        raw = annotations.get(key)
        if raw is None:
            if default is None:
                errors.append((key, "required when fleet autoscaling is on"))
            return default
        if not raw.isdigit() or not low <= int(raw) <= MAX_REPLICAS:
            errors.append((key, f"must be a whole number from {low} to {MAX_REPLICAS}{bound} (found {raw!r})"))
            return None
        return int(raw)

    max_replicas = replicas(f"{FLEET_PREFIX}-max-replicas", None, 1, "")
    min_replicas = replicas(f"{FLEET_PREFIX}-min-replicas", 1, 0, ", as spec.replicas")
    threshold = annotations.get(f"{FLEET_PREFIX}-threshold", "10")
    try:
        if not float(threshold) > 0:  # `not >` also refuses nan
            raise ValueError
    except ValueError:
        errors.append((f"{FLEET_PREFIX}-threshold", f"must be a positive number (found {threshold!r})"))
    query = annotations.get(f"{FLEET_PREFIX}-query")
    if query is not None and not query.strip():
        errors.append((f"{FLEET_PREFIX}-query", "must be a PromQL query, not empty"))
    if max_replicas is not None and min_replicas is not None and min_replicas > max_replicas:
        errors.append((f"{FLEET_PREFIX}-min-replicas", "is larger than the max replicas"))
    if errors or max_replicas is None or min_replicas is None:
        return None, errors
    return FleetAutoscaling(min_replicas, max_replicas, threshold, query), []


def zero_without_demand(settings: FleetAutoscaling) -> str | None:
    """Why fleet autoscaling that may park the deployment could never wake it, or None."""
    if settings.min_replicas == 0 and settings.query is None:
        return (f"{FLEET_PREFIX}-min-replicas 0 with the default query: it reads the waiting requests of the "
                "deployment's own pods, so once KEDA scales it to 0 nothing measures demand and only a manual scale "
                f"wakes it; give {FLEET_PREFIX}-query a demand signal that exists with no replica running")
    return None
