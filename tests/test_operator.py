"""`modelplane operator export`: the fleet's stacks as Pulumi Kubernetes Operator objects, checked against the
operator's own CRDs; prerequisites are the planner's dependencies, Programs hold exactly what `render` writes,
and no secret value is ever written."""

from __future__ import annotations

import copy
import pathlib
import re

import pytest
import yaml

from automation.cli import main
from automation.operator.export import STACK_ANNOTATION, ExportError, ExportOptions, export, object_name
from automation.operator.pulumi_yaml import literal
from automation.operator.validation import CRDS, derived_name_problems, problems
from automation.planning.stacks import desired_state
from fleet.validate import load_fleet
from tests import pulumi_double
from workloads.schemas import check

COMMIT = "0123456789abcdef0123456789abcdef01234567"
ROOT = pathlib.Path(__file__).resolve().parent.parent
TOKEN = "hf_operator_never_written_5e1"
OPTIONS = ExportOptions(backend="s3://bucket/fleet", git_url="https://github.com/acme/fleet", git_ref=COMMIT, secrets=("cloud",),
                        gcp_credentials=("gcp-workspace", "credentials.json"))  # the examples hold a GKE cluster


@pytest.fixture(scope="module")
def desired(tmp_path_factory):
    secret = tmp_path_factory.mktemp("s") / "secret.yaml"
    secret.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Secret",
                                      "metadata": {"name": "hf-token", "namespace": "ml-team"},
                                      "stringData": {"HF_TOKEN": TOKEN}}))
    loaded = load_fleet([str(ROOT / "examples"), str(secret)])
    return desired_state(loaded.fleet, control_plane="byo-eu")  # the gateway on the on-prem cluster


def by_stack(files: dict, kind: str) -> dict[str, dict]:
    """The exported objects of a kind, by the full stack name each is annotated with."""
    return {o["metadata"]["annotations"][STACK_ANNOTATION]: o for objs in files.values() for o in objs
            if o["kind"] == kind}


def file_of(stack: str) -> str:
    return f"{OPTIONS.object_name(stack)}.yaml"


def test_every_stack_becomes_valid_operator_objects_with_the_planners_order(desired):
    files = export(desired, OPTIONS)
    assert problems(files) == []
    stacks = by_stack(files, "Stack")
    assert set(stacks) == set(desired.specs)
    for name, spec in desired.specs.items():
        body = stacks[name]["spec"]
        assert [p["name"] for p in body.get("prerequisites", [])] == [OPTIONS.object_name(d) for d in spec.depends_on]
        assert body["destroyOnFinalize"] is (spec.kind not in ("platform", "gateway"))  # clusters only on purpose
        assert body["workspaceTemplate"]["spec"]["envFrom"] == [{"secretRef": {"name": "cloud"}}]
        assert body["backend"] == "s3://bucket/fleet"
    platform = stacks["platform-byo-eu"]["spec"]
    assert platform["projectRepo"] == "https://github.com/acme/fleet" and platform["commit"] == COMMIT
    assert "branch" not in platform  # a Stack tracking a branch re-runs on every commit
    assert platform["config"] == {"modelplane:fleet": "fleet", "modelplane:cluster": "byo-eu", "modelplane:gateway": "false"}
    assert stacks["gateway"]["spec"]["config"]["modelplane:gatewayOnly"] == "true"


