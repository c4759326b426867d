"""An Existing cluster whose platform team manages its add-ons (`spec.cluster.existing.addons: Verify`), through the
real CLI, engine and provider: local-fleet/ with local-b in that mode. `modelplane local up` installs, as local-b's
platform team, the bundled CRDs and every chart's CRDs (stand-ins), and no chart. An `up` while one CRD local-b
needs is missing applies nothing anywhere; once it is back, `up` applies every stack and creates no add-on on
local-b: no chart, no CRD, no add-on namespace, while local-a (Install, the default) gets them all."""

from __future__ import annotations

import shutil

import pytest

from automation.execution.kube import ALL_NAMESPACES
from automation.local.standin_charts import STANDIN_LABEL
from components.versions import CHARTS
from tests.realengine.conftest import FLEET, started, wait_for
from tests.realengine.test_real_up import STACKS, running_pods

CRD = "apiextensions.k8s.io/v1"
POOLS = "inferencepools.inference.networking.k8s.io"  # the llama-70b replica on local-b routes to one
ADDON_NAMESPACES = {spec.namespace for spec in CHARTS.values()} - {"kube-system"}


@pytest.fixture(scope="module")
def verify_fleet(tmp_path_factory):
    manifests = tmp_path_factory.mktemp("verify-manifests") / "fleet"
    shutil.copytree(FLEET, manifests)
    path = manifests / "fleet.yaml"
    text = path.read_text()
    assert "name: local-b-kubeconfig\n" in text
    path.write_text(text.replace("name: local-b-kubeconfig\n", "name: local-b-kubeconfig\n      addons: Verify\n"))
    for fleet in started(tmp_path_factory, manifests):
        yield fleet, str(manifests)


def pulumi_managed(crd: dict) -> bool:
    return any("pulumi" in (m.get("manager") or "") for m in crd["metadata"].get("managedFields") or [])


def test_up_with_a_needed_crd_missing_on_the_verify_cluster_applies_nothing(verify_fleet):
    fleet, manifests = verify_fleet
    a, b = fleet.api("local-a"), fleet.api("local-b")
    assert b.delete(CRD, "CustomResourceDefinition", None, POOLS)
    wait_for("the InferencePool CRD gone from local-b", lambda: b.get(CRD, "CustomResourceDefinition", None, POOLS) is None)
    refused = fleet.modelplane("up", "-f", manifests, check=False)
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert "InferenceCluster/local-b: inference.networking.k8s.io/v1 InferencePool is not served" in refused.stderr
    # nothing was applied: no stack in the backend (the refused run did not even open it), nothing of ours on either
    # API server
    backend = fleet.state / "backend"
    assert not [stack for stack in STACKS if backend.exists() and fleet.history(stack) is not None]
    for api in (a, b):
        names = {n["metadata"]["name"] for n in api.list("v1", "Namespace", None)}
        assert not names & {"modelplane-system", "ml-team"} and not names & ADDON_NAMESPACES


def test_once_served_up_applies_every_stack_and_installs_no_addon_on_the_verify_cluster(verify_fleet):
    from components import crds

    fleet, manifests = verify_fleet
    a, b = fleet.api("local-a"), fleet.api("local-b")
    # the platform team puts it back
    for crd in crds.inference_extension():
        if crd["metadata"]["name"] == POOLS:
            b.apply(crd)
    wait_for("the InferencePool CRD served on local-b", lambda: b.get(CRD, "CustomResourceDefinition", None, POOLS))
    fleet.modelplane("up", "-f", manifests)
    for stack in STACKS:
        assert len(fleet.checkpoint(stack)["deployment"].get("resources") or []) > 1, stack
    wait_for("llama-70b's pod running on local-b", lambda: running_pods(b, "ml-team", "llama-70b"))
    assert b.get("gateway.networking.k8s.io/v1", "Gateway", "modelplane-system", "inference-gateway") is not None

    def types(stack: str) -> set[str]:
        return {r["type"] for r in fleet.checkpoint(stack)["deployment"]["resources"]}

    # local-a (Install) gets the add-ons; local-b (Verify) none of them, in the backend and on its API server
    assert "kubernetes:helm.sh/v3:Release" in types("platform-local-a")
    assert not {t for t in types("platform-local-b") if t.startswith(("kubernetes:helm.sh", "kubernetes:yaml"))
                or "CustomResourceDefinition" in t}
    namespaces = {cluster: {n["metadata"]["name"] for n in api.list("v1", "Namespace", None)}
                  for cluster, api in (("local-a", a), ("local-b", b))}
    assert namespaces["local-a"] & ADDON_NAMESPACES and not namespaces["local-b"] & ADDON_NAMESPACES
    controllers = {cluster: api.list("apps/v1", "Deployment", ALL_NAMESPACES, f"{STANDIN_LABEL}=true")
                   for cluster, api in (("local-a", a), ("local-b", b))}
    assert controllers["local-a"] and not controllers["local-b"]
    # the CRDs local-b serves are its platform team's: none was applied by the engine (local-a's were adopted)
    assert [c for c in a.list(CRD, "CustomResourceDefinition", None) if pulumi_managed(c)]
    assert not [c["metadata"]["name"] for c in b.list(CRD, "CustomResourceDefinition", None) if pulumi_managed(c)]
