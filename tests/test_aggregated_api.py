"""The portal as the control-plane cluster's aggregated API: what is rendered (workloads/aggregated_api.py), that the
deployability check sees it, and front-proxy authentication with the cluster's authorization
(automation/portal/front_proxy.py) over real TLS with client certificates."""

from __future__ import annotations

import base64
import copy
import datetime
import shutil
import ssl
import threading
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn

from automation.operator.export import PULUMI_IMAGE
from automation.portal.app import create_app
from automation.portal.auth import TokensFile
from automation.portal import front_proxy
from automation.portal.front_proxy import ClusterReviewer, FrontProxySettings, attributes
from automation.portal.store import Store
from tests.portal_server import API, TEAM_A, free_port, write_tokens
from workloads import aggregated_api
from workloads.aggregated_api import PREFIX, objects
from workloads.schemas import check

ROOT = Path(__file__).resolve().parent.parent
ON = {PREFIX: "enabled", f"{PREFIX}-source": "modelplane-pulumi @ git+https://github.com/example/fleet@" + "0" * 40}


def test_the_default_image_is_the_operators():
    assert aggregated_api.DEFAULT_IMAGE == PULUMI_IMAGE


def _ca_bundle() -> str:
    return base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


@pytest.mark.parametrize("annotations", [ON, {**ON, f"{PREFIX}-serving-secret": "mine", f"{PREFIX}-ca-bundle": _ca_bundle(),
                                              f"{PREFIX}-executor": "operator"}])
def test_every_rendered_object_is_valid_against_its_upstream_schema(annotations):
    rendered = objects(annotations)
    kinds = sorted(o["kind"] for o in rendered)
    assert {"Namespace", "ServiceAccount", "ClusterRoleBinding", "RoleBinding", "Deployment", "Service",
            "APIService"} <= set(kinds)
    assert ("Certificate" in kinds) == (f"{PREFIX}-serving-secret" not in annotations)
    for obj in rendered:
        assert check(obj) == [], obj["kind"]
        broken = copy.deepcopy(obj)
        broken.setdefault("spec", {})["notAField"] = 1  # the same check refuses what the API server would
        assert check(broken) != [], obj["kind"]
    api = next(o for o in rendered if o["kind"] == "APIService")
    assert api["metadata"]["name"] == "v1alpha1.modelplane.ai"
    assert ("caBundle" in api["spec"]) != ("cert-manager.io/inject-ca-from" in api["metadata"].get("annotations", {}))
    bindings = {o["roleRef"]["name"]: o for o in rendered if "roleRef" in o}
    assert bindings["extension-apiserver-authentication-reader"]["metadata"]["namespace"] == "kube-system"
    assert "system:auth-delegator" in bindings


@pytest.mark.parametrize("annotations,key", [
    ({PREFIX: "yes"}, PREFIX),
    ({PREFIX: "enabled"}, f"{PREFIX}-image"),
    ({**ON, f"{PREFIX}-executor": "local"}, f"{PREFIX}-executor"),
    ({**ON, f"{PREFIX}-serving-secret": "mine"}, f"{PREFIX}-serving-secret"),
    ({**ON, f"{PREFIX}-serving-secret": "mine", f"{PREFIX}-ca-bundle": "not base64!"}, f"{PREFIX}-ca-bundle"),
    ({**ON, f"{PREFIX}-colour": "blue"}, f"{PREFIX}-colour"),
])
def test_wrong_annotations_are_named(annotations, key):
    assert key in [k for k, _ in aggregated_api.errors(annotations)]
    if aggregated_api.enabled(annotations):
        with pytest.raises(ValueError, match=key):
            objects(annotations)


IMAGE = {PREFIX: "enabled", f"{PREFIX}-image": "registry.example/modelplane:0.1.0"}


