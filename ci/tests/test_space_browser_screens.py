"""The Space as people meet it, on a phone (390×844, a touch screen's viewport) and on a laptop (1280×800): headless
Chromium (selenium, as test_space_browser.py) with the window's size and kind emulated (Chrome's DevTools
`Emulation.setDeviceMetricsOverride`).

On both screens, every view: each probability bar of Decide, Rank and Moderate is as wide as its probability says (a
share of its track) and wider than nothing; after pressing a view's button its first answer row, or its error, is
inside the window and the button keeps the keyboard focus; Moderate's threshold lines stand out from the page in the
light and the dark theme; the chat's message box is inside the first screen of its tab; the page's status region
(what a screen reader hears) speaks words, not an untranslated key. On the phone every tab is
reached by a click, none hidden behind a menu or past the screen's edge.

A failing test leaves a screenshot of what the page showed in ci/artifacts/space-screen-<screen>-<view>.png."""

from __future__ import annotations

import sys

import pytest

from helpers import ROOT, running
from helpers.browser import SCREENS, in_view, open_page, open_tab, rect, screenshot_on_failure, visible_text

pytestmark = [pytest.mark.e2e, pytest.mark.space, pytest.mark.browser, pytest.mark.slow]

TABS = ["Decide", "Rank", "Moderate", "Sheet", "Chat", "API"]


@pytest.fixture(scope="module")
def space(demo_root):
    env = {"BLINK_MODEL": "demo", "BLINK_UI_CHAT_MAX_TOKENS": "4"}
    with running([sys.executable, str(ROOT / "app.py")], demo_root, env=env, name="space-browser-screens") as url:
        yield url


def check_bars(browser, results_id: str, count: int) -> list[float]:
    """Every bar in `results_id`: its fill is its probability's share of its track (within a pixel and the fill's
    2 px least width), the track is there to see, the fill wider than nothing. The probabilities, in order."""
    from selenium.webdriver.common.by import By

    bars = browser.find_elements(By.CSS_SELECTOR, f"#{results_id} .blink-bar")
    assert len(bars) == count
    shown = []
    for bar in bars:
        p = float(bar.get_attribute("data-p"))
        fill = rect(browser, bar.find_element(By.CSS_SELECTOR, ".blink-fill"))["width"]
        track = rect(browser, bar.find_element(By.CSS_SELECTOR, ".blink-track"))["width"]
        assert track >= 48, f"{bar.get_attribute('data-option')}: a track of {track:.0f} px"
        assert fill > 0 and abs(fill - max(p * track, 2.0)) <= 1.5, (bar.get_attribute("data-option"), p, fill, track)
        shown.append(p)
    return shown


def press(browser, wait, button_id: str, results_id: str, count: int) -> None:
    """Clicks the view's button and waits for `count` bars; the first row of the answer is then in the window, and
    the button still has the keyboard focus."""
    from selenium.webdriver.common.by import By

    browser.find_element(By.ID, button_id).click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, f"#{results_id} .blink-bar")) == count)
    first = browser.find_element(By.CSS_SELECTOR, f"#{results_id} .blink-bar")
    wait.until(lambda d: in_view(d, first))
    assert browser.execute_script("return document.activeElement.id") == button_id
    assert_status_in_words(browser)


def assert_status_in_words(browser) -> None:
    """What a screen reader hears from the page's status region is words, never an untranslated key."""
    from selenium.webdriver.common.by import By

    heard = [e.get_attribute("textContent") for e in browser.find_elements(By.CSS_SELECTOR, "[role='status']")]
    assert not [h for h in heard if "common." in h], heard


def load_example(browser, wait, button_id: str, box_css: str) -> None:
    from selenium.webdriver.common.by import By

    wait.until(lambda d: d.find_element(By.ID, button_id)).click()
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, box_css).get_attribute("value"))


@pytest.mark.parametrize("screen", SCREENS)
def test_decide_bars_and_answer_in_view(space, browser, screen):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    with screenshot_on_failure(browser, f"{screen}-decide"):
        wait = open_page(browser, space, screen)
        load_example(browser, wait, "example-ticket", "#blink-state textarea")
        press(browser, wait, "blink-decide", "blink-results", 6)
        probabilities = check_bars(browser, "blink-results", 6)
        assert abs(sum(probabilities[:4]) - 1) < 1e-3 and abs(sum(probabilities[4:]) - 1) < 1e-3
        load_example(browser, wait, "example-sentiment", "#blink-state textarea")
        press(browser, wait, "blink-decide", "blink-results", 5)
        check_bars(browser, "blink-results", 5)
        # a refused form: the message on its box (far above the button), brought into the window, the focus kept
        instructions = browser.find_element(By.CSS_SELECTOR, "#q0-instructions textarea")
        instructions.send_keys(Keys.CONTROL, "a")
        instructions.send_keys(Keys.DELETE)
        browser.find_element(By.ID, "blink-decide").send_keys(Keys.ENTER)
        error = wait.until(lambda d: visible_text(d, "Write the question"))
        wait.until(lambda d: in_view(d, error))
        assert browser.execute_script("return document.activeElement.id") == "blink-decide"


