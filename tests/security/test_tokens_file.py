"""Finding 1: the tokens file is strict, a plaintext file readable by others is warned about, and a changed
file takes effect without a restart (a bad change keeps the tokens in force)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
import yaml

from automation.portal.auth import Tokens, TokensFile, TokensFileError, digest
from tests.portal_server import ADMIN, API, TEAM_A, TOKENS, ThreadServer, free_port, start_process

GOOD_SHA = digest("a-token-of-enough-length")
BAD_FILES = [
    # (file content, what the one line must name)
    ([{"name": "ops", "token": "ops-token-00000001", "admin": "false"}], "entry 0 (ops): admin: Input should be a valid boolean"),
    ([{"name": "ops", "token": "ops-token-00000001", "admin": 1}], "entry 0 (ops): admin"),
    ([{"name": "ops", "token": "ops-token-00000001", "amdin": True}], "entry 0 (ops): amdin: Extra inputs are not permitted"),
    ([{"name": "ops", "token": ""}], "entry 0 (ops): token"),
    ([{"name": "ops", "tokenSha256": "abc"}], "entry 0 (ops): tokenSha256"),
    ([{"name": "ops", "tokenSha256": "z" * 64}], "entry 0 (ops): tokenSha256"),
    ([{"name": "ops", "token": "ops-token-00000001", "tokenSha256": GOOD_SHA}], "entry 0 (ops): entry: Value error, give exactly one"),
    ([{"name": "ops"}], "give exactly one of token and tokenSha256"),
    ([{"name": "a", "token": "same-token-0000001"}, {"name": "b", "token": "same-token-0000001"}], "entry b: the same token as entry a"),
    ([{"name": "a", "tokenSha256": digest("same-token-0000001")}, {"name": "b", "token": "same-token-0000001"}], "entry b: the same token as entry a"),
    ([{"name": "ops", "token": "ops-token-00000001", "namespaces": "team-a"}], "entry 0 (ops): namespaces"),
    ([{"name": "ops", "token": "ops-token-00000001", "namespaces": ["Team_A"]}], "entry 0 (ops): namespaces.0"),
    ([{"token": "ops-token-00000001"}], "entry 0: name: Field required"),
    ([], "tokens: List should have at least 1 item"),
    ({"tokens": [{"name": "a", "token": "ops-token-00000001"}], "quotas": {"team-a": {"maxGPUs": -1}}}, "quotas.team-a.maxGPUs"),
    ({"tokens": [{"name": "a", "token": "ops-token-00000001"}], "quota": {}}, "quota: Extra inputs"),
    ("just text", "expected a list of tokens"),
]


@pytest.mark.parametrize("content,message", BAD_FILES, ids=[m for _, m in BAD_FILES])
def test_a_bad_tokens_file_is_refused_with_one_line_naming_the_entry(tmp_path, content, message):
    path = tmp_path / "tokens.yaml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    with pytest.raises(TokensFileError) as caught:
        Tokens.load(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert "ops-token-00000001" not in str(caught.value) and "same-token" not in str(caught.value)  # never the secret


def test_admin_is_granted_only_by_a_real_boolean(tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump([{"name": "ops", "token": "ops-token-00000001", "admin": True},
                                    {"name": "dev", "tokenSha256": digest("dev-token-00000001")}]))
    tokens = Tokens.load(path)
    assert tokens.resolve("ops-token-00000001").admin is True
    assert tokens.resolve("dev-token-00000001").admin is False


def test_yaml_aliases_are_refused_in_the_tokens_file(tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text("- &a {name: a, token: alias-token-000001}\n- *a\n")
    with pytest.raises(TokensFileError, match="aliases are not allowed"):
        Tokens.load(path)


@pytest.mark.parametrize("entries, message", [
    ([{"name": "ops", "token": "ops-token-00000001", "admin": "false"}], "entry 0 (ops): admin: Input should be a valid boolean"),
    ([{"name": "ops", "token": "ops-token-00000001", "admin": True}, {"name": "ci", "token": "ci-token-000000001"},
      {"name": "ops", "token": "ops-token-00000002", "namespaces": ["team-a"]}],
     "entry 2 (ops): the name 'ops' is taken by entry 0; names must be unique"),
])
def test_serve_refuses_to_start_on_a_bad_tokens_file_with_one_line_and_exit_2(tmp_path, entries, message):
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump(entries))
    path.chmod(0o600)
    result = subprocess.run([sys.executable, "-m", "automation.cli", "serve", "--tokens", str(path), "--port",
                             str(free_port()), "--data-dir", str(tmp_path / "d")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: {path}: {message}"]


def test_plaintext_tokens_readable_by_others_are_warned_about(tmp_path, caplog):
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump([{"name": "ops", "token": "ops-token-00000001"}]))
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="modelplane.portal"):
        Tokens.load(path)
    assert "readable by other users" in caplog.text and "ops-token-00000001" not in caplog.text
    caplog.clear()
    path.chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="modelplane.portal"):
        Tokens.load(path)
    assert "readable by other users" not in caplog.text
    hashed = tmp_path / "hashed.yaml"  # digests only: nothing usable to protect
    hashed.write_text(yaml.safe_dump([{"name": "ops", "tokenSha256": GOOD_SHA}]))
    hashed.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="modelplane.portal"):
        Tokens.load(hashed)
    assert "readable by other users" not in caplog.text


def test_a_revoked_token_stops_working_without_a_restart_and_a_bad_edit_refuses_every_token(tmp_path):
    """Issue 65: a revocation saved with a typo kept the old tokens, the one being revoked with them. Now a file that
    does not load grants nothing (fail closed), and /readyz says why, until it is fixed."""
    with ThreadServer(tmp_path, check_every=0.05) as portal:
        with portal.client(TEAM_A) as team:
            assert team.get(API + "/namespaces/team-a/modeldeployments").status_code == 200
            portal.tokens_path.write_text(yaml.safe_dump([t for t in TOKENS if t["name"] != "team-a"]))
            time.sleep(0.2)
            assert team.get(API + "/namespaces/team-a/modeldeployments").status_code == 401
        with portal.client(ADMIN) as admin, portal.client(None) as anyone:
            portal.tokens_path.write_text("- {name: ops, admin: maybe}\n")  # a typo while editing
            time.sleep(0.2)
            assert admin.get("/plan").status_code == 401
            ready = anyone.get("/readyz")
            assert ready.status_code == 503 and "every token is refused" in ready.json()["message"]
            assert "entry 0 (ops): admin" in ready.json()["message"]
            assert anyone.get("/healthz").status_code == 200  # alive: nothing to restart
            portal.tokens_path.write_text(yaml.safe_dump(TOKENS))  # fixed
            time.sleep(0.2)
            assert admin.get("/plan").status_code == 200 and anyone.get("/readyz").status_code == 200


@pytest.mark.parametrize("broken", ["typo", "deleted", "empty", "not utf-8"])
def test_a_tokens_file_that_does_not_load_refuses_every_token_and_says_so_at_each_check(tmp_path, caplog, broken):
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump({"tokens": [{"name": "ops", "token": "ops-token-00000001"}],
                                    "quotas": {"team-a": {"maxGPUs": 4}}}))
    holder = TokensFile(path, check_every=0)
    assert holder.resolve("ops-token-00000001") is not None
    if broken == "deleted":
        path.unlink()
    else:
        path.write_bytes({"typo": b"- {name: ops, token: ops-token-00000001, admin: maybe}\n", "empty": b"",
                          "not utf-8": b"- {name: ops, token: ops-token-\xff0000001}\n"}[broken])
    with caplog.at_level(logging.ERROR, logger="modelplane.portal"):
        assert holder.resolve("ops-token-00000001") is None
        assert holder.resolve("ops-token-00000001") is None
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(said) == 2 and all("every token is refused" in m for m in said)  # each check, not once
    assert holder.last_error and holder.quotas["team-a"].maxGPUs == 4  # the limits in force stay
    path.write_text(yaml.safe_dump([{"name": "ops", "token": "ops-token-00000001"}]))
    assert holder.resolve("ops-token-00000001") is not None and holder.last_error is None


def test_an_edit_that_keeps_the_size_and_the_modification_time_is_seen(tmp_path):
    """Issue 65: changes were told by (mtime, size, inode), so an edit in place restoring the mtime was never
    loaded. They are told by the file's bytes."""
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump([{"name": "ops", "token": "ops-token-00000001"}]))
    before = os.stat(path)
    holder = TokensFile(path, check_every=0)
    with open(path, "r+b") as file:  # the same inode, the same size
        text = file.read()
        file.seek(0)
        file.write(text.replace(b"ops-token-00000001", b"ops-token-00000002"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_mtime_ns, after.st_size, after.st_ino) == (before.st_mtime_ns, before.st_size, before.st_ino)
    assert holder.resolve("ops-token-00000002") is not None and holder.resolve("ops-token-00000001") is None


def test_sighup_reloads_the_tokens_file_of_a_running_portal(tmp_path):
    port = free_port()
    process = start_process(tmp_path, port, ["--no-apply"])
    try:
        url = f"http://127.0.0.1:{port}"
        new = "a-new-token-after-sighup"
        assert httpx.get(url + "/plan", headers={"Authorization": f"Bearer {new}"}).status_code == 401
        (tmp_path / "tokens.yaml").write_text(yaml.safe_dump([*TOKENS, {"name": "new", "token": new}]))
        os.kill(process.pid, signal.SIGHUP)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if httpx.get(url + "/plan", headers={"Authorization": f"Bearer {new}"}).status_code == 200:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the new token was not accepted after SIGHUP")
    finally:
        process.terminate()
        process.wait(10)


def test_the_tokens_file_holder_reloads_only_when_the_file_changed(tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump([{"name": "ops", "token": "ops-token-00000001"}]))
    holder = TokensFile(path, check_every=0)
    first = holder.current()
    assert holder.current() is first
    path.write_text(yaml.safe_dump([{"name": "ops", "token": "ops-token-00000002"}]))
    os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert holder.resolve("ops-token-00000002") is not None and holder.resolve("ops-token-00000001") is None