@pytest.mark.parametrize("annotations, installs", [(IMAGE, False), (ON, True)])
def test_the_portal_starts_under_a_startup_probe_within_the_stacks_wait(annotations, installs):
    """A startup probe covers the start (seconds from an image, minutes for an install), liveness has no long fixed
    delay, and the gateway stack waits (`pulumi.com/timeoutSeconds`) at least as long as the probe allows. Before:
    liveness after 300 s and Pulumi's default ten minutes, whatever the start took."""
    (deployment,) = [o for o in objects(annotations) if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    startup = container["startupProbe"]
    assert startup["httpGet"] == container["livenessProbe"]["httpGet"]
    allowed = startup["periodSeconds"] * startup["failureThreshold"]
    assert (allowed >= 600) is installs and allowed >= 60
    assert container["livenessProbe"].get("initialDelaySeconds", 0) <= 30
    wait = int(deployment["metadata"]["annotations"]["pulumi.com/timeoutSeconds"])
    assert wait > allowed and (wait <= 600) is not installs
    assert ("pip install" in container["command"][-1]) is installs
    assert check(deployment) == []


def _fleet_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "fleet"
    shutil.copytree(ROOT / "examples", folder)
    gateway = folder / "platform" / "gateway.yaml"
    lines = "".join(f"    {k}: {v!r}\n" for k, v in ON.items())
    gateway.write_text(gateway.read_text().replace("  name: default\n", f"  name: default\n  annotations:\n{lines}"))
    return folder


def test_the_deployability_check_sees_the_aggregated_api_and_a_broken_one(tmp_path, monkeypatch):
    from automation.checks.deployability import check_fleet
    from automation.checks.offline_preview import all_stacks, forget
    from fleet.validate import load_fleet

    loaded = load_fleet([str(_fleet_folder(tmp_path))])
    assert not loaded.errors
    previews = all_stacks(loaded.fleet, only={"gateway", "platform-eks-us-west", "platform-gke-us-central"})
    gateway = next(p for p in previews if p.name == "gateway")
    assert any(r.type == "kubernetes:apiregistration.k8s.io/v1:APIService" for r in gateway.resources)
    assert [str(v) for v in check_fleet(loaded.fleet, previews)] == []
    real = aggregated_api.objects

    def broken(annotations):  # a Service port that is not the APIService's, a namespace nobody creates
        out = [o for o in real(annotations) if o["kind"] != "Namespace"]
        next(o for o in out if o["kind"] == "Service")["spec"]["ports"][0]["port"] = 8443
        return out

    monkeypatch.setattr(aggregated_api, "objects", broken)
    forget()  # the programs changed, not their inputs
    previews = all_stacks(loaded.fleet, only={"gateway", "platform-eks-us-west", "platform-gke-us-central"})
    found = [str(v) for v in check_fleet(loaded.fleet, previews)]
    assert any("api-service" in v and "has no port 443" in v for v in found), found
    assert any("namespace 'modelplane-portal'" in v for v in found), found
    forget()  # later tests preview the real programs


# ---- front-proxy authentication over TLS --------------------------------------------------------------------

def _cert(name: str, issuer=None, ca: bool = False, server: bool = False):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=1)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer[0].subject if issuer else subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now)
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        import ipaddress

        builder = builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                        critical=False)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH if ca else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False) if not ca else builder
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256()), key


