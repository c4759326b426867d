"""A session of the real kubectl (and the Python kubernetes client) against `modelplane serve --tls-self-signed`:
discovery, get (Table and YAML), explain, auth can-i, selectors and paging, apply, scale, delete, watch.

The session runs once per kubectl: the one on PATH, and Debian's 1.20 that `make browser` unpacks into the virtual
environment (older kubectl reads OpenAPI v2 as protobuf only, and prints versions and `explain` differently), once
when they are the same release. kubectl sends a bearer token over TLS only, so the portal serves https with the
certificate it made, and the kubeconfig names the CA the banner printed.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.manifests import deployment
from tests.portal_server import ADMIN, API, TEAM_A, free_port, write_tokens
from tests.test_portal import seed_fleet

DEBIAN_KUBECTL = Path(sys.prefix) / "debian-kubectl" / "kubectl"


def client_version(binary: str) -> str:
    done = subprocess.run([binary, "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout)["clientVersion"]["gitVersion"] if done.returncode == 0 else binary


def kubectls() -> dict[str, str]:
    """Client release -> binary: PATH's kubectl and Debian's, each release once."""
    found: dict[str, str] = {}
    for binary in (shutil.which("kubectl"), str(DEBIAN_KUBECTL) if DEBIAN_KUBECTL.exists() else None):
        if binary:
            found.setdefault(client_version(binary), binary)
    return found


KUBECTLS = kubectls()


def test_kubectl_and_debians_kubectl_are_installed():
    assert shutil.which("kubectl"), "kubectl is not installed: `make browser` installs Debian's kubernetes-client"
    assert DEBIAN_KUBECTL.exists(), f"{DEBIAN_KUBECTL} is missing: `make browser` unpacks Debian's kubernetes-client"


class Portal:
    """`modelplane serve` in a subprocess, over TLS, with the seeded fleet."""

    def __init__(self, folder: Path):
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "automation.cli", "serve", "--port", str(self.port), "--tokens",
             str(write_tokens(folder)), "--data-dir", str(folder / "data"), "--state", str(folder / "state"),
             "--no-apply", "--tls-self-signed"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            # a module's portal starts before the per-test cache folder is set (tests/conftest.py): its own here
            env={**os.environ, "MODELPLANE_CACHE_DIR": str(folder / "modelplane-cache")})
        assert self.process.stdout is not None
        banner = self.process.stdout.readline() + self.process.stdout.readline()
        assert banner.startswith(f"modelplane portal on https://127.0.0.1:{self.port}"), banner
        found = re.search(r"signed by the CA (\S+) ", banner)
        assert found, banner
        self.ca = found.group(1)
        self.url = f"https://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(self.url + "/healthz", verify=self.verify(), timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, self.process.stderr.read() if self.process.poll() else "no answer"
                time.sleep(0.1)

    def verify(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca)

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, verify=self.verify(),
                            timeout=60)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(20)


@pytest.fixture(scope="module", params=sorted(KUBECTLS))
def session(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("kubectl")
    portal = Portal(folder)
    try:
        seed_fleet(portal)
        with portal.client(ADMIN) as admin:
            for name, replicas, labels in (("chat", 2, {"app": "chat"}), ("code", 1, {"app": "code"}),
                                           ("embed", 1, {"app": "embed"})):
                body = deployment(name, "team-a", replicas=replicas)
                body["metadata"]["labels"] = labels
                assert admin.put(f"{API}/namespaces/team-a/modeldeployments/{name}", json=body).status_code == 201
            assert admin.put(f"{API}/namespaces/team-b/modeldeployments/other", json=deployment("other", "team-b")).status_code == 201
        config = {"apiVersion": "v1", "kind": "Config", "current-context": "team-a",
                  "clusters": [{"name": "portal", "cluster": {"server": portal.url, "certificate-authority": portal.ca}}],
                  "users": [{"name": "team-a", "user": {"token": TEAM_A}}],
                  "contexts": [{"name": "team-a", "context": {"cluster": "portal", "user": "team-a",
                                                             "namespace": "team-a"}}]}
        kubeconfig = folder / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(config))
        kubeconfig.chmod(0o600)
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(folder), "KUBECONFIG": str(kubeconfig),
               "KUBECACHEDIR": str(folder / "cache"), "MODELPLANE_TEST_KUBECTL": KUBECTLS[request.param]}
        yield portal, env, folder
    finally:
        portal.stop()


def kubectl(env: dict, *args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([env["MODELPLANE_TEST_KUBECTL"], *args], env=env, capture_output=True, text=True, timeout=60, input=stdin)
    if check:
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done


def rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.strip().splitlines()]


# ---- read side ---------------------------------------------------------------------------------------------------

def test_version_and_api_resources(session):
    _, env, _ = session
    # kubectl 1.20 prints the whole version.Info, later ones its GitVersion
    assert re.search(r'^Server Version: (version\.Info\{.*GitVersion:")?v1\.32\.0\+modelplane\.',
                     kubectl(env, "version").stdout, re.M)
    found = {r[0]: r for r in rows(kubectl(env, "api-resources").stdout)[1:]}
    assert found["modeldeployments"][1:] == ["md", "modelplane.ai/v1alpha1", "true", "ModelDeployment"]
    assert found["inferenceclusters"][1:] == ["ic", "modelplane.ai/v1alpha1", "false", "InferenceCluster"]
    assert found["modelreplicas"][1] == "mr"
    assert "selfsubjectaccessreviews" in found
    assert kubectl(env, "get", "modelplane", "-o", "name").stdout.count("modeldeployment.modelplane.ai/") == 3


def test_get_prints_the_servers_table_and_yaml(session):
    _, env, _ = session
    table = rows(kubectl(env, "get", "modeldeployments").stdout)
    assert table[0] == ["NAME", "REPLICAS", "READY", "BACKEND", "AGE"]
    assert [r[:4] for r in table[1:]] == [["chat", "2", "0", "native"], ["code", "1", "0", "native"],
                                          ["embed", "1", "0", "native"]]
    assert rows(kubectl(env, "get", "md", "-o", "wide").stdout)[0][4] == "CLUSTERS"
    listed = yaml.safe_load(kubectl(env, "get", "md", "-o", "yaml").stdout)
    assert listed["kind"] == "List" and [i["metadata"]["name"] for i in listed["items"]] == ["chat", "code", "embed"]
    one = yaml.safe_load(kubectl(env, "get", "md", "chat", "-o", "yaml").stdout)
    assert one["spec"]["replicas"] == 2 and one["status"]["replicas"]["placed"] == 2
    assert [r[0] for r in rows(kubectl(env, "get", "md", "-l", "app in (chat,code)").stdout)[1:]] == ["chat", "code"]
    bad = kubectl(env, "get", "md", "-l", "app in (chat", check=False)
    assert bad.returncode != 0 and "unable to parse requirement" in bad.stderr
    # every namespace: only the team's own
    assert {r[0] for r in rows(kubectl(env, "get", "md", "-A").stdout)[1:]} == {"team-a"}
    clusters = rows(kubectl(env, "get", "ic").stdout)
    assert clusters[0] == ["NAME", "SOURCE", "GATEWAY", "AGE"] and clusters[1][:2] == ["c1", "Existing"]
    assert [r[1] for r in rows(kubectl(env, "get", "mr").stdout)[1:]] == ["c1"] * 4


def test_explain_reads_the_models_schema(session):
    _, env, _ = session
    explained = kubectl(env, "explain", "modeldeployment.spec.replicas").stdout
    assert re.search(r"^KIND:\s+ModelDeployment$", explained, re.M)
    assert re.search(r"^FIELD:\s+replicas <integer>$", explained, re.M)
    assert "engines" in kubectl(env, "explain", "md.spec.template.spec").stdout
    # both of the reference's shapes: the v0.5 gateway's, service entry's and endpoint's fields (fleet/json_schema.py)
    gateway = kubectl(env, "explain", "ig.spec").stdout
    assert all(field in gateway for field in ("clusterName", "serviceSelector", "auth", "backend")), gateway
    assert re.search(r"^FIELD:\s+clusterName <string>$", kubectl(env, "explain", "ig.spec.clusterName").stdout, re.M)
    assert "priority" in kubectl(env, "explain", "ms.spec.endpoints").stdout
    assert "prefix" in kubectl(env, "explain", "me.spec.api").stdout


def test_auth_can_i_answers_from_the_team_model(session):
    _, env, _ = session
    yes = kubectl(env, "auth", "can-i", "create", "modeldeployments", "-n", "team-a")
    assert (yes.returncode, yes.stdout.strip()) == (0, "yes")
    no = kubectl(env, "auth", "can-i", "create", "modeldeployments", "-n", "team-b", check=False)
    assert (no.returncode, no.stdout.strip()) == (1, "no")
    assert kubectl(env, "auth", "can-i", "list", "inferenceclusters").stdout.strip() == "yes"
    assert kubectl(env, "auth", "can-i", "delete", "inferenceclusters", check=False).stdout.strip() == "no"
    assert kubectl(env, "auth", "can-i", "update", "modelreplicas", check=False).stdout.strip() == "no"


def test_the_python_client_selects_and_pages(session):
    from kubernetes import client

    portal, _, _ = session
    configuration = client.Configuration()
    configuration.host, configuration.ssl_ca_cert = portal.url, portal.ca
    configuration.api_key = {"authorization": f"Bearer {TEAM_A}"}
    with client.ApiClient(configuration) as api_client:
        api = client.CustomObjectsApi(api_client)
        list_md = lambda **kw: api.list_namespaced_custom_object("modelplane.ai", "v1alpha1", "team-a",  # noqa: E731
                                                                 "modeldeployments", **kw)
        names = lambda found: [i["metadata"]["name"] for i in found["items"]]  # noqa: E731
        assert names(list_md(label_selector="app!=chat")) == ["code", "embed"]
        assert names(list_md(field_selector="metadata.name=embed")) == ["embed"]
        first = list_md(limit=2)
        second = list_md(limit=2, _continue=first["metadata"]["continue"])
        assert names(first) == ["chat", "code"] and names(second) == ["embed"]
        assert "continue" not in second["metadata"]
        with pytest.raises(client.ApiException) as refused:
            list_md(field_selector="spec.replicas=2")
        assert refused.value.status == 400


# ---- the verbs (POST, PATCH, DELETE, watch) ---------------------------------------------------------------------

MANIFEST = """apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: applied
  labels: {app: applied}
