"""The portal page in headless Chromium: sign in with a token, see the fleet, submit a deployment."""

import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait

from tests.manifests import deployment
from tests.portal_server import TEAM_A, ThreadServer
from tests.test_portal import seed_fleet


def message_says(text: str):
    """The wait for the page's message to say `text`: the page replaces the message's node as it answers, and
    chromedriver then reports the node it was reading as "does not belong to the document" (a generic error, not a
    stale element that the condition already retries): read again, as for a stale one."""
    present = ready.text_to_be_present_in_element((By.ID, "message"), text)

    def check(driver) -> bool:
        try:
            return bool(present(driver))
        except WebDriverException as exc:
            if "does not belong to the document" in str(exc):
                return False
            raise
    return check


FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1280,1600"]


@pytest.fixture
def browser():
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "install Debian's chromium and chromium-driver (make test does, as root)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="modelplane-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    session = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    try:
        yield session
    finally:
        session.quit()
        shutil.rmtree(profile, ignore_errors=True)


def test_sign_in_see_the_fleet_and_submit_a_deployment(tmp_path, browser):
    with ThreadServer(tmp_path) as portal:
        seed_fleet(portal, gpus=4)
        wait = WebDriverWait(browser, 20)
        browser.get(portal.url + "/")
        browser.find_element(By.ID, "token").send_keys(TEAM_A)
        browser.find_element(By.ID, "signin").click()
        wait.until(ready.presence_of_element_located((By.ID, "fleet")))
        fleet = browser.find_element(By.ID, "fleet").text
        assert "c1" in fleet and "0 / 4" in fleet
        browser.find_element(By.ID, "manifest").send_keys(yaml.safe_dump(deployment("chat", namespace="team-a", replicas=2)))
        browser.find_element(By.ID, "submit").click()
        wait.until(message_says("Accepted ModelDeployment chat"))
        rows = browser.find_element(By.ID, "deployments").text
        # ready / desired, as kubectl users read it (nothing is applied here: 0 ready), and the placed count
        assert "team-a/chat" in rows and "0 / 2 (2 placed)" in rows and "ReplicasReady: Unknown" in rows
        assert "2 / 4" in browser.find_element(By.ID, "fleet").text  # the GPUs it claims
        assert TEAM_A not in browser.page_source  # the token is never echoed
        shot = Path(tmp_path) / "portal.png"
        browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        shutil.copy(shot, Path(tempfile.gettempdir()) / "modelplane-portal.png")


@pytest.mark.parametrize("width", [420, 1000, 1400])
def test_the_page_fits_its_width_and_every_delete_is_reachable(tmp_path, browser, width):
    """Nothing makes the page scroll sideways (wide tables scroll in their own box), and each row's Delete button
    is inside its table's box, at phone, laptop and desktop widths."""
    with ThreadServer(tmp_path) as portal:
        seed_fleet(portal, gpus=4)
        browser.set_window_size(width, 1200)
        browser.get(portal.url + "/")
        browser.find_element(By.ID, "token").send_keys(TEAM_A)
        browser.find_element(By.ID, "signin").click()
        WebDriverWait(browser, 20).until(ready.presence_of_element_located((By.ID, "fleet")))
        long_name = "a-deployment-with-a-long-name-that-would-widen-a-table-" + "x" * 8
        browser.find_element(By.ID, "manifest").send_keys(yaml.safe_dump(deployment(long_name, namespace="team-a")))
        browser.find_element(By.ID, "submit").click()
        WebDriverWait(browser, 20).until(message_says("Accepted"))
        page, view = browser.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert page <= view, f"the page scrolls sideways at {width} px ({page} > {view})"
        button = browser.find_element(By.CSS_SELECTOR, "#deployments form.delete button")
        box = browser.execute_script("const b = arguments[0].getBoundingClientRect(), t = arguments[0].closest("
                                     "'.scroll').getBoundingClientRect(); return [b.left, b.right, t.left, t.right]",
                                     button)
        browser.execute_script("arguments[0].closest('.scroll').scrollLeft = 1e6", button)
        right = browser.execute_script("return arguments[0].getBoundingClientRect().right", button)
        assert box[0] >= box[2] - 1 and right <= box[3] + 1, (width, box, right)


