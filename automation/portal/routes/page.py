"""The server-rendered page: sign in and out, the fleet's pools, deployments, services and runs, and forms to
apply or delete an object (each form carries the session's CSRF token; scripts use the API with a bearer token)."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.concurrency import run_in_threadpool

from automation.planning import conditions
from automation.portal.auth import Principal, digest
from automation.portal.deps import Objects, SignedIn, queued
from automation.portal.guard import Caller
from automation.portal.portal import Portal
from automation.portal.sessions import COOKIE
from automation.portal.service import PLURALS, ApiError
from automation.portal.state import CAPACITY, POLICIES
from fleet.api import KINDS
from fleet.inventory import build_clusters
from fleet.problems import Problem
from fleet.validate import Fleet

if TYPE_CHECKING:
    from fleet.loader import Document

SIGNIN_COOKIE = "modelplane_signin"  # the sign-in form's CSRF token (double submit: login CSRF)
PAGE_SIZE = 50  # rows per table page: the page of a 2,000-deployment fleet stays small and quick
NOTICES = {"bad-token": "That token is not valid"}  # the signed-out page's banners (errors): fixed texts, asked for by code
MAX_FLASH = 1500  # characters of a form's outcome carried to the page (a URL stays well under servers' limits)
templates = Environment(loader=PackageLoader("automation.portal", "templates"), autoescape=select_autoescape(["html"]))
router = APIRouter(include_in_schema=False)


def cookie_options(request: Request) -> dict:
    return {"httponly": True, "samesite": "strict", "secure": request.url.scheme == "https", "path": "/"}


def checked_form(who: Caller, csrf: str) -> Caller:
    """A form post from the page: signed in, and carrying this session's CSRF token (scripts use bearer)."""
    if who.how == "session" and not (who.csrf and hmac.compare_digest(csrf.encode(), who.csrf.encode())):
        raise ApiError(403, "Forbidden", "the form's CSRF token does not match this session; reload the page")
    return who


def _flash_signature(csrf: str, text: str, bad: bool = False) -> str:
    # whether it is an error is signed with the text: a link cannot show a refusal as a success or the other way
    return hmac.new(csrf.encode(), (b"error\0" if bad else b"flash\0") + text.encode(), hashlib.sha256).hexdigest()


def _back(who: Caller, message: str, bad: bool = False) -> RedirectResponse:
    """Back to the page with what the server said about the form, signed with the session's own secret: a link
    anyone else makes (`/?flash=Your+token+expired,+sign+in+at+...`) shows nothing on the portal's page."""
    if not who.csrf:  # a script that posted with a bearer token has no page to show it on
        return RedirectResponse("/", status_code=303)
    text = message[:MAX_FLASH]
    query = {"flash": text, **({"bad": "1"} if bad else {}), "sig": _flash_signature(who.csrf, text, bad)}
    return RedirectResponse("/?" + urlencode(query), status_code=303)


@dataclass(frozen=True)
class Banner:
    """The page's message box: a form's outcome, an error (`bad`: shown as one) or not."""
    text: str
    bad: bool = False


def _banner(who: Caller | None, notice: str | None, flash: str | None, sig: str | None,
            bad: bool = False) -> Banner | None:
    """What the page may show: signed out, one of NOTICES by its code; signed in, a flash this session was sent."""
    if who is None:
        return Banner(NOTICES[notice], bad=True) if notice in NOTICES else None
    if who.csrf and flash and sig and hmac.compare_digest(sig.encode(), _flash_signature(who.csrf, flash, bad).encode()):
        return Banner(flash, bad)
    return None


@router.get("/", response_class=HTMLResponse)
def page(request: Request, portal: Objects, message: str | None = None, flash: str | None = None,
         sig: str | None = None, bad: bool = False, page: int = 1, pools: int = 1) -> HTMLResponse:
    who = portal.sessions.authenticate(request.headers, request.cookies)
    shown = _banner(who, message, flash, sig, bad)  # never the query's text as it came
    if who is None:
        form_token = secrets.token_urlsafe(32)
        response = HTMLResponse(templates.get_template("signin.html").render(message=shown, csrf=form_token))
        response.set_cookie(SIGNIN_COOKIE, form_token, max_age=3600, **cookie_options(request))
        return response
    return _render(portal, who, shown, _server(request), page, pools)


def _server(request: Request) -> str:
    """The portal's URL as this browser reached it: what `modelplane apply --server` takes."""
    return str(request.base_url).rstrip("/")