def _write(folder: Path, name: str, pair) -> tuple[str, str]:
    from cryptography.hazmat.primitives import serialization

    cert, key = pair
    (folder / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / f"{name}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()))
    return str(folder / f"{name}.crt"), str(folder / f"{name}.key")


class StrictReviewer:
    """The API server's SubjectAccessReview, as strict: a malformed review is refused (400 there, an error here);
    the answer comes from a table of (user or group, verb, resource, namespace) grants, namespace "*" for all."""

    VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

    def __init__(self, grants: set[tuple[str, str, str, str]]):
        self.grants, self.reviews = grants, []

    def allowed(self, review: dict) -> bool:
        assert review["apiVersion"] == "authorization.k8s.io/v1" and review["kind"] == "SubjectAccessReview"
        spec = review["spec"]
        if not spec.get("user") and not spec.get("groups"):
            raise ValueError("at least one of user or group must be specified")
        if ("resourceAttributes" in spec) == ("nonResourceAttributes" in spec):
            raise ValueError("exactly one of nonResourceAttributes or resourceAttributes must be specified")
        self.reviews.append(spec)
        if "nonResourceAttributes" in spec:
            return spec["nonResourceAttributes"]["path"].startswith("/apis")
        attrs = spec["resourceAttributes"]
        if attrs.get("verb") not in self.VERBS or attrs.get("group") != "modelplane.ai" or not attrs.get("resource"):
            raise ValueError(f"malformed resourceAttributes {attrs}")
        who = [spec.get("user")] + spec.get("groups", [])
        return any((w, attrs["verb"], attrs["resource"], ns) in self.grants for w in who
                   for ns in (attrs.get("namespace", ""), "*"))


@contextmanager
def _front_proxied_portal(folder: Path, reviewer):
    """A portal over TLS that believes the front proxy (CA `proxy_ca`, name front-proxy-client) and asks `reviewer`."""
    proxy_ca, rogue_ca, server_ca = _cert("front-proxy-ca", ca=True), _cert("rogue-ca", ca=True), _cert("srv-ca", ca=True)
    files = {"proxy_ca": _write(folder, "proxy-ca", proxy_ca)[0], "server_ca": _write(folder, "server-ca", server_ca)[0],
             "client": _write(folder, "client", _cert("front-proxy-client", proxy_ca)),
             "other_name": _write(folder, "other", _cert("someone-else", proxy_ca)),
             "rogue": _write(folder, "rogue", _cert("front-proxy-client", rogue_ca))}
    cert, key = _write(folder, "server", _cert("portal", server_ca, server=True))
    settings = FrontProxySettings(Path(files["proxy_ca"]), ("front-proxy-client",), reviewer)
    store = Store(f"sqlite:///{folder / 'portal.db'}")
    app = create_app(store, TokensFile(write_tokens(folder)), apply=False, front_proxy=settings)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", ssl_certfile=cert,
                                           ssl_keyfile=key, **settings.uvicorn()))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"https://127.0.0.1:{port}"
    for _ in range(100):
        try:
            httpx.get(url + "/healthz", verify=ssl.create_default_context(cafile=files["server_ca"]), timeout=1)
            break
        except httpx.HTTPError:
            threading.Event().wait(0.1)
    try:
        yield url, files
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def front_proxied(tmp_path_factory):
    reviewer = StrictReviewer({("alice", "list", "modeldeployments", "team-a"), ("alice", "get", "modeldeployments", "team-a"),
                               ("system:masters", "list", "modeldeployments", "*")})
    with _front_proxied_portal(tmp_path_factory.mktemp("front-proxy"), reviewer) as (url, files):
        yield url, files, reviewer


def _client(files, cert: str | None):
    context = ssl.create_default_context(cafile=files["server_ca"])
    if cert:
        context.load_cert_chain(*files[cert])
    return httpx.Client(verify=context, timeout=30)


def _status(response, code):
    assert response.status_code == code, response.text
    body = response.json()
    assert body["kind"] == "Status" and body["code"] == code, body
    return body


def test_a_front_proxied_user_is_authorized_by_the_cluster(front_proxied):
    url, files, reviewer = front_proxied
    with _client(files, "client") as proxy:
        listed = proxy.get(f"{url}{API}/namespaces/team-a/modeldeployments", headers={"X-Remote-User": "alice"})
        assert listed.status_code == 200, listed.text
        assert reviewer.reviews[-1]["resourceAttributes"] == {
            "group": "modelplane.ai", "version": "v1alpha1", "resource": "modeldeployments", "namespace": "team-a",
            "verb": "list"}
        denied = proxy.get(f"{url}{API}/namespaces/team-b/modeldeployments", headers={"X-Remote-User": "alice"})
        assert 'User "alice" cannot list' in _status(denied, 403)["message"]
        everywhere = proxy.get(f"{url}{API}/modeldeployments",
                               headers={"X-Remote-User": "admin", "X-Remote-Group": "system:masters"})
        assert everywhere.status_code in (200, 404), everywhere.text  # allowed by the cluster: the portal's route answers
        assert reviewer.reviews[-1]["groups"] == ["system:masters"]
        assert "namespace" not in reviewer.reviews[-1]["resourceAttributes"]


