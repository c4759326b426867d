"""Secrets from the user's own Secret objects (and the environment, and a folder): they reach the stacks as Pulumi
secrets, and never a rendered manifest, a log line, the recorded state or a command line."""

from __future__ import annotations

import base64
import os
import pathlib

import pytest
import yaml

from automation.cli import main
from automation.checks.offline import is_secret, run
from automation.execution.programs import missing_secrets, program_for
from automation.projects import project_of
from automation.planning.stacks import desired_state
from fleet.secrets import SecretRef, SecretStore, SecretValue, secret_from_manifest
from fleet.validate import load_fleet
from tests import pulumi_double
from tests.pulumi_mocks import unwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOKEN = "hf_from_a_secret_manifest_7c21"
KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []\nusers: [{name: u, user: {token: kube-7d3e}}]\n"


def secrets_file(tmp_path: pathlib.Path, encoded: bool = False) -> pathlib.Path:
    path = tmp_path / "secrets.yaml"
    token = {"data": {"HF_TOKEN": base64.b64encode(TOKEN.encode()).decode()}} if encoded else {
        "stringData": {"HF_TOKEN": TOKEN}}
    path.write_text(yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token", "namespace": "ml-team"}, **token},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "byo-eu-kubeconfig", "namespace": "modelplane-system"},
         "stringData": {"kubeconfig": KUBECONFIG}},
    ]))
    return path


@pytest.fixture(autouse=True)
def no_ambient_secrets(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("MODELPLANE_SECRET_", "MODELPLANE_KUBECONFIG_")):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("encoded", [False, True], ids=["stringData", "data"])
def test_a_secret_given_with_the_manifests_reaches_the_cache_stack_as_a_pulumi_secret(tmp_path, encoded):
    loaded = load_fleet([str(ROOT / "examples"), str(secrets_file(tmp_path, encoded))])
    assert not loaded.errors
    desired = desired_state(loaded.fleet)
    spec = desired.specs["cache-ml-team.qwen3-coder"]
    assert missing_secrets(spec, loaded.fleet) == []
    registered = run(program_for(spec, loaded.fleet), project_of(spec.kind), spec.name, {}, [])
    tokens = [r for r in registered if r.type == "kubernetes:core/v1:Secret"]
    assert tokens and all(is_secret(r.inputs["stringData"]) for r in tokens)
    assert {unwrap(r.inputs)["stringData"]["HF_TOKEN"] for r in tokens} == {TOKEN}
    # the rendered objects (what `render` writes and what is fingerprinted) hold a placeholder, never the value
    assert TOKEN not in yaml.safe_dump_all([obj for _, _, obj in desired.rendered.objects()])


def test_an_existing_clusters_kubeconfig_comes_from_its_secret(tmp_path):
    loaded = load_fleet([str(ROOT / "examples"), str(secrets_file(tmp_path))])
    spec = desired_state(loaded.fleet).specs["platform-byo-eu"]
    registered = run(program_for(spec, loaded.fleet), project_of(spec.kind), spec.name,
                     {"modelplane:cluster": "byo-eu", "modelplane:gateway": "false"}, [])
    provider = next(r for r in registered if r.type == "pulumi:providers:kubernetes")
    assert is_secret(provider.inputs["kubeconfig"]) and unwrap(provider.inputs)["kubeconfig"] == KUBECONFIG


def test_validate_and_plan_never_print_a_secret(tmp_path, capsys):
    path = secrets_file(tmp_path)
    notes = []
    for command in (["validate"], ["validate", "-o", "json"], ["plan", "--fresh"], ["plan", "--fresh", "-o", "json"],
                    ["render", "--out", "-", "--fresh"]):
        code = main([*command, "-f", str(ROOT / "examples"), "-f", str(path)])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert TOKEN not in out + err and "kube-7d3e" not in out + err
        notes.append(err)
    assert "read Secret ml-team/hf-token (1 key(s); values are never printed)" in notes[0]


@pytest.mark.parametrize("manifest,message", [
    ({"apiVersion": "v1", "kind": "Secret", "metadata": {"namespace": "x"}}, "metadata.name"),
    ({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "x"}, "data": {"k": "not base64!"}}, "data.k"),
    ({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "x"}, "stringData": {"k": 5}}, "stringData.k"),
    ({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "x"}, "data": ["x"]}, "data"),
])
def test_a_malformed_secret_is_one_located_error_without_its_value(tmp_path, manifest, message):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(manifest))
    loaded = load_fleet([str(path)])
    (problem,) = loaded.errors
    assert problem.path == message and problem.source == str(path) and "not base64!" not in problem.message


