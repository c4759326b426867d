"""`cross_object_problems(fleet, about=obj)`, which a portal write asks for its own deployment (the whole fleet's
checks were a third of a write at 500 clusters), says exactly what the whole fleet's check says about that object:
the fleet's problems are the union of every object's, each in the order the whole check gives it."""

from collections import Counter

from fleet.validate import cross_object_problems
from tests.manifests import cache, cluster, deployment, gateway, gpu_class, member, mutate, run, service


def fleet_with_every_kind_of_cross_object_problem():
    dynamo = member(image="nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.4.0")
    nvlink = mutate(deployment("packed", namespace="team-a", engines=[{"name": "vllm", "members": [dynamo]}]),
                    "spec.template.spec.engines[0].capabilities", ["NVLinkDomain"])
    wide = deployment("wide", namespace="team-a", engines=[{"name": "vllm", "members": [
        member("Leader"), member("Worker", nodes=2)]}])
    unknown_attribute = deployment("odd", namespace="team-b", engines=[{"name": "vllm", "members": [
        member(cel="device.attributes['gpu.nvidia.com'].nonsense == 'x'")]}])
    bad_literal = deployment("lit", namespace="team-b", engines=[{"name": "vllm", "members": [
        member(cel="device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('20 Gi')) >= 0")]}])
    missing_cache = mutate(deployment("cached", namespace="team-a"), "spec.template.spec.modelCacheRef",
                           {"name": "absent"})
    system = deployment("sys", namespace="kube-system")
    unsupported = mutate(cluster("c2", pools=(("gpu", "missing", 1),)), "spec.cluster.existing.identitySecretRef",
                         {"name": "identity"})
    provisioned = cluster("c3", pools=(("gpu", "l4", 1),), source="GKE")  # l4 has no provisioning block
    return run(gpu_class("l4"), cluster("c1"), unsupported, provisioned, gateway(), cache("weights", "team-a"),
               nvlink, wide, unknown_attribute, bad_literal, missing_cache, system,
               deployment("plain", namespace="team-a"), service("lonely", namespace="team-a", deployment_name="none"),
               service("qwen", namespace="team-a", deployment_name="plain")).fleet


def test_each_objects_problems_are_what_the_whole_fleets_check_says_about_it():
    fleet = fleet_with_every_kind_of_cross_object_problem()
    whole = cross_object_problems(fleet)
    kinds = {p.object.split("/")[0] for p in whole}
    assert kinds >= {"InferenceCluster", "ModelDeployment", "ModelService"}, whole  # the fleet covers them
    assert len(whole) == 10 and any("NVLink" in p.message for p in whole), whole
    union: Counter = Counter()
    for obj in fleet.objects:
        mine = cross_object_problems(fleet, about=obj)
        assert all(p.object == f"{obj.kind}/{obj.name}" for p in mine)
        assert mine == [p for p in whole if p.object == f"{obj.kind}/{obj.name}"]  # names are unique here
        union.update(mine)
    assert union == Counter(whole)
