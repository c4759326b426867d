"""The record read from a bucket backend (automation/record/bucket.py): the checkpoints listed, the fleet's index read
and written in the bucket, no checkpoint loaded that did not change.

Against a real S3 API on loopback (moto's server, in this process) and the real Pulumi CLI `make toolchain` built,
which writes the checkpoints into that bucket from the same backend URL: what the test shows is that both open the
same bucket and prefix, that a fresh machine reads nothing but the listing and the index, and that a stack another
machine updated is read from its checkpoint. gs:// and azblob:// are opened by the same code but only their URL and
credential mapping is checked here (table below): no GCS or Azure API runs on this machine.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from automation.record import bucket
from automation.record.backend import PulumiRecord
from automation.record.bucket import BucketCheckpoints
from automation.record.backend import checkpoint_store
from tests.test_cli_contract import real_cli

BUCKET = "fleet-state"
PASSPHRASE = "bucket-test-passphrase"


@pytest.fixture(scope="module")
def s3():
    """An S3 API on a loopback port, with test credentials in the environment for this module's tests."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # not a line per request in a failure's output
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    patch = pytest.MonkeyPatch()
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_SESSION_TOKEN"):
        patch.delenv(name, raising=False)
    patch.setenv("AWS_ACCESS_KEY_ID", "testing")
    patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    patch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # nothing may ask a metadata address
    import urllib.request

    import obstore
    from obstore.store import S3Store

    endpoint = f"{host}:{port}"
    admin = S3Store(BUCKET, config={"endpoint": f"http://{endpoint}", "region": "us-east-1"},
                    client_options={"allow_http": True})
    urllib.request.urlopen(urllib.request.Request(f"http://{endpoint}/{BUCKET}", method="PUT"))  # CreateBucket
    yield endpoint, admin, obstore
    patch.undo()
    server.stop()


def _url(endpoint: str, prefix: str) -> str:
    # the URL a user gives the CLI for an S3-compatible store: a bare host, plain HTTP, the path style
    return f"s3://{BUCKET}/{prefix}?endpoint={endpoint}&disableSSL=true&s3ForcePathStyle=true&region=us-east-1"


def test_a_bucket_in_the_project_layout_is_listed_and_its_index_kept_there(s3):
    endpoint, admin, obstore = s3
    url = _url(endpoint, "listed")
    assert BucketCheckpoints.of(url) is None  # nothing there: read through the CLI, which says so
    obstore.put(admin, "listed/.pulumi/meta.yaml", b"version: 0\n")
    assert BucketCheckpoints.of(url) is None  # the old layout: every stack in one folder
    obstore.put(admin, "listed/.pulumi/meta.yaml", b"version: 1\n")
    obstore.put(admin, "listed/.pulumi/stacks/modelplane/gateway.json", b'{"v": 1}')
    obstore.put(admin, "listed/.pulumi/stacks/modelplane/gateway.json.bak", b"{}")  # not a checkpoint
    obstore.put(admin, "listed/.pulumi/stacks/modelplane/platform-a.json.gz", b"gz")
    obstore.put(admin, "listed/.pulumi/stacks/modelplane-workloads/team-a.json", b"{}")  # another project
    store = checkpoint_store(url)
    assert isinstance(store, BucketCheckpoints) and store.local_clock is False
    first = {listed.stack: listed for listed in store.list("modelplane")}
    assert sorted(first) == ["gateway", "platform-a"]
    obstore.put(admin, "listed/.pulumi/stacks/modelplane/gateway.json", b'{"v": 2}')  # another machine's update
    second = {listed.stack: listed for listed in store.list("modelplane")}
    assert second["gateway"].stamp != first["gateway"].stamp
    assert second["platform-a"].stamp == first["platform-a"].stamp
    assert store.get_index("fleet-a") is None
    store.put_index("fleet-a", {"modelplane/gateway": {"stamp": second["gateway"].stamp, "outputs": {}}})
    assert store.get_index("fleet-a") == {"modelplane/gateway": {"stamp": second["gateway"].stamp, "outputs": {}}}
    # the index is where any machine with the backend URL finds it, under the backend's prefix
    assert bytes(obstore.get(admin, "listed/.modelplane/index/fleet-a.json").bytes()).startswith(b"{")


