"""Everyday use, round three: what `validate` says when it matters (issue 32's CLI findings), one case each."""

from __future__ import annotations

from tests.manifests import cluster, deployment, errors, gpu_class, run, service


def test_a_zone_outside_its_clusters_region_is_refused():
    eks = cluster("e", source="EKS", pools=(("p", "l4", 1),))
    eks["spec"]["cluster"]["eks"]["region"] = "us-west2"  # a typo of us-west-2
    eks["spec"]["nodePools"][0]["zones"] = ["us-west-2a"]
    found = errors(gpu_class("l4", provider="EKS"), eks)
    assert found == ["spec.nodePools[0].zones[0]: zone 'us-west-2a' is not in the cluster's region 'us-west2' "
                     "(EKS zones there start with 'us-west2')"]
    eks["spec"]["cluster"]["eks"]["region"] = "us-west-2"
    assert errors(gpu_class("l4", provider="EKS"), eks) == []
    gke = cluster("g", source="GKE", pools=(("p", "l4", 1),))
    gke["spec"]["nodePools"][0]["zones"] = ["us-east1-b"]
    assert [e.split(":")[0] for e in errors(gpu_class("l4", provider="GKE"), gke)] == ["spec.nodePools[0].zones[0]"]


def test_an_invalid_class_is_reported_once_not_also_as_missing():
    bad = gpu_class("l4")
    bad["spec"]["devices"][0]["count"] = "x"
    found = errors(bad, gpu_class("l40"), cluster("c", pools=(("p", "l4", 1),)))
    assert found == ["spec.devices[0].count: must be a valid integer"]


def test_errors_come_in_file_and_line_order():
    bad = gpu_class("z")
    bad["spec"]["devices"][0]["count"] = "x"
    loaded = run(cluster("c", pools=(("p", "missing", 1),), source="GKE"), bad)
    assert [p.line for p in loaded.errors] == sorted(p.line for p in loaded.errors) and len(loaded.errors) == 2


def test_a_service_whose_selector_matches_nothing_is_a_warning():
    md = deployment("qwen")
    chat, ok = service("chat"), service("ok")
    chat["spec"]["endpoints"][0]["selector"]["matchLabels"] = {"app": "nothing"}
    ok["spec"]["endpoints"][0]["selector"]["matchLabels"]["modelplane.ai/cluster"] = "anywhere"  # placement's to say
    loaded = run(md, chat, ok)
    assert loaded.errors == []
    assert [(p.object, p.path) for p in loaded.warnings] == [
        ("ModelService/chat", "spec.endpoints[0].selector.matchLabels")]
    assert "routes nothing" in loaded.warnings[0].message
