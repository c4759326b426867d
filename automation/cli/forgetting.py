"""`up --prune --forget CLUSTER`: the stacks of a cluster that left the manifests, gone with its API server, leave
the backend. Which clusters may be forgotten, and the command that forgets them after a run that could not reach
one."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from automation.cli.stack_options import StackRun

if TYPE_CHECKING:
    from automation.execution.orchestrator import Report
    from automation.execution.session import Prepared


def departed(prepared: Prepared) -> list[str]:
    """Clusters the record has a platform stack of that the manifests no longer have."""
    from fleet.stack_id import StackId, StackKind

    ids = [StackId.parse(name) for name in prepared.recorded]
    fleet = {ic.name for ic in prepared.fleet.of("InferenceCluster")}
    return sorted({str(i.cluster) for i in ids if i.kind == StackKind.platform and str(i.cluster) not in fleet})


def forget_problem(run: StackRun, prepared: Prepared) -> str | None:
    """Why `--forget` cannot name these clusters, or None: only a cluster that left the manifests and whose stacks
    are recorded can be forgotten (a cluster of the fleet never is)."""
    fleet = {ic.name for ic in prepared.fleet.of("InferenceCluster")}
    for cluster in run.forget:
        if cluster in fleet:
            return (f"--forget {cluster}: InferenceCluster/{cluster} is in the manifests; remove it from them first "
                    "(a cluster of the fleet is never forgotten)")
        if cluster not in departed(prepared):
            return f"--forget {cluster}: the record has no stack of a cluster {cluster}"
    return None


def forget_command(run: StackRun, clusters: list[str]) -> str:
    """`modelplane up` with this run's manifests, state, backend, fleet and kubeconfigs, forgetting `clusters`."""
    words = ["modelplane", "up", *(w for path in run.paths for w in ("-f", path)), "--prune", "--yes-destroy-clusters"]
    for option, value in (("--state", run.state if run.state != ".modelplane" else None), ("--backend", run.backend),
                          ("--fleet", run.fleet_name), ("--control-plane", run.control_plane)):
        words += [option, value] if value else []
    words += [w for pair in run.kubeconfig for w in ("--kubeconfig", pair)]
    words += [w for cluster in clusters for w in ("--forget", cluster)]
    return shlex.join(words)


def forget_hint(run: StackRun, prepared: Prepared, report: Report) -> str | None:
    """After a run that failed on a cluster that does not answer: the command that forgets the clusters that left
    the manifests (when there are any left to forget)."""
    if not any(o.result is not None and o.result.unreachable for o in report.failed):
        return None
    gone = [cluster for cluster in departed(prepared) if cluster not in run.forget]
    if not gone:
        return None
    return (f"{', '.join(gone)} left the manifests, and a cluster with objects of these stacks does not answer: "
            "nothing there could be deleted. If it is gone for good, forget its stacks (they leave the backend; "
            f"whatever is still on the cluster stays there, unmanaged): {forget_command(run, gone)}")
