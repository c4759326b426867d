"""The cluster-wide objects a platform stack shares with every other user of its cluster: the bundled Gateway API and
inference-extension CRDs are adopted when already there and never deleted by our destroy (components/crds.py), as
the platform programs register them (under mocks)."""

from __future__ import annotations

import pathlib

import pytest

from automation.execution.programs import program_for, stack_config
from automation.projects import project_of
from automation.checks.offline import Registered, run, unwrap
from automation.planning.stacks import desired_state
from components.args import cluster_args
from components.serving_stack import release_values
from fleet.validate import load_fleet

ROOT = pathlib.Path(__file__).resolve().parent.parent
KUBECONFIG = "apiVersion: v1\nkind: Config\n"


@pytest.fixture(scope="module")
def examples():
    fleet = load_fleet([str(ROOT / "examples")]).fleet
    return fleet, desired_state(fleet).specs


def _crd_groups(resources: list[Registered]) -> list[Registered]:
    return [r for r in resources if r.type == "kubernetes:yaml/v2:ConfigGroup"
            and any(o["kind"] == "CustomResourceDefinition" for o in unwrap(r.inputs)["objs"])]


@pytest.mark.parametrize("stack, config", [
    ("platform-byo-eu", {"modelplane:byo-eu-kubeconfig": KUBECONFIG}),  # Existing: shared with its other teams
    ("platform-gke-us-central", {}),  # GKE 1.34 ships the Gateway API CRDs itself
    ("platform-eks-us-west", {}),
    ("gateway", {"modelplane:controlPlaneKubeconfig": KUBECONFIG}),  # a control plane no platform stack manages
])
def test_bundled_crds_are_adopted_and_never_deleted(examples, stack, config):
    fleet, specs = examples
    spec = specs[stack]
    resources = run(program_for(spec, fleet), project_of(spec.kind), spec.name, {**stack_config(spec), **config},
                    list(config))
    groups = _crd_groups(resources)
    assert groups, "the program installs no CRDs"
    providers = {r.name: unwrap(r.inputs) for r in resources if r.type == "pulumi:providers:kubernetes"}
    for group in groups:
        assert group.options.get("retainOnDelete") is True, group.name  # inherited by every CRD the group creates
        assert providers[group.provider].get("upsertExistingObjects") in (True, "true"), group.provider
        for crd in unwrap(group.inputs)["objs"]:
            assert crd["metadata"]["annotations"]["pulumi.com/patchForce"] == "true", crd["metadata"]["name"]
    # only the CRDs adopt: anything else already in the cluster is refused, not silently taken over
    adopting = {name for name, given in providers.items() if given.get("upsertExistingObjects") in (True, "true")}
    others = [r for r in resources if r.type.startswith("kubernetes:") and r not in groups]
    assert others and not [r.name for r in others if r.provider in adopting]


def test_removing_cert_manager_keeps_its_crds(examples):
    """Its CRDs are chart templates: without keep, uninstalling the release deletes every Certificate in the cluster."""
    fleet, _ = examples
    assert release_values("cert-manager", cluster_args(fleet, "byo-eu"))["crds"] == {"enabled": True, "keep": True}
