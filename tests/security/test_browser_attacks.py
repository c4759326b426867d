"""Finding 4: cross-site safety of the page. Sessions are server-side, every form carries a CSRF token, unsafe
requests from another origin (another port of the same host included) are refused, and the security headers
are on every response. The cross-site attack runs in a real browser."""

from __future__ import annotations

import asyncio
import http.server
import re
import threading
import time

import httpx
import pytest
import yaml
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait

from automation.portal.app import create_app
from automation.portal.sessions import COOKIE
from automation.portal.auth import TokensFile
from automation.portal.guard import SignInLimiter
from automation.portal.store import Store
from tests.manifests import deployment
from tests.portal_server import ADMIN, API, TEAM_A, TEAM_B, ThreadServer, free_port, write_tokens
from tests.test_portal import seed_fleet
from tests.test_portal_browser import browser  # noqa: F401  (the headless Chromium fixture)

OBJ = API + "/namespaces/team-a/modeldeployments/{name}"


def form_token(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def signed_in(portal, token=TEAM_A):
    """An httpx client that signed in through the page, as a browser does (its Origin on every post)."""
    client = portal.client(None)
    client.headers["Origin"] = portal.url
    page = client.get("/")
    response = client.post("/ui/signin", data={"token": token, "csrf": form_token(page.text)})
    assert response.status_code == 303
    return client


@pytest.fixture
def portal(tmp_path):
    with ThreadServer(tmp_path) as server:
        seed_fleet(server)
        yield server


def stored(portal, name: str) -> bool:
    with portal.client(ADMIN) as admin:
        return admin.get(OBJ.format(name=name)).status_code == 200


def test_the_cookie_holds_a_session_id_with_strict_flags_and_never_the_token(portal):
    client = signed_in(portal)
    cookie = client.cookies.get(COOKIE)
    assert cookie and TEAM_A not in cookie and len(cookie) >= 40
    with portal.store.read() as conn:  # the database holds only the session id's hash
        assert portal.store.get_session(conn, cookie) is not None
        rows = conn.exec_driver_sql("SELECT id_sha256, token_sha256 FROM sessions").fetchall()
    assert all(cookie not in row[0] and TEAM_A not in row[1] for row in rows)


def test_a_form_post_without_or_with_another_sessions_csrf_token_is_refused(portal):
    manifest = yaml.safe_dump(deployment("w1", namespace="team-a"))
    alice, mallory = signed_in(portal), signed_in(portal, TEAM_B)
    foreign = form_token(mallory.get("/").text)
    for data in ({"manifest": manifest}, {"manifest": manifest, "csrf": foreign}, {"manifest": manifest, "csrf": ""}):
        response = alice.post("/ui/apply", data=data)
        assert response.status_code == 403 and response.json()["reason"] == "Forbidden"
    assert not stored(portal, "w1")
    ok = alice.post("/ui/apply", data={"manifest": manifest, "csrf": form_token(alice.get("/").text)})
    assert ok.status_code == 303 and stored(portal, "w1")


@pytest.mark.parametrize("headers", [
    {"Origin": "http://127.0.0.1:1"},  # another port of the same host: same site, another origin
    {"Origin": "null"},
    {"Referer": "http://evil.example/page"},
    {},  # a signed-in write that names no origin at all
], ids=["other-port", "null-origin", "foreign-referer", "no-origin"])
def test_unsafe_requests_from_another_origin_are_refused_before_anything_else(portal, headers):
    client = signed_in(portal)
    csrf = form_token(client.get("/").text)
    del client.headers["Origin"]
    response = client.post("/ui/apply", data={"manifest": yaml.safe_dump(deployment("w2", namespace="team-a")),
                                              "csrf": csrf}, headers=headers)
    assert response.status_code == 403 and response.json()["kind"] == "Status"
    assert not stored(portal, "w2")


def test_a_script_with_a_bearer_token_needs_no_origin_but_a_foreign_origin_is_still_refused(portal):
    with portal.client(TEAM_A) as script:
        assert script.put(OBJ.format(name="w3"), json=deployment("w3", namespace="team-a")).status_code == 201
        refused = script.put(OBJ.format(name="w4"), json=deployment("w4", namespace="team-a"),
                             headers={"Origin": "http://127.0.0.1:1"})
    assert refused.status_code == 403


def test_the_sign_in_form_has_its_own_csrf_token_against_login_csrf(portal):
    with portal.client(None) as client:
        client.headers["Origin"] = portal.url
        for data in ({"token": TEAM_A}, {"token": TEAM_A, "csrf": "forged"}):
            response = client.post("/ui/signin", data=data)
            assert response.status_code in (403, 422) and response.json()["kind"] == "Status"
        assert COOKIE not in client.cookies


def test_signing_out_revokes_the_session_even_for_a_copied_cookie(portal):
    client = signed_in(portal)
    copied = client.cookies.get(COOKIE)
    assert client.post("/ui/signout", data={"csrf": form_token(client.get("/").text)}).status_code == 303
    with portal.client(None) as thief:
        thief.cookies.set(COOKIE, copied)
        assert "Sign in" in thief.get("/").text
        assert thief.get("/plan").status_code == 401


def test_revoking_a_token_ends_its_browser_sessions(portal):
    client = signed_in(portal)
    assert client.get("/plan").status_code == 200
    portal.tokens_path.write_text(yaml.safe_dump([{"name": "platform", "token": ADMIN, "admin": True}]))
    time.sleep(1.2)
    assert client.get("/plan").status_code == 401


@pytest.mark.parametrize("path", ["/", "/plan", "/no/such/route", OBJ.format(name="none")])
def test_security_headers_are_on_every_response(portal, path):
    with portal.client(TEAM_A) as client:
        response = client.get(path)
    policy = response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "script-src" not in policy and "default-src 'none'" in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"


def test_the_session_cookie_is_secure_when_served_over_https(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    app = create_app(store, TokensFile(write_tokens(tmp_path)), apply=False)

    async def over_https():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://portal.example") as client:
            page = await client.get("/")
            assert "secure" in page.headers["set-cookie"].lower()
            return await client.post("/ui/signin", data={"token": TEAM_A, "csrf": form_token(page.text)},
                                     headers={"Origin": "https://portal.example"})

    loop = asyncio.new_event_loop()  # not asyncio.run(): it would unset the thread's loop other tests use
    try:
        response = loop.run_until_complete(over_https())
    finally:
        loop.close()
    assert response.status_code == 303
    cookie = response.headers["set-cookie"].lower()
    assert "secure" in cookie and "samesite=strict" in cookie and "httponly" in cookie


def test_sign_in_attempts_are_rate_limited_per_client(tmp_path):
    with ThreadServer(tmp_path, limiter=SignInLimiter(attempts=5, window=60)) as portal:
        with portal.client(None) as client:
            client.headers["Origin"] = portal.url
            codes = []
            for _ in range(7):
                token = form_token(client.get("/").text)
                codes.append(client.post("/ui/signin", data={"token": "guess-000000000001", "csrf": token}))
        assert [r.status_code for r in codes] == [303] * 5 + [429] * 2
        assert int(codes[-1].headers["Retry-After"]) >= 1 and codes[-1].json()["reason"] == "TooManyRequests"


def test_the_limiter_forgets_after_its_window():
    now = [0.0]
    limiter = SignInLimiter(attempts=2, window=10, clock=lambda: now[0])
    assert [limiter.retry_after("a") for _ in range(3)] == [0, 0, 10]
    assert limiter.retry_after("b") == 0  # per client
    now[0] = 10.5
    assert limiter.retry_after("a") == 0


class _AttackerPage(http.server.BaseHTTPRequestHandler):
    target = ""

    def do_GET(self):
        manifest = yaml.safe_dump(deployment("stolen", namespace="team-a")).replace('"', "&quot;")
        page = (f'<html><body><form id="f" method="post" action="{self.target}/ui/apply">'
                f'<input type="hidden" name="manifest" value="{manifest}"></form>'
                '<script>document.getElementById("f").submit()</script></body></html>').encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args):
        pass


def test_a_page_on_another_port_cannot_submit_through_a_signed_in_browser(tmp_path, browser):  # noqa: F811
    with ThreadServer(tmp_path) as portal:
        seed_fleet(portal)
        wait = WebDriverWait(browser, 20)
        browser.get(portal.url + "/")
        browser.find_element(By.ID, "token").send_keys(TEAM_A)
        browser.find_element(By.ID, "signin").click()
        wait.until(ready.presence_of_element_located((By.ID, "fleet")))
        _AttackerPage.target = portal.url
        attacker = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _AttackerPage)
        threading.Thread(target=attacker.serve_forever, daemon=True).start()
        try:
            browser.get(f"http://127.0.0.1:{attacker.server_address[1]}/")
            wait.until(lambda b: "Forbidden" in b.page_source or "cross-origin" in b.page_source)
        finally:
            attacker.shutdown()
        assert "cross-origin request refused" in browser.page_source
        assert not stored(portal, "stolen")
        browser.get(portal.url + "/")  # the user is still signed in, and nothing was submitted in their name
        assert "team-a/stolen" not in browser.find_element(By.ID, "deployments").text
