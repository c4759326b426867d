"""`modelplane operator export`: the fleet's stacks as Pulumi Kubernetes Operator objects, checked against the
operator's own CRDs; prerequisites are the planner's dependencies, Programs hold exactly what `render` writes,
and no secret value is ever written."""

from __future__ import annotations

import copy
import pathlib

import pytest
import yaml

from automation.cli import main
from automation.operator import CRDS, ExportError, ExportOptions, export, problems
from automation.stacks import desired_state
from fleet.validate import load_fleet
from workloads.schemas import check

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOKEN = "hf_operator_never_written_5e1"
OPTIONS = ExportOptions(backend="s3://bucket/fleet", git_url="https://github.com/acme/fleet", secrets=("cloud",))


@pytest.fixture(scope="module")
def desired(tmp_path_factory):
    secret = tmp_path_factory.mktemp("s") / "secret.yaml"
    secret.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Secret",
                                      "metadata": {"name": "hf-token", "namespace": "ml-team"},
                                      "stringData": {"HF_TOKEN": TOKEN}}))
    loaded = load_fleet([str(ROOT / "examples"), str(secret)])
    return desired_state(loaded.fleet, control_plane="byo-eu")  # the gateway on the on-prem cluster


def unescape(value):
    if isinstance(value, str):
        return value.replace("$${", "${")
    if isinstance(value, list):
        return [unescape(v) for v in value]
    if isinstance(value, dict):
        return {k: unescape(v) for k, v in value.items()}
    return value


def test_every_stack_becomes_valid_operator_objects_with_the_planners_order(desired):
    files = export(desired, OPTIONS)
    assert problems(files) == []
    stacks = {o["metadata"]["name"]: o for objs in files.values() for o in objs if o["kind"] == "Stack"}
    assert set(stacks) == set(desired.specs)
    for name, spec in desired.specs.items():
        body = stacks[name]["spec"]
        assert [p["name"] for p in body.get("prerequisites", [])] == spec.depends_on
        assert body["destroyOnFinalize"] is (spec.kind not in ("platform", "gateway"))  # clusters only on purpose
        assert body["workspaceTemplate"]["spec"]["envFrom"] == [{"secretRef": {"name": "cloud"}}]
        assert body["backend"] == "s3://bucket/fleet"
    platform = stacks["platform-byo-eu"]["spec"]
    assert platform["projectRepo"] == "https://github.com/acme/fleet" and platform["branch"] == "main"
    assert platform["config"] == {"modelplane:fleet": "fleet", "modelplane:cluster": "byo-eu", "modelplane:gateway": "false"}
    assert stacks["gateway"]["spec"]["config"]["modelplane:gatewayOnly"] == "true"


def test_programs_hold_exactly_what_render_writes_and_no_secret_value(desired):
    files = export(desired, OPTIONS)
    programs = {o["metadata"]["name"]: o for objs in files.values() for o in objs if o["kind"] == "Program"}
    assert set(programs) == {n for n, s in desired.specs.items() if s.kind not in ("platform", "gateway")}
    for name, program in programs.items():
        resources = program["program"]["resources"]
        for target, objects in desired.specs[name].payload["objects"].items():
            written = unescape(resources[f"{target}-objects"]["properties"]["objs"])
            secrets = [r["properties"]["metadata"]["name"] for key, r in resources.items()
                       if key.startswith(f"{target}-secret-")]
            expected = [o for o in objects if not (o["kind"] == "Secret" and o["metadata"]["name"] in secrets)]
            assert written == expected
            assert resources[f"{target}-k8s"]["properties"]["kubeconfig"] == f'${{{target}-platform.outputs["kubeconfig"]}}'
    cache = programs["cache-ml-team.qwen3-coder"]["program"]
    assert cache["configuration"] == {"secret-ml-team-hf-token-hf_token": {"type": "String"}}
    (cache_stack,) = [o for o in files["cache-ml-team.qwen3-coder.yaml"] if o["kind"] == "Stack"]
    assert cache_stack["spec"]["secretsRef"]["secret-ml-team-hf-token-hf_token"] == {
        "type": "Secret", "secret": {"name": "ml-team-hf-token", "key": "HF_TOKEN"}}
    assert TOKEN not in yaml.safe_dump_all([o for objs in files.values() for o in objs])