@pytest.mark.parametrize("screen", SCREENS)
def test_rank_bars_and_answer_or_error_in_view(space, browser, screen):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    with screenshot_on_failure(browser, f"{screen}-rank"):
        wait = open_page(browser, space, screen)
        open_tab(browser, wait, "Rank")
        load_example(browser, wait, "rank-example-late", "#rank-query textarea")
        press(browser, wait, "rank-button", "rank-results", 4)
        scores = check_bars(browser, "rank-results", 4)
        assert scores == sorted(scores, reverse=True)
        # no documents: the error is where the person looks, the focus still on the button
        documents = browser.find_element(By.CSS_SELECTOR, "#rank-documents textarea")
        documents.send_keys(Keys.CONTROL, "a")
        documents.send_keys(Keys.DELETE)
        browser.find_element(By.ID, "rank-button").click()
        error = wait.until(lambda d: visible_text(d, "write at least one document"))
        wait.until(lambda d: in_view(d, error))
        assert browser.execute_script("return document.activeElement.id") == "rank-button"


def backdrop(browser, element) -> str:
    """The colour the element is drawn over: the first opaque background among it and its ancestors (the canvas's
    white when none is)."""
    return browser.execute_script(
        "for (let e = arguments[0]; e; e = e.parentElement) {"
        " const c = getComputedStyle(e).backgroundColor;"
        " if (c && !/rgba\\(.*, 0\\)$/.test(c) && c !== 'transparent') return c; }"
        "return 'rgb(255, 255, 255)';",
        element,
    )


def luminance(css_color: str) -> float:
    """The relative luminance (WCAG) of a computed `rgb(...)`/`rgba(...)` colour."""
    r, g, b = (float(v) / 255 for v in css_color[css_color.index("(") + 1 : -1].split(",")[:3])

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b)


def contrast(a: str, b: str) -> float:
    light, dark = sorted((luminance(a), luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


@pytest.mark.parametrize("screen", SCREENS)
@pytest.mark.parametrize("theme", ["light", "dark"])
def test_moderate_bars_and_threshold_lines(space, browser, screen, theme):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    with screenshot_on_failure(browser, f"{screen}-moderate-{theme}"):
        wait = open_page(browser, space, screen, theme)
        assert ("dark" in browser.find_element(By.TAG_NAME, "body").get_attribute("class")) == (theme == "dark")
        open_tab(browser, wait, "Moderate")
        load_example(browser, wait, "moderate-example-forum", "#moderate-text textarea")
        press(browser, wait, "moderate-button", "moderate-results", 13)
        check_bars(browser, "moderate-results", 13)
        page = backdrop(browser, browser.find_element(By.ID, "moderate-results"))
        for bar in browser.find_elements(By.CSS_SELECTOR, "#moderate-results .blink-bar"):
            mark = bar.find_element(By.CSS_SELECTOR, ".blink-mark")
            track = rect(browser, bar.find_element(By.CSS_SELECTOR, ".blink-track"))
            line = rect(browser, mark)
            assert line["width"] >= 2 and line["height"] >= 8
            assert track["left"] <= line["left"] and line["right"] <= track["right"] + 1
            assert contrast(mark.value_of_css_property("background-color"), page) >= 3, theme
        # the demo model says, on the view, why everything is flagged
        assert (
            "random weights put every category's score near 0.5"
            in browser.find_element(By.ID, "moderate-demo-note").text
        )
        # no text: the error on the Text box, in the window, the focus still on the button
        text = browser.find_element(By.CSS_SELECTOR, "#moderate-text textarea")
        text.send_keys(Keys.CONTROL, "a")
        text.send_keys(Keys.DELETE)
        browser.find_element(By.ID, "moderate-button").click()
        error = wait.until(lambda d: visible_text(d, "write the text to moderate"))
        wait.until(lambda d: in_view(d, error))
        assert browser.execute_script("return document.activeElement.id") == "moderate-button"


def test_every_tab_is_reached_by_a_click_on_a_phone(space, browser):
    from selenium.webdriver.common.by import By

    with screenshot_on_failure(browser, "phone-tabs"):
        wait = open_page(browser, space, "phone")
        width = browser.execute_script("return innerWidth")
        assert browser.execute_script("return document.documentElement.scrollWidth") <= width  # nothing sticks out
        more = [b for b in browser.find_elements(By.CSS_SELECTOR, "[aria-label='More tabs']") if b.is_displayed()]
        assert not more
        for name in TABS:
            tab = browser.find_element(By.XPATH, f"//button[@role='tab' and normalize-space(.)='{name}']")
            box = rect(browser, tab)
            assert tab.is_displayed() and 0 <= box["left"] and box["right"] <= width, (name, box)
            open_tab(browser, wait, name)
        assert_status_in_words(browser)


@pytest.mark.parametrize("screen", SCREENS)
def test_the_chat_box_is_on_the_first_screen_of_its_tab(space, browser, screen):
    from selenium.webdriver.common.by import By

    with screenshot_on_failure(browser, f"{screen}-chat"):
        wait = open_page(browser, space, screen)
        open_tab(browser, wait, "Chat")
        assert browser.execute_script("return scrollY") == 0
        box = wait.until(
            lambda d: next(
                (
                    t
                    for t in d.find_elements(By.CSS_SELECTOR, "#blink-chat-input textarea, textarea")
                    if t.is_displayed() and "message" in (t.get_attribute("placeholder") or "").lower()
                ),
                None,
            )
        )
        assert in_view(browser, box), rect(browser, box)
        # the example prompts look like buttons: a border around each
        example = browser.find_element(By.CSS_SELECTOR, "#blink-chatbot button.example")
        assert example.value_of_css_property("border-top-style") == "solid"
        assert example.value_of_css_property("cursor") == "pointer"
