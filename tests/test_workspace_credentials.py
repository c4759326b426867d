"""GKE and Nebius kubeconfigs that work in an operator workspace pod (issue 61, item 1).

A workspace pod has no gcloud sign-in and no Nebius CLI profile. These tests run each kubeconfig's exec plugin the
way the official Kubernetes client runs it (kubernetes.config), in a pod-like environment: an empty HOME, the
environment and the mounted files the operator export gives the workspace. The plugins are stand-ins that accept
only the flags their vendors document and sign in only from what they document reading:

* gke-gcloud-auth-plugin: `--use_application_default_credentials` reads Application Default Credentials, i.e. the
  key file GOOGLE_APPLICATION_CREDENTIALS names; without it, the plugin asks gcloud for its signed-in account
  (kubernetes/cloud-provider-gcp, issue 654);
* nebius: `profile create --endpoint E --service-account-file F --profile P`, then `--profile P` on a command
  (docs.nebius.com, "Authorized keys"); `mk8s cluster get-token --format json` as `get-credentials` writes it.

What only a real cloud shows: that the real plugins and the pinned workspace image behave as documented.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

import pytest
import yaml

from automation.operator.export import PULUMI_IMAGE, ExportError, ExportOptions, export
from automation.operator.validation import problems
from automation.planning.stacks import desired_state
from components import gke, nebius
from components.workspace_credentials import GCP_FILE, MOUNT_DIR, MOUNTED, NEBIUS_FILE
from fleet.validate import load_fleet

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONCEPTS = ROOT / "tests" / "data" / "reference" / "concepts.yaml"  # AKS, EKS, Existing, GKE, Nebius clusters
COMMIT = "0123456789abcdef0123456789abcdef01234567"
CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="

GKE_PLUGIN = """
import json, os, sys

def refuse(why):  # said on stderr, which the client's log does not show (automation/execution/kube.py), and kept
    with open(os.path.join(os.environ["HOME"], "refused.log"), "a") as out:
        out.write(why + "\\n")
    sys.exit(why)
args = sys.argv[1:]
for arg in args:
    if arg != "--use_application_default_credentials":
        refuse(f"unknown flag: {arg}")
if args:  # Application Default Credentials: the file GOOGLE_APPLICATION_CREDENTIALS names
    path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", "")
    if not os.path.isfile(path):
        refuse("no Application Default Credentials")
    token = "adc:" + json.load(open(path))["client_email"]
else:  # gcloud's signed-in account
    if not os.path.isdir(os.path.join(os.environ.get("HOME", "/nonexistent"), ".config", "gcloud")):
        refuse("gcloud has no signed-in account")
    token = "gcloud"
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                  "status": {"token": token}}))
"""

NEBIUS_CLI = """
import json, os, sys

def refuse(why):  # said on stderr, which the client's log does not show (automation/execution/kube.py), and kept
    with open(os.path.join(os.environ["HOME"], "refused.log"), "a") as out:
        out.write(why + "\\n")
    sys.exit(why)
args = sys.argv[1:]
home = os.environ["HOME"]
store = os.path.join(home, ".nebius", "profiles.json")
profiles = json.load(open(store)) if os.path.exists(store) else {}

def flags(rest, allowed):
    if len(rest) % 2 or any(name not in allowed for name in rest[::2]):
        refuse(f"unknown flags: {rest}")
    return dict(zip(rest[::2], rest[1::2]))

if args[:2] == ["profile", "create"]:
    given = flags(args[2:], {"--endpoint", "--service-account-file", "--profile", "--parent-id"})
    key = json.load(open(given["--service-account-file"]))["subject-credentials"]
    if given["--profile"] in profiles:
        refuse("profile exists")
    profiles[given["--profile"]] = {"endpoint": given["--endpoint"], "kid": key["kid"]}
    os.makedirs(os.path.dirname(store), exist_ok=True)
    json.dump(profiles, open(store, "w"))
    print("profile created and set as default")  # on stdout, as a CLI says it
elif args[:3] == ["mk8s", "cluster", "get-token"]:
    given = flags(args[3:], {"--format", "--profile"})
    if given.get("--format") != "json":
        refuse("--format json is what the client reads")
    profile = profiles.get(given.get("--profile", "default"))
    if profile is None:
        refuse("no profile: run nebius profile create")
    print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                      "status": {"token": "nebius:" + profile["kid"]}}))
