"""The read side of the Kubernetes API over HTTP: discovery, OpenAPI, selectors, paging, Tables, access reviews,
Status errors, and the self-signed certificate. tests/test_kubectl.py drives the same through the real kubectl."""

from __future__ import annotations

import base64
import json
import ssl
import stat

import pytest

from automation.portal import protobuf
from automation.portal.selectors import parse_labels
from automation.portal.service import ApiError
from automation.portal.tables import human_duration
from automation.portal.tls import self_signed
from tests.manifests import deployment
from tests.portal_server import ADMIN, API, TEAM_A, TEAM_B, ThreadServer
from tests.test_portal import seed_fleet

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
MD = API + "/namespaces/{ns}/modeldeployments"


@pytest.fixture
def portal(tmp_path):
    with ThreadServer(tmp_path) as server:
        yield server


def labelled(name: str, namespace: str, labels: dict) -> dict:
    body = deployment(name, namespace)
    body["metadata"]["labels"] = labels
    return body


@pytest.fixture
def seeded(portal):
    seed_fleet(portal)
    with portal.client(ADMIN) as admin:
        for name, labels in (("a1", {"app": "chat", "tier": "1"}), ("a2", {"app": "chat", "tier": "2"}),
                             ("a3", {"app": "code"}), ("a4", {})):
            assert admin.put(MD.format(ns="team-a") + f"/{name}", json=labelled(name, "team-a", labels)).status_code == 201
        assert admin.put(MD.format(ns="team-b") + "/b1", json=labelled("b1", "team-b", {"app": "chat"})).status_code == 201
    return portal


def names(response) -> list[str]:
    assert response.status_code == 200, response.text
    return [o["metadata"]["name"] for o in response.json()["items"]]


# ---- discovery -------------------------------------------------------------------------------------------------

def test_discovery_lists_every_kind_with_the_verbs_its_routes_take(portal):
    with portal.client(TEAM_A) as client:
        groups = client.get("/apis", headers={"Accept": AGGREGATED})
        assert groups.headers["content-type"] == "application/json"  # the legacy form: kubectl then asks per version
        assert {g["name"]: g["preferredVersion"]["version"] for g in groups.json()["groups"]} == {
            "modelplane.ai": "v1alpha1", "authorization.k8s.io": "v1"}
        assert client.get("/api").json()["versions"] == []
        resources = {r["name"]: r for r in client.get(API).json()["resources"]}
        assert client.get("/apis/modelplane.ai").json()["preferredVersion"]["groupVersion"] == "modelplane.ai/v1alpha1"
    assert resources["modeldeployments"]["shortNames"] == ["md"] and resources["modeldeployments"]["namespaced"]
    assert resources["modeldeployments"]["categories"] == ["crossplane", "modelplane"]
    # read from the routes: every verb routes/verbs.py takes, and nothing the composed kinds refuse
    assert resources["modeldeployments"]["verbs"] == ["create", "delete", "get", "list", "patch", "update", "watch"]
    assert resources["modelreplicas"]["verbs"] == ["get", "list", "watch"]
    assert not resources["inferenceclusters"]["namespaced"] and resources["inferenceclasses"]["shortNames"] == ["icl"]
    assert resources["modeldeployments/scale"]["kind"] == "Scale" and resources["modeldeployments/scale"]["group"] == "autoscaling"
    assert resources["modeldeployments/scale"]["verbs"] == ["get", "patch", "update"]
    assert "modeldeployments/status" not in resources  # not served: the portal alone writes status


def test_version_is_public_and_discovery_needs_a_token(portal):
    with portal.client(None) as anyone:
        info = anyone.get("/version").json()
        assert (info["major"], info["minor"]) == ("1", "32") and info["gitVersion"].startswith("v1.32.0+modelplane.")
        for path in ("/api", "/apis", API, "/openapi/v3", "/openapi/v2"):
            response = anyone.get(path)
            assert response.status_code == 401 and response.json()["kind"] == "Status", path


@pytest.mark.parametrize("method,path,code", [("GET", "/apis/nothing.example/v1", 404), ("GET", "/api/v1", 404),
                                              ("GET", API + "/modelroutes", 404), ("POST", "/version", 405),
                                              ("DELETE", "/apis", 405), ("GET", API + "/namespaces/team-a/nothing", 404)])
def test_errors_are_status_objects(portal, method, path, code):
    with portal.client(TEAM_A) as client:
        response = client.request(method, path)
    assert response.status_code == code
    assert response.json()["kind"] == "Status" and response.json()["code"] == code


# ---- OpenAPI ---------------------------------------------------------------------------------------------------

