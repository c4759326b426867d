"""What a cluster's Dynamo platform is made of, beyond the chart: its values and the ModelExpress server. Plain
manifests, so tests check them against the bundled upstream CRDs; the platform stack (components/serving_stack.py)
creates them after the `dynamo-platform` release.

- **Values** (dynamo-platform 1.2.1): Grove and the KAI scheduler installed as the chart's subcharts
  (`global.grove.install`, `global.kai-scheduler.install`; the operator then turns its Grove integration on, and
  Dynamo's topology-aware placement needs KAI); `dynamo-operator.upgradeCRD` kept on, so the operator's
  `crd-apply` init container applies its release's CRDs on every upgrade (Helm's `crds/` only installs them the
  first time); and, where ModelExpress runs, `dynamo-operator.modelExpressURL`, from which the operator injects
  `MODEL_EXPRESS_URL` into the graphs' pods.
- **Grove's topology**: where the cluster's classes declare levels (fleet/topology.py), Grove's operator
  configuration (the `grove` subchart's `config.topologyAwareScheduling`) turns topology-aware scheduling on with
  those levels. Grove v0.1.0-alpha.8 (the subchart of dynamo-platform 1.2.1) then makes the ClusterTopology
  `grove-topology` from them at start, the only one it reads, and accepts the graphs' `packDomain`s; with it off
  (the chart's default) its PodCliqueSet webhook refuses every topology constraint. Nothing else creates a
  ClusterTopology: one of another name would be ignored.
- **ModelExpress** (WeightStreaming): the server as the ModelExpress chart runs it (one Deployment, its gRPC port
  8001 behind a Service; no persistence, no metrics): Dynamo 1.2.1 ships no ModelExpress chart.
"""

from __future__ import annotations

from collections.abc import Sequence

NAMESPACE = "dynamo-system"
MODEL_EXPRESS = "modelexpress-server"
MODEL_EXPRESS_PORT = 8001
MODEL_EXPRESS_URL = f"http://{MODEL_EXPRESS}.{NAMESPACE}.svc.cluster.local:{MODEL_EXPRESS_PORT}"


def platform_values(model_express: bool, levels: Sequence[tuple[str, str]] = ()) -> dict:
    """The release's values; `levels` the cluster's topology levels (domain, node label), broadest first."""
    operator: dict = {"upgradeCRD": True}
    if model_express:
        operator["modelExpressURL"] = MODEL_EXPRESS_URL
    values: dict = {"global": {"grove": {"install": True}, "kai-scheduler": {"install": True}},
                    "dynamo-operator": operator}
    if levels:  # Grove refuses topology-aware scheduling without levels: left off (its default) where none
        values["grove"] = {"config": {"topologyAwareScheduling": {
            "enabled": True, "levels": [{"domain": domain, "key": key} for domain, key in levels]}}}
    return values


def model_express_objects(image: str) -> list[dict]:
    labels = {"app.kubernetes.io/name": MODEL_EXPRESS, "app.kubernetes.io/managed-by": "modelplane"}
    meta = {"name": MODEL_EXPRESS, "namespace": NAMESPACE, "labels": labels}
    probe = {"tcpSocket": {"port": MODEL_EXPRESS_PORT}, "initialDelaySeconds": 5, "periodSeconds": 10}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": MODEL_EXPRESS}},
                 "template": {"metadata": {"labels": labels}, "spec": {"containers": [{
                     "name": "server", "image": image,
                     "ports": [{"name": "grpc", "containerPort": MODEL_EXPRESS_PORT, "protocol": "TCP"}],
                     "env": [{"name": "MODEL_EXPRESS_SERVER_PORT", "value": str(MODEL_EXPRESS_PORT)},
                             {"name": "MX_METADATA_NAMESPACE", "value": NAMESPACE}],
                     "readinessProbe": probe, "livenessProbe": probe,
                     "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}},
    }
    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta,
               "spec": {"selector": {"app.kubernetes.io/name": MODEL_EXPRESS},
                        "ports": [{"name": "grpc", "port": MODEL_EXPRESS_PORT, "targetPort": MODEL_EXPRESS_PORT}]}}
    return [deployment, service]
