"""The portal's app factory and server: its HTTP API (shaped like Kubernetes' own, `routes/`) and its page.

Security model (docs/portal.md has it in full): every unsafe request passes `guard.Guard` first (same
origin, authenticated before its body is read, bodies capped); browsers hold a server-side session id in
an HttpOnly SameSite=Strict cookie and send a CSRF token with every form; every error is a Kubernetes
`Status`; database work runs on worker threads, so reads never wait on writes, and `serve` runs the writes (with
the capacity ledger and the background replan) in a process of their own (writer.py), so they never hold the
interpreter that serves reads.
Handlers return a JSONResponse of what they read rather than a dict: FastAPI would walk a returned dict through
`jsonable_encoder`, on the event loop, which was 88% of a read of a 100-deployment namespace.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from fastapi import FastAPI

from automation.portal import errors
from automation.portal.auth import Tokens, TokensFile
from automation.portal.front_proxy import ClusterReviewer, FrontProxy, FrontProxySettings
from automation.portal.guard import Guard, SignInLimiter
from automation.portal.portal import Portal
from automation.portal.routes import authz, composed, discovery, health, objects, openapi, page, runs, verbs
from automation.portal.store import Store
from automation.portal.replan_worker import ReplanWorker, fewer_collections
from automation.portal.writer import WriteWorker
from fleet.errors import ModelplaneError

if TYPE_CHECKING:
    import socket

    from automation.portal.capacity_refresh import CapacityRefresher
    from automation.portal.worker import ExecutorFactory
    from fleet.capacity import LiveCapacity

log = logging.getLogger("modelplane.portal")


def create_app(store: Store, tokens: Tokens | TokensFile, apply: bool = True,
               limiter: SignInLimiter | None = None, replan_worker: ReplanWorker | None = None,
               front_proxy: FrontProxySettings | None = None, writer: WriteWorker | None = None) -> FastAPI:
    """The portal: one `Portal` (what every route shares), the guard in front, the routers behind it. `writer`: the
    writes run in that process (writer.py), with the ledger and the background replanner; else in this one."""
    app = FastAPI(title="modelplane portal", version="v1alpha1", docs_url=None, redoc_url=None,  # CDN scripts: routes/health.py
                  description="Submit ModelDeployments and ModelServices, watch them land. Kubernetes-shaped API.")
    portal = Portal(store, tokens, apply, replan_worker, writer=writer)
    app.state.portal = portal
    app.state.replanner = portal.replanner
    if portal.replanner is not None:
        app.router.on_shutdown.append(portal.replanner.stop)
    app.add_middleware(Guard, authenticate=portal.sessions.authenticate, limiter=limiter)
    if front_proxy is not None:  # added last, so it runs before the guard
        app.add_middleware(FrontProxy, ca_file=front_proxy.ca_file, allowed_names=front_proxy.allowed_names,
                           reviewer=front_proxy.reviewer or ClusterReviewer())
    errors.install(app)
    for router in (health.router, discovery.router, openapi.router, authz.router, composed.router, objects.router,
                   verbs.router, runs.router, page.router):
        app.include_router(router)  # in this order: the composed kinds' paths before the generic {plural} ones
    return app


class StartupError(ModelplaneError):
    """The portal cannot start for a reason the user fixes (a busy port, a bad database URL): one line, exit 2."""


def listening_socket(host: str, port: int) -> socket.socket:
    """Bind before anything else starts, so a busy port is a clear message, not a server log line."""
    import socket

    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        # with its protocol (TCP) named: asyncio turns Nagle's algorithm off on accepted connections only then, and
        # with it on, every response waited ~40 ms for the client's delayed ACK between its headers and its body
        sock = socket.socket(info[0], socket.SOCK_STREAM, info[2] or socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
        sock.listen(2048)
    except OSError as exc:
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def checked_tls(cert: Path, key: Path) -> None:
    """A certificate and key that do not load (or do not match) are one line before listening, not a traceback."""
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise StartupError(f"cannot use TLS certificate {cert} with key {key}: {exc.strerror or exc}") from None


SHUTDOWN_WAIT = 10  # seconds


def serve(host: str, port: int, data_dir: Path, tokens_file: Path, database: str | None, apply: bool,
          worker_interval: float = 1.0, state_dir: Path = Path(".modelplane"), backend: str | None = None,
          announce: Callable[[], None] | None = None, runner: ExecutorFactory | None = None, parallel: int = 2, tls: tuple[Path, Path] | None = None,
          front_proxy: FrontProxySettings | None = None, capacity: str = "declared",
          capacity_every: float = 60.0) -> None:
    """Run the portal; `announce()` is called once it listens (a banner that never precedes a startup error).
    `capacity`: where free devices come from (`declared`, `live`: every cluster read every `capacity_every`
    seconds, or a snapshot file read once; docs/scheduling.md "Live capacity").
    `runner`: how accepted changes are applied (a worker RunnerFactory; default: Pulumi engines on this host).
    `tls`: (certificate, key) files to serve https with (kubectl sends a bearer token over TLS only).
    `front_proxy`: believe the API server's front proxy (an aggregated API, front_proxy.py); needs `tls`."""
    import signal
    from concurrent.futures.process import BrokenProcessPool

    import uvicorn

    from automation.portal.store import StoreError
    from automation.portal.worker import Worker, pulumi_runner

    tokens = TokensFile(tokens_file)
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        url = database or f"sqlite:///{(data_dir / 'portal.db').resolve()}"
        store = Store(url)
    except (OSError, StoreError) as exc:
        raise StartupError(str(exc)) from None
    if tls is not None:
        checked_tls(*tls)
    sock = listening_socket(host, port)
    if announce is not None:
        announce()
    fewer_collections()  # this process holds the parsed snapshot and the composed lists (megabytes at fleet scale)
    # the writes, the fleet's capacity ledger and the background replanner in a process of their own (writer.py)
    try:
        writer = WriteWorker(url, tokens_file, apply)
    except BrokenProcessPool:
        raise StartupError("the portal's writer process did not start (see the lines above)") from None
    if hasattr(signal, "SIGHUP"):  # `kill -HUP` reloads the tokens file (a revoked token stops working at once)
        def reload(*_: object) -> None:
            tokens.reload()
            writer.reload_tokens()  # its quotas
        signal.signal(signal.SIGHUP, reload)
    app = create_app(store, tokens, apply, front_proxy=front_proxy, writer=writer)
    refresher = _capacity(app.state.portal, store, capacity, capacity_every, state_dir)
    worker = (Worker(store, state_dir, interval=worker_interval, runner=runner or pulumi_runner(backend),
                     parallel=parallel) if apply else None)
    if worker:
        worker.start()
    try:
        # uvicorn handles SIGINT and SIGTERM (a graceful stop) and leaves SIGHUP to us; a stop waits for open
        # requests at most SHUTDOWN_WAIT seconds (a watch lasts up to an hour; clients resume it elsewhere)
        uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=SHUTDOWN_WAIT,
                                      ssl_certfile=tls[0] if tls else None,
                                      ssl_keyfile=tls[1] if tls else None,
                                      **(front_proxy.uvicorn() if front_proxy else {}))).run(sockets=[sock])
    finally:
        if refresher is not None:
            refresher.stop()
        writer.close()
        if worker:
            worker.stop()


def _capacity(portal: Portal, store: Store, source: str, every: float, state_dir: Path) -> CapacityRefresher | None:
    """The capacity the portal plans on, read as the CLI reads it (automation/capacity/source.py) every `every`
    seconds in the background (returned, to be stopped). A snapshot is read once first: one that cannot be used
    stops the start (StartupError)."""
    from automation.capacity.source import DECLARED, LIVE, capacity_of
    from automation.errors import AutomationError
    from automation.portal.capacity_refresh import CapacityRefresher
    from fleet.validate import Fleet

    if source == DECLARED:
        portal.writes.capacity("")  # a portal served with live capacity before plans on declared again
        return None

    def read(fleet: Fleet) -> LiveCapacity:
        found = capacity_of(fleet, source, {}, state_dir)
        assert found is not None  # only `declared` is None
        return found
    refresher = CapacityRefresher(store, read, portal.writes.capacity, every)
    if source != LIVE:
        try:
            refresher.refresh()
        except AutomationError as exc:
            raise StartupError(str(exc)) from None
    refresher.start()
    return refresher
