"""Smaller compatibility items with the reference's users' manifests."""

from __future__ import annotations

import yaml

from automation.planning.stacks import desired_state
from components.args import control_plane_cluster
from fleet.validate import load_fleet
from tests.manifests import cache, cluster, deployment, gateway, gpu_class, run
from tests.rendering import find, rendered

L4 = gpu_class("l4", 1, "23034Mi")


def test_a_cluster_without_node_pools_offers_no_capacity_but_can_host_the_gateway():
    control = cluster("control", pools=())
    del control["spec"]["nodePools"]
    loaded = run(L4, control, cluster("gpus", pools=(("gpu", "l4", 1),)), deployment("qwen", replicas=2), gateway())
    assert not loaded.errors, [str(p) for p in loaded.errors]
    assert control_plane_cluster(loaded.fleet, "control") == "control"
    desired = desired_state(loaded.fleet, control_plane="control")
    assert {r.cluster for r in desired.plan.replicas} == {"gpus"}  # one fits; the pool-less cluster offers nothing
    assert desired.plan.unscheduled[0].missing == 1


def test_an_observed_device_count_of_zero_means_no_capacity_not_an_error():
    observed = cluster("a", pools=(("gpu", "l4", 2),))
    device = {"name": "gpu", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com", "count": 0,
              "attributes": {"productName": {"string": "NVIDIA L4"}}, "capacity": {"memory": {"value": "23034Mi"}}}
    observed["status"] = {"gateway": {"address": "10.0.0.1"}, "gpuPools": [{"name": "gpu", "nodes": 2, "devices": [device]}],
                          "conditions": [{"type": "Ready", "status": "True"}]}
    loaded = run(L4, observed, deployment("qwen"))
    assert not loaded.errors, [str(p) for p in loaded.errors]
    plan = desired_state(loaded.fleet).plan
    assert not plan.replicas and plan.unscheduled[0].missing == 1


def test_the_hydration_job_expires_and_leaves_the_stack_once_the_cache_is_ready():
    ready = cache()
    ready["status"] = {"clusters": [{"name": "a", "phase": "Ready"}, {"name": "b", "phase": "Hydrating"}]}
    _, result = rendered(L4, cluster("a"), cluster("b"), ready, gateway())
    jobs = {t: o for s, t, o in result.objects() if o["kind"] == "Job"}
    assert set(jobs) == {"b"} and jobs["b"]["spec"]["ttlSecondsAfterFinished"] == 3600
    claims = {t for s, t, o in result.objects() if o["kind"] == "PersistentVolumeClaim"}
    assert claims == {"a", "b"}  # the weights stay
    assert find(result, "Job", target="a") == []


def test_variant_files_of_one_object_say_which_file_to_drop_and_each_loads_alone(tmp_path):
    first, second = tmp_path / "gateway-metallb.yaml", tmp_path / "gateway-cloud.yaml"
    first.write_text(yaml.safe_dump(gateway()))
    second.write_text(yaml.safe_dump(gateway()))
    loaded = load_fleet([str(first), str(second)])
    (problem,) = loaded.errors
    assert "two variants of one object: give only one of the files" in problem.message
    assert str(first) in problem.message and str(second) in problem.message
    assert not load_fleet([str(first)]).errors and not load_fleet([str(second)]).errors