else:
    refuse(f"unknown command: {args}")
"""


@pytest.fixture
def pod(tmp_path, monkeypatch):
    """A fresh workspace pod: the plugins on PATH, an empty HOME, and MOUNT_DIR's files in a folder here."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, source in (("gke-gcloud-auth-plugin", GKE_PLUGIN), ("nebius", NEBIUS_CLI)):
        (bin_dir / name).write_text(f"#!{sys.executable}\n{source}")
        (bin_dir / name).chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    mounts = tmp_path / "mounts"
    (mounts / "gcp").mkdir(parents=True)
    (mounts / "nebius").mkdir(parents=True)
    (mounts / "gcp" / "credentials.json").write_text(json.dumps(
        {"type": "service_account", "client_email": "fleet@p.iam.gserviceaccount.com"}))
    (mounts / "nebius" / "credentials.json").write_text(json.dumps(
        {"subject-credentials": {"alg": "RS256", "private-key": "k", "kid": "publickey-e00abc",
                                 "iss": "serviceaccount-e00x", "sub": "serviceaccount-e00x"}}))
    return mounts


def _in_pod(mounts: pathlib.Path, text: str) -> str:
    return text.replace(MOUNT_DIR, str(mounts))  # the Secret volumes, mounted here instead of MOUNT_DIR


def _refused() -> str:
    """What the stand-in plugins refused, and why (the pod's HOME keeps it)."""
    log = pathlib.Path(os.environ["HOME"]) / "refused.log"
    return log.read_text() if log.exists() else ""


def _token(kubeconfig: str, caplog) -> str | None:
    """What the official Kubernetes client sends after running the kubeconfig's exec plugin."""
    from kubernetes import client, config

    configuration = client.Configuration()
    caplog.clear()
    config.load_kube_config_from_dict(yaml.safe_load(kubeconfig), client_configuration=configuration)
    value = configuration.api_key.get("authorization")
    return value.removeprefix("Bearer ") if value else None


def test_gke_kubeconfig_signs_in_from_the_mounted_key_in_a_fresh_pod(pod, monkeypatch, caplog):
    laptop = gke.kubeconfig("c", "10.0.0.1", CA)
    assert _token(laptop, caplog) is None  # the laptop's kubeconfig: gcloud has no account in a pod
    assert "gcloud has no signed-in account" in _refused()
    mounted = gke.kubeconfig("c", "10.0.0.1", CA, MOUNTED)
    user = yaml.safe_load(mounted)["users"][0]["user"]["exec"]
    assert user["command"] == "gke-gcloud-auth-plugin" and user["args"] == ["--use_application_default_credentials"]
    assert user["provideClusterInfo"] is True
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", _in_pod(pod, GCP_FILE))  # what the export sets
    assert _token(mounted, caplog) == "adc:fleet@p.iam.gserviceaccount.com"
    assert yaml.safe_load(laptop)["users"][0]["user"]["exec"].get("args") is None  # a laptop's is as it was


def test_nebius_kubeconfig_makes_its_profile_from_the_mounted_key_then_reuses_it(pod, caplog):
    laptop = nebius.kubeconfig("c", "10.0.0.1", CA)
    assert _token(laptop, caplog) is None and "no profile" in _refused()  # no CLI profile in a pod
    assert yaml.safe_load(laptop)["users"][0]["user"]["exec"]["args"] == nebius.GET_TOKEN
    mounted = _in_pod(pod, nebius.kubeconfig("c", "10.0.0.1", CA, MOUNTED))
    assert _token(mounted, caplog) == "nebius:publickey-e00abc"  # stdout held the ExecCredential alone
    assert _token(mounted, caplog) == "nebius:publickey-e00abc"  # the second run reuses the profile
    assert "profile exists" not in _refused()


def _desired(path: pathlib.Path = CONCEPTS):
    loaded = load_fleet([str(path)])
    desired = desired_state(loaded.fleet, {}, None)
    return desired


def _options(**extra) -> ExportOptions:
    return ExportOptions(backend="s3://b", git_url="https://github.com/acme/fleet", git_ref=COMMIT, **extra)


