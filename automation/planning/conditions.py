"""Every object's status as the reference's tools read it: its status fields and its conditions.

Computed from what is known, never invented: the plan (placements and shortfalls), what the desired
stacks render (endpoints, which services route to them, where caches stage), and how each stack stands:
applied at the fingerprint the manifests ask for (the recorded state of `up` and of the portal's worker),
queued, running or failed (the portal's runs). A condition whose truth depends on something not yet
applied is `Unknown` (reason `NotApplied`), not `False`; a model stack applied at the desired fingerprint
means Pulumi waited for its workloads to be Available, so its replicas were ready when it finished.

`snapshot()` turns a DesiredState into plain JSON (the portal stores it with each replan);
`with_status()` and `composed()` read only that snapshot and the observations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from textwrap import shorten
from typing import TYPE_CHECKING, Any

from fleet.plan_output import plan_to_dict
from fleet.stack_id import StackId
from workloads.service_routing import PENDING_FRONT_DOOR, backend_service_name, service_address

if TYPE_CHECKING:
    from automation.planning.stacks import DesiredState

API = "modelplane.ai/v1alpha1"


def snapshot(desired: DesiredState) -> dict:
    """What status needs from one planning: JSON, so the portal can store it with the replan that made it."""
    rendered = desired.rendered
    return {
        **plan_to_dict(desired.plan),
        "fingerprints": {name: spec.fingerprint for name, spec in desired.specs.items()},
        "endpoints": [{"namespace": ep.namespace, "name": ep.name, "url": ep.url, "rewritePath": ep.rewrite_path,
                       "labels": dict(ep.labels), "composed": ep.composed} for ep in rendered.endpoints],
        "routes": {f"{ns}/{name}": names for (ns, name), names in sorted(rendered.routes.items())},
        "caches": {f"{ns}/{name}": clusters for (ns, name), clusters in sorted(rendered.cache_clusters.items())},
        "frontDoorTls": rendered.front_door_tls,
        "placementLabels": rendered.placement_labels,
        "credentials": {f"{ns}/{name}": why for (ns, name), why in sorted(rendered.credentials.items())},
    }


@dataclass
class Observed:
    """How the stacks stand: `applied` is the recorded state's stacks ({name: {fingerprint, outputs, appliedAt}}),
    `runs` the latest run per stack where a portal keeps them ({name: {status, fingerprint, finishedAt, log}})."""

    applied: dict[str, dict] = field(default_factory=dict)
    runs: dict[str, dict] = field(default_factory=dict)


@dataclass(frozen=True)
class Standing:
    status: str  # "True" (applied as desired), "False" (working on it, or failed), "Unknown"
    reason: str
    message: str
    since: str | None = None


def standing(stack: str, snap: dict, observed: Observed, verbs: tuple[str, str] = ("Deploying", "Failed")) -> Standing:
    """The desired stack's standing: applied at its desired fingerprint, on its way, failed, or not known."""
    want = snap.get("fingerprints", {}).get(stack)
    applied = observed.applied.get(stack) or {}
    run = observed.runs.get(stack) or {}
    if want is not None and applied.get("fingerprint") == want:
        return Standing("True", "Applied", f"stack {stack} is applied", applied.get("appliedAt"))
    if run.get("status") in ("queued", "running"):
        return Standing("False", verbs[0], f"stack {stack} is {run['status']}", run.get("startedAt"))
    if run.get("status") == "failed" and run.get("fingerprint") in (want, None, ""):
        last = next((line for line in reversed((run.get("log") or "").splitlines()) if line.strip()), "")
        return Standing("False", verbs[1], f"stack {stack} failed: {shorten(last.strip(), 200, placeholder=' ...')}",
                        run.get("finishedAt"))
    if applied:
        return Standing("Unknown", "PendingUpdate", f"stack {stack} is applied, but not the current manifests",
                        applied.get("appliedAt"))
    return Standing("Unknown", "NotApplied", f"stack {stack} has not been applied", None)