WORDS_BROKEN = """
const broken = [];
for (const th of document.querySelectorAll(arguments[0] + ' th')) {
  const text = th.firstChild;
  if (!text || text.nodeType !== Node.TEXT_NODE) continue;
  for (const m of text.data.matchAll(/\\S+/g)) {  // a word laid out on more than one line was broken inside
    const range = document.createRange();
    range.setStart(text, m.index);
    range.setEnd(text, m.index + m[0].length);
    const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
    if (lines.size > 1) broken.push(m[0]);
  }
}
return broken;
"""


def signed_in_with(browser, portal, manifest: str, expected: str) -> None:
    browser.get(portal.url + "/")
    browser.find_element(By.ID, "token").send_keys(TEAM_A)
    browser.find_element(By.ID, "signin").click()
    WebDriverWait(browser, 20).until(ready.presence_of_element_located((By.ID, "fleet")))
    browser.find_element(By.ID, "manifest").send_keys(manifest)
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 20).until(message_says(expected))


def test_at_1280_px_no_table_header_breaks_inside_a_word(tmp_path, browser):
    """Issue 66: the Deployments table's headers broke mid-word at a laptop's 1280 px, squeezed by long rows."""
    with ThreadServer(tmp_path) as portal:
        seed_fleet(portal, gpus=4)
        browser.set_window_size(1280, 1000)
        long_name = "a-deployment-with-a-long-name-that-would-widen-a-table-" + "x" * 8
        signed_in_with(browser, portal, yaml.safe_dump(deployment(long_name, namespace="team-a", replicas=9)),
                       "Accepted")
        for table in ("#fleet", "#deployments", "#services", "#runs"):
            assert browser.execute_script(WORDS_BROKEN, table) == [], table
        page, view = browser.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert page <= view  # and the page still does not scroll sideways
        browser.save_screenshot(str(Path(tmp_path) / "portal-1280.png"))


def test_an_error_looks_like_an_error_and_a_success_does_not(tmp_path, browser):
    """Issue 66: a refusal and an acceptance were the same yellow box. Read as the browser paints them."""
    style = ("const s = getComputedStyle(document.getElementById('message')), b = getComputedStyle("
             "document.getElementById('message'), '::before'); return [s.backgroundColor, s.color, b.content]")
    with ThreadServer(tmp_path) as portal:
        seed_fleet(portal, gpus=4)
        signed_in_with(browser, portal, yaml.safe_dump(deployment("chat", namespace="team-a")), "Accepted")
        success = browser.execute_script(style)
        browser.find_element(By.ID, "manifest").clear()
        chat = deployment("chat", namespace="team-a")
        browser.find_element(By.ID, "manifest").send_keys(yaml.safe_dump({**chat, "spec": {**chat["spec"],
                                                                                           "replicas": "x"}}))
        browser.find_element(By.ID, "submit").click()
        WebDriverWait(browser, 20).until(message_says("spec.replicas"))
        error = browser.execute_script(style)
        shot = Path(tmp_path) / "portal-error.png"
        browser.save_screenshot(str(shot))

    def rgb(css: str) -> tuple[int, ...]:
        return tuple(int(float(v)) for v in css[css.index("(") + 1:css.index(")")].split(",")[:3])

    red, green, blue = rgb(error[1])
    assert red > 140 and green < 60 and blue < 60, error  # the text is red
    bg_red, bg_green, _ = rgb(error[0])
    assert bg_red > bg_green, error  # on a reddish ground
    assert error[0] != success[0] and error[1] != success[1], (error, success)
    assert "Error" in error[2] and "Error" not in success[2], (error, success)  # said in words too, not colour alone
    s_red, s_green, _ = rgb(success[0])
    assert s_green > s_red, success  # a success is green, not the yellow both used to share
