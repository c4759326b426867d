"""A real portal on loopback for tests: uvicorn in a thread (or a subprocess for crash tests)."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import httpx
import uvicorn
import yaml

from automation.portal.app import create_app
from automation.portal.auth import TokensFile
from automation.portal.store import Store

ADMIN, TEAM_A, TEAM_B = "admin-token-0001", "team-a-token-0002", "team-b-token-0003"
TOKENS = [
    {"name": "platform", "token": ADMIN, "admin": True},
    {"name": "team-a", "token": TEAM_A, "namespaces": ["team-a"]},
    {"name": "team-b", "token": TEAM_B, "namespaces": ["team-b"]},
]
API = "/apis/modelplane.ai/v1alpha1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_tokens(folder: Path, document=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tokens.yaml"
    path.write_text(yaml.safe_dump(TOKENS if document is None else document))
    path.chmod(0o600)  # plaintext tokens: readable by their owner only, as the portal asks
    return path


class ThreadServer:
    def __init__(self, folder: Path, apply: bool = False, tokens=None, check_every: float = 1.0, limiter=None,
                 replan_worker=None, replan_interval: float | None = None, tls=None):
        """`tls`: a SelfSigned (automation/portal/tls.py) to serve https with, as `serve --tls-self-signed` does."""
        self.port = free_port()
        self.tls = tls
        self.store = Store(f"sqlite:///{folder / 'portal.db'}")
        self.tokens_path = write_tokens(folder, tokens)
        self.tokens = TokensFile(self.tokens_path, check_every=check_every)
        app = create_app(self.store, self.tokens, apply, limiter=limiter, replan_worker=replan_worker)
        self.app = app
        self.replanner = app.state.replanner
        if replan_interval is not None:  # a test that settles after every write need not wait out the batching
            self.replanner._gather = self.replanner._interval = replan_interval
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error",
                                                    ssl_certfile=tls.cert if tls else None,
                                                    ssl_keyfile=tls.key if tls else None))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        wait_until_up(self.url, verify=ssl.create_default_context(cafile=self.tls.ca) if self.tls else True)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)

    def settle(self) -> None:
        """Wait for the background replan after the writes made so far (it queues their stack runs)."""
        assert self.replanner.settle(60), "the background replan did not finish within 60 s"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def client(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)


def seed_one_cluster(admin: httpx.Client, gpus: int) -> None:
    """The platform's part of a small fleet, stored through `admin`: class l4 and cluster c1 with `gpus` of them."""
    from tests.manifests import cluster, gpu_class

    assert admin.put(f"{API}/inferenceclasses/l4", json=gpu_class("l4", 1, "23034Mi")).status_code == 201
    assert admin.put(f"{API}/inferenceclusters/c1", json=cluster("c1", pools=(("gpu", "l4", gpus),))).status_code == 201


@contextmanager
def one_cluster_server(folder: Path, gpus: int) -> Iterator[ThreadServer]:
    """A portal in this process with class l4 and cluster c1 of `gpus` GPUs stored."""
    with ThreadServer(folder) as server:
        with server.client(ADMIN) as admin:
            seed_one_cluster(admin, gpus)
        yield server


def wait_until_up(url: str, seconds: float = 30, verify: ssl.SSLContext | bool = True) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/openapi.json", timeout=1, verify=verify)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"portal at {url} did not start")


def start_process(folder: Path, port: int, extra: list[str], tokens=None) -> subprocess.Popen:
    command = [sys.executable, "-m", "automation.cli", "serve", "--port", str(port), "--tokens",
               str(write_tokens(folder, tokens)), "--data-dir", str(folder / "data"), "--state", str(folder / "state"), *extra]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_until_up(f"http://127.0.0.1:{port}")
    return process


@contextmanager
def postgres_portals(folder: Path, count: int = 2, pool_gpus: int = 4) -> Iterator[Callable[[int, str], httpx.Client]]:
    """`count` portal processes on one PostgreSQL database, with one cluster of `pool_gpus` L4 GPUs stored through the
    first; yields `client(portal index, token)`."""
    from tests.postgres_server import PostgresServer

    with PostgresServer() as pg:
        ports = [free_port() for _ in range(count)]
        processes = [start_process(folder / f"p{i}", port, ["--database", pg.url, "--no-apply"])
                     for i, port in enumerate(ports)]

        def client(index: int, token: str) -> httpx.Client:
            return httpx.Client(base_url=f"http://127.0.0.1:{ports[index]}",
                                headers={"Authorization": f"Bearer {token}"}, timeout=60)
        try:
            with client(0, ADMIN) as admin:
                seed_one_cluster(admin, pool_gpus)
            yield client
        finally:
            for process in processes:
                process.terminate()
                process.wait(10)


def put_retrying(client: httpx.Client, url: str, body: dict) -> httpx.Response:
    """PUT as a Kubernetes client does: a 429 or 503 (the portal's backpressure) is retried after its Retry-After."""
    while True:
        response = client.put(url, json=body)
        if response.status_code not in (429, 503):
            return response
        assert response.json()["kind"] == "Status" and "Retry-After" in response.headers
        time.sleep(float(response.headers["Retry-After"]) / 10)


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may never be reaped in a container); reads /proc.

    A process reaped between the open and the read makes the read fail with ESRCH
    (ProcessLookupError): it is gone, just as when the file is missing."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in status)
    except (FileNotFoundError, ProcessLookupError):
        return False