@pytest.mark.parametrize("headers,groups", [
    ([("X-Remote-Group", "system:masters,team-a")], ["system:masters,team-a"]),  # one value is one group
    ([("X-Remote-Group", "system:masters"), ("X-Remote-Group", "team-a")], ["system:masters", "team-a"]),
    ([("X-Remote-Group", "")], []),
])
def test_each_remote_group_header_is_one_group_as_the_api_server_reads_it(front_proxied, headers, groups):
    """Issue 65: a value was split on commas, so `X-Remote-Group: system:masters,team-a` (one group named so) was
    reviewed as membership of system:masters."""
    url, files, reviewer = front_proxied
    with _client(files, "client") as proxy:
        proxy.get(f"{url}{API}/namespaces/team-a/modeldeployments",
                  headers=[("X-Remote-User", "alice"), ("X-Remote-User", "mallory"), *headers])
    assert reviewer.reviews[-1]["groups"] == groups
    assert reviewer.reviews[-1]["user"] == "alice"  # the first user header, as the API server's headerValue


@pytest.mark.parametrize("cert,headers,code", [
    (None, {}, 401),  # no certificate, no header, no token
    (None, {"X-Remote-User": "alice"}, 401),  # the header alone, from anyone, means nothing
    ("other_name", {"X-Remote-User": "alice"}, 401),  # the CA's, but not the allowed name
    ("client", {}, 401),  # the proxy's certificate without a user
])
def test_without_the_front_proxy_and_a_user_a_request_is_unauthenticated(front_proxied, cert, headers, code):
    url, files, _ = front_proxied
    with _client(files, cert) as client:
        _status(client.get(f"{url}{API}/namespaces/team-a/modeldeployments", headers=headers), code)


def test_a_certificate_of_another_ca_is_refused_by_the_tls_layer(front_proxied):
    url, files, _ = front_proxied
    with _client(files, "rogue") as client, pytest.raises(httpx.HTTPError):
        client.get(f"{url}{API}/namespaces/team-a/modeldeployments", headers={"X-Remote-User": "alice"})


def test_bearer_tokens_keep_working_beside_the_front_proxy(front_proxied):
    url, files, _ = front_proxied
    with _client(files, None) as client:
        answer = client.get(f"{url}{API}/namespaces/team-a/modeldeployments", headers={"Authorization": f"Bearer {TEAM_A}"})
        assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("method,path,query,expected", [
    ("GET", f"{API}/namespaces/ns/modeldeployments", "", ("list", "modeldeployments", "ns", "", "")),
    ("GET", f"{API}/namespaces/ns/modeldeployments", "watch=true", ("watch", "modeldeployments", "ns", "", "")),
    # issue 65: the API server's reading of the parameter (the first value; all but false/0 is a watch)
    ("GET", f"{API}/namespaces/ns/modeldeployments", "watch=True", ("watch", "modeldeployments", "ns", "", "")),
    ("GET", f"{API}/namespaces/ns/modeldeployments", "watch=", ("watch", "modeldeployments", "ns", "", "")),
    ("GET", f"{API}/namespaces/ns/modeldeployments", "watch=yes", ("watch", "modeldeployments", "ns", "", "")),
    ("GET", f"{API}/namespaces/ns/modeldeployments", "watch=FALSE", ("list", "modeldeployments", "ns", "", "")),
    ("GET", f"{API}/namespaces/ns/modeldeployments", "watch=0", ("list", "modeldeployments", "ns", "", "")),
    ("GET", f"{API}/namespaces/ns/modeldeployments", "watch=false&watch=true", ("list", "modeldeployments", "ns", "", "")),
    ("GET", f"{API}/namespaces/ns/modeldeployments", "watch=true&watch=false", ("watch", "modeldeployments", "ns", "", "")),
    ("PUT", f"{API}/namespaces/ns/modeldeployments/q/scale", "", ("update", "modeldeployments", "ns", "q", "scale")),
    ("DELETE", f"{API}/namespaces/ns/modelservices", "", ("deletecollection", "modelservices", "ns", "", "")),
    ("POST", f"{API}/inferenceclusters", "", ("create", "inferenceclusters", "", "", "")),
])
def test_request_attributes_are_the_api_servers(method, path, query, expected):
    a = attributes(method, path, query)
    assert (a.verb, a.resource, a.namespace, a.name, a.subresource) == expected and not a.path


