"""The Space's Sheet view in headless Chromium, at 1280×800 and 390×844 (as test_space_browser_screens.py), and its
Gradio endpoint `sheet` over gradio_client, on one Space (the demo model; a run takes at most 250 rows here).

In the browser: a 200-row CSV uploaded, its state column picked from the header, Run: the progress line moves, the
status (and the first row of the table) is in the window, the table fills, a chart per question, the CSV download
holds every row with its answer columns; Stop keeps the rows done (downloadable); a file without a header and one
past the row limit are each told in words. Over gradio_client: a file in, the labelled file out (CSV and Parquet),
equal to what `python -m blink run-batch --table` writes for the same rows (floats within 1e-6); a table without
the named column is refused naming the columns it has.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys

import httpx
import pytest

from helpers import ROOT, running
from helpers.batch import ANSWER_COLUMNS, QUESTIONS, run_table, tickets
from helpers.browser import in_view, open_page, open_tab, screenshot_on_failure, visible_text

pytestmark = [pytest.mark.e2e, pytest.mark.space, pytest.mark.slow]
browser_test = pytest.mark.browser
MAX_ROWS = 250


@pytest.fixture(scope="module")
def space(demo_root):
    env = {"BLINK_MODEL": "demo", "BLINK_SHEET_MAX_ROWS": str(MAX_ROWS)}
    with running([sys.executable, str(ROOT / "app.py")], demo_root, env=env, name="space-sheet") as url:
        yield url


def write_csv(path, rows: list[dict], header: bool = True):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, list(rows[0]))
        if header:
            writer.writeheader()
        writer.writerows(rows)
    return path


def read_csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


# --- the browser -----------------------------------------------------------------------------------------------
def upload(browser, wait, path) -> None:
    """The file into the view's upload box, then its header read: the state column menu says `text`."""
    from selenium.webdriver.common.by import By

    browser.find_element(By.CSS_SELECTOR, "#sheet-file input[type=file]").send_keys(str(path))
    wait.until(lambda d: "rows; columns" in d.find_element(By.ID, "sheet-status").text or error_shown(d))


def error_shown(browser):
    from selenium.webdriver.common.by import By

    return next((e for e in browser.find_elements(By.CSS_SELECTOR, "#sheet-status .blink-error") if e.text), None)