def test_openapi_v3_describes_each_kind_from_the_models(portal):
    from fleet.json_schema import schema

    with portal.client(TEAM_A) as client:
        index = client.get("/openapi/v3").json()["paths"]["apis/modelplane.ai/v1alpha1"]["serverRelativeURL"]
        document = client.get(index).json()
        v2 = client.get("/openapi/v2", headers={"Accept": "application/json"}).json()
        as_protobuf = client.get("/openapi/v2", headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"})
        neither = client.get("/openapi/v2", headers={"Accept": "text/html"})
    md = document["components"]["schemas"]["ai.modelplane.v1alpha1.ModelDeployment"]
    assert md["x-kubernetes-group-version-kind"] == [{"group": "modelplane.ai", "kind": "ModelDeployment", "version": "v1alpha1"}]
    model = schema("ModelDeployment")["$defs"]["ModelDeploymentSpec"]["properties"]["replicas"]
    replicas = md["properties"]["spec"]["properties"]["replicas"]
    assert (replicas["type"], replicas["minimum"], replicas["maximum"]) == ("integer", model["minimum"], model["maximum"])
    assert "$ref" not in json.dumps(md)  # inlined, as a CRD's schema is
    patch = document["paths"][API + "/namespaces/{namespace}/modeldeployments/{name}"]["patch"]
    assert any(p["name"] == "fieldValidation" for p in patch["parameters"])  # kubectl then leaves it to the server
    assert v2["definitions"]["ai.modelplane.v1alpha1.ModelDeployment"]["properties"]["spec"]["required"] == ["replicas", "template"]
    assert neither.status_code == 406 and neither.json()["kind"] == "Status"
    # as gnostic's protobuf (what kubectl 1.20 reads): the same definitions, with the kind's GVK extension
    assert as_protobuf.status_code == 200 and as_protobuf.headers["content-type"] == "application/octet-stream"
    document_pb = protobuf.fields(as_protobuf.content)
    assert document_pb[1] == [b"2.0"]
    named = {protobuf.strings(protobuf.fields(entry), {1: "name"})["name"]: protobuf.message(protobuf.fields(entry), 2)
             for entry in protobuf.message(document_pb, 9)[1] if isinstance(entry, bytes)}
    assert set(named) == set(v2["definitions"])
    md_pb = named["ai.modelplane.v1alpha1.ModelDeployment"]
    extensions = {protobuf.strings(protobuf.fields(e), {1: "name"})["name"]:
                  json.loads(protobuf.strings(protobuf.message(protobuf.fields(e), 2), {2: "yaml"})["yaml"])
                  for e in md_pb[31] if isinstance(e, bytes)}
    assert extensions["x-kubernetes-group-version-kind"] == md["x-kubernetes-group-version-kind"]
    properties = {protobuf.strings(protobuf.fields(e), {1: "name"})["name"]: protobuf.message(protobuf.fields(e), 2)
                  for e in protobuf.message(md_pb, 25)[1] if isinstance(e, bytes)}
    spec_required = [r.decode() for r in properties["spec"][19] if isinstance(r, bytes)]
    assert spec_required == ["replicas", "template"]


# ---- selectors, paging --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("selector,expected", [
    ("app=chat", ["a1", "a2"]), ("app==chat", ["a1", "a2"]), ("app!=chat", ["a3", "a4"]),
    ("app in (chat, code)", ["a1", "a2", "a3"]), ("app notin (chat)", ["a3", "a4"]), ("tier", ["a1", "a2"]),
    ("!tier", ["a3", "a4"]), ("app=chat,tier=2", ["a2"]), ("tier>1", ["a2"]), ("tier<2", ["a1"]),
    ("app=", []),  # the empty value, which a4 (no app label) does not have
])
def test_label_selectors_select_as_kubernetes_does(seeded, selector, expected):
    with seeded.client(TEAM_A) as client:
        assert names(client.get(MD.format(ns="team-a"), params={"labelSelector": selector})) == expected


@pytest.mark.parametrize("selector", ["app in (chat", "app in ()", "=chat", "app=chat,", "a b", "app=x y",
                                      "-bad=1", "tier>one", "app@=1", "app in chat"])
def test_a_bad_label_selector_is_a_400_status(seeded, selector):
    with seeded.client(TEAM_A) as client:
        response = client.get(MD.format(ns="team-a"), params={"labelSelector": selector})
    assert response.status_code == 400 and response.json()["reason"] == "BadRequest", (selector, response.text)


def test_label_selector_parser_reads_whitespace_and_prefixed_keys():
    parsed = parse_labels(" example.com/app  in ( a , b ) , !x ")
    assert [(r.key, r.operator, r.values) for r in parsed] == [("example.com/app", "in", ("a", "b")), ("x", "!", ())]
    with pytest.raises(ApiError):
        parse_labels(("a" * 254) + "/b=c")