def _render(portal: Portal, who: Caller, shown: Banner | None, server: str, page: int = 1, pools: int = 1,
            manifest: str = "", status_code: int = 200) -> HTMLResponse:
    """The signed-in page; `manifest`: the text a refused paste had, kept in the form to fix; `server`: this
    portal's URL, for the command that fills an empty fleet."""
    person, store = who.principal, portal.store
    with store.read() as conn:
        plan, observed, gateways = portal.reads.observation(conn)
        gateway = conditions.gateway_address(plan, observed, gateways)
        clusters = store.list(conn, "InferenceCluster")
        classes = store.list(conn, "InferenceClass")
        visible = [o for o in store.list(conn, "ModelDeployment") if person.can_see(o["metadata"]["namespace"])]
        rows = Paged(visible, page, "page", {"pools": pools})
        deployments = portal.reads.statuses(rows.items, conn)  # statuses of one page only: a fleet has thousands
        services = portal.reads.statuses([o for o in store.list(conn, "ModelService")
                                    if person.can_see(o["metadata"]["namespace"])], conn)
        run_rows = [r for r in store.list_runs(conn, 50) if portal.sessions.visible_stack(person, r["stack"])]
        held = portal.reads.held_back(conn) if person.admin else []  # they may name any team's objects
        capacity = CAPACITY.text(conn)
        policies = team_policies(POLICIES.text(conn), person)
    pool_rows = pool_capacity(clusters, classes, plan, observed, capacity)
    totals = {"clusters": len(clusters), "pools": len(pool_rows), "used": sum(p["used"] for p in pool_rows),
              "total": sum(p["total"] for p in pool_rows), "deployments": len(visible),
              "unprovisioned": len({p["cluster"] for p in pool_rows if not p["provisioned"]})}
    return HTMLResponse(templates.get_template("fleet.html").render(
        who=person, pools=Paged(pool_rows, pools, "pools", {"page": rows.number}), deployments=deployments,
        deployment_pages=rows, services=services, runs=run_rows, message=shown, gateway=gateway,
        totals=totals, csrf=who.csrf or "", held=held[:20], policies=policies, manifest=manifest, server=server),
        status_code=status_code)


def team_policies(text: str, person: Principal) -> dict:
    """Each budget of the TeamPolicy of every namespace the caller sees, with its use by the last full plan, and
    each visible namespace's residency (the plan's `policies`, as `plan -o json` has them: fleet/policy_preview.py)."""
    from fleet.policy_preview import policy_rows, residency_text

    document = json.loads(text) if text else {}
    return {"budgets": [r for r in policy_rows(document) if person.can_see(r.namespace)],
            "residency": [(e["namespace"], residency_text(e)) for e in document.get("residency") or []
                          if person.can_see(e["namespace"])]}


@router.post("/ui/signin")
async def signin(request: Request, portal: Objects, token: str = Form(..., max_length=4096),
           csrf: str = Form(..., max_length=100)) -> RedirectResponse:
    expected = request.cookies.get(SIGNIN_COOKIE, "")
    if not expected or not hmac.compare_digest(csrf.encode(), expected.encode()):
        raise ApiError(403, "Forbidden", "the sign-in form's CSRF token does not match; reload the page")
    if await run_in_threadpool(portal.tokens.resolve, token) is None:  # it may reload the tokens file
        return RedirectResponse("/?message=bad-token", status_code=303)
    session_id = await queued(portal, _new_session, portal, digest(token))
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(COOKIE, session_id, **cookie_options(request))
    response.delete_cookie(SIGNIN_COOKIE, path="/")
    return response


@router.post("/ui/signout")
async def signout(request: Request, who: SignedIn, portal: Objects, csrf: str = Form("", max_length=100)) -> RedirectResponse:
    checked_form(who, csrf)
    session_id = request.cookies.get(COOKIE)
    if session_id:  # the cookie's id stops working, even if it was copied
        await queued(portal, _end_session, portal, session_id)
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


