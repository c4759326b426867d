"""Front-proxy authentication: the portal behind the cluster's API server as an aggregated API.

The API server authenticates the caller, then proxies to the portal over TLS with a client certificate signed by
its request-header CA and the caller in `X-Remote-User` / `X-Remote-Group`. Those headers are believed only from a
connection whose client certificate the TLS layer verified against that CA (and, when allowed names are given,
whose common name is one of them): from anyone else they mean nothing. Authorization is the cluster's: each request
is a SubjectAccessReview (group modelplane.ai, the plural, namespace, verb), and the principal the routes see is
scoped to exactly what the review allowed (its namespace, or every namespace for a cluster-wide verb).

`python -m automation.portal.front_proxy DIR` writes the cluster's request-header CA and allowed names (the
`kube-system/extension-apiserver-authentication` ConfigMap) into DIR, before `serve` starts in the pod.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from starlette.types import ASGIApp, Receive, Scope, Send

from automation.portal.auth import Principal
from automation.portal.guard import Caller, status_body
from automation.portal.watch import requested as watch_requested

PEER_CERT = "modelplane.peer_cert"  # the verified client certificate (DER), put in each request's state
GROUP, VERSION = "modelplane.ai", "v1alpha1"
API = f"/apis/{GROUP}/{VERSION}"
VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
SEGMENT = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@dataclass(frozen=True)
class Attributes:
    """What one request does, as the API server's RequestInfo says it: a resource request, or a non-resource path."""

    verb: str
    resource: str = ""
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    path: str = ""  # non-resource requests only

    def review(self, user: str, groups: list[str]) -> dict:
        spec: dict = {"user": user, "groups": groups}
        if self.path:
            spec["nonResourceAttributes"] = {"path": self.path, "verb": self.verb}
        else:
            spec["resourceAttributes"] = {k: v for k, v in {
                "group": GROUP, "version": VERSION, "resource": self.resource, "namespace": self.namespace,
                "name": self.name, "subresource": self.subresource, "verb": self.verb}.items() if v}
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def attributes(method: str, path: str, query: str) -> Attributes:
    verb = VERBS.get(method.upper(), method.lower())
    if not path.startswith(API + "/"):
        return Attributes(verb="get" if verb == "get" else verb, path=path)
    parts = [p for p in path[len(API):].split("/") if p]
    namespace = ""
    if len(parts) >= 3 and parts[0] == "namespaces":
        namespace, parts = parts[1], parts[2:]
    resource, name, subresource = (parts + ["", "", ""])[:3]
    if len(parts) > 3 or not all(SEGMENT.match(p) for p in parts):
        return Attributes(verb=verb, path=path)  # no resource of ours: the routes answer 404
    if verb == "get" and not name:
        verb = "watch" if watch_requested(query) else "list"
    if verb == "delete" and not name:
        verb = "deletecollection"
    return Attributes(verb, resource, namespace, name, subresource)


class AccessReviewer(Protocol):
    def allowed(self, review: dict) -> bool:
        """Whether the cluster allows the SubjectAccessReview `review` (raises when the cluster refuses it)."""


REVIEW_TIMEOUT = 5.0  # seconds a SubjectAccessReview may take (the API server's webhook authorizer: 30; ours is one hop)
MAX_REVIEWS = 16  # reviews in flight at once: the next request is answered 429 at once rather than waiting


class ClusterReviewer:
    """SubjectAccessReviews created with the pod's service account (bound to system:auth-delegator), each given
    REVIEW_TIMEOUT seconds to connect and to answer. `configuration`: another API server's (tests); default the
    pod's own."""

    def __init__(self, configuration: Any = None, timeout: float = REVIEW_TIMEOUT) -> None:
        from kubernetes import client, config

        if configuration is None:
            config.load_incluster_config()
        self._api = client.AuthorizationV1Api(client.ApiClient(configuration) if configuration else None)
        self.timeout = timeout

    def allowed(self, review: dict) -> bool:
        answer = self._api.create_subject_access_review(review, _request_timeout=(self.timeout, self.timeout))
        return bool(answer.status and answer.status.allowed)


@dataclass(frozen=True)
class FrontProxySettings:
    """`serve --requestheader-client-ca FILE [--requestheader-allowed-names A,B]`."""

    ca_file: Path
    allowed_names: tuple[str, ...] = ()
    reviewer: AccessReviewer | None = None  # default: the cluster's, with the pod's service account

    def uvicorn(self) -> dict:
        """The TLS layer asks for a client certificate and verifies one, if sent, against the CA; none is needed
        (browsers and bearer tokens keep working)."""
        import ssl

        return {"ssl_ca_certs": str(self.ca_file), "ssl_cert_reqs": ssl.CERT_OPTIONAL, "http": peer_cert_protocol()}


