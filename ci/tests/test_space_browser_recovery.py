"""A real browser (headless Chromium via selenium, as test_space_browser.py) drives the UI through the cases that
used to leave it stuck or stale: an error in Chat, then a follow-up message that gets a reply; an empty chat
message, not sent; a validation error after a decision, with no old answer left; an example loaded after a
decision, with no old answer left. Screenshots of each in ci/artifacts/space-ui-*.png.

ci/browser-setup.sh installs chromium, chromium-driver (apt) and selenium when they are missing."""

from __future__ import annotations

import sys

import pytest

from helpers import ARTIFACTS, ROOT, running

CONTEXT = 256  # a small context window, so a long chat message is refused


@pytest.fixture(scope="module")
def space(demo_root):
    env = {"BLINK_MODEL": "demo", "BLINK_UI_CHAT_MAX_TOKENS": "4", "BLINK_MAX_CONTEXT_TOKENS": str(CONTEXT)}
    with running([sys.executable, str(ROOT / "app.py")], demo_root, env=env, name="space-browser-recovery") as url:
        yield url


def shot(browser, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"space-ui-{name}.png"
    browser.save_screenshot(str(path))
    assert path.stat().st_size > 10_000


def bars(browser) -> list:
    from selenium.webdriver.common.by import By

    return browser.find_elements(By.CSS_SELECTOR, "#blink-results .blink-bar")


def d_notes(browser) -> list:
    from selenium.webdriver.common.by import By

    return browser.find_elements(By.ID, "blink-state-note")


def decide_an_example(browser, wait, example: str = "example-ticket") -> None:
    from selenium.webdriver.common.by import By

    wait.until(lambda d: d.find_element(By.ID, example)).click()
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#blink-state textarea").get_attribute("value"))
    browser.find_element(By.ID, "blink-decide").click()
    wait.until(lambda d: len(bars(d)) >= 2)


def test_decide_leaves_no_stale_answers(space, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 90)
    browser.get(space + "/")
    # a fresh page tells nothing (nothing done yet); emptying the box says so beside it; an example's state takes the
    # note away
    assert not any("The state is empty" in e.text for e in d_notes(browser))
    state = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#blink-state textarea"))
    state.send_keys("x")
    state.send_keys(Keys.BACKSPACE)
    wait.until(lambda d: any("The state is empty" in e.text for e in d_notes(d)))
    decide_an_example(browser, wait)
    wait.until(lambda d: not any("The state is empty" in e.text for e in d.find_elements(By.ID, "blink-state-note")))
    summary = browser.find_element(By.ID, "blink-results").text
    assert "confidence" in summary and "Charges, refunds and invoices" in summary  # descriptions beside the bars
    caveat = browser.find_element(By.ID, "blink-caveat").text
    assert "calibrated" not in caveat.replace("no calibration", "") and "no calibration" in caveat
    shot(browser, "answered-with-descriptions")

    # a validation error after a decision: the refusal next to its box, and no old answer left
    options = browser.find_element(By.CSS_SELECTOR, "#q0-options textarea")
    options.send_keys(Keys.CONTROL, "a")
    options.send_keys("billing\nbilling\nshipping")
    browser.find_element(By.ID, "blink-decide").click()
    wait.until(lambda d: "listed more than once" in d.find_element(By.ID, "q0-options").text)
    wait.until(lambda d: not bars(d))
    assert "probabilities" not in browser.find_element(By.ID, "blink-raw").text
    shot(browser, "refused-no-stale-answers")

    # empty instructions after a decision: refused next to their box, and no old answer left
    options.send_keys(Keys.CONTROL, "a")
    options.send_keys("billing\nshipping")
    decide_an_example(browser, wait)
    instructions = browser.find_element(By.CSS_SELECTOR, "#q0-instructions textarea, #q0-instructions input")
    instructions.send_keys(Keys.CONTROL, "a")
    instructions.send_keys(Keys.DELETE)
    browser.find_element(By.ID, "blink-decide").click()
    wait.until(lambda d: "Write the question" in d.find_element(By.ID, "q0-instructions").text)
    wait.until(lambda d: not bars(d))
    shot(browser, "refused-empty-instructions")

    # an example loaded after a decision: the new form, and no old answer left
    decide_an_example(browser, wait, "example-ticket")
    wait.until(lambda d: d.find_element(By.ID, "example-sentiment")).click()
    wait.until(
        lambda d: "Trail running" in d.find_element(By.CSS_SELECTOR, "#blink-state textarea").get_attribute("value")
    )
    wait.until(lambda d: not bars(d))
    shot(browser, "example-loaded-no-stale-answers")

    # the score summary counts levels from 0, as the raw response beside it does; the caption gives the formula
    browser.find_element(By.ID, "blink-decide").click()
    wait.until(lambda d: len(bars(d)) == 5)
    summary = browser.find_element(By.ID, "blink-results").text
    assert "on a scale of 0 (Very negative) to 4 (Very positive)" in summary and "of 1" not in summary
    assert "Confidence (score): 1 when" in summary and "Σ" not in summary  # words first
    browser.find_element(By.CSS_SELECTOR, "#blink-results .blink-how summary").click()  # the formula one click away
    summary = browser.find_element(By.ID, "blink-results").text
    assert "Confidence (score) = 1 − Σ" in summary and "entropy" not in summary
    shot(browser, "score-zero-based")

    # at a phone's width the question's Type menu fits the screen (it wraps under the id rather than being cut off)
    browser.set_window_size(390, 844)
    try:
        wait.until(lambda d: d.execute_script("return window.innerWidth") <= 400)
        right = browser.execute_script(
            "return document.querySelector('#q0-type').getBoundingClientRect().right <= window.innerWidth"
        )
        shot(browser, "phone-width")
        assert right, "the Type menu runs past a phone-width screen"
    finally:
        browser.set_window_size(1400, 1800)  # the size headless_chromium opens with


def test_chat_recovers_from_an_error_and_sends_no_empty_message(space, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 90)
    browser.get(space + "/")
    wait.until(lambda d: d.find_element(By.XPATH, "//button[@role='tab' and contains(., 'Chat')]")).click()

    def box():
        boxes = [b for b in browser.find_elements(By.CSS_SELECTOR, "textarea") if b.is_displayed()]
        placeholder = [b for b in boxes if "message" in (b.get_attribute("placeholder") or "").lower()]
        return (placeholder or boxes)[-1]

    def bubbles(role: str) -> list:
        return [b.text for b in browser.find_elements(By.CSS_SELECTOR, f".message-row.{role}-row, .{role}-row")]

    wait.until(lambda d: box().is_enabled())
    # an empty message is not sent
    box().send_keys(Keys.ENTER)
    wait.until(lambda d: "Write a message first" in d.find_element(By.TAG_NAME, "body").text)
    assert not bubbles("user")
    shot(browser, "chat-empty-not-sent")

    # a message past the context window: refused as a reply, and the input comes back
    box().send_keys("word " * (CONTEXT * 4))
    box().send_keys(Keys.ENTER)
    wait.until(lambda d: any("Not answered" in b for b in bubbles("bot")))
    text = " ".join(bubbles("bot"))
    assert "too long for the model's context window" in text and "message 0" not in text
    wait.until(lambda d: box().is_enabled() and box().get_attribute("value") == "")
    shot(browser, "chat-refused")

    # a follow-up message gets a reply
    box().send_keys("Hello there")
    box().send_keys(Keys.ENTER)
    wait.until(lambda d: len(bubbles("bot")) >= 2 and "Not answered" not in bubbles("bot")[-1] and bubbles("bot")[-1])
    wait.until(lambda d: box().is_enabled())
    shot(browser, "chat-recovered")
