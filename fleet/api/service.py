"""ModelService (one OpenAI-compatible endpoint) and ModelEndpoint (one backend of it)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from fleet.api.common import Int, RequiredMatchLabels, Resource, Rule, Str, Strict


class ServiceEndpoint(Strict):
    weight: Annotated[int, Int(1, 1_000_000)] = 1
    selector: RequiredMatchLabels
    # An addition: 0 serves; 1 is overflow, used only when no priority-0 endpoint can take a request (every one
    # unhealthy, or saturated: 429). Needs InferenceGateway backend Envoy (workloads/fleet_data_plane.py).
    priority: Annotated[int, Int(0, 1)] = 0


class ModelServiceSpec(Strict):
    endpoints: list[ServiceEndpoint] = Field(min_length=1)


class ModelService(Resource):
    kind: Literal["ModelService"]
    spec: ModelServiceSpec
    status: dict[str, Any] | None = None


class ModelEndpointSpec(Strict):
    url: Annotated[str, Str(1)]
    rewritePath: str | None = None


class ModelEndpoint(Resource):
    kind: Literal["ModelEndpoint"]
    spec: ModelEndpointSpec
    status: dict[str, Any] | None = None


def model_service_rules(ms: ModelService) -> Rule:
    return iter(())


def model_endpoint_rules(me: ModelEndpoint) -> Rule:
    url = me.spec.url
    if not (url.startswith("http://") or url.startswith("https://")):
        yield ("spec", "url"), f"url {url!r} must start with http:// or https://"
    if me.spec.rewritePath is not None and not me.spec.rewritePath.startswith("/"):
        yield ("spec", "rewritePath"), "rewritePath must start with '/'"