def test_programs_hold_exactly_what_render_writes_and_no_secret_value(desired):
    files = export(desired, OPTIONS)
    programs = by_stack(files, "Program")
    assert set(programs) == {n for n, s in desired.specs.items() if s.kind not in ("platform", "gateway")}
    for name, program in programs.items():
        resources = program["program"]["resources"]
        for target, objects in desired.specs[name].objects.items():
            # as Pulumi YAML reads them: the EndpointSlices read their cluster's gateway address, all else is literal
            written = [literal(o) for o in resources[f"{target}-objects"]["properties"]["objs"]
                       if "modelplane.ai/gateway-of" not in (o["metadata"].get("annotations") or {})]
            secrets = [r["properties"]["metadata"]["name"] for key, r in resources.items()
                       if key.startswith(f"{target}-secret-")]
            expected = [o for o in objects if not (o["kind"] == "Secret" and o["metadata"]["name"] in secrets)]
            assert written == [o for o in expected if "modelplane.ai/gateway-of" not in (o["metadata"].get("annotations") or {})]
            assert resources[f"{target}-k8s"]["properties"]["kubeconfig"] == f'${{{target}-platform.outputs["kubeconfig"]}}'
    cache = programs["cache-ml-team.qwen3-coder"]["program"]
    (config_key,) = cache["configuration"]
    assert cache["configuration"] == {config_key: {"type": "String"}}
    (cache_stack,) = [o for o in files[file_of("cache-ml-team.qwen3-coder")] if o["kind"] == "Stack"]
    assert cache_stack["spec"]["secretsRef"][config_key] == {  # `<ns>.<name>`: a namespace has no `.`
        "type": "Secret", "secret": {"name": "ml-team.hf-token", "key": "HF_TOKEN"}}
    assert TOKEN not in yaml.safe_dump_all([o for objs in files.values() for o in objs])


def test_the_export_is_byte_identical_and_refuses_a_folder_it_did_not_write(tmp_path):
    args = ["operator", "export", "-f", str(ROOT / "examples"), "--backend", "s3://bucket/fleet",
            "--git-url", "https://github.com/acme/fleet", "--git-ref", "0123456789abcdef0123456789abcdef01234567",
            "--fresh", "--gcp-credentials", "gcp-workspace"]
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
    cloud = ExportOptions(backend="https://api.pulumi.com", git_url="https://github.com/acme/fleet", git_ref=COMMIT, organization="acme",
                          gcp_credentials=("gcp-workspace", "credentials.json"))
    stacks = by_stack(export(desired, cloud), "Stack")
    assert stacks["platform-byo-eu"]["spec"]["stack"] == "acme/modelplane/platform-byo-eu"
    project = object_name("model-ml-team.qwen3-8b")  # a Program's project is its object's name
    assert stacks["model-ml-team.qwen3-8b"]["spec"]["stack"] == f"acme/{project}/model-ml-team.qwen3-8b"


def test_the_checker_is_as_strict_as_the_operators_api_server(desired):
    files = export(desired, OPTIONS)
    stack = copy.deepcopy(files["platform-byo-eu.yaml"][0])
    stack["spec"]["destroyOnFinalise"] = True  # a typo the API server's strict validation refuses
    assert any("destroyOnFinalise" in m for m in check(stack, CRDS))
    del stack["spec"]["destroyOnFinalise"]
    del stack["spec"]["stack"]  # required
    assert any("stack" in m for m in check(stack, CRDS))


@pytest.mark.parametrize("options,says", [
    ({"backend": "ftp://x"}, "expected s3://"),
    ({"git_url": ""}, "--git-url"),
    ({"backend": "file:///tmp/state"}, "inside each workspace pod"),  # pod-local: gone on restart, seen by no one
    ({"git_ref": "main"}, "re-runs every cluster"),  # a branch: resolved before, never exported
    ({"git_auth": ("password", "git")}, "--git-auth"),
])
def test_bad_options_are_one_clear_error(options, says):
    with pytest.raises(ExportError, match=says):
        ExportOptions(**{"backend": "s3://b", "git_url": "https://g", "git_ref": COMMIT, **options})


def test_every_object_the_operator_derives_from_a_stack_name_is_valid(desired):
    """PKO names a Stack's Workspace after it, and the Workspace's Service and StatefulSet `<name>-workspace`:
    a dotted stack name is a valid Stack name but never a Service name, so such a Stack stalls."""
    assert derived_name_problems("model-ml-team.qwen3-8b")  # the stack name as it is
    for name in [*desired.specs, "model-" + "a" * 60 + ".b", "1fleet_platform-x"]:
        assert derived_name_problems(object_name(name)) == [], name
    # one-to-one still: the encoding that once gave two stacks one name does not come back through the label
    assert object_name("model-ml-team.qwen") != object_name("model-ml.team-qwen")
    assert problems(export(desired, OPTIONS)) == []