spec:
  replicas: REPLICAS
  template:
    spec:
      engines:
      - name: vllm
        members:
        - template:
            spec:
              containers: [{name: engine, image: "vllm/vllm-openai:v0.11.0"}]
          nodeSelector:
            devices:
            - name: gpu
              selectors: [{cel: 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0'}]
"""


def replicas_of(env: dict, name: str) -> str:
    return kubectl(env, "get", "md", name, "-o", "jsonpath={.spec.replicas}").stdout


def test_apply_create_then_change_then_server_side(session):
    portal, env, _ = session
    assert kubectl(env, "apply", "-f", "-", stdin=MANIFEST.replace("REPLICAS", "1")).stdout.strip() == \
        "modeldeployment.modelplane.ai/applied created"
    assert kubectl(env, "apply", "-f", "-", stdin=MANIFEST.replace("REPLICAS", "2")).stdout.strip() == \
        "modeldeployment.modelplane.ai/applied configured"
    assert replicas_of(env, "applied") == "2"
    # changing what client-side apply set conflicts, as on Kubernetes (its field manager owns spec.replicas) ...
    conflict = kubectl(env, "apply", "--server-side", "-f", "-", stdin=MANIFEST.replace("REPLICAS", "3"), check=False)
    assert conflict.returncode == 1 and "conflict" in conflict.stderr.lower()
    assert replicas_of(env, "applied") == "2"
    # ... an object that server-side apply made, it changes
    made = MANIFEST.replace("applied", "ssa")
    for replicas in ("1", "3"):
        assert kubectl(env, "apply", "--server-side", "-f", "-", stdin=made.replace("REPLICAS", replicas)).stdout.strip() \
            == "modeldeployment.modelplane.ai/ssa serverside-applied"
        assert replicas_of(env, "ssa") == replicas


def test_scale_then_delete(session):
    portal, env, _ = session
    kubectl(env, "apply", "-f", "-", stdin=MANIFEST.replace("applied", "scaled").replace("REPLICAS", "1"))
    assert kubectl(env, "scale", "md", "scaled", "--replicas=2").stdout.strip() == "modeldeployment.modelplane.ai/scaled scaled"
    assert replicas_of(env, "scaled") == "2"
    # a server-side dry run is checked and answered, and scales nothing (it once scaled for real: issue 65)
    # (kubectl 1.20 says "scaled" for a dry run too; newer ones add "(server dry run)")
    kubectl(env, "scale", "md", "scaled", "--replicas=4", "--dry-run=server")
    assert replicas_of(env, "scaled") == "2"
    assert kubectl(env, "delete", "md", "scaled").stdout.strip() == 'modeldeployment.modelplane.ai "scaled" deleted'
    gone = kubectl(env, "get", "md", "scaled", check=False)
    assert gone.returncode == 1 and "NotFound" in gone.stderr


def test_get_watch_sees_a_change(session):
    portal, env, _ = session
    watcher = subprocess.Popen([env["MODELPLANE_TEST_KUBECTL"], "get", "md", "code", "--watch"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in watcher.stdout or []], daemon=True).start()

    def next_row(seconds: float = 20) -> list[str]:
        return lines.get(timeout=seconds).split()

    try:
        assert next_row() == ["NAME", "REPLICAS", "READY", "BACKEND", "AGE"]
        assert next_row()[:2] == ["code", "1"]
        kubectl(env, "scale", "md", "code", "--replicas=3")
        deadline = time.monotonic() + 20
        while True:  # the change comes as a row of the server's columns
            row = next_row(max(0.1, deadline - time.monotonic()))
            if row[:2] == ["code", "3"]:
                break
    finally:
        watcher.terminate()
        watcher.wait(10)


TEAM_POLICY = """apiVersion: modelplane.ai/v1alpha1
kind: TeamPolicy
metadata:
  name: team-b
spec:
  gpus:
  - {deviceClassName: gpu.nvidia.com, count: COUNT}
  maxDeployments: 10
"""


def test_the_platform_team_applies_and_lists_team_policies(session):
    """TeamPolicy is cluster-scoped and the platform team's: an admin applies it, a team reads it and may not."""
    portal, env, folder = session
    config = yaml.safe_load(Path(env["KUBECONFIG"]).read_text())
    config["users"] = [{"name": "team-a", "user": {"token": ADMIN}}]  # the same context, the admin's token
    admin_config = folder / "kubeconfig-admin"
    admin_config.write_text(yaml.safe_dump(config))
    admin_config.chmod(0o600)
    admin = {**env, "KUBECONFIG": str(admin_config)}
    assert kubectl(admin, "apply", "-f", "-", stdin=TEAM_POLICY.replace("COUNT", "50")).stdout.strip() == \
        "teampolicy.modelplane.ai/team-b created"
    assert kubectl(admin, "apply", "-f", "-", stdin=TEAM_POLICY.replace("COUNT", "60")).stdout.strip() == \
        "teampolicy.modelplane.ai/team-b configured"
    table = rows(kubectl(env, "get", "teampolicies").stdout)
    assert table[0] == ["NAME", "GPU", "BUDGETS", "MAX", "DEPLOYMENTS", "AGE"] and table[1][:3] == ["team-b", "1", "10"]
    listed = yaml.safe_load(kubectl(env, "get", "tp", "team-b", "-o", "yaml").stdout)
    assert listed["spec"]["gpus"] == [{"deviceClassName": "gpu.nvidia.com", "count": 60}]
    refused = kubectl(env, "apply", "-f", "-", stdin=TEAM_POLICY.replace("COUNT", "99"), check=False)
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower()