def test_export_refuses_gke_and_nebius_clusters_without_a_working_credential_naming_the_setting():
    desired = _desired()
    with pytest.raises(ExportError, match=r"InferenceCluster/gke-[a-z0-9-]+: .*set credentials.gcp .*--gcp-credentials"):
        export(desired, _options(nebius_credentials=("nebius", "credentials.json"), image="acme/workspace:1"))
    with pytest.raises(ExportError, match=r"InferenceCluster/nebius-eu-north: .*set credentials.nebius"):
        export(desired, _options(gcp_credentials=("gcp", "credentials.json"), image="acme/workspace:1"))
    with pytest.raises(ExportError, match=rf"{PULUMI_IMAGE} has no Nebius CLI.*set image"):
        export(desired, _options(gcp_credentials=("gcp", "key.json"), nebius_credentials=("nebius", "key.json")))


def test_every_workspace_mounts_the_credentials_where_the_kubeconfigs_read_them(pod, monkeypatch, caplog):
    files = export(_desired(), _options(gcp_credentials=("gcp", "key.json"), nebius_credentials=("neb", "sa.json"),
                                        image="acme/workspace:1"))
    assert problems(files) == []  # the mounts pass the operator's Stack CRD
    stacks = {obj["metadata"]["annotations"]["modelplane.ai/stack"]: obj for objects in files.values()
              for obj in objects if obj["kind"] == "Stack"}
    for name, stack in stacks.items():
        workspace = stack["spec"]["workspaceTemplate"]["spec"]
        # (the constraints file's PIP_CONSTRAINT and ConfigMap mount are tests/test_operator.py's)
        assert [e for e in workspace["env"] if e["name"] != "PIP_CONSTRAINT"] == [
            {"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": GCP_FILE}], name
        pod_spec = workspace["podTemplate"]["spec"]
        volumes = {v["name"]: v["secret"] for v in pod_spec["volumes"] if "secret" in v}
        (container,) = pod_spec["containers"]
        assert container["name"] == "pulumi"  # PKO's workspace container, which runs the program
        placed = {f"{m['mountPath']}/{item['path']}": (volumes[m["name"]]["secretName"], item["key"])
                  for m in container["volumeMounts"] if m["name"] in volumes for item in volumes[m["name"]]["items"]}
        assert placed == {GCP_FILE: ("gcp", "key.json"), NEBIUS_FILE: ("neb", "sa.json")}, name
        assert all(m["readOnly"] for m in container["volumeMounts"])
    config = {name: stack["spec"].get("config", {}) for name, stack in stacks.items()}
    assert config["platform-gke-us-central"]["modelplane:clusterCredentials"] == MOUNTED
    assert config["platform-nebius-eu-north"]["modelplane:clusterCredentials"] == MOUNTED
    assert "modelplane:clusterCredentials" not in config["platform-eks-us-west"]  # its own credentials (env)


def test_the_platform_program_outputs_the_mounted_kubeconfig_when_the_stack_says_so(pod, monkeypatch, caplog):
    import pulumi

    from components.platform import platform
    from tests.pulumi_mocks import inputs, named, registered

    fleet = load_fleet([str(CONCEPTS)]).fleet
    expected = {("gke-us-central", ""): "gke-gcloud-auth-plugin", ("gke-us-central", MOUNTED): "gke-gcloud-auth-plugin",
                ("nebius-eu-north", ""): "nebius", ("nebius-eu-north", MOUNTED): "sh"}
    for (cluster, credentials), command in expected.items():
        config = {"modelplane:cluster": cluster, "modelplane:gateway": "false", "gcp:project": "p",
                  "modelplane:clusterCredentials": credentials}
        resources = registered(lambda: platform(fleet, pulumi.Config("modelplane")), f"platform-{cluster}", config)
        kubeconfig = inputs(named(resources, f"{cluster}-k8s", "pulumi:providers:kubernetes"))["kubeconfig"]
        user = yaml.safe_load(kubeconfig)["users"][0]["user"]["exec"]
        assert user["command"] == command, (cluster, credentials)
        mounted = credentials == MOUNTED
        assert ("--use_application_default_credentials" in (user.get("args") or [])) == (mounted and command != "sh")
        if mounted:  # the program's own output signs in, in the pod, from the mounted files
            monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", _in_pod(pod, GCP_FILE))
            assert _token(_in_pod(pod, kubeconfig), caplog), (cluster, caplog.text)
