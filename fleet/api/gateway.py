"""InferenceGateway: the fleet's front door (a singleton named `default`)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from fleet.api.common import Resource, Rule, Str, Strict


class MetalLB(Strict):
    addressPool: Annotated[str, Str(1)]


class Traefik(Strict):
    version: Annotated[str, Str(1)]
    loadBalancer: Literal["MetalLB"] | None = None
    metallb: MetalLB | None = None


class InferenceGatewaySpec(Strict):
    backend: Literal["Traefik"]
    traefik: Traefik | None = None


class InferenceGateway(Resource):
    kind: Literal["InferenceGateway"]
    spec: InferenceGatewaySpec
    status: dict[str, Any] | None = None

    namespaced: ClassVar[bool] = False


def inference_gateway_rules(ig: InferenceGateway) -> Rule:
    if ig.spec.backend == "Traefik" and ig.spec.traefik is None:
        yield ("spec", "traefik"), "backend Traefik needs the traefik block"
    if ig.spec.traefik and ig.spec.traefik.loadBalancer == "MetalLB" and ig.spec.traefik.metallb is None:
        yield ("spec", "traefik", "metallb"), "loadBalancer MetalLB needs the metallb block"
