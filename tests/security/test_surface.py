"""Small findings: no third-party script behind /docs, no attacker-chosen text on the page, one name per token."""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator

import httpx
import pytest
import yaml

from automation.portal.auth import Tokens, TokensFileError
from tests.manifests import deployment
from tests.portal_server import ADMIN, TEAM_A, TEAM_B, ThreadServer
from tests.test_portal import form_token, seed_fleet

ATTACK = "Your token has expired: sign in again at https://evil.example"


@pytest.fixture
def portal(tmp_path):
    with ThreadServer(tmp_path) as server:
        yield server


# ---- /docs: FastAPI's Swagger UI and ReDoc load scripts from a CDN ---------------------------------------------

@pytest.mark.parametrize("path", ["/docs", "/redoc", "/docs/oauth2-redirect"])
def test_no_interactive_docs_that_load_third_party_scripts(portal, path):
    with portal.client(None) as anyone:
        response = anyone.get(path)
    assert response.status_code == 404 and response.json()["kind"] == "Status", response.text
    assert "cdn" not in response.text.lower() and "<script" not in response.text


def test_the_api_is_described_by_openapi_json_and_the_docs_path_says_so(portal):
    with portal.client(None) as anyone:
        assert anyone.get("/openapi.json").json()["info"]["title"] == "modelplane portal"
        assert "/openapi.json" in anyone.get("/docs").json()["message"]


def test_no_page_of_the_portal_loads_a_script(portal):
    seed_fleet(portal)
    with portal.client(None) as anyone:
        pages = [anyone.get("/").text]
    with portal.client(ADMIN) as admin:
        pages.append(admin.get("/").text)
    for html in pages:
        assert "<script" not in html.lower()
        assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing from another host


# ---- the page's banner: only what the server chose ------------------------------------------------------------

@contextmanager
def signed_in(server: ThreadServer, token: str) -> Iterator[httpx.Client]:
    """A browser's session: signed in on the page, holding its cookie."""
    with server.client(None) as browser:
        browser.headers["Origin"] = server.url
        signin = browser.get("/")
        assert browser.post("/ui/signin", data={"token": token, "csrf": form_token(signin.text)}).status_code == 303
        yield browser


def test_query_text_is_never_shown_as_a_banner(portal):
    with portal.client(None) as anyone:
        assert ATTACK not in anyone.get("/", params={"message": ATTACK}).text
        assert ATTACK not in anyone.get("/", params={"flash": ATTACK, "sig": "0" * 64}).text
        assert "That token is not valid" in anyone.get("/", params={"message": "bad-token"}).text  # a fixed notice
    with portal.client(TEAM_A) as script:
        assert ATTACK not in script.get("/", params={"message": ATTACK}).text
    with signed_in(portal, TEAM_A) as browser:
        for params in ({"message": ATTACK}, {"flash": ATTACK}, {"flash": ATTACK, "sig": "0" * 64}):
            assert ATTACK not in browser.get("/", params=params).text
        assert "That token is not valid" not in browser.get("/", params={"message": "bad-token"}).text


def test_a_form_s_outcome_is_shown_to_the_session_that_sent_it_and_to_no_other(portal):
    seed_fleet(portal)
    with signed_in(portal, TEAM_A) as browser, signed_in(portal, TEAM_B) as other:
        csrf = form_token(browser.get("/").text)
        sent = browser.post("/ui/apply", data={"manifest": yaml.safe_dump(deployment("web", namespace="team-a")),
                                               "csrf": csrf})
        assert sent.status_code == 303
        back = sent.headers["location"]
        assert "Accepted ModelDeployment web" in browser.get(back).text
        assert "Accepted ModelDeployment web" not in other.get(back).text  # a link made by one session shows nothing
        with portal.client(None) as anyone:
            assert "Accepted ModelDeployment web" not in anyone.get(back).text


# ---- the tokens file: one name per entry ------------------------------------------------------------------------

DUPLICATE_NAMES = [{"name": "ops", "token": "ops-token-00000001", "admin": True},
                   {"name": "ci", "token": "ci-token-000000001"},
                   {"name": "ops", "token": "ops-token-00000002", "namespaces": ["team-a"]}]


def test_a_duplicate_name_in_the_tokens_file_is_refused_naming_the_file_and_the_name(tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump(DUPLICATE_NAMES))
    with pytest.raises(TokensFileError) as caught:
        Tokens.load(path)
    assert str(caught.value) == (f"{path}: entry 2 (ops): the name 'ops' is taken by entry 0; names must be unique")
    assert "ops-token" not in str(caught.value)
