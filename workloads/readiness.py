"""When Pulumi considers a Kubernetes object ready, and what a workload says to be waited for.

pulumi-kubernetes 4.x awaits a few built-in kinds by itself; any other object is "ready" once the API
server accepted it, unless its `pulumi.com/waitFor` annotation says what to wait for
(`pulumi.com/skipAwait: "true"` turns waiting off). One table, read by composition (which annotates
the workloads), the deployability check and the test double of the CLI.
"""

from __future__ import annotations

from typing import Mapping

AWAITED_BY_PULUMI = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "Pod", "Service",
                               "PersistentVolumeClaim", "Ingress"})
# The condition each workload controller sets once its pods are ready (a model stack's success means serving).
READY_WHEN = {"LeaderWorkerSet": "condition=Available",  # LWS: every group's pods ready
              "DynamoGraphDeployment": "condition=Ready"}  # Dynamo operator: every component ready


def awaited(kind: str, annotations: Mapping[str, str]) -> bool:
    """Would pulumi-kubernetes wait for this object to be ready before its step succeeds?"""
    if annotations.get("pulumi.com/skipAwait") == "true":
        return False
    return bool(annotations.get("pulumi.com/waitFor")) or kind in AWAITED_BY_PULUMI


# The provider's yaml/v2 ConfigGroup orders its objects by this annotation (sigs.k8s.io/cli-utils' depends-on): an
# object named in it is created first. It may name only objects of the same group, or the whole group fails.
DEPENDS_ON = "config.kubernetes.io/depends-on"
POD_OWNERS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "LeaderWorkerSet")


def _pod_specs(obj: dict) -> list[dict]:
    spec = obj.get("spec") or {}
    if obj["kind"] == "LeaderWorkerSet":
        group = spec.get("leaderWorkerTemplate") or {}
        templates = [group.get("leaderTemplate"), group.get("workerTemplate")]
    else:
        templates = [spec.get("template")]
    return [t["spec"] for t in templates if t and t.get("spec")]


def _needs(pod: dict) -> set[tuple[str, str, str]]:
    """(group, kind, name) of what a pod needs to exist before it can be made or started."""
    out = {("", "ServiceAccount", pod["serviceAccountName"])} if pod.get("serviceAccountName") else set()
    out |= {("resource.k8s.io", "ResourceClaimTemplate", c["resourceClaimTemplateName"])
            for c in pod.get("resourceClaims") or [] if c.get("resourceClaimTemplateName")}
    for volume in pod.get("volumes") or []:
        if (volume.get("configMap") or {}).get("name"):
            out.add(("", "ConfigMap", volume["configMap"]["name"]))
        if (volume.get("secret") or {}).get("secretName"):
            out.add(("", "Secret", volume["secret"]["secretName"]))
        if (volume.get("persistentVolumeClaim") or {}).get("claimName"):
            out.add(("", "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]))
    return out


def with_prerequisites(objects: list[dict]) -> list[dict]:
    """Each workload among `objects` names, in its DEPENDS_ON annotation, the objects among `objects` that its pods
    need (their ServiceAccount, ResourceClaimTemplates, mounted ConfigMaps, Secrets and claims), so the engine creates
    those first. Without it the engine may start a workload's step first, and the step then waits for pods that
    cannot be made yet: with `--parallel N`, N such steps hold every slot and the stack waits for its readiness
    timeout (an hour), as the real engine showed with a model stack's engine and endpoint-picker Deployments at 2.
    Objects outside `objects` (a cache's claim, in its own stack) are never named."""
    from workloads.service_routing import PLACEHOLDER_ANNOTATION

    present = {(o["apiVersion"].rpartition("/")[0], o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
               for o in objects  # a placeholder Secret is made beside the group (components/workload_objects.py)
               if PLACEHOLDER_ANNOTATION not in (o["metadata"].get("annotations") or {})}
    for obj in objects:
        if obj["kind"] not in POD_OWNERS:
            continue
        namespace = obj["metadata"].get("namespace", "")
        needed = sorted({(group, kind, name) for pod in _pod_specs(obj) for group, kind, name in _needs(pod)
                         if (group, kind, namespace, name) in present})
        if needed:
            meta = obj["metadata"]
            meta["annotations"] = {**(meta.get("annotations") or {}), DEPENDS_ON: ",".join(
                f"{group}/namespaces/{namespace}/{kind}/{name}" for group, kind, name in needed)}
    return objects
