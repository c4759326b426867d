"""`modelplane local up|status|env|down`: the local fleet's whole life, over `control_plane.py`'s processes.

`up` starts (or completes) a control plane for every Existing InferenceCluster of the fleet, publishes each
cluster's simulated hardware (`hardware.py`), and installs the add-ons a platform team would have installed on such
a cluster (on one whose add-ons its platform team manages, `existing.addons: Verify`, every chart's CRDs too). It is
idempotent: a cluster already up is left running, and its hardware and CRDs re-applied.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from automation.execution.kube import KubeClient, KubeError
from automation.local import control_plane, pki as pki_
from automation.local.control_plane import LocalCluster, LocalFleet, LocalFleetError
from automation.local.hardware import hardware
from automation.local.toolchain import CONTROL_PLANE, Toolchain, ToolchainMissing
from fleet.validate import Fleet


@dataclass(frozen=True)
class ClusterState:
    name: str
    server: str
    kubeconfig: str
    up: bool
    nodes: int | None  # Nodes the API server holds (None: not reachable)


def existing_clusters(fleet: Fleet) -> list:
    return [ic for ic in fleet.of("InferenceCluster") if ic.spec.cluster.source == "Existing"]


def stages_file(fleet: LocalFleet, tools: Toolchain) -> Path:
    """kwok's Stages: the ones it ships (printed by our kwok-stages) and the local fleet's own."""
    try:
        shipped = subprocess.run([str(tools.binary("kwok-stages"))], capture_output=True, text=True, check=True,
                                 timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise LocalFleetError(f"kwok-stages failed ({type(exc).__name__}): run `make toolchain` again") from None
    own = resources.files("automation.local").joinpath("data/stages.yaml").read_text()
    path = fleet.folder / "stages.yaml"
    path.write_text(shipped.rstrip() + "\n---\n" + own)
    return path


def up(fleet: Fleet, state: Path, tools: Toolchain, say=print) -> list[LocalCluster]:
    clusters = existing_clusters(fleet)
    if not clusters:
        raise LocalFleetError("the fleet has no InferenceCluster with source Existing: a local fleet runs only those "
                              "(GKE, EKS, AKS, Nebius, Vultr and Civo clusters need their clouds)")
    missing = tools.missing(CONTROL_PLANE)
    if missing:
        raise ToolchainMissing(f"the local fleet needs {', '.join(missing)}: run `make toolchain` (it builds the "
                               "real engine from pinned Go modules; about an hour the first time on 2 cores)")
    local = LocalFleet.load(control_plane.local_folder(state))
    pki = pki_.ensure(local.folder / "pki")
    stages = stages_file(local, tools)
    write_chart_sources(local.folder)
    control_plane.start_etcd(local, tools)
    classes = {c.name: c for c in fleet.of("InferenceClass")}
    started = []
    for ic in clusters:
        current = local.clusters.get(ic.name)
        if current and current.lws_webhook_port and all(p.alive() for p in current.processes):
            cluster = current
            say(f"{ic.name}: already up at {cluster.server}")
        else:
            if current:
                control_plane.stop_cluster(local, ic.name)
            say(f"{ic.name}: starting a control plane (kube-apiserver, kube-controller-manager, kube-scheduler, kwok)")
            cluster = control_plane.start_cluster(local, ic.name, tools, pki, stages, install_addons)
        api = _client(cluster)
        if ic.existing_block.addons == "Verify":
            for crd in platform_team_crds():
                _apply(api, crd)
            say(f"{ic.name}: its add-ons are its platform team's (existing.addons: Verify): installed every chart's "
                "CRDs as stand-ins, no chart")
        made = hardware(ic, classes)
        for obj in made.device_classes + made.nodes + made.slices + made.storage + lws_webhooks(cluster, pki):
            _apply(api, obj)
        devices = sum(len(s["spec"]["devices"]) for s in made.slices)
        say(f"{ic.name}: up at {cluster.server}; {len(made.nodes)} simulated node(s), {devices} simulated device(s); "
            f"kubeconfig {cluster.kubeconfig}")
        started.append(cluster)
    return started


def chart_sources_file(state: Path) -> Path:
    return control_plane.local_folder(state) / "chart-sources.json"


def write_chart_sources(folder: Path) -> None:
    """The stand-in charts, and the chart sources that point a local cluster's platform stack at them
    (automation/execution/pulumi_runner.py reads them for the clusters of this local fleet)."""
    import json

    from automation.local import standin_charts

    sources = standin_charts.write(folder / "charts")
    (folder / "chart-sources.json").write_text(json.dumps(sources, indent=2, sort_keys=True))


def _client(cluster: LocalCluster) -> KubeClient:
    return KubeClient(Path(cluster.kubeconfig), timeout=30, cluster=f"local cluster {cluster.name}")


def install_addons(cluster: LocalCluster) -> None:
    """What the local fleet's platform team has installed before any stack runs: the Gateway API and inference
    extension CRDs the project bundles (as GKE ships the Gateway API's). The platform stacks adopt them
    (components/crds.py), as they would on such a cluster."""
    from components import crds

    api = _client(cluster)
    for crd in crds.gateway_api() + crds.inference_extension() + [disaggregated_sets_crd()]:
        _apply(api, crd)


def disaggregated_sets_crd() -> dict:
    """The built LeaderWorkerSet controller also runs a DisaggregatedSet controller, which exits when its kind is not
    served. Nothing of ours makes DisaggregatedSets: a stand-in CRD keeps the controller up."""
    from automation.local.standin_charts import crd

    return crd("disaggregatedset.x-k8s.io", "DisaggregatedSet", ["v1"])


LWS_WEBHOOKS = (  # (kind of webhook, name, path, resources, operations, on pods of a LeaderWorkerSet only)
    ("Mutating", "mleaderworkerset.lws.modelplane.local", "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
     ("leaderworkerset.x-k8s.io", "leaderworkersets"), ("CREATE", "UPDATE"), False),
    ("Mutating", "mpod.lws.modelplane.local", "/mutate--v1-pod", ("", "pods"), ("CREATE",), True),
    ("Validating", "vleaderworkerset.lws.modelplane.local", "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
     ("leaderworkerset.x-k8s.io", "leaderworkersets"), ("CREATE", "UPDATE"), False),
    ("Validating", "vpod.lws.modelplane.local", "/validate--v1-pod", ("", "pods"), ("CREATE", "UPDATE"), True),
)


def lws_webhooks(cluster: LocalCluster, pki: pki_.Pki) -> list[dict]:
    """The LeaderWorkerSet controller's admission webhooks, as its chart registers them but by URL on loopback (where
    `control_plane.start_lws` serves them), so the API server never dials a simulated pod."""
    import base64

    ca = base64.b64encode(pki.ca.read_bytes()).decode()
    out = []
    for kind in ("Mutating", "Validating"):
        hooks = [{"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
                  "timeoutSeconds": 10,
                  "clientConfig": {"url": f"https://127.0.0.1:{cluster.lws_webhook_port}{path}", "caBundle": ca},
                  "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": list(operations),
                             "resources": [resource]}],
                  **({"objectSelector": {"matchExpressions": [
                      {"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}} if pods_only else {})}
                 for hook_kind, name, path, (group, resource), operations, pods_only in LWS_WEBHOOKS
                 if hook_kind == kind]
        out.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": f"{kind}WebhookConfiguration",
                    "metadata": {"name": "modelplane-local-lws"}, "webhooks": hooks})
    return out


def platform_team_crds() -> list[dict]:
    """What the platform team of a local cluster whose add-ons it manages (`existing.addons: Verify`) has installed
    besides the bundled CRDs (`install_addons`): the CRDs of every chart the project would install (stand-ins,
    automation/local/standin_charts.py), so that `up` finds them served; no chart and no controller."""
    from automation.local import standin_charts
    from components.versions import CHARTS

    return [crd for spec in CHARTS.values() for crd in standin_charts.chart_crds(spec)]


def _apply(api: KubeClient, obj: dict) -> None:
    """Server-side apply, retried while the API server is still settling (a kind served a moment later)."""
    import time

    for attempt in range(20):
        try:
            api.apply(obj)
            if obj["kind"] == "Node":  # the capacity is status: a kubelet would report it
                api.apply_status(obj)
            return
        except KubeError as exc:
            if exc.status not in (404, 409, 429, 500, 503) or attempt == 19:
                raise
            time.sleep(0.5)


def status(state: Path) -> list[ClusterState]:
    local = LocalFleet.load(control_plane.local_folder(state))
    out = []
    for name, cluster in sorted(local.clusters.items()):
        alive = bool(cluster.processes) and all(p.alive() for p in cluster.processes)
        nodes = None
        if alive:
            try:
                nodes = len(KubeClient(Path(cluster.kubeconfig), timeout=5).list("v1", "Node", None))
            except KubeError:
                nodes = None
        out.append(ClusterState(name, cluster.server, cluster.kubeconfig, alive and nodes is not None, nodes))
    return out


def down(state: Path, purge: bool = False) -> list[str]:
    """Stops every process; `purge` also deletes the clusters' data (etcd, PKI, kubeconfigs, logs, stand-in charts)."""
    import shutil

    local = LocalFleet.load(control_plane.local_folder(state))
    stopped = control_plane.stop(local)
    if local.file.exists():
        local.file.unlink()
    if purge and local.folder.is_dir():
        shutil.rmtree(local.folder)
    return stopped


def env_lines(state: Path, tools: Toolchain) -> list[str]:
    """Shell lines that put the toolchain first on PATH and name the local clusters' kubeconfigs (as
    `minikube docker-env` prints them: `eval "$(modelplane local env)"`)."""
    from automation.planning.secret_sources import kubeconfig_env

    local = LocalFleet.load(control_plane.local_folder(state))
    lines = [f"export PATH={shlex.quote(str(tools.folder))}:\"$PATH\""]
    lines.append(f"export PULUMI_HOME={shlex.quote(str(tools.pulumi_home))}")
    configs = [c.kubeconfig for _, c in sorted(local.clusters.items())]
    for name, cluster in sorted(local.clusters.items()):
        lines.append(f"export {kubeconfig_env(name)}={shlex.quote(cluster.kubeconfig)}")
    if configs:
        lines.append(f"export KUBECONFIG={shlex.quote(':'.join(configs))}")
    return lines
