"""The automation layer's inline programs, as the engine would run them (under mocks): references, hosts, owners."""

from __future__ import annotations

import pathlib

import pytest

from automation.checks import offline
from automation.checks.offline import run, unwrap
from automation.checks.offline_preview import all_stacks
from automation.execution.programs import program_for, stack_config
from automation.projects import project_of
from automation.planning.stacks import desired_state
from components.workload_objects import is_placeholder_secret, secret_config_key
from fleet.validate import load_fleet

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def examples():
    fleet = load_fleet([str(ROOT / "examples")]).fleet
    return fleet, desired_state(fleet).specs


def _run(spec, fleet, organization="organization", config=None, secrets=None):
    config = {**stack_config(spec), **(config or {}), **(secrets or {})}
    return run(program_for(spec, fleet), project_of(spec.kind), spec.name, config, list(secrets or {}),
               organization=organization)


def test_stack_references_name_the_backends_organization(examples):
    fleet, specs = examples
    resources = _run(specs["model-ml-team.qwen3-8b"], fleet, organization="acme")
    references = sorted(unwrap(r.inputs)["name"] for r in resources if r.type == "pulumi:pulumi:StackReference")
    assert references == ["acme/modelplane/platform-eks-us-west", "acme/modelplane/platform-gke-us-central"]
    diy = _run(specs["model-ml-team.qwen3-8b"], fleet)  # DIY backends: the literal `organization`
    assert all(unwrap(r.inputs)["name"].startswith("organization/") for r in diy if r.type == "pulumi:pulumi:StackReference")


def test_first_preview_of_a_fresh_fleet_needs_no_platform_outputs(examples, monkeypatch):
    """Before any platform stack applied, its outputs do not exist: downstream programs must still run."""
    fleet, specs = examples
    original = offline.Recorder.new_resource

    def no_outputs(self, args):
        if args.typ == "pulumi:pulumi:StackReference":
            self._last[__import__("threading").get_ident()] = args
            return f"{args.name}-id", {**args.inputs, "outputs": {}}
        return original(self, args)

    monkeypatch.setattr(offline.Recorder, "new_resource", no_outputs)
    from automation.checks.offline_preview import forget, preview_stack

    forget()  # the programs must run again, under these mocks, and what they register here is not kept
    try:
        for name in ("gateway", "model-ml-team.qwen3-8b", "service-ml-team.qwen3-8b", "cache-ml-team.qwen3-coder"):
            preview = preview_stack(specs[name], fleet)
            assert preview.error is None and preview.resources, (name, preview.error)
    finally:
        forget()


def test_gateway_on_a_fleet_cluster_creates_nothing_its_serving_stack_owns(examples):
    fleet, specs = examples
    everything = _run(specs["gateway"], fleet)
    gateway = [r for r in everything if r.type.startswith("kubernetes:")]
    namespaces = [unwrap(r.inputs)["metadata"]["name"] for r in gateway if r.type == "kubernetes:core/v1:Namespace"]
    # the ModelServices' namespace is their team stack's; modelplane-system is the serving stack's
    assert namespaces == []
    assert not [r for r in gateway if r.type == "kubernetes:yaml/v2:ConfigGroup"]  # no CRDs: the serving stack's
    provider = next(r for r in everything if r.type == "pulumi:providers:kubernetes")
    assert unwrap(provider.inputs)["clusterIdentifier"] == "eks-us-west"  # the first cluster by name whose cloud gives its LoadBalancer an address


def test_gateway_on_a_separate_control_plane_creates_its_own_basics(examples):
    fleet, specs = examples
    secret = {"modelplane:controlPlaneKubeconfig": "apiVersion: v1\nkind: Config\n"}
    gateway = _run(specs["gateway"], fleet, secrets=secret)
    types = {r.type for r in gateway}
    assert {"kubernetes:yaml/v2:ConfigGroup", "kubernetes:core/v1:Namespace"} <= types
    assert not [r for r in gateway if r.type == "pulumi:pulumi:StackReference"]
    provider = next(r for r in gateway if r.type == "pulumi:providers:kubernetes")
    assert unwrap(provider.inputs)["clusterIdentifier"] == "control-plane"


def _metallb_fleet(tmp_path):
    text = (ROOT / "stacks" / "fleets" / "existing" / "fleet.yaml").read_text()
    assert "MetalLB" in text
    (tmp_path / "fleet.yaml").write_text(text)
    return load_fleet([str(tmp_path)]).fleet


