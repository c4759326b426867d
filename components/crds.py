"""The Gateway API and inference-extension CRDs, installed from the bundled upstream files.

These are the CRDs no chart of ours installs (Envoy Gateway and Traefik are told not to), so
each has one owner per cluster: the serving stack, or the fleet gateway on a control-plane
cluster that no platform stack manages. The same files are the schemas `render` checks against.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

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
