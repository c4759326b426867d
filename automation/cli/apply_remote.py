"""`modelplane apply -f PATH --server URL`: push manifests to a portal, as `kubectl apply` pushes to an API server.

Every modelplane.ai object is validated locally first (nothing is sent if any is invalid), then PUT
to its path, fleet kinds before workloads (classes, clusters, gateways, caches, deployments,
endpoints, services), so a portal sees them in an order it can plan. The token comes from
$MODELPLANE_TOKEN or a file (`--token-file`), never from the command line; a portal whose certificate a private CA
signed (`serve --tls-self-signed`) is verified with that CA (`--ca-file`, or $SSL_CERT_FILE); the portal's Warning
headers are printed. The first refusal stops the push and is reported with the portal's message; so does any
answer but 200 or 201 with the object (a redirect is reported with where it points, never followed).
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from fleet.errors import ModelplaneError

if TYPE_CHECKING:
    from fleet.validate import Fleet

API = "/apis/modelplane.ai/v1alpha1"
ORDER = ["InferenceClass", "InferenceCluster", "InferenceGateway", "ModelCache", "ModelDeployment", "ModelEndpoint",
         "ModelService"]


@dataclass
class Pushed:
    ref: str
    status: int
    warnings: list[str]
    unchanged: bool = False  # stored as sent already: nothing was written (kubectl apply's `unchanged`)

    @property
    def verb(self) -> str:
        return "unchanged" if self.unchanged else "created" if self.status == 201 else "configured"


OWNED = ("spec",)  # what a manifest says and the portal stores as given (status and most metadata are the portal's)


def same_as_stored(body: dict, stored: dict) -> bool:
    meta, kept = body.get("metadata") or {}, stored.get("metadata") or {}
    return all(body.get(k) == stored.get(k) for k in OWNED) and all(
        (meta.get(k) or {}) == (kept.get(k) or {}) for k in ("labels", "annotations"))


class PushError(ModelplaneError):
    pass


def path_of(kind: str, namespace: str | None, name: str) -> str:
    from automation.portal.service import PLURALS

    plural, namespaced = next((p, ns) for p, (k, ns) in PLURALS.items() if k == kind)
    return f"{API}/namespaces/{namespace}/{plural}/{name}" if namespaced else f"{API}/{plural}/{name}"


def stored_as(response: httpx.Response, ref: str, kind: str, name: str) -> None:
    """A write succeeded only if the portal answered 200 or 201 with the object; anything else (a redirect, a
    proxy's page, an empty 204) stored nothing that we know of, and says so rather than "configured"."""
    code = response.status_code
    if 300 <= code < 400:
        where = response.headers.get("location", "nowhere")
        raise PushError(f"{ref}: the server answered {code}, a redirect to {where[:200]}; nothing was stored "
                        "(a write is not sent on to another address: give --server the portal's own URL)")
    try:
        answer = response.json()
    except ValueError:
        answer = None
    meta = answer.get("metadata") if isinstance(answer, dict) else None
    if code not in (200, 201) or not isinstance(meta, dict) or answer.get("kind") != kind or meta.get("name") != name:
        raise PushError(f"{ref}: the server answered {code} without the stored object; nothing is known to be stored "
                        "(is --server a modelplane portal?)")


RETRIES = 3  # resends of one write the portal shed, each after the Retry-After it asked for


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds to wait before resending, when the portal shed the write and said when to come back."""
    if response.status_code not in (429, 503):
        return None
    try:
        seconds = float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
    return min(max(seconds, 0.0), 60.0)


def verification(ca_file: str | None) -> ssl.SSLContext | bool:
    """What the portal's certificate is checked against: `ca_file` alone when given, else the system's CAs (or
    $SSL_CERT_FILE, which httpx reads)."""
    if ca_file is None:
        return True
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise PushError(f"--ca-file {ca_file}: not a readable PEM CA certificate "
                        f"({getattr(exc, 'strerror', None) or type(exc).__name__})") from None


def unreached(server: str, exc: httpx.HTTPError) -> PushError:
    """A connection that failed; when the portal's certificate did not verify, which option fixes it, in one line."""
    if "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return PushError(f"{server}: its TLS certificate is not signed by a CA this machine trusts: give the CA "
                         "the portal was served with as --ca-file (`serve --tls-self-signed` prints its ca.crt), "
                         "or set SSL_CERT_FILE to it")
    return PushError(f"{server}: {type(exc).__name__}: {exc}")


def push(fleet: Fleet, server: str, token: str, client: httpx.Client | None = None,
         ca_file: str | None = None) -> list[Pushed]:
    """PUT every object (ModelReplicas, which the portal composes, and ModelRoutes are skipped); raises PushError on a
    refusal. `ca_file`: the CA the portal's certificate is verified with (default: the system's, or $SSL_CERT_FILE)."""
    http = client or httpx.Client(base_url=server.rstrip("/"), timeout=60, verify=verification(ca_file))
    out = []
    objects = sorted((o for o in fleet.objects if o.kind in ORDER), key=lambda o: (ORDER.index(o.kind), o.ref))
    for obj in objects:
        body = obj.model_dump(mode="json", by_alias=True, exclude_none=True)
        namespace = obj.namespace if obj.namespaced else None
        ref = f"{obj.kind}/{obj.name}" if namespace is None else f"{obj.kind}/{namespace}/{obj.name}"
        try:  # as kubectl apply: read it first, and write nothing when it is stored as given already
            current = http.get(path_of(obj.kind, namespace, obj.name), headers={"Authorization": f"Bearer {token}"},
                               follow_redirects=False)
        except httpx.HTTPError as exc:
            raise unreached(server, exc) from None
        if current.status_code == 200:
            try:
                stored = current.json()
            except ValueError:
                stored = None
            if isinstance(stored, dict) and stored.get("kind") == obj.kind and same_as_stored(body, stored):
                out.append(Pushed(ref, 200, [], unchanged=True))
                continue
        for attempt in range(RETRIES + 1):
            try:
                # a redirect is never followed: the token and the write would go wherever it points
                response = http.put(path_of(obj.kind, namespace, obj.name), json=body,
                                    headers={"Authorization": f"Bearer {token}"}, follow_redirects=False)
            except httpx.HTTPError as exc:
                raise unreached(server, exc) from None
            wait = _retry_after(response)
            if wait is None or attempt == RETRIES:
                break
            time.sleep(wait)  # the portal shed it (429) or its lock was busy (503): as client-go, wait and resend
        if response.status_code >= 400:
            try:
                message = response.json().get("message") or response.text
                causes = "; ".join(c.get("text") or c.get("message", "") for c in response.json().get("details", {})
                                   .get("causes", []))
            except ValueError:
                message, causes = response.text[:300], ""
            raise PushError(f"{ref}: {response.status_code} {message}" + (f": {causes}" if causes else ""))
        stored_as(response, ref, obj.kind, obj.name)
        warnings = [w.strip() for w in response.headers.get_list("warning")] if "warning" in response.headers else []
        out.append(Pushed(ref, response.status_code, warnings))
    return out