def condition(type_: str, status: str, reason: str, message: str, generation: int | None = None,
              since: str | None = None) -> dict:
    out: dict[str, Any] = {"type": type_, "status": status, "reason": reason, "message": message}
    if since:
        out["lastTransitionTime"] = since
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def _generation(body: dict) -> int | None:
    value = body.get("metadata", {}).get("generation")
    return int(value) if value is not None else None


def _from(st: Standing, type_: str, true_reason: str, true_message: str, generation: int | None) -> dict:
    if st.status == "True":
        return condition(type_, "True", true_reason, true_message, generation, st.since)
    return condition(type_, st.status, st.reason, st.message, generation, st.since)


def _output(observed: Observed, stack: str, key: str) -> Any:
    return ((observed.applied.get(stack) or {}).get("outputs") or {}).get(key)


def gateway_address(snap: dict, observed: Observed, fleet_objects: list[dict]) -> str | None:
    """The fleet gateway's address: the gateway stack's output, else an observed InferenceGateway status."""
    found = _output(observed, "gateway", "address")
    if found:
        return found
    gateway = next((o for o in fleet_objects if o["kind"] == "InferenceGateway"), None)
    return ((gateway or {}).get("status") or {}).get("address")


def with_status(body: dict, snap: dict, observed: Observed, fleet_objects: list[dict]) -> dict:
    """The object with its status (the reference's fields and conditions, and this project's additions)."""
    kind = body["kind"]
    meta = body["metadata"]
    namespace, name = meta.get("namespace", ""), meta["name"]
    generation = _generation(body)
    status: dict[str, Any]
    if kind == "ModelDeployment":
        status = _deployment_status(body, snap, observed, generation)
    elif kind == "ModelService" and _v05_gateway(fleet_objects) is not None:
        status = _v05_service_status(namespace, name, snap, observed, fleet_objects, generation)
    elif kind == "ModelService":
        stack = str(StackId.service(namespace, name))
        address = gateway_address(snap, observed, fleet_objects)
        matched = snap.get("routes", {}).get(f"{namespace}/{name}", [])
        st = standing(stack, snap, observed, ("Configuring", "RouteFailed"))
        routing = (_from(st, "RoutingReady", "RouteConfigured", "the route is configured on the fleet gateway",
                         generation) if address or st.status != "True" else
                   condition("RoutingReady", "False", "WaitingForGateway", "the fleet gateway has no address yet",
                             generation))
        status = {
            "address": service_address(address or PENDING_FRONT_DOOR, namespace, name, snap.get("frontDoorTls", False)),
            "conditions": [
                condition("EndpointsResolved", "True", "Resolved", f"Matched {len(matched)} endpoint(s)", generation)
                if matched else
                condition("EndpointsResolved", "False", "NoEndpoints", "no ready endpoint matches the selectors",
                          generation),
                routing],
            "stack": _stack(stack, st, observed),
        }
    elif kind == "ModelEndpoint":
        spec = body.get("spec") or {}
        status = _endpoint_status(namespace, name, snap, observed, generation) if "url" in spec else \
            _v05_endpoint_status(namespace, name, spec, snap, generation)
    elif kind == "ModelCache":
        status = _cache_status(body, snap, observed, generation)
    elif kind == "InferenceCluster":
        stack = str(StackId.platform(name))
        st = standing(stack, snap, observed, ("Provisioning", "ProvisioningFailed"))
        address = _output(observed, stack, "gatewayAddress")
        status = {"conditions": [
            _from(st, "ClusterReady", "ClusterRunning", "the cluster and its GPU pools are provisioned", generation),
            _from(st, "BackendReady", "BackendHealthy", "the serving stack is installed", generation)],
            "stack": _stack(stack, st, observed)}
        # only `address`: the reference's v0.5 also publishes `hostname` and `caCertificate`, and only once the
        # cluster gateway has an address, its own serving CA and a fleet gateway's client CA (fail closed). The
        # platform stack records neither (its fleet listener's certificate is self-signed and never read back, and
        # replicas are reached by per-replica names, not one per cluster), so neither is shown: never invented.
        if address:
            status["gateway"] = {"address": address}
        if _output(observed, stack, "pools"):
            status["gpuPools"] = _output(observed, stack, "pools")
    elif kind == "InferenceGateway" and "clusterName" in (body.get("spec") or {}):
        status = _v05_gateway_status(body, snap, observed, fleet_objects, generation)
    elif kind == "InferenceGateway":
        st = standing("gateway", snap, observed, ("Installing", "InstallFailed"))
        address = gateway_address(snap, observed, fleet_objects)
        status = {"conditions": [_from(st, "ControllerReady", "ControllerHealthy", "the fleet gateway is installed",
                                       generation)]}
        if address:
            status["address"] = address
    elif kind == "InferenceClass":
        status = {"conditions": [condition("Accepted", "True", "Available", "the class is valid", generation)]}
    elif kind == "TeamPolicy":
        governs = ("every namespace without a TeamPolicy of its own" if (body.get("spec") or {}).get("defaultForNamespaces")
                   else f"namespace {name}")
        status = {"conditions": [condition("Accepted", "True", "Enforced", f"governs {governs}: plans, the front door "
                                           "and the portal's writes hold it to this policy", generation)]}
    else:
        status = dict(body.get("status") or {})
    return {**{k: v for k, v in body.items() if k != "status"}, "status": status}


