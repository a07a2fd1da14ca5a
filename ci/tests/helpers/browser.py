"""The Space in headless Chromium at a given screen (test_space_browser_screens.py, test_space_browser_sheet.py): the
screens, opening the page and a tab, where an element is drawn, and a screenshot left where a failing test was."""

from __future__ import annotations

from contextlib import contextmanager

from helpers.servers import ARTIFACTS

SCREENS = {"phone": (390, 844, True), "laptop": (1280, 800, False)}  # width, height, a touch screen's viewport


@contextmanager
def screenshot_on_failure(browser, name: str):
    """On a failure, what the page showed: ci/artifacts/space-screen-<name>.png."""
    try:
        yield
    except BaseException:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / f"space-screen-{name}.png"))
        raise


def open_page(browser, url: str, screen: str, theme: str | None = None):
    """The Space's page at `screen`'s size (Chrome's DevTools `Emulation.setDeviceMetricsOverride`); a wait of 90 s."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    width, height, mobile = SCREENS[screen]
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
    )
    browser.get(url + "/" + (f"?__theme={theme}" if theme else ""))
    wait = WebDriverWait(browser, 90)
    wait.until(lambda d: d.find_elements(By.ID, "example-ticket"))
    assert browser.execute_script("return [innerWidth, innerHeight]") == [width, height]
    return wait


def open_tab(browser, wait, name: str) -> None:
    from selenium.webdriver.common.by import By

    tab = wait.until(lambda d: d.find_element(By.XPATH, f"//button[@role='tab' and normalize-space(.)='{name}']"))
    tab.click()
    wait.until(lambda d: tab.get_attribute("aria-selected") == "true")


def rect(browser, element) -> dict:
    return browser.execute_script("return arguments[0].getBoundingClientRect().toJSON()", element)


def in_view(browser, element) -> bool:
    """The element's box lies inside the window, top to bottom (and it is drawn)."""
    box = rect(browser, element)
    height = browser.execute_script("return innerHeight")
    return box["height"] > 0 and box["top"] >= 0 and box["bottom"] <= height


def visible_text(browser, text: str):
    """The innermost element drawn on the page whose text holds `text` (or None)."""
    return browser.execute_script(
        "const hits = [...document.querySelectorAll('body *')].filter(e => e.offsetParent !== null"
        " && e.innerText && e.innerText.includes(arguments[0]));"
        "return hits.find(e => ![...e.children].some(c => c.innerText && c.innerText.includes(arguments[0])))"
        " || null;",
        text,
    )