def test_a_secret_value_never_shows_itself():
    value = SecretValue("s3cr3t")
    for shown in (repr(value), str(value), f"{value}", f"{[value]}", str({"k": value})):
        assert "s3cr3t" not in shown
    assert value.reveal() == "s3cr3t"
    assert secret_from_manifest({"metadata": {"name": "a", "namespace": "x"}, "data": {"k": base64.b64encode(b"x").decode()},
                                 "stringData": {"k": "y"}})[2]["k"].reveal() == "y"  # stringData wins, as in the API


def test_the_environment_and_a_secrets_folder_are_read_by_the_users_names(tmp_path):
    ref = SecretRef("ml-team", "hf-token", "HF_TOKEN")
    assert ref.environment_variable == "MODELPLANE_SECRET_ML_TEAM__HF_TOKEN__HF_TOKEN"  # no hash of ours in it
    assert SecretStore(environ={ref.environment_variable: "from-env"}).get(ref).reveal() == "from-env"
    folder = tmp_path / "secrets" / "ml-team" / "hf-token"
    folder.mkdir(parents=True)
    (folder / "HF_TOKEN").write_text("from-file\n")
    assert SecretStore(environ={}, directory=tmp_path / "secrets").get(ref).reveal() == "from-file"
    assert SecretStore(environ={}).get(ref) is None


@pytest.fixture
def double(tmp_path, monkeypatch):
    pulumi_double.on_path(tmp_path, monkeypatch, "secrets-test")
    return tmp_path


def test_up_with_a_secret_manifest_keeps_it_off_argv_and_out_of_the_state(double, capsys):
    path = secrets_file(double)
    assert main(["up", "-f", str(ROOT / "examples"), "-f", str(path)]) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    calls = pulumi_double.calls(double / "double")
    assert calls and not any(TOKEN in arg or "kube-7d3e" in arg for c in calls for arg in c["argv"])
    state = (double / "work" / ".modelplane").rglob("*")
    assert not any(p.is_file() and (TOKEN.encode() in p.read_bytes() or b"kube-7d3e" in p.read_bytes()) for p in state)
    assert TOKEN not in out + err


def test_up_refuses_a_secret_that_has_no_value_before_anything_runs(double, capsys):
    assert main(["up", "-f", str(ROOT / "examples"), "--kubeconfig", f"byo-eu={secrets_file(double)}"]) == 2
    err = capsys.readouterr().err
    assert "cache-ml-team.qwen3-coder: Secret ml-team/hf-token key 'HF_TOKEN' has no value" in err
    assert "$MODELPLANE_SECRET_ML_TEAM__HF_TOKEN__HF_TOKEN" in err
    assert not [c for c in pulumi_double.calls(double / "double") if c["argv"][:1] == ["up"]]


def test_fields_naming_credentials_this_project_does_not_use_are_warned_about():
    from tests.manifests import cluster, run

    existing = cluster("onprem")
    existing["spec"]["cluster"]["existing"]["identitySecretRef"] = {"name": "gcp-sa"}
    gke = cluster("gke", source="GKE")
    gke["spec"]["cluster"]["gke"]["credentials"] = {"name": "default"}
    warnings = {(p.object.split("/")[-1], p.path): p.message for p in run(existing, gke).problems if p.warning}
    assert "is not used" in warnings[("onprem", "spec.cluster.existing.identitySecretRef")]
    assert "gcloud application default credentials" in warnings[("gke", "spec.cluster.gke.credentials")]


def test_a_missing_secret_is_named_once_though_its_cache_stages_weights_on_three_clusters():
    loaded = load_fleet([str(ROOT / "examples")])
    spec = desired_state(loaded.fleet).specs["cache-ml-team.qwen3-coder"]
    assert len(spec.objects) == 3  # one Secret per cluster the cache stages on
    (missing,) = missing_secrets(spec, loaded.fleet)
    assert missing.startswith("cache-ml-team.qwen3-coder: Secret ml-team/hf-token key 'HF_TOKEN' has no value")