def open_sheet(browser, url: str, screen: str):
    """The Sheet tab with Decide's ticket questions loaded by the view's example (its pasted rows then cleared); a wait
    that looks again when the page redraws what it was reading (the status and the table redraw after each chunk)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    open_page(browser, url, screen)
    wait = WebDriverWait(browser, 90, ignored_exceptions=(StaleElementReferenceException,))
    open_tab(browser, wait, "Sheet")
    browser.find_element(By.ID, "sheet-example").click()
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#sheet-q0-instructions textarea").get_attribute("value"))
    pasted = browser.find_element(By.CSS_SELECTOR, "#sheet-paste textarea")
    pasted.send_keys(Keys.CONTROL, "a")
    pasted.send_keys(Keys.DELETE)
    wait.until(lambda d: not d.find_element(By.CSS_SELECTOR, "#sheet-paste textarea").get_attribute("value"))
    return wait


def progress(browser) -> tuple[int, int] | None:
    """(rows done, rows) as the status line says it, or None before the first chunk."""
    from selenium.webdriver.common.by import By

    found = re.search(r"([\d,]+) of ([\d,]+) rows", browser.find_element(By.ID, "sheet-status").text)
    return (int(found[1].replace(",", "")), int(found[2].replace(",", ""))) if found else None


def run_and_watch(browser, wait) -> set:
    """Run pressed; the status in the window at once; every progress seen until the run ends."""
    from selenium.webdriver.common.by import By

    browser.find_element(By.ID, "sheet-run").click()
    wait.until(lambda d: in_view(d, d.find_element(By.CSS_SELECTOR, "#sheet-status .blink-summary")))
    seen = set()

    def finished(d) -> bool:
        now = progress(d)
        if now:
            seen.add(now)
        return (now is not None and now[0] == now[1]) or "Stopped after" in d.find_element(By.ID, "sheet-status").text

    wait.until(finished)
    return seen


def downloaded_csv(browser, wait) -> list[dict]:
    """The CSV download, fetched from its link."""
    from selenium.webdriver.common.by import By

    link = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#sheet-downloads a[download$='.csv']"))
    return read_csv(httpx.get(link.get_attribute("href"), timeout=30).text)


@browser_test
@pytest.mark.parametrize("screen", ["laptop", "phone"])
def test_a_table_labelled_in_the_browser(space, browser, screen, tmp_path):
    from selenium.webdriver.common.by import By

    rows = tickets(200)
    path = write_csv(tmp_path / "tickets.csv", rows)
    with screenshot_on_failure(browser, f"{screen}-sheet"):
        wait = open_sheet(browser, space, screen)
        upload(browser, wait, path)
        assert "200 rows" in browser.find_element(By.ID, "sheet-status").text
        seen = run_and_watch(browser, wait)
        assert any(0 < done < 200 for done, _ in seen), seen  # the progress moved chunk by chunk
        first = wait.until(lambda d: visible_text(d, "T0000"))  # the first labelled row's first cell
        assert in_view(browser, browser.find_element(By.CSS_SELECTOR, "#sheet-status .blink-summary"))
        assert in_view(browser, first), "the first labelled row is out of the window"
        charts = browser.find_elements(By.CSS_SELECTOR, "#sheet-charts .blink-summary")
        assert [c.text.split(":")[0] for c in charts] == ["team", "urgent"]
        bars = browser.find_elements(By.CSS_SELECTOR, "#sheet-charts .blink-bar")
        assert len(bars) == 4 + 2 and all(float(b.get_attribute("data-p")) >= 0 for b in bars)
        got = downloaded_csv(browser, wait)
        assert len(got) == 200 and [r["ticket"] for r in got] == [r["ticket"] for r in rows]
        assert list(got[0]) == ["ticket", "text", "note", "blink.team", *[f"blink.team.p.{t}" for t in TEAMS]] + [
            "blink.urgent",
            "blink.error",
        ]
        assert got[0]["note"] == "'=1+1" and all(r["blink.error"] == "" for r in got)  # a formula, escaped


TEAMS = ["billing", "shipping", "returns", "technical"]


@browser_test
def test_stop_keeps_the_rows_done(space, browser, tmp_path):
    from selenium.webdriver.common.by import By

    path = write_csv(tmp_path / "many.csv", tickets(MAX_ROWS))
    with screenshot_on_failure(browser, "laptop-sheet-stop"):
        wait = open_sheet(browser, space, "laptop")
        upload(browser, wait, path)
        browser.find_element(By.ID, "sheet-run").click()
        wait.until(lambda d: (progress(d) or (0, 0))[0] > 0)
        browser.find_element(By.ID, "sheet-stop").click()
        stopped = wait.until(lambda d: visible_text(d, "Stopped after"))
        done = int(re.search(r"Stopped after ([\d,]+) of", stopped.text)[1].replace(",", ""))
        assert 0 < done < MAX_ROWS
        assert len(downloaded_csv(browser, wait)) == done


@browser_test
@pytest.mark.parametrize(
    ("screen", "case", "words"),
    [
        ("phone", "no header", "does not look like a header"),
        ("laptop", "too many rows", f"more than {MAX_ROWS} rows"),
    ],
)
def test_a_bad_table_is_told_in_words(space, browser, tmp_path, screen, case, words):
    from selenium.webdriver.common.by import By

    rows = tickets(MAX_ROWS + 1 if case == "too many rows" else 20)
    path = write_csv(tmp_path / "bad.csv", rows, header=case != "no header")
    with screenshot_on_failure(browser, f"{screen}-sheet-bad"):
        wait = open_sheet(browser, space, screen)
        upload(browser, wait, path)
        assert words in error_shown(browser).text  # told on upload
        browser.find_element(By.ID, "sheet-run").click()  # and on Run, where the person looks
        told = "Nothing was run. bad.csv: the first line" if case == "no header" else "Nothing was run. The table"
        wait.until(lambda d: (e := error_shown(d)) and told in e.text and words in e.text and in_view(d, e))
        assert not visible_text(browser, "T0000")  # no table


# --- the Gradio endpoint -----------------------------------------------------------------------------------------
def test_the_endpoint_labels_a_file_as_run_batch_does(space, demo_root, tmp_path):
    import pyarrow.parquet as pq
    from gradio_client import Client, handle_file

    rows = tickets(24, seed=3)
    path = write_csv(tmp_path / "tickets.csv", rows)
    client = Client(space, verbose=False)
    held = saved_states(space)
    assert held["active"]  # off ZeroGPU the Space keeps a prefix-state cache
    labelled = client.predict(handle_file(str(path)), ["text"], QUESTIONS, "csv", api_name="/sheet")
    assert saved_states(space) == held  # 24 new states saved nothing there: others' states stay
    got = read_csv(open(labelled, encoding="utf-8").read())
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(QUESTIONS))
    done = run_table(demo_root, path, questions, tmp_path / "out.csv", "--quiet")
    assert done.returncode == 0, done.stderr
    want = read_csv((tmp_path / "out.csv").read_text(encoding="utf-8"))
    assert list(got[0]) == list(want[0]) == ["ticket", "text", "note", *ANSWER_COLUMNS]
    assert len(got) == len(want) == 24
    for a, b in zip(got, want, strict=True):
        for column in a:
            if column.startswith("blink.") and ".p." in column or column in ("blink.refund", "blink.anger"):
                assert abs(float(a[column]) - float(b[column])) <= 1e-6, (column, a, b)
            else:
                assert a[column] == b[column], column
    parquet = client.predict(handle_file(str(path)), "text", QUESTIONS, "parquet", api_name="/sheet")
    table = pq.read_table(parquet)
    assert table.column_names == list(got[0]) and table.num_rows == 24
    assert table.column("blink.refund").to_pylist() == pytest.approx([float(r["blink.refund"]) for r in got])


def saved_states(space: str) -> dict:
    cache = httpx.get(space + "/healthz", timeout=30).json()["prefix_cache"]
    return {k: cache[k] for k in ("active", "entries", "used_mib")}


def test_the_endpoint_refuses_a_missing_column_in_words(space, tmp_path):
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    path = write_csv(tmp_path / "tickets.csv", tickets(3))
    with pytest.raises(AppError) as refused:
        Client(space, verbose=False).predict(handle_file(str(path)), ["body"], QUESTIONS, "csv", api_name="/sheet")
    assert "no column 'body'" in str(refused.value) and "ticket, text, note" in str(refused.value)


# --- a spent quota -------------------------------------------------------------------------------------------------
def test_a_spent_quota_stops_the_run_saying_when_to_come_back():
    """ZeroGPU's refusal as the Space maps it (space/zerogpu.py), then the Sheet's words for it: the rows kept, why,
    and when to come back (its Retry-After in minutes and as a time)."""
    import gradio as gr

    from space import zerogpu
    from space.sheet import stopped_by

    message = "You have exceeded your free ZeroGPU quota (30s requested vs. 7s left). Try again in 0:30:00. "
    error = zerogpu.map_gpu_errors(gr.Error(message, title="ZeroGPU quota exceeded"), zero_gpu=True)
    told = stopped_by(error, 128, 1000)
    assert told.startswith("Stopped after 128 of 1,000 rows; the rows done are in the downloads.")
    assert "ZeroGPU quota ran out" in told and "Come back in about 30 minutes (after " in told and "UTC)" in told


# --- an upload refused before any work -----------------------------------------------------------------------------
def test_an_upload_with_two_columns_of_one_name_is_refused_naming_it(tmp_path):
    """One of two columns of one name would be lost (rows are keyed by name): refused at upload, in words."""
    from space.sheet import SheetLimits, SheetRefused, open_table

    path = tmp_path / "twice.csv"
    path.write_text("text,text,id\nx,y,1\n", encoding="utf-8")
    with pytest.raises(SheetRefused, match="twice.csv cannot be read: it has two columns named 'text'"):
        open_table(str(path), SheetLimits(max_rows=10, max_bytes=10**6))
