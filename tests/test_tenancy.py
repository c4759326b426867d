"""Team namespaces on workload clusters: the reserved names and the namespaces the isolation admits are the
platform's own, and the quota counts what the plan gives a team."""

from __future__ import annotations

from components.serving_stack import SYSTEM_NAMESPACE
from components.versions import CHARTS, chart
from fleet import tenancy
from tests.manifests import cluster, deployment, gateway, gpu_class, member
from tests.rendering import rendered
from workloads import tenancy as objects


def test_every_namespace_the_platform_installs_into_is_reserved_for_it():
    platform = {spec.namespace for spec in CHARTS.values()} | {SYSTEM_NAMESPACE}
    assert platform <= tenancy.RESERVED, platform - tenancy.RESERVED


def test_the_network_policy_admits_the_namespaces_the_platform_really_uses():
    assert objects.GATEWAY_PROXY_NAMESPACE == chart("envoy-gateway").namespace
    assert objects.METRICS_NAMESPACE == chart("prometheus").namespace


def test_the_quota_counts_copies_pods_and_devices_per_class_with_the_rolling_surge_of_plain_deployments():
    l4x4 = gpu_class("l4x4", 4, "23034Mi")
    engines = [{"name": "vllm", "copies": 3, "members": [member(gpus=2)]}]
    plan, result = rendered(l4x4, cluster("a", pools=(("gpu", "l4x4", 4),)),
                            deployment("big", namespace="team-a", engines=engines), gateway())
    (quota,) = [o for o in result.stacks["team-team-a.a"]["a"] if o["kind"] == "ResourceQuota"]
    # 3 copies x 2 GPUs, plus ceil(3 / 4) = 1 surge pod x 2 GPUs during a rolling update
    assert quota["spec"]["hard"] == {"gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "8"}
    assert objects.replica_devices(plan.replicas[0])["gpu.nvidia.com"] == 8


def test_multi_node_engines_count_every_node_and_get_no_surge():
    l4 = gpu_class("l4", 1, "23034Mi")
    engines = [{"name": "vllm", "members": [member("Leader"), member("Worker", nodes=3)]}]
    plan, _ = rendered(l4, cluster("a", pools=(("gpu", "l4", 8),)),
                       deployment("wide", namespace="team-a", engines=engines, modelCacheRef=None), gateway())
    assert objects.replica_devices(plan.replicas[0])["gpu.nvidia.com"] == 4  # leader + 3 workers, LWS: no surge