def _v05_gateway(fleet_objects: list[dict]) -> dict | None:
    """The v0.5 InferenceGateway composed (the first by name: workloads/render.py `v05_gateway`), or None."""
    gateways = sorted((o for o in fleet_objects if o["kind"] == "InferenceGateway"
                       and "clusterName" in (o.get("spec") or {})), key=lambda o: o["metadata"]["name"])
    return gateways[0] if gateways else None


def _v05_gateway_status(body: dict, snap: dict, observed: Observed, fleet_objects: list[dict],
                        generation: int | None) -> dict:
    """v0.5's InferenceGateway status (reference §2.1): `address`, `endpoints` (only without TLS),
    `clientCACertificate`, and GatewayReady: GatewayProgrammed once the gateway stack applied with an address; a
    gateway this project does not compose (not the first by name) composes nothing."""
    from workloads.ai_gateway import base_urls

    if ((_v05_gateway(fleet_objects) or {}).get("metadata") or {}).get("name") != body["metadata"]["name"]:
        return {"conditions": [condition("GatewayReady", "False", "NotComposed", "this project composes one v0.5 "
                                         "InferenceGateway per fleet: the first by name", generation)]}
    st = standing("gateway", snap, observed, ("WaitingForGateway", "GatewayFailed"))
    address = gateway_address(snap, observed, fleet_objects)
    cluster = body["spec"]["clusterName"]
    status: dict[str, Any] = {}
    if address:
        status["address"] = address
        urls = base_urls(address, bool(body["spec"].get("tls")))
        if urls:
            status["endpoints"] = urls
    ca = _output(observed, "gateway", "clientCACertificate")
    if ca:
        status["clientCACertificate"] = ca
    if st.status == "True" and not address:
        ready = condition("GatewayReady", "False", "WaitingForGateway",
                          f"Waiting for the Gateway on cluster {cluster} to be programmed", generation)
    else:
        ready = _from(st, "GatewayReady", "GatewayProgrammed", f"the gateway is programmed on cluster {cluster}",
                      generation)
    status["conditions"] = [ready]
    return status


