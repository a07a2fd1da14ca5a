"""A real browser drives the Space's UI: headless Chromium (Debian's chromium + chromium-driver, via selenium)
loads an example in one click, clicks Decide and finds a probability bar for every option. A screenshot of
the answered page is saved to ci/artifacts/space-ui-answered.png (with bias removal chosen in the Calibration menu:
space-ui-prior.png).

ci/browser-setup.sh installs chromium, chromium-driver (apt) and selenium when they are missing."""

from __future__ import annotations

import sys

import pytest

from helpers import ARTIFACTS, ROOT, running

pytestmark = [pytest.mark.e2e, pytest.mark.space, pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def space(demo_root):
    env = {"BLINK_MODEL": "demo", "BLINK_UI_CHAT_MAX_TOKENS": "6"}
    with running([sys.executable, str(ROOT / "app.py")], demo_root, env=env, name="space-browser") as url:
        yield url


def test_decide_in_a_real_browser(space, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 60)
    browser.get(space + "/")
    # one click loads the ticket-routing example: state and questions filled in
    wait.until(EC.element_to_be_clickable((By.ID, "example-ticket"))).click()
    wait.until(
        lambda d: "charged twice" in d.find_element(By.CSS_SELECTOR, "#blink-state textarea").get_attribute("value")
    )
    browser.find_element(By.ID, "blink-decide").click()
    bars = wait.until(
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, "#blink-results .blink-bar")
            if len(d.find_elements(By.CSS_SELECTOR, "#blink-results .blink-bar")) >= 6
            else False
        )
    )
    by_question: dict[str, dict[str, float]] = {}
    for question in browser.find_elements(By.CSS_SELECTOR, "#blink-results .blink-question"):
        qid = question.get_attribute("data-question")
        by_question[qid] = {
            bar.get_attribute("data-option"): float(bar.get_attribute("data-p"))
            for bar in question.find_elements(By.CSS_SELECTOR, ".blink-bar")
        }
    assert set(by_question) == {"team", "urgent"}
    assert set(by_question["team"]) == {"billing", "shipping", "returns", "technical"}
    assert set(by_question["urgent"]) == {"yes", "no"}
    for probs in by_question.values():
        assert all(0.0 <= p <= 1.0 for p in probs.values()) and abs(sum(probs.values()) - 1.0) < 1e-3
    assert len(bars) == 6
    # the raw JSON response and the caveat are on the page with the answers
    page = browser.find_element(By.TAG_NAME, "body").text
    assert "probabilities" in page
    import space_config

    assert space_config.CAVEAT[:40] in page
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "space-ui-answered.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000

    # the Calibration menu: choosing bias removal clears the answers got otherwise and the caveat says what it does;
    # the next decision sends it (the raw response says the prior was applied)
    browser.find_element(By.CSS_SELECTOR, "#blink-calibration input").click()
    wait.until(
        EC.element_to_be_clickable((By.CSS_SELECTOR, '[data-testid="dropdown-option"][aria-label="Bias removal"]'))
    ).click()
    wait.until(lambda d: "lean towards some options" in d.find_element(By.ID, "blink-caveat").text)
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, "#blink-results .blink-bar"))
    browser.find_element(By.ID, "blink-decide").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#blink-results .blink-bar")) == 6)
    wait.until(lambda d: '"prior"' in d.find_element(By.ID, "blink-raw").text)  # x_calibration.prior
    shot = ARTIFACTS / "space-ui-prior.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000

    # the demo model is announced; a bad form is refused before any request, the message next to its box
    assert "random weights" in browser.find_element(By.ID, "blink-demo-banner").text
    from selenium.webdriver.common.keys import Keys

    options = browser.find_element(By.CSS_SELECTOR, "#q0-options textarea")
    options.send_keys(Keys.CONTROL, "a")
    options.send_keys("billing\nbilling\nshipping")
    browser.find_element(By.ID, "blink-decide").click()
    wait.until(lambda d: "listed more than once" in d.find_element(By.ID, "q0-options").text)
    shot = ARTIFACTS / "space-ui-refused.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000


def test_rank_and_moderate_in_a_real_browser(space, browser):
    """The Rank and Moderate tabs: one click loads an example, the button draws the bars (a document per bar in
    the answer's order; a category per bar, its threshold a line across it). Screenshots: space-ui-rank.png,
    space-ui-moderate.png."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 60)
    browser.get(space + "/")
    wait.until(lambda d: d.find_element(By.XPATH, "//button[@role='tab' and contains(., 'Rank')]")).click()
    wait.until(EC.element_to_be_clickable((By.ID, "rank-example-late"))).click()
    wait.until(lambda d: "late" in d.find_element(By.CSS_SELECTOR, "#rank-query textarea").get_attribute("value"))
    browser.find_element(By.ID, "rank-button").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#rank-results .blink-bar")) == 4)
    scores = [
        float(b.get_attribute("data-p")) for b in browser.find_elements(By.CSS_SELECTOR, "#rank-results .blink-bar")
    ]
    assert scores == sorted(scores, reverse=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "space-ui-rank.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000

    browser.find_element(By.XPATH, "//button[@role='tab' and contains(., 'Moderate')]").click()
    wait.until(EC.element_to_be_clickable((By.ID, "moderate-example-forum"))).click()
    wait.until(lambda d: "idiot" in d.find_element(By.CSS_SELECTOR, "#moderate-text textarea").get_attribute("value"))
    browser.find_element(By.ID, "moderate-button").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#moderate-results .blink-bar")) == 13)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#moderate-results .blink-mark")) == 13
    assert "flagged" in browser.find_element(By.ID, "moderate-verdict").text
    shot = ARTIFACTS / "space-ui-moderate.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
