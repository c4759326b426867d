"""A portal a newcomer can fill (issue 66): the empty page says how to push the fleet, `modelplane apply` reaches a
`serve --tls-self-signed` portal with its CA and says which option to use when the certificate does not verify, an
error on the page looks like one and names its place once, and kubectl prints no copyable placeholder address."""

import html
import pathlib
import re

import pytest
import yaml

from automation.portal.tls import self_signed
from tests.manifests import deployment, service
from tests.portal_server import ADMIN, API, TEAM_A, ThreadServer
from tests.test_portal import form_token, seed_fleet, signed_in

EXAMPLES = str(pathlib.Path(__file__).resolve().parent.parent / "examples")


def message_box(page: str) -> tuple[str, str]:
    """(class, text) of the page's message box."""
    found = re.search(r'<p class="([^"]+)" id="message">(.*?)</p>', page, re.S)
    assert found, page[:2000]
    return found.group(1), html.unescape(found.group(2))


def test_the_empty_page_tells_an_admin_the_command_that_fills_it(tmp_path):
    with ThreadServer(tmp_path) as portal:
        with portal.client(ADMIN) as admin:
            page = html.unescape(admin.get("/").text)
        assert "no clusters yet" in page
        # the first step, with this portal's own address, as the README and docs/portal.md show it
        assert f"modelplane apply -f FLEET_FOLDER --server {portal.url}" in page
        with portal.client(TEAM_A) as team:
            team_page = html.unescape(team.get("/").text)
        assert "modelplane apply" not in team_page and "An admin has not pushed" in team_page  # a team cannot push clusters
        seed_fleet(portal)
        with portal.client(ADMIN) as admin:
            assert "modelplane apply -f" not in html.unescape(admin.get("/").text)


@pytest.fixture
def tls_portal(tmp_path):
    made = self_signed(tmp_path / "data", "127.0.0.1")
    with ThreadServer(tmp_path, tls=made) as server:
        yield server, made


def test_apply_reaches_a_self_signed_portal_with_its_ca(tls_portal, monkeypatch, capsys):
    from automation.cli import main

    portal, made = tls_portal
    monkeypatch.setenv("MODELPLANE_TOKEN", ADMIN)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    assert main(["apply", "-f", EXAMPLES, "--server", portal.url]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err  # one line, naming what fixes it
    assert "--ca-file" in err and "SSL_CERT_FILE" in err and portal.url in err, err
    assert main(["apply", "-f", EXAMPLES, "--server", portal.url, "--ca-file", str(made.ca)]) == 0
    out, err = capsys.readouterr()
    assert "InferenceClass/eks-h100-8x-p5 created" in out.splitlines()
    # examples/observed holds a ModelReplica: the portal composes those, so it is not sent, and the push says so
    assert re.search(r"^note: .*examples/observed/qwen3-8b-gke\.yaml:\d+: not pushed: ModelReplica/ml-team/"
                     r"qwen3-8b-a02c0 \(the portal composes ModelReplicas itself", err, re.M), err
    monkeypatch.setenv("SSL_CERT_FILE", str(made.ca))  # what the message says works too
    assert main(["apply", "-f", EXAMPLES, "--server", portal.url]) == 0
    assert all(line.endswith(" unchanged") for line in capsys.readouterr().out.splitlines())
    not_a_ca = made.ca.parent / "not-a-ca.pem"
    not_a_ca.write_text("hello\n")
    assert main(["apply", "-f", EXAMPLES, "--server", portal.url, "--ca-file", str(not_a_ca)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: --ca-file {not_a_ca}: not a readable PEM CA certificate") and "Traceback" not in err


def test_a_refused_paste_is_an_error_box_with_one_locator(tmp_path):
    with ThreadServer(tmp_path) as portal:
        seed_fleet(portal)
        with portal.client(None) as browser:
            csrf = signed_in(portal, browser)
            good = yaml.safe_dump(deployment("one", namespace="team-a"))
            accepted = browser.post("/ui/apply", data={"manifest": good, "csrf": csrf}, follow_redirects=True)
            assert message_box(accepted.text)[0] == "message"  # a success is not dressed as an error
            three = deployment("three", namespace="team-a")
            bad = yaml.safe_dump_all([deployment("two", namespace="team-a"),
                                      {**three, "spec": {**three["spec"], "replicas": "x"}}], sort_keys=False)
            refused = browser.post("/ui/apply", data={"manifest": bad, "csrf": csrf}, follow_redirects=False)
            kind, text = message_box(refused.text)
            assert "bad" in kind.split(), kind
            # one place per problem: the pasted text's own line of the field, never a second "request:N" locator
            line = next(n for n, t in enumerate(bad.splitlines(), 1) if t.strip().startswith("replicas: x"))
            assert text.startswith(f"manifest:{line}: ModelDeployment/three: spec.replicas: "), text
            assert "request:" not in text and text.count("manifest:") == 1, text
            # a form whose refusal comes back through a redirect is an error too
            unconfirmed = browser.post("/ui/delete", data={"kind": "ModelDeployment", "namespace": "team-a",
                                                           "name": "one", "csrf": csrf}, follow_redirects=True)
            assert "bad" in message_box(unconfirmed.text)[0].split()
            deleted = browser.post("/ui/delete", data={"kind": "ModelDeployment", "namespace": "team-a",
                                                       "name": "one", "csrf": csrf, "confirm": "one"},
                                   follow_redirects=True)
            assert message_box(deleted.text) == ("message", "Deleted ModelDeployment team-a/one")
        with portal.client(None) as stranger:
            bad_token = stranger.post("/ui/signin", data={"token": "nope", "csrf": form_token(stranger.get("/").text)},
                                      follow_redirects=True)
            assert "bad" in message_box(bad_token.text)[0].split()


def test_kubectl_prints_pending_not_a_placeholder_address(tmp_path):
    with ThreadServer(tmp_path) as portal:
        seed_fleet(portal)
        with portal.client(ADMIN) as admin:
            admin.put(f"{API}/namespaces/team-a/modeldeployments/a1", json=deployment("a1", namespace="team-a"))
            admin.put(f"{API}/namespaces/team-a/modelservices/a1",
                      json=service("a1", namespace="team-a", deployment_name="a1"))
            table = "application/json;as=Table;v=v1;g=meta.k8s.io"
            for path in (f"{API}/namespaces/team-a/modelservices", f"{API}/namespaces/team-a/modelendpoints",
                         f"{API}/inferenceclusters"):
                got = admin.get(path, headers={"Accept": table}).json()
                assert got["rows"], path
                cells = [str(c) for r in got["rows"] for c in r["cells"]]
                assert not [c for c in cells if "pending.modelplane.invalid" in c], (path, cells)
            rows = admin.get(f"{API}/namespaces/team-a/modelservices", headers={"Accept": table}).json()["rows"]
            assert rows[0]["cells"][1] == "<pending>"  # as kubectl shows a LoadBalancer's address before it has one
            # the object itself keeps its status as it is (scripts read it)
            assert "pending.modelplane.invalid" in admin.get(
                f"{API}/namespaces/team-a/modelservices/a1").json()["status"]["address"]