def test_a_bucket_that_cannot_be_listed_is_named_in_one_line(s3, monkeypatch):
    endpoint, admin, obstore = s3
    obstore.put(admin, "denied/.pulumi/meta.yaml", b"version: 1\n")
    store = BucketCheckpoints.of(_url(endpoint, "denied"))
    assert store is not None
    monkeypatch.setattr(store, "store", bucket._s3("no-such-bucket", "x", {"endpoint": f"http://{endpoint}",
                                                                            "use_path_style": "true"})[0])
    with pytest.raises(OSError) as failed:
        store.list("modelplane")
    message = str(failed.value)
    assert message.startswith(f"s3://{BUCKET}/denied/.pulumi/stacks/modelplane/: ")  # where, then why
    assert "\n" not in message and "testing" not in message  # one line, and no credential in it


def _private_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


@pytest.mark.parametrize(("url", "env", "expected"), [
    # s3: the CLI's own completion of a bare endpoint and its path style
    ("s3://b/p?endpoint=minio:9000&disableSSL=true&s3ForcePathStyle=true&region=eu-west-1",
     {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
     {"endpoint": "http://minio:9000", "region": "eu-west-1", "virtual_hosted_style_request": False, "http": True}),
    ("s3://b/p?region=us-east-2", {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
     {"region": "us-east-2", "virtual_hosted_style_request": True, "http": False}),
    ("s3://b?endpoint=https://s3.example.org&use_path_style=true", {"AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/t"},
     {"endpoint": "https://s3.example.org", "virtual_hosted_style_request": False, "http": False}),
    # s3 whose credentials only the CLI finds, or whose URL says what this read does not do: the CLI reads it
    ("s3://b/p?region=us-east-1", {}, None),
    ("s3://b/p?region=us-east-1", {"AWS_PROFILE": "prod"}, None),
    ("s3://b/p?profile=prod", {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}, None),
    ("s3://b/p?role=arn:aws:iam::1:role/r", {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}, None),
    ("s3://b/p?kmskeyid=k&ssetype=aws:kms", {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}, None),
    # gs: a credential file, else the metadata server, which is left to the CLI
    ("gs://b/p", {"GOOGLE_APPLICATION_CREDENTIALS": "{sa}"}, {"application_credentials": "{sa}"}),
    ("gs://b/p", {}, None),
    ("gs://b/p?anonymous=true", {"GOOGLE_APPLICATION_CREDENTIALS": "{sa}"}, None),
    # azblob: an account with a key or a SAS token
    ("azblob://c/p?storage_account=acct", {"AZURE_STORAGE_KEY": "a2V5"}, {"account_name": "acct", "account_key": "a2V5"}),
    ("azblob://c/p", {"AZURE_STORAGE_ACCOUNT": "acct", "AZURE_STORAGE_SAS_TOKEN": "sv=1"},
     {"account_name": "acct", "sas_key": "sv=1"}),
    ("azblob://c/p", {"AZURE_STORAGE_ACCOUNT": "acct"}, None),  # `az login` or a managed identity: the CLI's
    ("azblob://c/p?storage_account=acct&localemu=true", {"AZURE_STORAGE_KEY": "a2V5"}, None),
])
def test_a_bucket_is_opened_as_the_cli_opens_its_url(url, env, expected, monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith(("AWS_", "GOOGLE_", "AZURE_", "CLOUDSDK_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))  # no application-default credentials of this machine's user
    account = tmp_path / "sa.json"  # a service-account file as `gcloud iam service-accounts keys create` writes one
    account.write_text(json.dumps({"type": "service_account", "client_email": "ci@p.iam.gserviceaccount.com",
                                   "private_key": _private_key(), "private_key_id": "1", "project_id": "p"}))
    for name, value in env.items():
        monkeypatch.setenv(name, value.replace("{sa}", str(account)))
    expected = {k: v.replace("{sa}", str(account)) if isinstance(v, str) else v for k, v in (expected or {}).items()} \
        or None
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    opened = bucket.OPENERS[parts.scheme](parts.netloc, parts.path.strip("/"), query)
    if expected is None:
        assert opened is None
        return
    assert opened is not None
    store, where = opened
    prefix = parts.path.strip("/")
    assert where == f"{parts.scheme}://{parts.netloc}/" + (f"{prefix}/" if prefix else "")
    assert (store.prefix or "") == prefix
    config: dict[str, Any] = dict(store.config)
    wanted = dict(expected)
    http = wanted.pop("http", None)
    # obstore gives its configuration back as text ("false"), as its environment variables would set it
    assert {k: str(config.get(k)).lower() for k in wanted} == {k: str(v).lower() for k, v in wanted.items()}
    # a bucket that is down fails the read in seconds (then the CLI's read says why), not after obstore's three
    # minutes of retries
    assert store.retry_config["retry_timeout"] <= timedelta(seconds=15)
    if http is not None:
        assert str(store.client_options.get("allow_http")).lower() == str(http).lower()


# --- the real CLI writes the checkpoints; the record read finds them with two requests ---------------------------


def _real_command(calls: list[str]):
    """The automation API's command for the real CLI `make toolchain` built, counting each `stack output`."""
    from pulumi import automation as auto

    from automation.execution.runner import started_cli

    command = started_cli(auto.PulumiCommand)  # the built CLI: first on PATH (`real_engine` below)
    run = command.run

    def counted(args, cwd, additional_env, on_output=None, on_error=None):
        calls.append(" ".join(a for a in args[:2]))
        return run(args, cwd, additional_env, on_output, on_error)

    command.run = counted
    return command


def _apply(url: str, project: str, stack: str, outputs: dict[str, Any], work: Path) -> None:
    """An update by the real CLI whose program exports `outputs` (as a stack program exports its record)."""
    import pulumi
    from pulumi import automation as auto

    def program() -> None:
        for name, value in outputs.items():
            pulumi.export(name, value)

    folder = work / project
    folder.mkdir(parents=True, exist_ok=True)
    env = {"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE, "PULUMI_SKIP_UPDATE_CHECK": "true",
           "PULUMI_BACKEND_URL": url}
    options = auto.LocalWorkspaceOptions(
        work_dir=str(folder), env_vars=env, pulumi_command=_real_command([]),
        project_settings=auto.ProjectSettings(name=project, runtime="python", backend=auto.ProjectBackend(url=url)))
    auto.create_or_select_stack(stack_name=stack, project_name=project, program=program, opts=options).up()


def _record_output(fingerprint: str) -> dict[str, Any]:
    return {"modelplane": {"fingerprint": fingerprint, "placements": []}, "gatewayAddress": f"192.0.2.{len(fingerprint)}"}


def test_the_real_cli_and_the_indexed_read_see_the_same_bucket(s3, tmp_path, monkeypatch):
    endpoint, admin, obstore = s3
    monkeypatch.setenv("PATH", f"{real_cli()}{os.pathsep}{os.environ['PATH']}")  # never skipped: missing fails
    monkeypatch.setenv("PULUMI_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION", "true")
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", PASSPHRASE)
    url = _url(endpoint, "fleet")
    _apply(url, "modelplane", "gateway", _record_output("g1"), tmp_path / "cli")
    _apply(url, "modelplane", "platform-a", _record_output("pa1"), tmp_path / "cli")
    _apply(url, "modelplane-workloads", "team-ml.a", _record_output("t1"), tmp_path / "cli")
    # what the CLI wrote is in the layout the read lists, under the URL's prefix
    assert isinstance(checkpoint_store(url), BucketCheckpoints)

    def fresh(name: str) -> tuple[Any, list[str]]:
        calls: list[str] = []
        state = tmp_path / name
        state.mkdir()
        return PulumiRecord(state, url, command=_real_command(calls)).read(), calls

    first, calls = fresh("first")
    assert {n: s.fingerprint for n, s in first.stacks.items()} == {"gateway": "g1", "platform-a": "pa1",
                                                                   "team-ml.a": "t1"}
    assert calls.count("stack output") == 3 and "stack ls" not in calls
    assert "3 of 3 stacks read from their checkpoints: no index; index rewritten" in first.source
    second, calls = fresh("second")
    assert calls == [] and second.source == f"the Pulumi backend {url}"  # the listing and the index: no CLI at all
    assert {n: (s.fingerprint, s.outputs) for n, s in second.stacks.items()} == \
        {n: (s.fingerprint, s.outputs) for n, s in first.stacks.items()}
    assert {n: s.applied_at for n, s in second.stacks.items()} == {n: s.applied_at for n, s in first.stacks.items()}
    _apply(url, "modelplane", "platform-a", _record_output("pa22"), tmp_path / "elsewhere")  # another machine's up
    third, calls = fresh("third")
    assert third.stacks["platform-a"].fingerprint == "pa22" and calls.count("stack output") == 1
    assert "1 of 3 stacks read from their checkpoints" in third.source
    fourth, calls = fresh("fourth")
    assert calls == [] and fourth.stacks["platform-a"].fingerprint == "pa22"