def test_field_selectors_take_name_and_namespace_only(seeded):
    with seeded.client(ADMIN) as admin:
        assert names(admin.get(MD.format(ns="team-a"), params={"fieldSelector": "metadata.name=a2"})) == ["a2"]
        assert names(admin.get(MD.format(ns="team-a"), params={"fieldSelector": "metadata.name!=a2"})) == ["a1", "a3", "a4"]
        assert names(admin.get(API + "/modeldeployments", params={"fieldSelector": "metadata.namespace=team-b"})) == ["b1"]
        refused = admin.get(MD.format(ns="team-a"), params={"fieldSelector": "spec.replicas=1"})
    assert refused.status_code == 400 and "field label not supported: spec.replicas" in refused.json()["message"]


def test_limit_and_continue_page_through_a_list_once_each(seeded):
    with seeded.client(ADMIN) as admin:
        first = admin.get(MD.format(ns="team-a"), params={"limit": 3}).json()
        assert [o["metadata"]["name"] for o in first["items"]] == ["a1", "a2", "a3"]
        assert first["metadata"]["remainingItemCount"] == 1
        token = first["metadata"]["continue"]
        # a write between pages: the next page still starts after the last key given (no repeat, no skip)
        assert admin.put(MD.format(ns="team-a") + "/a0", json=labelled("a0", "team-a", {})).status_code == 201
        second = admin.get(MD.format(ns="team-a"), params={"limit": 3, "continue": token}).json()
        assert [o["metadata"]["name"] for o in second["items"]] == ["a4"] and "continue" not in second["metadata"]
        assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        other = admin.get(MD.format(ns="team-b"), params={"continue": token})  # another list's token
        forged = admin.get(MD.format(ns="team-a"), params={"continue": base64.b64encode(b"{}").decode()})
        bad_limit = admin.get(MD.format(ns="team-a"), params={"limit": "-1"})
        selected = admin.get(MD.format(ns="team-a"), params={"limit": 1, "labelSelector": "app=chat"}).json()
    assert other.status_code == forged.status_code == bad_limit.status_code == 400
    assert [o["metadata"]["name"] for o in selected["items"]] == ["a1"] and "remainingItemCount" not in selected["metadata"]


def test_the_all_namespaces_list_shows_only_what_the_caller_may_see(seeded):
    with seeded.client(TEAM_A) as team:
        assert names(team.get(API + "/modeldeployments")) == ["a1", "a2", "a3", "a4"]
    with seeded.client(TEAM_B) as team:
        assert names(team.get(API + "/modeldeployments")) == ["b1"]
        assert {o["metadata"]["namespace"] for o in team.get(API + "/modelreplicas").json()["items"]} <= {"team-b"}
    with seeded.client(ADMIN) as admin:
        everything = admin.get(API + "/modeldeployments").json()["items"]
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in everything][-1] == ("team-b", "b1")


# ---- Tables ----------------------------------------------------------------------------------------------------

def test_tables_have_the_kinds_columns_and_partial_metadata(seeded):
    seeded.settle()
    with seeded.client(TEAM_A) as client:
        table = client.get(MD.format(ns="team-a"), headers={"Accept": TABLE}, params={"labelSelector": "app=chat"}).json()
        one = client.get(MD.format(ns="team-a") + "/a1", headers={"Accept": TABLE}, params={"includeObject": "Object"}).json()
        bare = client.get(MD.format(ns="team-a") + "/a1", headers={"Accept": TABLE}, params={"includeObject": "None"}).json()
        plain = client.get(MD.format(ns="team-a") + "/a1").json()
        bad = client.get(MD.format(ns="team-a"), headers={"Accept": TABLE}, params={"includeObject": "All"})
        clusters = client.get(API + "/inferenceclusters", headers={"Accept": TABLE}).json()
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Replicas", "Ready", "Backend", "Clusters", "Age"]
    assert [r["cells"][:4] for r in table["rows"]] == [["a1", 1, 0, "native"], ["a2", 1, 0, "native"]]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert table["rows"][0]["object"]["metadata"]["labels"] == {"app": "chat", "tier": "1"}
    assert one["rows"][0]["object"]["spec"] == plain["spec"] and "object" not in bare["rows"][0]
    assert bad.status_code == 400
    assert [c["name"] for c in clusters["columnDefinitions"]] == ["Name", "Source", "Gateway", "Age"]
    assert clusters["rows"][0]["cells"][:2] == ["c1", "Existing"]