@router.post("/ui/apply")
async def ui_apply(request: Request, who: SignedIn, portal: Objects, manifest: str = Form(...),
                   csrf: str = Form("", max_length=100)) -> Response:
    """One or more objects pasted (YAML documents, or a List): each checked as its PUT checks it before any is
    written; on a refusal the page comes back with the text in the form, to fix."""
    person = checked_form(who, csrf).principal
    accepted: list[str] = []
    try:
        objects = await run_in_threadpool(_objects, manifest)  # parsing and validation are CPU work
        for kind, plural, namespace, name, _, _ in objects:
            if not person.can_write(namespace):
                raise ApiError(403, "Forbidden", f"{person.name} may not write {'in ' + namespace if namespace else plural}")
        for kind, _, namespace, name, raw, doc in objects:
            try:
                await queued(portal, portal.writes.put, kind, namespace, name, raw)
            except ApiError as exc:
                raise _located(exc, doc, kind, name) from None
            accepted.append(f"{kind} {name}")
    except ApiError as exc:
        message = exc.message + "".join(f"; {c.get('text') or c['message']}" for c in exc.causes[:5])
        if accepted:
            message = f"Accepted {', '.join(accepted)}; then refused: {message}"
        return await run_in_threadpool(_render, portal, who, Banner(message[:MAX_FLASH], bad=True), _server(request),
                                       1, 1, manifest, 422)
    return _back(who, f"Accepted {', '.join(accepted)}")


def _new_session(portal: Portal, token_sha256: str) -> str:
    with portal.store.write() as conn:
        return portal.store.create_session(conn, token_sha256)[0]


def _end_session(portal: Portal, session_id: str) -> None:
    with portal.store.write() as conn:
        portal.store.delete_session(conn, session_id)


MAX_PASTED = 50  # objects one paste may hold


def _located(exc: ApiError, doc: Document, kind: str, name: str) -> ApiError:
    """The refusal of one pasted object, each problem named once at its line of the paste. The checks read the
    object's own text (`request:N`, its lines, not the paste's); shown beside the paste's locator, that was two
    places for one problem."""
    if not exc.causes:
        return ApiError(exc.code, exc.reason, f"manifest:{doc.line}: {kind} {name}: {exc.message}")
    shown = [str(Problem("manifest", doc.line_of(_path(c.get("field") or "")), f"{kind}/{name}", c.get("field") or "",
                         c.get("message") or "")) for c in exc.causes[:5]]
    more = f" (and {len(exc.causes) - 5} more)" if len(exc.causes) > 5 else ""
    return ApiError(exc.code, exc.reason, "; ".join(shown) + more)


def _path(field: str) -> tuple[str | int, ...]:
    """'spec.engines[0].name' -> ('spec', 'engines', 0, 'name'): a cause's field as a document's lines are keyed."""
    return tuple(int(part[1:-1]) if part.startswith("[") else part for part in re.findall(r"\[\d+\]|[^.\[\]]+", field))


def _objects(manifest: str) -> list[tuple[str, str, str | None, str, bytes, Document]]:
    """(kind, plural, namespace, name, its own text, its document in the paste) of every object pasted, each
    validated as its PUT would be."""
    import yaml

    from automation.portal.service import parse_body
    from fleet.loader import parse_text

    documents, problems = parse_text(manifest, "manifest")
    if problems:
        raise ApiError(400, "BadRequest", str(problems[0]))
    found = [d for d in documents if d.data is not None]
    if not found:
        raise ApiError(400, "BadRequest", "paste one or more objects (YAML mappings)")
    if len(found) > MAX_PASTED:
        raise ApiError(400, "BadRequest", f"{len(found)} objects pasted; at most {MAX_PASTED} at once")
    out = []
    for doc in found:
        data = doc.data
        if not isinstance(data, dict):
            raise ApiError(400, "BadRequest", f"manifest:{doc.line}: not an object (a YAML mapping)")
        kind = data.get("kind")
        plural = next((p for p, (k, _) in PLURALS.items() if k == kind), None)
        if plural is None:
            raise ApiError(400, "BadRequest", f"manifest:{doc.line}: unknown kind {str(kind)[:80]!r}")
        meta: dict = data["metadata"] if isinstance(data.get("metadata"), dict) else {}
        namespace = str(meta.get("namespace") or "default") if PLURALS[plural][1] else None
        name = str(meta.get("name") or "")
        raw = yaml.safe_dump(data, sort_keys=False).encode()
        try:
            parse_body(raw, str(kind), namespace, name)
        except ApiError as exc:
            raise _located(exc, doc, str(kind), name) from None
        out.append((str(kind), plural, namespace, name, raw, doc))
    return out


@router.post("/ui/delete")
async def ui_delete(who: SignedIn, portal: Objects, kind: str = Form(..., max_length=64),
              namespace: str = Form(..., max_length=63), name: str = Form(..., max_length=253),
              csrf: str = Form("", max_length=100), confirm: str = Form("", max_length=253)) -> RedirectResponse:
    person = checked_form(who, csrf).principal
    try:
        if confirm != name:  # the page asks for the name typed again: a click alone deletes nothing
            raise ApiError(400, "BadRequest", f"type the name {name!r} to confirm deleting {kind} {namespace}/{name}")
        if kind not in ("ModelDeployment", "ModelService") or not person.can_write(namespace):
            raise ApiError(403, "Forbidden", f"{person.name} may not delete {kind} {namespace}/{name}")
        await queued(portal, portal.writes.delete, kind, namespace, name)
        message, bad = f"Deleted {kind} {namespace}/{name}", False
    except ApiError as exc:
        message, bad = exc.message, True
    return _back(who, message, bad)