def test_the_export_is_byte_identical_and_refuses_a_folder_it_did_not_write(tmp_path):
    args = ["operator", "export", "-f", str(ROOT / "examples"), "--backend", "s3://bucket/fleet",
            "--git-url", "https://github.com/acme/fleet", "--git-ref", "0123456789abcdef0123456789abcdef01234567",
            "--fresh"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    a, b = sorted((tmp_path / "a").glob("*.yaml")), sorted((tmp_path / "b").glob("*.yaml"))
    assert [p.name for p in a] == [p.name for p in b] and all(x.read_bytes() == y.read_bytes() for x, y in zip(a, b))
    platform = yaml.safe_load_all((tmp_path / "a" / "platform-byo-eu.yaml").read_text())
    assert next(platform)["spec"]["commit"] == "0123456789abcdef0123456789abcdef01234567"  # a pinned commit
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("x")
    assert main([*args, "--out", str(mine)]) == 1 and (mine / "notes.txt").exists()


def test_pulumi_cloud_names_stacks_fully(desired):
    cloud = ExportOptions(backend="https://api.pulumi.com", git_url="https://github.com/acme/fleet", organization="acme")
    stacks = {o["metadata"]["name"]: o for objs in export(desired, cloud).values() for o in objs if o["kind"] == "Stack"}
    assert stacks["platform-byo-eu"]["spec"]["stack"] == "acme/modelplane/platform-byo-eu"
    assert stacks["model-ml-team.qwen3-8b"]["spec"]["stack"] == "acme/model-ml-team.qwen3-8b/model-ml-team.qwen3-8b"


def test_the_checker_is_as_strict_as_the_operators_api_server(desired):
    files = export(desired, OPTIONS)
    stack = copy.deepcopy(files["platform-byo-eu.yaml"][0])
    stack["spec"]["destroyOnFinalise"] = True  # a typo the API server's strict validation refuses
    assert any("destroyOnFinalise" in m for m in check(stack, CRDS))
    del stack["spec"]["destroyOnFinalise"]
    del stack["spec"]["stack"]  # required
    assert any("stack" in m for m in check(stack, CRDS))


@pytest.mark.parametrize("backend,git_url", [("ftp://x", "https://g"), ("s3://b", "")])
def test_bad_options_are_one_clear_error(backend, git_url):
    with pytest.raises(ExportError):
        ExportOptions(backend=backend, git_url=git_url)


def test_an_existing_clusters_kubeconfig_comes_from_a_secret_in_the_stacks_namespace(desired):
    files = export(desired, OPTIONS)
    (platform,) = files["platform-byo-eu.yaml"]
    assert platform["spec"]["secretsRef"] == {"modelplane:byo-eu-kubeconfig": {
        "type": "Secret", "secret": {"name": "byo-eu-kubeconfig", "key": "kubeconfig"}}}
    assert "secretsRef" not in files["platform-gke-us-central.yaml"][0]["spec"]  # the cloud makes its own


def test_the_gateway_stack_runs_the_root_program_with_its_hosts_kubeconfig(desired, monkeypatch):
    """The operator runs the repository's Pulumi.yaml for the gateway alone: the program must find the host
    cluster's kubeconfig through the platform stack the Stack names (it has no cluster of its own)."""
    from automation.offline import run, unwrap
    from infra.program import main as platform_program

    (gateway,) = export(desired, OPTIONS)["gateway.yaml"]
    config = {**gateway["spec"]["config"], "modelplane:fleet": "examples"}
    assert config["modelplane:controlPlaneStack"] == "organization/modelplane/platform-byo-eu"
    monkeypatch.chdir(ROOT / "infra")
    resources = run(platform_program, "modelplane", "gateway", config, root_directory=str(ROOT))
    references = [unwrap(r.inputs)["name"] for r in resources if r.type == "pulumi:pulumi:StackReference"]
    assert references == ["organization/modelplane/platform-byo-eu"]
    provider = next(r for r in resources if r.type == "pulumi:providers:kubernetes")
    assert unwrap(provider.inputs)["clusterIdentifier"] == "byo-eu"
    assert any(r.type == "kubernetes:gateway.networking.k8s.io/v1:Gateway" for r in resources)


def test_the_fast_writer_writes_the_same_bytes_in_one_process_or_several(desired, tmp_path, monkeypatch):
    import automation.operator as operator_module
    from workloads.yamlio import dump, dump_fast

    files = export(desired, OPTIONS)
    for objects in files.values():
        for obj in objects:
            assert dump_fast(obj) == dump(obj)  # libyaml writes what the pure-Python writer writes
    operator_module.write(files, tmp_path / "one", jobs=1)
    monkeypatch.setattr(operator_module, "PARALLEL_FROM", 1)
    operator_module.write(files, tmp_path / "two", jobs=2)
    one, two = sorted((tmp_path / "one").iterdir()), sorted((tmp_path / "two").iterdir())
    assert [p.name for p in one] == [p.name for p in two]
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(one, two))
