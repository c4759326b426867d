"""The Gateway API and inference-extension CRDs, installed from the bundled upstream files.

These are the CRDs no chart of ours installs (Envoy Gateway and Traefik are told not to), so
each has one owner per cluster: the serving stack, or the fleet gateway on a control-plane
cluster that no platform stack manages. The same files are the schemas `render` checks against.

They are cluster-wide and shared: other teams' Gateways and HTTPRoutes are objects of them, and
a cluster may have them already (GKE 1.34 ships the Gateway API's). So they are adopted, never
owned: created over what is there (`adopted`, with `ADOPTING`, applied by a provider that upserts)
and never deleted by a destroy (`installed`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import yaml

UPSTREAM = Path(__file__).resolve().parent.parent / "workloads" / "crds" / "upstream"
GATEWAY_API = ["gateway.networking.k8s.io_gatewayclasses.yaml", "gateway.networking.k8s.io_gateways.yaml",
               "gateway.networking.k8s.io_httproutes.yaml", "gateway.networking.k8s.io_referencegrants.yaml",
               # Traefik 3.x's Gateway provider waits on informers for these too: without them it never serves
               "gateway.networking.k8s.io_grpcroutes.yaml", "gateway.networking.k8s.io_tlsroutes.yaml",
               # external https endpoints: TLS from the gateway to the provider
               "gateway.networking.k8s.io_backendtlspolicies.yaml"]
# InferencePool, and the objectives and rewrites the llm-d endpoint picker watches (it fails to start without them)
INFERENCE = ["inference.networking.k8s.io_inferencepools.yaml", "inference.networking.x-k8s.io_inferenceobjectives.yaml",
             "llm-d.ai_inferenceobjectives.yaml", "llm-d.ai_inferencemodelrewrites.yaml"]
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# pulumi-kubernetes' per-object force: a field another manager owns on an adopted CRD (kubectl's, the cloud's) is
# taken over instead of failing the apply with a conflict
ADOPTING = {"pulumi.com/patchForce": "true"}


@lru_cache(maxsize=None)
def load(*files: str) -> tuple[dict, ...]:
    out = []
    for name in files:
        for doc in yaml.load_all((UPSTREAM / name).read_text(), Loader=_Loader):
            if doc:
                doc.pop("status", None)
                doc.get("metadata", {}).pop("creationTimestamp", None)
                out.append(doc)
    return tuple(out)


def gateway_api() -> list[dict]:
    return list(load(*GATEWAY_API))


def inference_extension() -> list[dict]:
    return list(load(*INFERENCE))


def adopted(objects: list[dict]) -> list[dict]:
    """The CRDs as applied: each annotated `ADOPTING` (copies; the cached files stay the schemas)."""
    return [{**o, "metadata": {**o["metadata"], "annotations": {**(o["metadata"].get("annotations") or {}), **ADOPTING}}}
            for o in objects]


def installed(name: str, objects: list[dict], adopting: k8s.Provider, parent: pulumi.Resource,
              depends_on: list) -> k8s.yaml.v2.ConfigGroup:
    """The CRDs' ConfigGroup. `adopting`: a provider that upserts (components/kubernetes.py `provider(adopt=True)`),
    so a CRD already in the cluster is patched, not refused as existing (pulumi-kubernetes 4.29+ creates with a
    plain create). `retain_on_delete`, which the group's objects inherit (the provider registers them as its
    children): neither a destroy nor a replacement ever deletes a CRD, and with it every object of that kind in
    the cluster, another team's included."""
    return k8s.yaml.v2.ConfigGroup(name, objs=adopted(objects), opts=pulumi.ResourceOptions(
        provider=adopting, parent=parent, depends_on=depends_on, retain_on_delete=True))