# ---- a cluster whose authorization does not answer ---------------------------------------------------------------

class HangingReviewer:
    """A cluster whose SubjectAccessReviews never come back (until the test lets them go)."""

    def __init__(self):
        self.entered, self.release, self._lock = 0, threading.Event(), threading.Lock()

    def allowed(self, review: dict) -> bool:
        with self._lock:
            self.entered += 1
        self.release.wait(60)
        return True


def test_a_review_that_never_answers_takes_a_bounded_few_threads_and_healthz_answers(tmp_path, monkeypatch):
    """Issue 65: each request's review held a worker thread with no timeout: 50 of them stalled /healthz. Reviews
    now run on MAX_REVIEWS threads of their own; the next request is answered 429 with Retry-After at once."""
    monkeypatch.setattr(front_proxy, "REVIEW_TIMEOUT", 30.0)  # they hang for the whole test
    reviewer = HangingReviewer()
    with _front_proxied_portal(tmp_path, reviewer) as (url, files):
        answers: list[httpx.Response | Exception] = []

        def ask() -> None:
            with _client(files, "client") as proxy:
                try:
                    answers.append(proxy.get(f"{url}{API}/namespaces/team-a/modeldeployments",
                                             headers={"X-Remote-User": "alice"}, timeout=60))
                except httpx.HTTPError as exc:
                    answers.append(exc)

        askers = [threading.Thread(target=ask, daemon=True) for _ in range(50)]
        try:
            for asker in askers:
                asker.start()
            refused = 50 - front_proxy.MAX_REVIEWS
            for _ in range(600):  # every request past the bound is answered while the others hang
                if len(answers) >= refused:
                    break
                threading.Event().wait(0.05)
            with _client(files, None) as anyone:
                assert anyone.get(f"{url}/healthz", timeout=10).status_code == 200
            assert reviewer.entered == front_proxy.MAX_REVIEWS
            assert len(answers) == refused
            assert all(isinstance(a, httpx.Response) and a.status_code == 429 and a.headers["retry-after"] == "1"
                       and a.json()["reason"] == "TooManyRequests" for a in answers)
        finally:
            reviewer.release.set()
            for asker in askers:
                asker.join(30)
        assert len(answers) == 50 and sum(a.status_code == 200 for a in answers if isinstance(a, httpx.Response)) \
            == front_proxy.MAX_REVIEWS  # let go, the held ones are answered


def test_a_review_past_its_timeout_is_a_503(tmp_path, monkeypatch):
    monkeypatch.setattr(front_proxy, "REVIEW_TIMEOUT", 0.2)
    reviewer = HangingReviewer()
    with _front_proxied_portal(tmp_path, reviewer) as (url, files), _client(files, "client") as proxy:
        try:
            answer = proxy.get(f"{url}{API}/namespaces/team-a/modeldeployments", headers={"X-Remote-User": "alice"},
                               timeout=20)
        finally:
            reviewer.release.set()
    assert _status(answer, 503)["message"] == "the cluster's authorization did not answer within 0.2 seconds"


def test_the_cluster_reviewer_gives_up_on_an_api_server_that_never_answers():
    """A SubjectAccessReview to a loopback API server that accepts the connection and never answers."""
    import socket

    from kubernetes import client

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        configuration = client.Configuration()
        configuration.host = f"http://127.0.0.1:{listener.getsockname()[1]}"
        reviewer = ClusterReviewer(configuration, timeout=0.3)
        outcome: list[BaseException | bool] = []

        def review() -> None:
            try:
                outcome.append(reviewer.allowed(attributes("GET", f"{API}/modeldeployments", "").review("alice", [])))
            except Exception as exc:
                outcome.append(exc)

        asking = threading.Thread(target=review, daemon=True)
        asking.start()
        asking.join(30)  # a bound for the test itself: the review's own timeout is 0.3 s
        assert not asking.is_alive(), "the review waited on past its timeout"
    assert len(outcome) == 1 and isinstance(outcome[0], Exception) and "timed out" in str(outcome[0]).lower()