def test_metallb_comes_with_the_hosts_platform_stack_so_nothing_waits_on_a_later_stack(tmp_path):
    """Regression: the serving Gateway waited for an address that only the later gateway stack's MetalLB gave."""
    fleet = _metallb_fleet(tmp_path)
    previews = {p.name: p for p in all_stacks(fleet)}
    platform = previews["platform-onprem"].resources
    pools = [r for r in platform if r.type == "kubernetes:metallb.io/v1beta1:IPAddressPool"]
    assert pools and not [r for r in previews["gateway"].resources if "metallb" in r.type or "metallb" in r.name]
    gateway = next(r for r in platform if r.type == "kubernetes:gateway.networking.k8s.io/v1:Gateway")
    assert unwrap(gateway.inputs)["metadata"]["annotations"]["pulumi.com/waitFor"].startswith("jsonpath=")
    assert {"onprem-serving-address-pool", "onprem-serving-l2"} <= set(gateway.depends_on)


def test_without_any_load_balancer_the_serving_gateway_does_not_wait_for_an_address(examples):
    fleet, specs = examples
    platform = _run(specs["platform-byo-eu"], fleet, secrets={"modelplane:byo-eu-kubeconfig": "apiVersion: v1\n"})
    gateway = next(r for r in platform if r.type == "kubernetes:gateway.networking.k8s.io/v1:Gateway")
    annotations = unwrap(gateway.inputs)["metadata"]["annotations"]
    assert annotations == {"pulumi.com/skipAwait": "true"}


def test_an_existing_cluster_that_says_it_has_a_load_balancer_waits_for_its_gateways_address(tmp_path):
    """The local fleet's clusters (and an adopted cloud cluster) give LoadBalancers an address: annotated, their
    serving Gateway and the fleet gateway on them wait for it, so the fleet gateway's address is known after the
    first `up` instead of staying empty until a refresh; unannotated, nothing waits, and the fingerprint is the one
    it had before the annotation existed."""
    text = (ROOT / "local-fleet" / "fleet.yaml").read_text()
    assert text.count('modelplane.ai/load-balancer: "true"') == 2
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    (tmp_path / "on" / "fleet.yaml").write_text(text)
    (tmp_path / "off" / "fleet.yaml").write_text(text.replace('modelplane.ai/load-balancer: "true"',
                                                              'modelplane.ai/load-balancer: "yes"'))
    for folder in ("on", "off"):
        (tmp_path / folder / "gateway.yaml").write_text((ROOT / "local-fleet" / "gateway.yaml").read_text())
    waits = {}
    fingerprints = {}
    for folder in ("on", "off"):
        fleet = load_fleet([str(tmp_path / folder)]).fleet
        previews = {p.name: p for p in all_stacks(fleet)}
        for stack in ("platform-local-a", "gateway"):
            gateway = next(r for r in previews[stack].resources
                           if r.type == "kubernetes:gateway.networking.k8s.io/v1:Gateway")
            waits[folder, stack] = "pulumi.com/waitFor" in unwrap(gateway.inputs)["metadata"]["annotations"]
        fingerprints[folder] = desired_state(fleet).specs["platform-local-a"].fingerprint
    assert waits == {("on", "platform-local-a"): True, ("on", "gateway"): True,
                     ("off", "platform-local-a"): False, ("off", "gateway"): False}  # only "true" says so
    text_without = text.replace('    modelplane.ai/load-balancer: "true"\n', "")
    (tmp_path / "off" / "fleet.yaml").write_text(text_without)
    assert desired_state(load_fleet([str(tmp_path / "off")]).fleet).specs["platform-local-a"].fingerprint == \
        fingerprints["off"] != fingerprints["on"]


def test_control_plane_must_be_a_cluster_of_the_fleet(tmp_path, capsys):
    from automation.cli import main

    path = tmp_path / "fleet.yaml"
    path.write_text((ROOT / "tests" / "data" / "reference" / "concepts.yaml").read_text())
    assert main(["preview", "--offline", "-f", str(path), "--control-plane", "vultr-ewx"]) == 2
    assert "'vultr-ewx' is not an InferenceCluster of the fleet" in capsys.readouterr().err


def test_stack_references_follow_the_fleet_prefix(examples):
    fleet, specs = examples
    spec = specs["model-ml-team.qwen3-8b"]
    resources = run(program_for(spec, fleet, None, "staging"), project_of(spec.kind), spec.name, stack_config(spec), [])
    references = sorted(unwrap(r.inputs)["name"] for r in resources if r.type == "pulumi:pulumi:StackReference")
    assert references == ["organization/modelplane/staging_platform-eks-us-west",
                          "organization/modelplane/staging_platform-gke-us-central"]