@pytest.mark.parametrize("seconds,shown", [(5, "5s"), (119, "119s"), (130, "2m10s"), (600, "10m"), (3 * 3600 + 60, "3h1m"),
                                           (9 * 3600, "9h"), (3 * 86400 + 3600, "3d1h"), (30 * 86400, "30d"),
                                           (3 * 365 * 86400, "3y"), (-5, "<invalid>")])
def test_age_reads_as_kubectl_shows_it(seconds, shown):
    assert human_duration(seconds) == shown


# ---- access reviews --------------------------------------------------------------------------------------------

def review(client, **attributes):
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes}}
    response = client.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=body)
    assert response.status_code == 201, response.text
    return response.json()["status"]["allowed"]


def test_access_reviews_answer_from_the_team_model(portal):
    md = {"group": "modelplane.ai", "resource": "modeldeployments"}
    with portal.client(TEAM_A) as team, portal.client(ADMIN) as admin:
        assert review(team, verb="get", namespace="team-a", **md)
        assert review(team, verb="update", namespace="team-a", **md)
        assert not review(team, verb="get", namespace="team-b", **md)
        assert not review(team, verb="list", namespace="", **md)  # every namespace: admins
        assert review(admin, verb="list", namespace="", **md)
        assert review(team, verb="list", group="modelplane.ai", resource="inferenceclusters")
        assert not review(team, verb="update", group="modelplane.ai", resource="inferenceclusters")
        assert review(admin, verb="update", group="modelplane.ai", resource="inferenceclusters")
        assert not review(team, verb="update", namespace="team-a", group="modelplane.ai", resource="modelreplicas")
        assert review(team, verb="update", namespace="team-a", group="modelplane.ai", resource="modeldeployments",
                      subresource="scale")
        assert not review(team, verb="get", namespace="team-a", group="", resource="pods")
        path = team.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                         json={"spec": {"nonResourceAttributes": {"path": "/version", "verb": "get"}}}).json()
        empty = team.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json={"spec": {}})
    assert path["status"]["allowed"] and empty.status_code == 422


def varint(n: int) -> bytes:
    out = b""
    while True:
        out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return out


def field(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data


def test_a_protobuf_review_as_kubectl_sends_it_is_read(portal):
    attributes = field(1, b"team-a") + field(2, b"create") + field(3, b"modelplane.ai") + field(5, b"modeldeployments")
    obj = field(1, b"") + field(2, field(1, attributes))
    body = protobuf.MAGIC + field(1, field(1, b"authorization.k8s.io/v1") + field(2, b"SelfSubjectAccessReview")) + field(2, obj)
    headers = {"Content-Type": protobuf.MEDIA_TYPE, "Accept": protobuf.MEDIA_TYPE + ",application/json"}
    with portal.client(TEAM_A) as team, portal.client(TEAM_B) as other:
        yes = team.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", content=body, headers=headers)
        no = other.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", content=body, headers=headers)
        garbage = team.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", content=b"k8s\x00\xff\xff",
                            headers=headers)
    assert yes.json()["status"]["allowed"] and not no.json()["status"]["allowed"]
    assert yes.json()["spec"]["resourceAttributes"]["resource"] == "modeldeployments"
    assert garbage.status_code == 400 and garbage.json()["kind"] == "Status"


# ---- TLS -------------------------------------------------------------------------------------------------------

def handshake(made, client: ssl.SSLContext, name: str) -> None:
    """One TLS handshake with a server holding the certificate (raises when the client does not trust it)."""
    import socket
    import threading

    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(made.cert, made.key)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        def accept():
            conn, _ = listener.accept()
            try:
                with server.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (ssl.SSLError, OSError):
                pass

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        with socket.create_connection(listener.getsockname()) as raw, client.wrap_socket(raw, server_hostname=name) as tls:
            tls.sendall(b"x")
        thread.join(5)


def test_the_self_signed_certificate_verifies_against_its_ca_and_is_kept(tmp_path):
    made = self_signed(tmp_path / "data", "127.0.0.1")
    assert stat.S_IMODE(made.key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
    for name in ("localhost", "127.0.0.1"):
        handshake(made, ssl.create_default_context(cafile=str(made.ca)), name)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(made, ssl.create_default_context(cafile=str(made.ca)), "portal.internal")  # not a name it has
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(made, ssl.create_default_context(), "localhost")  # not signed by a CA the system trusts
    first = made.ca.read_bytes()
    assert self_signed(tmp_path / "data", "127.0.0.1").ca.read_bytes() == first  # kept: kubeconfigs keep working
    other = self_signed(tmp_path / "data", "portal.internal")  # a name it does not cover: made anew, with it
    assert other.ca.read_bytes() != first
    handshake(other, ssl.create_default_context(cafile=str(other.ca)), "portal.internal")
