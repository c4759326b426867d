"""The modelplane.ai/v1alpha1 API: one module per kind, and the table of kinds."""

from typing import Any, Callable, Iterable

from fleet.api.cache import ModelCache, model_cache_rules
from fleet.api.cluster import InferenceCluster, inference_cluster_rules
from fleet.api.common import API_VERSION, GROUP, Resource
from fleet.api.deployment import ModelDeployment, ModelReplica, model_deployment_rules, model_replica_rules
from fleet.api.gateway import InferenceGateway, inference_gateway_rules
from fleet.api.inference_class import InferenceClass, inference_class_rules
from fleet.api.policy import TeamPolicy, team_policy_rules
from fleet.api.service import (ModelEndpoint, ModelRoute, ModelService, model_endpoint_rules, model_route_rules,
                               model_service_rules)

# kind -> (model, cross-field rules). Order is the order summaries are printed in.
# kind -> (model, rules yielding (field path, message) for every problem)
KINDS: dict[str, tuple[type[Resource], Callable[[Any], Iterable[tuple[tuple, str]]]]] = {
    "InferenceClass": (InferenceClass, inference_class_rules),
    "InferenceCluster": (InferenceCluster, inference_cluster_rules),
    "InferenceGateway": (InferenceGateway, inference_gateway_rules),
    "ModelCache": (ModelCache, model_cache_rules),
    "ModelDeployment": (ModelDeployment, model_deployment_rules),
    "ModelReplica": (ModelReplica, model_replica_rules),
    "ModelEndpoint": (ModelEndpoint, model_endpoint_rules),
    "ModelService": (ModelService, model_service_rules),
    "ModelRoute": (ModelRoute, model_route_rules),  # v0.5, machine-generated: read as observed state
    "TeamPolicy": (TeamPolicy, team_policy_rules),  # an addition: what a team may take, and where
}

__all__ = [
    "API_VERSION", "GROUP", "KINDS", "Resource",
    "InferenceClass", "InferenceCluster", "InferenceGateway", "ModelCache",
    "ModelDeployment", "ModelReplica", "ModelEndpoint", "ModelService", "ModelRoute", "TeamPolicy",
]
