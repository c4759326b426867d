"""Findings 2 and 3: no YAML amplification, no body read before authentication, every body capped."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
import yaml

from automation.portal.guard import MAX_BODY, MAX_SIGNIN_BODY
from tests.manifests import deployment
from tests.portal_server import API, TEAM_A, ThreadServer

OBJ = API + "/namespaces/team-a/modeldeployments/{name}"


def alias_bomb(levels: int = 9) -> str:
    """A ModelDeployment whose free-form field (metadata.managedFields, which the schema accepts as any objects)
    nests aliases: about 1 KB that means gigabytes once stored as JSON."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return ("apiVersion: modelplane.ai/v1alpha1\nkind: ModelDeployment\nmetadata:\n  name: bomb\n  namespace: team-a\n"
            "  managedFields:\n  - fieldsV1:\n" + "\n".join("      " + line for line in lines) + "\n"
            "spec:\n  replicas: 1\n  template:\n    spec:\n      engines: []\n")


@pytest.fixture
def portal(tmp_path):
    with ThreadServer(tmp_path) as server:
        yield server


def raw_request(port: int, head: str, body: bytes = b"", read_timeout: float = 10) -> tuple[str, float]:
    """Send a request by hand (a declared length the client never sends in full); the status line and how long
    the server took to answer."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as conn:
        conn.sendall(head.encode() + b"\r\n" + body)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith((b"}", b">")):
            chunk = conn.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer.decode(errors="replace"), time.monotonic() - started


def test_an_alias_bomb_is_refused_fast_and_small(portal):
    bomb = alias_bomb()
    assert len(bomb) < 1500
    started = time.monotonic()
    with portal.client(TEAM_A) as team:
        response = team.put(OBJ.format(name="bomb"), content=bomb, headers={"Content-Type": "application/yaml"})
        assert time.monotonic() - started < 2
        assert response.status_code == 400 and response.json()["kind"] == "Status"
        assert "expands to about" in response.json()["message"]
        assert team.get(OBJ.format(name="bomb")).status_code == 404
        assert portal.store.engine.url.database and (
            __import__("os").path.getsize(portal.store.engine.url.database) < 1024 * 1024)


def test_aliases_used_as_keys_are_measured_too(portal):
    """100 KB whose keys repeat a 1,000-character anchor 12,000 times: 12 MB once stored as JSON."""
    fields = "      a: {&k " + "x" * 1000 + ": 1}\n      b: [" + ",".join(["{*k: 1}"] * 12000) + "]\n"
    body = alias_bomb(1).replace('      a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n', fields)
    assert len(body) < 100 * 1024 and "*k" in body
    with portal.client(TEAM_A) as team:
        response = team.put(OBJ.format(name="bomb"), content=body, headers={"Content-Type": "application/yaml"})
        assert response.status_code == 400 and "expands to about" in response.json()["message"]
        assert team.get(OBJ.format(name="bomb")).status_code == 404


def test_a_modest_alias_is_still_accepted(portal):
    from tests.test_portal import seed_fleet

    seed_fleet(portal)
    body = yaml.safe_dump(deployment("shared", namespace="team-a"))
    body = body.replace("metadata:\n", "metadata:\n  labels: &l {team: a}\n  annotations:\n    note: x\n", 1)
    with portal.client(TEAM_A) as team:
        assert team.put(OBJ.format(name="shared"), content=body).status_code == 201


def test_the_cli_loader_refuses_the_same_bomb_with_a_located_line(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb(10))
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "automation.cli", "validate", "-f", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert time.monotonic() - started < 20
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{path}:1: " in result.stderr and "expands to about" in result.stderr


def test_free_form_fields_are_size_limited(portal):
    body = deployment("big", namespace="team-a")
    body["metadata"]["annotations"] = {f"note{i}": "x" * 8000 for i in range(40)}  # 320 KB of annotations
    with portal.client(TEAM_A) as team:
        response = team.put(OBJ.format(name="big"), json=body)
    assert response.status_code == 422
    assert any(c["field"] == "metadata.annotations" and "at most 262,144" in c["message"]
               for c in response.json()["details"]["causes"])


def test_an_unauthenticated_upload_is_answered_before_its_body_is_read(portal):
    # 300 MB declared, 1 KB sent: the server must answer 401 without waiting for (or buffering) the rest
    head = (f"POST /ui/apply HTTP/1.1\r\nHost: 127.0.0.1:{portal.port}\r\nOrigin: {portal.url}\r\n"
            "Content-Type: multipart/form-data; boundary=x\r\nContent-Length: 314572800\r\n")
    answer, took = raw_request(portal.port, head, b"--x\r\n" + b"a" * 1024)
    assert answer.startswith("HTTP/1.1 401") and '"kind":"Status"' in answer
    assert took < 2


@pytest.mark.parametrize("path", [OBJ.format(name="x"), "/ui/apply"])
def test_an_authenticated_body_over_the_cap_is_413_from_its_declared_length(portal, path):
    head = (f"PUT {path} HTTP/1.1\r\n" if path.startswith(API) else f"POST {path} HTTP/1.1\r\n") + (
        f"Host: 127.0.0.1:{portal.port}\r\nAuthorization: Bearer {TEAM_A}\r\nContent-Length: {MAX_BODY + 1}\r\n")
    answer, took = raw_request(portal.port, head, b"{")
    assert answer.startswith("HTTP/1.1 413") and '"reason":"RequestEntityTooLarge"' in answer and took < 2


def test_a_streamed_body_is_cut_off_at_the_cap(portal):
    def chunks():
        for _ in range(64):  # 64 MB offered without a Content-Length
            yield b"x" * (1024 * 1024)

    with portal.client(TEAM_A) as team:
        response = team.put(OBJ.format(name="x"), content=chunks())
    assert response.status_code == 413 and response.json()["code"] == 413


def test_the_sign_in_form_is_capped_small_before_any_token(portal):
    head = (f"POST /ui/signin HTTP/1.1\r\nHost: 127.0.0.1:{portal.port}\r\n"
            f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {MAX_SIGNIN_BODY + 1}\r\n")
    answer, _ = raw_request(portal.port, head, b"token=")
    assert answer.startswith("HTTP/1.1 413")