def test_a_dotted_name_is_refused_by_the_operators_check():
    stack = {"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": {"name": "model-ml-team.qwen"},
             "spec": {"stack": "model-ml-team.qwen", "programRef": {"name": "x"}}}
    assert any("DNS-1035" in line for line in problems({"x.yaml": [stack]}))


def test_workspaces_get_memory_for_what_they_run_and_a_nonroot_image_as_new_as_the_sdk(desired):
    """The operator's webhook gives a workspace 64Mi and its agent holds to the request: installing the cloud
    SDKs needs more. The restricted profile runs as non-root: only `pulumi/pulumi` has `-nonroot` tags."""
    from fleet.quantity import parse_quantity

    stacks = by_stack(export(desired, OPTIONS), "Stack")
    for name, stack in stacks.items():
        spec = stack["spec"]["workspaceTemplate"]["spec"]
        memory = parse_quantity(spec["resources"]["requests"]["memory"])
        assert memory >= parse_quantity("2Gi" if "projectRepo" in stack["spec"] else "512Mi"), name
        assert parse_quantity(spec["resources"]["limits"]["memory"]) >= memory
        image, _, tag = spec["image"].partition(":")
        assert image == "pulumi/pulumi" and tag.endswith("-nonroot")
    floor = re.search(r'"pulumi>=([0-9.]+)', (ROOT / "pyproject.toml").read_text()).group(1)
    assert tuple(map(int, tag.removesuffix("-nonroot").split("."))) >= tuple(map(int, floor.split(".")))


def test_pulumi_install_in_a_workspace_installs_this_project():
    """The Python host runs `pip install -r requirements.txt` in the program's folder (`main: infra/`)."""
    plan = pulumi_double.install_plan(ROOT)
    assert plan is not None, "pulumi install would install nothing"
    cwd, requirements = plan
    installed = [(cwd / line).resolve() for line in requirements if not line.startswith("-")]
    assert ROOT in installed and 'name = "modelplane-pulumi"' in (ROOT / "pyproject.toml").read_text()


def test_a_private_repository_is_cloned_with_a_named_secret(desired):
    for mode, expected in [
        ("accessToken", {"accessToken": {"type": "Secret", "secret": {"name": "git", "key": "accessToken"}}}),
        ("sshAuth", {"sshAuth": {"sshPrivateKey": {"type": "Secret", "secret": {"name": "git", "key": "sshPrivateKey"}}}}),
        ("basicAuth", {"basicAuth": {"userName": {"type": "Secret", "secret": {"name": "git", "key": "username"}},
                                     "password": {"type": "Secret", "secret": {"name": "git", "key": "password"}}}}),
    ]:
        options = ExportOptions(backend="s3://b", git_url="git@github.com:acme/fleet.git", git_ref=COMMIT,
                                git_auth=(mode, "git"), gcp_credentials=OPTIONS.gcp_credentials)
        files = export(desired, options)
        assert problems(files) == []
        stacks = by_stack(files, "Stack")
        assert stacks["platform-byo-eu"]["spec"]["gitAuth"] == expected
        assert "gitAuth" not in stacks["model-ml-team.qwen3-8b"]["spec"]  # Programs are not cloned


def test_replica_slices_in_programs_hold_their_clusters_live_gateway_output(desired):
    """An endpoints Program's replica EndpointSlices take the platform stack's `gatewayEndpoints` and
    `gatewayAddressType` outputs when the operator runs it, through StackReferences the Program declares."""
    programs = by_stack(export(desired, OPTIONS), "Program")
    program = programs["endpoints-ml-team"]["program"]
    slices = [o for r in program["resources"].values() if r["type"] == "kubernetes:yaml/v2:ConfigGroup"
              for o in r["properties"]["objs"] if o["kind"] == "EndpointSlice"]
    assert slices
    for s in slices:
        cluster = s["metadata"]["annotations"]["modelplane.ai/gateway-of"]
        assert s["endpoints"] == f'${{{cluster}-gateway.outputs["gatewayEndpoints"]}}'
        assert s["addressType"] == f'${{{cluster}-gateway.outputs["gatewayAddressType"]}}'
        assert "modelplane.ai/placeholder" not in s["metadata"]["annotations"]
        assert program["resources"][f"{cluster}-gateway"] == {"type": "pulumi:pulumi:StackReference", "properties": {
            "name": f"organization/modelplane/platform-{cluster}"}}
    assert "pending.modelplane.invalid" not in yaml.safe_dump(program)


