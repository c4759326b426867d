"""`modelplane apply` reports success only when the portal answered 200 or 201 with the object: a redirect (a proxy
sending http to https, a moved portal) stored nothing, and printing "configured" after it told the user a lie."""

from __future__ import annotations

import json
import pathlib
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import yaml

from tests.manifests import gpu_class

ROOT = pathlib.Path(__file__).resolve().parent.parent


class Answering(BaseHTTPRequestHandler):
    """Answers every PUT with the server's `answer` (code, headers, body) and remembers the paths asked for."""

    def do_PUT(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.server.seen.append(self.path)  # type: ignore[attr-defined]
        code, headers, body = self.server.answer  # type: ignore[attr-defined]
        self.send_response(code)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def servers():
    made = []

    def make(answer):
        server = HTTPServer(("127.0.0.1", 0), Answering)
        server.answer, server.seen = answer, []  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        made.append(server)
        return server

    yield make
    for server in made:
        server.shutdown()
        server.server_close()


def url(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def apply(tmp_path, server, monkeypatch, capsys) -> tuple[int, str, str]:
    from automation.cli import main

    manifest = tmp_path / "class.yaml"
    manifest.write_text(yaml.safe_dump(gpu_class("l4", 1, "23034Mi")))
    monkeypatch.setenv("MODELPLANE_TOKEN", "admin-token-0001")
    code = main(["apply", "-f", str(manifest), "--server", url(server)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_redirect_is_an_error_saying_where_it_points_and_is_not_followed(tmp_path, servers, monkeypatch, capsys):
    elsewhere = servers((201, {"content-type": "application/json"}, b"{}"))
    moved = servers((307, {"location": url(elsewhere) + "/apis/x"}, b""))
    code, out, err = apply(tmp_path, moved, monkeypatch, capsys)
    assert code == 1 and "configured" not in out and "created" not in out
    assert err.strip().splitlines() == [
        f"error: InferenceClass/l4: the server answered 307, a redirect to {url(elsewhere)}/apis/x; nothing was stored "
        "(a write is not sent on to another address: give --server the portal's own URL)"]
    assert moved.seen == ["/apis/modelplane.ai/v1alpha1/inferenceclasses/l4"] and elsewhere.seen == []  # no token sent on


@pytest.mark.parametrize("answer", [
    (200, {"content-type": "text/html"}, b"<html>welcome to the proxy</html>"),
    (204, {}, b""),
    (200, {"content-type": "application/json"}, b'{"kind": "Status", "status": "Success"}'),
    (202, {"content-type": "application/json"}, b'{"kind": "InferenceClass", "metadata": {"name": "l4"}}'),
], ids=["a proxy's page", "no content", "not the object", "accepted, not stored"])
def test_success_is_reported_only_for_200_or_201_with_the_object(tmp_path, servers, monkeypatch, capsys, answer):
    code, out, err = apply(tmp_path, servers(answer), monkeypatch, capsys)
    assert code == 1 and out == ""
    assert f"the server answered {answer[0]} without the stored object" in err and "Traceback" not in err


def test_the_object_answered_with_201_is_created(tmp_path, servers, monkeypatch, capsys):
    stored = b'{"kind": "InferenceClass", "metadata": {"name": "l4", "resourceVersion": "3"}}'
    code, out, err = apply(tmp_path, servers((201, {"content-type": "application/json"}, stored)), monkeypatch, capsys)
    assert (code, out, err) == (0, "InferenceClass/l4 created\n", "")


def test_a_write_the_portal_shed_is_resent_after_its_retry_after_and_gives_up_after_three(monkeypatch):
    import httpx

    from automation.cli import apply_remote
    from fleet.validate import load_fleet

    fleet = load_fleet([str(ROOT / "examples" / "models" / "qwen3-8b.yaml")]).fleet
    waits: list[float] = []
    monkeypatch.setattr(apply_remote.time, "sleep", waits.append)
    answers = iter([429, 503, 200])

    def portal(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":  # not stored yet
            return httpx.Response(404, json={"kind": "Status", "code": 404})
        code = next(answers, 429)
        if code != 200:
            return httpx.Response(code, headers={"Retry-After": "2"}, json={"kind": "Status", "message": "busy"})
        body = json.loads(request.content)
        return httpx.Response(200, json=body)

    client = httpx.Client(base_url="http://portal", transport=httpx.MockTransport(portal))
    pushed = apply_remote.push(fleet, "http://portal", "t" * 32, client=client)
    assert pushed[0].verb == "configured" and waits[:2] == [2.0, 2.0]
    waits.clear()
    with pytest.raises(apply_remote.PushError, match="429"):  # answers only 429 from here on
        apply_remote.push(fleet, "http://portal", "t" * 32, client=client)
    assert waits == [2.0] * apply_remote.RETRIES


def test_an_object_stored_as_given_is_unchanged_and_not_written_again():
    """As kubectl apply says `unchanged`: the object is read first, and nothing is written when it matches."""
    import httpx

    from automation.cli import apply_remote
    from fleet.validate import load_fleet

    fleet = load_fleet([str(ROOT / "examples" / "models" / "qwen3-8b.yaml")]).fleet
    stored: dict[str, dict] = {}
    writes: list[str] = []

    def portal(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            found = stored.get(request.url.path)
            return httpx.Response(200, json=found) if found else httpx.Response(404, json={"kind": "Status"})
        writes.append(request.url.path)
        body = json.loads(request.content)
        body["metadata"] = {**body["metadata"], "resourceVersion": "7", "uid": "u", "generation": 1}
        body["status"] = {"conditions": []}  # the portal's own fields do not make it differ
        created = request.url.path not in stored
        stored[request.url.path] = body
        return httpx.Response(201 if created else 200, json=body)

    client = httpx.Client(base_url="http://portal", transport=httpx.MockTransport(portal))
    assert [p.verb for p in apply_remote.push(fleet, "http://portal", "t" * 32, client=client)] == ["created"] * len(
        [o for o in fleet.objects if o.kind in apply_remote.ORDER])
    before = len(writes)
    again = apply_remote.push(fleet, "http://portal", "t" * 32, client=client)
    assert {p.verb for p in again} == {"unchanged"} and len(writes) == before
    md = next(o for o in fleet.objects if o.kind == "ModelDeployment")
    md.spec.replicas += 1
    changed = apply_remote.push(fleet, "http://portal", "t" * 32, client=client)
    assert [p.verb for p in changed if p.ref.startswith("ModelDeployment/")] == ["configured"]
