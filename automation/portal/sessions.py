"""Who is asking: a bearer token, or a sign-in session (server-side: the cookie holds a random id, never the
token, and revoking the token ends its sessions); and which stacks they may see."""

from __future__ import annotations

from starlette.datastructures import Headers

from automation.portal.auth import Principal, Tokens, TokensFile
from automation.portal.guard import Caller
from automation.portal.store import Store
from fleet.stack_id import StackId, StackIdError

COOKIE = "modelplane_session"  # a random session id; the token itself never leaves the sign-in form


def stack_namespace(stack: str) -> str | None:
    """The namespace a stack belongs to, parsed from its identity (None: platform, gateway, legacy names: admins')."""
    try:
        return StackId.parse(stack).namespace
    except StackIdError:
        return None


class Sessions:
    def __init__(self, store: Store, tokens: Tokens | TokensFile) -> None:
        self.store, self.tokens = store, tokens

    def authenticate(self, headers: Headers, cookies: dict[str, str]) -> Caller | None:
        header = headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            who = self.tokens.resolve(header[7:].strip())
            return Caller(who, "bearer") if who else None
        session_id = cookies.get(COOKIE)
        if not session_id or len(session_id) > 100:
            return None
        with self.store.read() as conn:
            session = self.store.get_session(conn, session_id)
        who = self.tokens.by_digest(session["token_sha256"]) if session else None  # a revoked token ends its sessions
        return Caller(who, "session", session["csrf"]) if who and session else None

    def visible_stack(self, who: Principal, stack: str) -> bool:
        if who.admin:
            return True
        namespace = stack_namespace(stack)
        return namespace is not None and who.can_see(namespace)