def test_every_reference_in_a_program_names_what_it_declares(desired):
    """Pulumi YAML fails a run on an undeclared `${name}`: the check refuses it before anything is applied."""
    files = export(desired, OPTIONS)
    assert problems(files) == []
    broken = copy.deepcopy(files)
    program = next(o for objs in broken.values() for o in objs if o["kind"] == "Program"
                   and o["metadata"]["annotations"][STACK_ANNOTATION] == "endpoints-ml-team")
    del program["program"]["resources"][next(k for k in program["program"]["resources"] if k.endswith("-gateway"))]
    assert any("undeclared" in line for line in problems(broken))


def test_an_existing_clusters_kubeconfig_comes_from_a_secret_in_the_stacks_namespace(desired):
    files = export(desired, OPTIONS)
    (platform,) = files["platform-byo-eu.yaml"]
    assert platform["spec"]["secretsRef"] == {"modelplane:byo-eu-kubeconfig": {
        "type": "Secret", "secret": {"name": "byo-eu-kubeconfig", "key": "kubeconfig"}}}
    assert "secretsRef" not in files["platform-gke-us-central.yaml"][0]["spec"]  # the cloud makes its own


def test_the_gateway_stack_runs_the_root_program_with_its_hosts_kubeconfig(desired, monkeypatch):
    """The operator runs the repository's Pulumi.yaml for the gateway alone: the program must find the host
    cluster's kubeconfig through the platform stack the Stack names (it has no cluster of its own)."""
    from automation.checks.offline import run, unwrap
    from components.platform import main as platform_program

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
    import automation.operator.export as operator_module
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


def test_every_exported_object_is_written_by_the_fast_writer(desired, monkeypatch):
    """A value of another type than JSON's (a StackKind label was one) sends the whole object to the pure-Python
    writer: the same bytes, but `operator export` took 63 s instead of seconds at 2,000 deployments."""
    import workloads.yamlio as yamlio

    slow: list[str] = []
    reference = yamlio.dump
    monkeypatch.setattr(yamlio, "dump", lambda obj: slow.append(repr(obj)[:60]) or reference(obj))
    monkeypatch.setattr(yamlio, "_KEYS", {})  # keys it wrote before used `dump` too, and are remembered
    for objects in export(desired, OPTIONS).values():
        for obj in objects:
            yamlio.dump_fast(obj)
    assert not [s for s in slow if "'apiVersion'" in s], slow[:3]  # an unusual key may still ask the reference


def test_every_program_runs_the_kubernetes_provider_the_local_executor_runs(desired):
    """A Program that names no version gets whichever kubernetes plugin is newest when its workspace starts, so
    two runs of one fingerprint could run two providers. Every Kubernetes resource goes through a provider the
    Program pins to the installed pulumi-kubernetes SDK's plugin: the one the local executor's programs run."""
    from importlib.metadata import version

    programs = by_stack(export(desired, OPTIONS), "Program")
    assert programs
    for name, program in programs.items():
        resources = program["program"]["resources"]
        providers = {key for key, r in resources.items() if r["type"] == "pulumi:providers:kubernetes"}
        assert providers, name
        for key in providers:
            assert resources[key]["options"] == {"version": version("pulumi-kubernetes")}, (name, key)
        for key, resource in resources.items():
            if resource["type"].startswith("kubernetes:"):
                assert resource["options"]["provider"] in {f"${{{p}}}" for p in providers}, (name, key)


def _pins(files: dict) -> tuple[dict, dict[str, str]]:
    """The exported constraints ConfigMap and its pins (canonical name -> version)."""
    (configmap,) = [o for o in files["_operator.yaml"] if o["kind"] == "ConfigMap"]
    lines = [line for line in configmap["data"]["constraints.txt"].splitlines() if not line.startswith("#")]
    pins = dict(line.split("==") for line in lines)
    assert len(pins) == len(lines)
    return configmap, pins