def _v05_service_status(namespace: str, name: str, snap: dict, observed: Observed, fleet_objects: list[dict],
                        generation: int | None) -> dict:
    """v0.5's ModelService status (reference §2.2): `model`, `routes.{total, ready}` and RoutingReady, over the one
    v0.5 gateway composed (a service its serviceSelector leaves out has no route)."""
    stack = str(StackId.service(namespace, name))
    served = f"{namespace}/{name}" in snap.get("routes", {})
    st = standing(stack, snap, observed, ("WaitingForRoutes", "RouteFailed"))
    address = gateway_address(snap, observed, fleet_objects)
    ready = 1 if served and address and st.status == "True" else 0
    gateway = (_v05_gateway(fleet_objects) or {}).get("metadata", {}).get("name", "")
    if not served:
        routing = condition("RoutingReady", "False", "NoGatewayServesThisService", "No InferenceGateway's "
                            "serviceSelector matches this service's labels, so no caller can reach it", generation)
    elif not address:
        routing = condition("RoutingReady", "False", "WaitingForGateways",
                            f"Waiting for gateways to come up: {gateway}", generation)
    elif st.status != "True":
        routing = condition("RoutingReady", "False", "WaitingForRoutes", f"Waiting for routes on gateways: {gateway}",
                            generation, st.since)
    else:
        routing = condition("RoutingReady", "True", "RoutesAccepted", "the route is accepted on every gateway",
                            generation, st.since)
    return {"model": f"{namespace}/{name}", "routes": {"total": int(served), "ready": ready},
            "conditions": [routing], "stack": _stack(stack, st, observed)}


def _replica_endpoint(namespace: str, replica: dict, observed: Observed) -> str:
    """The replica's URL behind its cluster's gateway (a marked placeholder until the address is known)."""
    address = _output(observed, str(StackId.platform(replica["cluster"])), "gatewayAddress") or \
        f"{replica['cluster']}.gateway.pending.modelplane.invalid"
    return f"http://{address}/{namespace}/{replica['name']}/v1"


def _stack(stack: str, st: Standing, observed: Observed) -> dict:
    run = observed.runs.get(stack)
    return {"name": stack, "standing": st.status,
            "lastRun": {k: run[k] for k in ("id", "status", "operation") if k in run} if run else None}


def by_deployment(snap: dict) -> dict[str, tuple[list[dict], dict | None]]:
    """deployment -> (its placed replicas, its shortfall): built once per snapshot, which is never changed once
    made (a list of 100 deployments' statuses would otherwise scan a fleet's thousands of replicas 100 times)."""
    index = snap.get(INDEX)
    if index is None:
        index = {}
        for r in snap.get("replicas", []):
            index.setdefault(r["deployment"], ([], None))[0].append(r)
        for u in snap.get("unscheduled", []):
            index[u["deployment"]] = (index.get(u["deployment"], ([], None))[0], u)
        snap[INDEX] = index  # two threads may build it at once: both build the same
    return index


INDEX = "__by_deployment"  # not JSON: never stored, never sent


def _deployment_status(body: dict, snap: dict, observed: Observed, generation: int | None) -> dict:
    meta = body["metadata"]
    namespace, name = meta.get("namespace", "default"), meta["name"]
    key = f"{namespace}/{name}"
    desired = body["spec"]["replicas"]
    placed, missing = by_deployment(snap).get(key, ([], None))
    stack = str(StackId.model(namespace, name))
    st = standing(stack, snap, observed, ("ModelStarting", "ModelFailed"))
    ready = len(placed) if st.status == "True" else 0
    if desired == 0:
        scheduled, replicas_ready = _parked(stack, observed, generation)
    elif not placed:
        scheduled = condition("ReplicasScheduled", "False", "InsufficientCapacity",
                              f"0 of {desired} replicas scheduled" + (f": {missing['reasons'][0]}" if missing and
                                                                     missing["reasons"] else ""), generation)
        replicas_ready = condition("ReplicasReady", "False", "NoReplicasScheduled", "no replica is scheduled",
                                   generation)
    else:
        scheduled = condition("ReplicasScheduled", "True" if not missing else "False",
                              "ReplicasCreated" if not missing else "InsufficientCapacity",
                              f"Scheduled {len(placed)} of {desired} replicas", generation)
        replicas_ready = (condition("ReplicasReady", "True", "AllReplicasReady", f"{ready} of {len(placed)} ready",
                                    generation, st.since) if st.status == "True" else
                          condition("ReplicasReady", st.status, st.reason, st.message, generation, st.since))
    conditions = [scheduled, replicas_ready]
    ref = ((body["spec"].get("template") or {}).get("spec") or {}).get("modelCacheRef")
    if ref:
        known = f"{namespace}/{ref['name']}" in snap.get("caches", {})
        conditions.append(condition("ModelCacheResolved", "True" if known else "False",
                                    "ModelCacheResolved" if known else "ModelCacheNotFound",
                                    f"ModelCache {namespace}/{ref['name']}" + (" stages to its clusters" if known else
                                                                               " is not in the fleet"), generation))
    return {
        "replicas": {"desired": desired, "placed": len(placed), "total": len(placed), "ready": ready},
        "placement": [{**{k: r[k] for k in ("name", "cluster", "index", "engines")},
                       "endpoint": _replica_endpoint(namespace, r, observed)} for r in placed],
        "unscheduled": {"missing": missing["missing"], "reasons": missing["reasons"]} if missing else None,
        "conditions": conditions,
        "stack": _stack(stack, st, observed),
    }