@router.post("/ui/scale")
async def ui_scale(who: SignedIn, portal: Objects, namespace: str = Form(..., max_length=63),
                   name: str = Form(..., max_length=253), replicas: int = Form(..., ge=0, le=10),
                   csrf: str = Form("", max_length=100)) -> RedirectResponse:
    """The page's replicas field: what `kubectl scale` does (the scale subresource's write)."""
    person = checked_form(who, csrf).principal
    try:
        if not person.can_write(namespace):
            raise ApiError(403, "Forbidden", f"{person.name} may not write in {namespace}")
        await queued(portal, portal.writes.scale, namespace, name, replicas, None)
        message, bad = f"Scaled ModelDeployment {namespace}/{name} to {replicas} replica(s)", False
    except ApiError as exc:
        message, bad = exc.message, True
    return _back(who, message, bad)


class Paged:
    """One page of a table's rows (1-based; out of range is the nearest page) and the links to its neighbours,
    keeping the other tables' pages (`others`: query parameter -> page)."""

    def __init__(self, rows: list, number: int, parameter: str, others: dict[str, int]):
        self.count = max(1, -(-len(rows) // PAGE_SIZE))
        self.number = min(max(1, number), self.count)
        self.items = rows[(self.number - 1) * PAGE_SIZE: self.number * PAGE_SIZE]
        self.first = (self.number - 1) * PAGE_SIZE + 1 if rows else 0
        self.last = (self.number - 1) * PAGE_SIZE + len(self.items)
        self.total = len(rows)
        self._parameter, self._others = parameter, others

    def __iter__(self) -> Iterator[dict]:
        return iter(self.items)

    def link(self, number: int) -> str | None:
        if not 1 <= number <= self.count or number == self.number:
            return None
        return "/?" + urlencode({**self._others, self._parameter: number})


def pool_capacity(clusters: list[dict], classes: list[dict], plan: dict,
                  observed: conditions.Observed | None = None, capacity: str = "") -> list[dict]:
    """Per pool: claimable devices in total and claimed by placed replicas, as the scheduler counts them
    (`fleet.inventory`: a cluster's published `status.gpuPools` win over its declared node pools), and whether
    its cluster is provisioned (its platform stack applied): a cluster that never was offers nothing yet.
    `capacity`: the clusters' live capacity as last read (`serve --capacity`): then each row also says where its
    free devices come from (`live`: "live, read <time>", else why declared), what is free now and what others hold."""
    from fleet.stack_id import StackId

    applied = observed.applied if observed is not None else {}
    used: dict[tuple[str, str], int] = {}
    for r in plan.get("replicas", []):
        for e in r["engines"]:
            for m in e["members"]:
                key = (r["cluster"], m["pool"])
                used[key] = used.get(key, 0) + m["nodes"] * sum(m["devices"].values())
    objects = [KINDS[body["kind"]][0].model_validate(body) for body in clusters + classes]
    live: dict[tuple[str, str], dict] = {}
    if capacity:
        from fleet.capacity import LiveCapacity
        from fleet.live_capacity import capacity_rows, capacity_to_dict

        for r in capacity_rows(capacity_to_dict(Fleet(objects=objects), LiveCapacity.from_json(capacity))):
            live[r.cluster, r.pool] = {"source": r.source, "liveFree": r.free_total, "heldByOthers": r.others_total,
                                       "notCounted": "" if r.not_counted == "-" else r.not_counted}
    rows = []
    for cluster in build_clusters(Fleet(objects=objects)):
        for pool in cluster.pools:
            total = pool.nodes * sum(d.count for d in pool.kind.devices if d.claimable)
            claimed = used.get((cluster.name, pool.name), 0)
            provisioned = str(StackId.platform(cluster.name)) in applied
            rows.append({"cluster": cluster.name, "pool": pool.name, "nodes": pool.nodes, "total": total,
                         "used": claimed, "free": total - claimed, "provisioned": provisioned,
                         "state": "provisioned" if provisioned else "not provisioned yet",
                         **live.get((cluster.name, pool.name), {})})
    return rows