def test_every_workspace_installs_exactly_the_package_versions_the_local_executor_runs(desired):
    """A repository workspace's `pulumi install` pip-installs this project with pyproject.toml's ranges: without a
    pin it takes the newest in range, not what planned and fingerprinted the stacks. Every Stack's workspace gets
    the installed versions of the project's whole requirement tree as a constraints file (a ConfigMap, mounted),
    and PIP_CONSTRAINT naming it, which pip reads as `-c` for every install."""
    import tomllib
    from importlib.metadata import requires, version

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    files = export(desired, OPTIONS)
    assert problems(files) == []  # the ConfigMap against Kubernetes' schema, the mounts against the Stack CRD
    configmap, pins = _pins(files)
    assert configmap["metadata"]["namespace"] == OPTIONS.namespace
    assert pins and all(version(name) == pinned for name, pinned in pins.items())  # exact, as installed here
    assert "modelplane-pulumi" not in pins  # the workspace installs it from the cloned commit
    direct = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert {canonicalize_name(Requirement(r).name) for r in direct} <= set(pins)
    for name in list(pins):  # transitively: what each pinned distribution requires unconditionally is pinned too
        for line in requires(name) or []:
            if Requirement(line).marker is None:
                assert canonicalize_name(Requirement(line).name) in pins, (name, line)
    assert "psycopg-binary" in pins  # through an extra (`psycopg[binary]`)
    mounted = "/var/run/modelplane/constraints/constraints.txt"
    stacks = by_stack(files, "Stack")
    assert set(stacks) == set(desired.specs)
    for name, stack in stacks.items():
        workspace = stack["spec"]["workspaceTemplate"]["spec"]
        assert {"name": "PIP_CONSTRAINT", "value": mounted} in workspace["env"], name
        pod = workspace["podTemplate"]["spec"]
        (volume,) = [v for v in pod["volumes"] if "configMap" in v]
        assert volume["configMap"] == {"name": configmap["metadata"]["name"],
                                       "items": [{"key": "constraints.txt", "path": "constraints.txt"}]}, name
        (container,) = pod["containers"]
        assert container["name"] == "pulumi"  # PKO's workspace container, which runs `pulumi install`
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert f"{mount['mountPath']}/constraints.txt" == mounted and mount["readOnly"], name


def test_pip_reads_the_exported_constraints_from_pip_constraint(desired, tmp_path):
    """The exported file, given as the workspace gives it (PIP_CONSTRAINT), is what pip resolves
    `pip install -r requirements.txt` against: consistent with this machine's packages, and binding (one pin moved
    makes the same install fail). Offline: --no-index, --dry-run; nothing is installed."""
    import os
    import subprocess
    import sys

    configmap, pins = _pins(export(desired, OPTIONS))
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("pulumi-kubernetes\npydantic\n")

    def install(text: str) -> subprocess.CompletedProcess:
        (tmp_path / "constraints.txt").write_text(text)
        env = {**os.environ, "PIP_CONSTRAINT": str(tmp_path / "constraints.txt"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        return subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "-r",
                               str(requirements)], env=env, capture_output=True, text=True, timeout=120, check=False)

    exported = configmap["data"]["constraints.txt"]
    assert install(exported).returncode == 0, install(exported).stderr
    moved = exported.replace(f"pulumi-kubernetes=={pins['pulumi-kubernetes']}\n", "pulumi-kubernetes==4.34.0\n")
    assert moved != exported and pins["pulumi-kubernetes"] != "4.34.0"
    refused = install(moved)
    assert refused.returncode != 0 and "pulumi-kubernetes==4.34.0" in refused.stdout + refused.stderr


def test_a_requirement_missing_on_this_machine_is_one_clear_error():
    from automation.operator.constraints import ConstraintsError, installed_versions

    with pytest.raises(ConstraintsError, match="modelplane-no-such-dist: required by modelplane-no-such-dist but not installed"):
        installed_versions("modelplane-no-such-dist")