SCALED_TO_ZERO = "ScaledToZero"  # the reference's v0.5 reason (its PR #454); one upstream revision: NoReplicasDesired


def _parked(stack: str, observed: Observed, generation: int | None) -> tuple[dict, dict]:
    """`spec.replicas: 0`: nothing to schedule, so both conditions are True (as a Deployment at zero is Available),
    once nothing of the deployment is applied. While its model stack is still recorded, its replicas still run
    until `up` destroys it: ReplicasReady says so instead."""
    scheduled = condition("ReplicasScheduled", "True", SCALED_TO_ZERO, "0 replicas desired", generation)
    applied = observed.applied.get(stack) or {}
    if applied:
        return scheduled, condition("ReplicasReady", "Unknown", "PendingUpdate",
                                    f"scaled to zero: stack {stack} is still applied until `up` destroys it",
                                    generation, applied.get("appliedAt"))
    return scheduled, condition("ReplicasReady", "True", SCALED_TO_ZERO, "0 replicas desired", generation)


def routed_endpoints(snap: dict) -> set[tuple[str, str]]:
    """(namespace, name) of every endpoint a ModelService routes to: built once per snapshot, as `by_deployment`
    (listing a fleet's thousands of endpoints would otherwise scan its thousands of routes for each)."""
    found = snap.get(ROUTED)
    if found is None:
        found = {(key.split("/")[0], name) for key, names in snap.get("routes", {}).items() for name in names}
        snap[ROUTED] = found
    return found


ROUTED = "__routed"  # not JSON: never stored, never sent
DERIVED = (INDEX, ROUTED)  # what a snapshot keeps of itself: an overlay of it makes its own


def _endpoint_status(namespace: str, name: str, snap: dict, observed: Observed, generation: int | None) -> dict:
    routed = (namespace, name) in routed_endpoints(snap)
    st = standing(str(StackId.endpoints(namespace)), snap, observed, ("WaitingForBackend", "BackendFailed"))
    if not routed:
        return {"conditions": [condition("RoutingReady", "False", "NotRouted", "no ModelService routes to it",
                                         generation)]}
    status: dict[str, Any] = {"conditions": [_from(st, "RoutingReady", "BackendConfigured",
                                                   "its backend Service and EndpointSlice exist", generation)]}
    if st.status == "True":
        status["routing"] = {"backendName": backend_service_name(name)}
    return status