def verified_name(der: bytes, ca_pem: bytes) -> str | None:
    """The common name of a client certificate issued by the CA (signature checked here, not only by TLS)."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.x509.oid import NameOID

    cert = x509.load_der_x509_certificate(der)
    for ca in x509.load_pem_x509_certificates(ca_pem):
        try:
            cert.verify_directly_issued_by(ca)
        except (InvalidSignature, ValueError, TypeError):  # another issuer, or a key of another type
            continue
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        return str(names[0].value) if names else ""
    return None


class FrontProxy:
    """ASGI middleware in front of the guard: a request from the front proxy becomes a `Caller` the guard and the
    routes take as it is (`state["caller"]`); any other request passes untouched (a bearer token or a session)."""

    def __init__(self, app: ASGIApp, ca_file: Path, allowed_names: tuple[str, ...], reviewer: AccessReviewer) -> None:
        self.app, self.ca, self.allowed_names, self.reviewer = app, Path(ca_file).read_bytes(), allowed_names, reviewer
        # reviews run on threads of their own, at most MAX_REVIEWS at once: a cluster that does not answer holds
        # those and no more, never the threads that serve everything else (/healthz answers on the event loop)
        self._threads = ThreadPoolExecutor(MAX_REVIEWS, thread_name_prefix="access-review")
        self._slots = threading.BoundedSemaphore(MAX_REVIEWS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        state = scope.setdefault("state", {})
        state.pop("caller", None)  # only this middleware and the guard set it
        der = state.pop(PEER_CERT, None)
        user = next(iter(_values(scope, b"x-remote-user")), None)  # the first one, as the API server reads it
        if der is None or not user:
            return await self.app(scope, receive, send)
        name = verified_name(der, self.ca)
        if name is None or (self.allowed_names and name not in self.allowed_names):
            return await _refuse(send, 401, "Unauthorized", "the client certificate is not the front proxy's")
        groups = _values(scope, b"x-remote-group")
        asked = attributes(scope["method"], scope["path"], scope.get("query_string", b"").decode("latin-1"))
        if not self._slots.acquire(blocking=False):
            return await _refuse(send, 429, "TooManyRequests", "too many authorization reviews in flight; retry",
                                 ((b"retry-after", b"1"),))
        review = self._threads.submit(self.reviewer.allowed, asked.review(user, groups))
        review.add_done_callback(lambda _: self._slots.release())  # its thread is free (or it never started)
        try:
            allowed = await asyncio.wait_for(asyncio.wrap_future(review), REVIEW_TIMEOUT + 1)
        except TimeoutError:  # a reviewer without a timeout of its own: the slot stays taken until it returns
            return await _refuse(send, 503, "ServiceUnavailable",
                                 f"the cluster's authorization did not answer within {REVIEW_TIMEOUT:g} seconds")
        except Exception as exc:  # the cluster did not answer: never a guess
            return await _refuse(send, 503, "ServiceUnavailable", f"the cluster's authorization failed: {type(exc).__name__}")
        if not allowed:
            what = (f'resource "{asked.resource}{"/" + asked.subresource if asked.subresource else ""}" in API group '
                    f'"{GROUP}"' + (f' in the namespace "{asked.namespace}"' if asked.namespace else " at the cluster scope")
                    if not asked.path else f'path "{asked.path}"')
            return await _refuse(send, 403, "Forbidden", f'User "{user}" cannot {asked.verb} {what}')
        cluster_wide = not asked.path and not asked.namespace
        principal = Principal(user, frozenset({asked.namespace} if asked.namespace else ()), cluster_wide)
        state["caller"] = Caller(principal, "front-proxy")
        return await self.app(scope, receive, send)


def _values(scope: Scope, name: bytes) -> list[str]:
    """Every non-empty value of a header, each one whole: the API server's request-header authenticator takes each
    `X-Remote-Group` value as one group (a group name may hold a comma; several groups are several headers)."""
    return [v.decode("latin-1").strip() for k, v in scope.get("headers", [])
            if k.lower() == name and v.strip()]


async def _refuse(send: Send, code: int, reason: str, message: str, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    body = status_body(code, reason, message)
    await send({"type": "http.response.start", "status": code, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": body})


def peer_cert_protocol() -> type:
    """uvicorn's h11 protocol with each connection's verified client certificate (DER) in every request's state:
    the ASGI scope has no TLS details of its own. `getpeercert` returns one only when the handshake verified it
    (ssl_cert_reqs=CERT_OPTIONAL with ssl_ca_certs, the request-header CA)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class PeerCertProtocol(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            self.app_state = {**self.app_state, PEER_CERT: der} if der else {
                k: v for k, v in self.app_state.items() if k != PEER_CERT}

    return PeerCertProtocol


def fetch(folder: Path) -> None:
    """Write the cluster's request-header CA (`ca.crt`) and allowed names (`allowed-names`, comma-separated)."""
    from kubernetes import client, config

    config.load_incluster_config()
    data = client.CoreV1Api().read_namespaced_config_map("extension-apiserver-authentication", "kube-system").data or {}
    ca = data.get("requestheader-client-ca-file")
    if not ca:
        raise SystemExit("kube-system/extension-apiserver-authentication has no requestheader-client-ca-file: "
                         "the API server is not configured for aggregation (--requestheader-client-ca-file)")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ca.crt").write_text(ca)
    (folder / "allowed-names").write_text(",".join(json.loads(data.get("requestheader-allowed-names") or "[]")))


if __name__ == "__main__":
    fetch(Path(sys.argv[1]))