_ROUNDS = """
import gc, sys
import pulumi
from automation.checks.offline_preview import forget, preview_stack
from automation.planning.stacks import desired_state
from fleet.validate import load_fleet

fleet = load_fleet([sys.argv[1]]).fleet
platforms = [s for s in desired_state(fleet).specs.values() if s.kind in ("platform", "gateway")]
assert len(platforms) >= 3
for _ in range(3):
    for spec in platforms:
        forget()  # run again, not the preview kept
        preview = preview_stack(spec, fleet)
        assert preview.error is None and preview.resources, preview.error
    gc.collect()
    print(sum(isinstance(o, pulumi.Resource) for o in gc.get_objects()))
"""


def test_a_program_run_keeps_nothing_of_the_runs_before():
    # the record's stack transformation once kept every run's resources and their outputs alive in the process:
    # about 4 MB a platform stack, so a preview of 500 clusters peaked at 1.3 GB a worker. In a fresh interpreter,
    # as a command runs them: what other tests leave in this one's Pulumi runtime is not what is measured.
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _ROUNDS, str(ROOT / "examples")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    first, *later = [int(line) for line in done.stdout.split()]
    assert later == [first, first]


def _declared_outputs(component: type) -> set[str]:
    """The output properties a Pulumi SDK class declares (its `@pulumi.getter` properties)."""
    return {name for name, value in vars(component).items() if isinstance(value, property)}


def test_components_a_provider_constructs_answer_their_declared_outputs_not_their_inputs():
    # the mocks once echoed a ConfigGroup's objects (a platform stack's 0.6 MB of CRDs) back as its state; the
    # provider answers `resources`, which the SDK declares, and nothing of what it was given
    import pulumi_kubernetes as k8s

    from automation.checks.fake_outputs import COMPONENT_OUTPUTS

    assert set(COMPONENT_OUTPUTS["kubernetes:yaml/v2:ConfigGroup"]) == _declared_outputs(k8s.yaml.v2.ConfigGroup)
    seen: dict = {}

    def program():
        group = k8s.yaml.v2.ConfigGroup("crds", objs=[{"apiVersion": "v1", "kind": "Namespace",
                                                       "metadata": {"name": "ml"}}])
        group.resources.apply(lambda value: seen.setdefault("resources", value))

    registered = run(program, "modelplane-platform", "platform-c1")
    group = next(r for r in registered if r.type == "kubernetes:yaml/v2:ConfigGroup")
    assert unwrap(group.inputs)["objs"][0]["metadata"]["name"] == "ml"  # what the program asked for is recorded
    assert seen == {"resources": []}


@pytest.mark.parametrize("stack", ["model-ml-team.qwen3-8b", "service-ml-team.qwen3-8b", "cache-ml-team.qwen3-coder"])
def test_a_renamed_stacks_objects_are_aliased_to_the_names_they_had_under_its_legacy_name(examples, stack):
    """The legacy stack-name migration renames `model-ml-team-qwen3-8b` to `model-ml-team.qwen3-8b` and its resources
    with it (automation/execution/migration.py): each object's logical name is derived from the stack's, so without
    an alias the first update after the rename would create every object anew and delete the old ones."""
    fleet, specs = examples
    legacy = specs[stack].id.legacy_name()
    placeholders = {secret_config_key(o, key) for objs in specs[stack].objects.values() for o in objs
                    if is_placeholder_secret(o) for key in o.get("stringData", {})}
    resources = _run(specs[stack], fleet, secrets={f"modelplane:{key}": "hf_x" for key in placeholders})
    components = [r for r in resources if r.type == "modelplane:workload:Objects"]
    assert components
    for component in components:
        target = component.name.removeprefix(f"{stack}-")
        assert component.options.get("aliases") == [f"{legacy}-{target}"]
        children = [r for r in resources if r.parent == component.name]
        groups = [r for r in children if r.type == "kubernetes:yaml/v2:ConfigGroup"]
        assert groups and all(r.name.startswith(component.name) for r in children)  # so they inherit the alias
        assert all(r.options.get("aliases") == [legacy + r.name.removeprefix(stack)] for r in children)
        # the group's objects are named `<group>:<object>` (no resourcePrefix of ours): they inherit it from the group
        assert all("resourcePrefix" not in unwrap(g.inputs) for g in groups)


def test_a_stack_that_never_had_another_name_has_no_alias(examples):
    fleet, specs = examples
    resources = _run(specs["team-ml-team.gke-us-central"], fleet)
    assert resources and not [r.name for r in resources if "aliases" in r.options]
