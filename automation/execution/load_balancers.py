"""A provisioned cluster's cloud load balancers, deleted before the cluster is.

A gateway controller makes its Gateway's Service of type LoadBalancer, and the cloud makes a load balancer for
it; neither is in the platform stack's state. Destroying the stack deletes the Gateway, the controllers and the
cluster in one go, so the cloud's controller never gets to delete the load balancer: it is left behind, and on
EKS its network interfaces and security group keep the subnets and the VPC from being deleted
(DependencyViolation), on GKE its forwarding rules stay and are billed.

So before a provisioned cluster's platform stack is destroyed: every Gateway is deleted (its controller then
deletes its Service; deleting the Service first would have the controller make it again), then every Service of
type LoadBalancer, and the drain waits until they are gone. Kubernetes holds such a Service (the finalizer
`service.kubernetes.io/load-balancer-cleanup`) until the cloud has deleted its load balancer, so gone means
deleted in the cloud.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from automation.execution.kube import ALL_NAMESPACES, KubeAPI, KubeError

GATEWAY = "gateway.networking.k8s.io/v1"
WAIT_SECONDS = 600.0


def _name(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace')}/{meta['name']}"


def _load_balancers(api: KubeAPI) -> list[dict]:
    return [s for s in api.list("v1", "Service", ALL_NAMESPACES) if (s.get("spec") or {}).get("type") == "LoadBalancer"]


def drain(api: KubeAPI, wait_seconds: float = WAIT_SECONDS, poll_seconds: float = 2.0,
          say: Callable[[str], None] = lambda line: None, sleep: Callable[[float], None] = time.sleep,
          clock: Callable[[], float] = time.monotonic, deleted: list[str] | None = None) -> list[str]:
    """Delete the cluster's Gateways, then its LoadBalancer Services, and wait until those are gone; returns
    the Services still there when `wait_seconds` ran out (empty: every load balancer was deleted). The Gateways
    it deleted are appended to `deleted`."""
    try:
        gateways = api.list(GATEWAY, "Gateway", ALL_NAMESPACES)
    except KubeError as exc:
        if exc.status != 404:  # 404: no Gateway API on the cluster, so no Gateway
            raise
        gateways = []
    for gateway in gateways:
        say(f"deleting Gateway {_name(gateway)} (its controller deletes its load balancer)")
        api.delete(GATEWAY, "Gateway", gateway["metadata"]["namespace"], gateway["metadata"]["name"])
        if deleted is not None:
            deleted.append(_name(gateway))
    deadline = clock() + wait_seconds
    while True:
        left = _load_balancers(api)
        if not left:
            return []
        for service in left:
            if not service["metadata"].get("deletionTimestamp"):
                say(f"deleting Service {_name(service)} (type LoadBalancer)")
                api.delete("v1", "Service", service["metadata"]["namespace"], service["metadata"]["name"])
        if clock() >= deadline:
            return sorted(_name(s) for s in left)
        sleep(poll_seconds)


def drained_marker(root: Path, stack: str) -> Path:
    """Where a platform stack is marked when its destroy failed after the drain deleted its cluster's Gateways:
    its state still holds them, so the next `up` runs it (unchanged or not) with a refresh, which finds them gone
    and creates them again. On the machine whose state folder ran the destroy (docs/platform.md)."""
    return Path(root) / "drained" / stack


def drained_stacks(root: Path) -> set[str]:
    folder = Path(root) / "drained"
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()