def _v05_endpoint_status(namespace: str, name: str, spec: dict, snap: dict, generation: int | None) -> dict:
    """v0.5's ModelEndpoint status (reference §2.3, [F-ME]): EndpointReady, on its credential's Secret alone (v0.3.1's
    RoutingReady is gone). A credential the last planning did not see (a write not planned yet) is waiting."""
    secret = (((spec.get("credential") or {}).get("apiKey") or {}).get("secretRef") or {}).get("name")
    if secret is None:
        return {"conditions": [condition("EndpointReady", "True", "EndpointUsable", "the endpoint has no credential",
                                         generation)]}
    why = snap.get("credentials", {}).get(f"{namespace}/{name}")
    if why is None:
        ready = condition("EndpointReady", "False", "WaitingForCredential", f"Waiting for Secret {secret} to resolve",
                          generation)
    elif why:
        ready = condition("EndpointReady", "False", "CredentialMissing", why, generation)
    else:
        ready = condition("EndpointReady", "True", "EndpointUsable", f"Secret {secret} holds the credential",
                          generation)
    return {"conditions": [ready]}


def _cache_status(body: dict, snap: dict, observed: Observed, generation: int | None) -> dict:
    meta = body["metadata"]
    namespace, name = meta.get("namespace", "default"), meta["name"]
    clusters = snap.get("caches", {}).get(f"{namespace}/{name}", [])
    st = standing(str(StackId.cache(namespace, name)), snap, observed, ("Pending", "Failed"))
    # the stack does not wait for the hydration Job: once applied, each cluster is hydrating (or done)
    phase = {"True": "Hydrating", "False": "Failed" if st.reason == "Failed" else "Pending"}.get(st.status, "Pending")
    conditions = [
        condition("ClustersMatched", "True" if clusters else "False", "Matched" if clusters else "NoClusters",
                  f"stages to {len(clusters)} cluster(s)" if clusters else "no cluster matches the selector or has "
                                                                           "an RWX storage class", generation),
        condition("ArtifactReady", "Unknown" if clusters else "False",
                  ("Hydrating" if st.status == "True" else st.reason) if clusters else "NoClusters",
                  "the hydration Jobs' completion is not observed by this project" if st.status == "True"
                  else st.message, generation, st.since),
    ]
    return {"clusters": [{"name": c, "phase": phase} for c in clusters], "conditions": conditions,
            "stack": _stack(str(StackId.cache(namespace, name)), st, observed)}


def composed(namespace: str | None, snap: dict, observed: Observed) -> list[dict]:
    """The objects the reference composes and users' tools list: a ModelReplica per placed replica and a
    ModelEndpoint per replica endpoint, read-only, with their status."""
    out: list[dict] = []
    for r in snap.get("replicas", []):
        ns, deployment = r["deployment"].split("/", 1)
        if namespace is not None and ns != namespace:
            continue
        stack = str(StackId.model(ns, deployment))
        st = standing(stack, snap, observed, ("Deploying", "Failed"))
        # the cluster's placement labels (the reference's v0.5), then the managed ones
        labels = {**snap.get("placementLabels", {}).get(r["cluster"], {}), "modelplane.ai/deployment": deployment,
                  "modelplane.ai/cluster": r["cluster"], "modelplane.ai/replica-index": str(r["index"])}
        out.append({
            "apiVersion": API, "kind": "ModelReplica",
            "metadata": {"name": r["name"], "namespace": ns, "labels": labels},
            "spec": {"clusterName": r["cluster"], "engines": [
                {"name": e["name"], "copies": e.get("copies", 1), "members": [
                    {"role": m["role"], "nodePoolName": m["pool"]} for m in e["members"]]} for e in r["engines"]]},
            "status": {"conditions": [
                _from(st, "ModelAccepted", "Accepted", "its workloads are created", None),
                _from(st, "ModelReady", "Serving", "its workloads were Available when the stack finished", None)]},
        })
    for ep in snap.get("endpoints", []):
        if ep.get("composed") and (namespace is None or ep["namespace"] == namespace):
            body = {"apiVersion": API, "kind": "ModelEndpoint",
                    "metadata": {"name": ep["name"], "namespace": ep["namespace"], "labels": ep["labels"]},
                    "spec": {"url": ep["url"], "rewritePath": ep["rewritePath"]}}
            out.append({**body, "status": _endpoint_status(ep["namespace"], ep["name"], snap, observed, None)})
    return out
