"""Read live capacity from every cluster that can be reached, in parallel, each within a timeout.

Per cluster, four LISTs (Nodes, ResourceSlices, ResourceClaims of every namespace, this fleet's replica pods), so a
fleet's read grows with its clusters, not its replicas, and takes about the slowest cluster's time. A cluster with no
kubeconfig here, or that does not answer in time, keeps its declared capacity, and the capacity says why: a plan is
never refused because a cluster could not be read.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Mapping

from automation.errors import AutomationError
from automation.execution.kube import ALL_NAMESPACES, KubeAPI, cluster_client
from automation.execution.prerequisites import existing_kubeconfigs
from automation.planning.secret_sources import kubeconfig_env
from fleet.inventory import ClusterView, build_clusters
from fleet.capacity import ClusterCapacity, LiveCapacity, declared
from fleet.live_capacity import REPLICA_LABEL, observe
from fleet.validate import Fleet

TIMEOUT = 10.0  # seconds a cluster's read may take, each request (docs/scheduling.md "Live capacity")
PARALLEL = 16  # clusters read at once

Reader = Callable[[Fleet, ClusterView, dict[str, int | None]], ClusterCapacity]  # (fleet, cluster, autoscaling)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def kubeconfig_paths(fleet: Fleet, given: Mapping[str, str], root: Path) -> dict[str, str]:
    """Each cluster's kubeconfig file, where one is here: an Existing cluster's as `up` finds it; a provisioned
    cluster's from `--kubeconfig CLUSTER=PATH` or $MODELPLANE_KUBECONFIG_<CLUSTER>."""
    found = existing_kubeconfigs(fleet, given, root)
    for ic in fleet.of("InferenceCluster"):
        if ic.name in found:
            continue
        path = given.get(ic.name) or os.environ.get(kubeconfig_env(ic.name))
        if path and Path(path).expanduser().is_file():
            found[ic.name] = str(Path(path).expanduser().resolve())
    return found


def read_cluster(api: KubeAPI, view: ClusterView, autoscaling: dict[str, int | None]) -> ClusterCapacity:
    """One cluster's live capacity through its API (four LISTs). `autoscaling`: each pool's maxNodeCount."""
    nodes = api.list("v1", "Node", None)
    slices = api.list("resource.k8s.io/v1", "ResourceSlice", None)
    claims = api.list("resource.k8s.io/v1", "ResourceClaim", ALL_NAMESPACES)
    pods = api.list("v1", "Pod", ALL_NAMESPACES, label_selector=REPLICA_LABEL)
    return observe(view, autoscaling, nodes, slices, claims, pods, now())


def kube_reader(kubeconfigs: Mapping[str, str], timeout: float = TIMEOUT) -> Reader:
    def read(fleet: Fleet, view: ClusterView, autoscaling: dict[str, int | None]) -> ClusterCapacity:
        with cluster_client(fleet, kubeconfigs, view.name, timeout) as client:
            return read_cluster(client, view, autoscaling)
    return read


def read_capacity(fleet: Fleet, read: Reader, timeout: float = TIMEOUT,
                  clusters: list[str] | None = None) -> LiveCapacity:
    """Every cluster's capacity (`clusters`: only these; the others declared): live where `read` answers within
    `timeout` seconds per request (four requests, so at most four times that a cluster), else declared with why."""
    views = {c.name: c for c in build_clusters(fleet)}
    scaling = {ic.name: {p.name: p.maxNodeCount for p in ic.spec.nodePools} for ic in fleet.of("InferenceCluster")}
    names = [n for n in (clusters if clusters is not None else views) if n in views]
    out: dict[str, ClusterCapacity] = {}
    if not names:
        return LiveCapacity({n: declared(n, "not asked") for n in views})
    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(names)), thread_name_prefix="capacity") as pool:
        futures = {pool.submit(read, fleet, views[name], scaling[name]): name for name in names}
        done, late = wait(futures, timeout=timeout * 4 + 1)
        for future in done:
            name = futures[future]
            try:
                out[name] = future.result()
            except AutomationError as exc:
                out[name] = declared(name, f"not read: {exc}")
        for future in late:
            future.cancel()
            out[futures[future]] = declared(futures[future], f"not read: no answer within {timeout * 4:.0f} s")
    for ic in fleet.of("InferenceCluster"):
        out.setdefault(ic.name, declared(ic.name, "not asked"))
    return LiveCapacity(dict(sorted(out.items())))
