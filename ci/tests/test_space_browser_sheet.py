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
import math
import re
import sys

import httpx
import pytest

from helpers import ROOT, running
from helpers.batch import ANSWER_COLUMNS, QUESTIONS, run_table, tickets
from helpers.browser import in_view, open_page, open_tab, rect, screenshot_on_failure, visible_text

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
    """The Sheet tab; a wait that looks again when the page redraws what it was reading (the status and the table
    redraw after each chunk)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    open_page(browser, url, screen)
    wait = WebDriverWait(browser, 90, ignored_exceptions=(StaleElementReferenceException,))
    open_tab(browser, wait, "Sheet")
    return wait


def load_example(browser, wait) -> None:
    """The view's example button pressed: Decide's ticket questions in the editor (and its rows, with no table)."""
    from selenium.webdriver.common.by import By

    browser.find_element(By.ID, "sheet-example").click()
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#sheet-q0-instructions textarea").get_attribute("value"))


def pasted_rows(browser) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.CSS_SELECTOR, "#sheet-paste textarea").get_attribute("value")


def shown_cell(browser, column: str, first: str):
    """The labelled rows' cell drawn in `column` (by its header) on the row whose first cell is `first`, and the box
    the table shows of it (what the boxes around it that scroll or clip leave in sight), or None."""
    return browser.execute_script(
        "const table = document.getElementById('sheet-table');"
        "const at = [...table.querySelectorAll('thead th')].map(th => th.title).indexOf(arguments[0]);"
        "const first = [...table.querySelectorAll('.body-cell.first-column, tbody td:first-child')]"
        ".find(c => c.innerText.trim() === arguments[1] && c.getBoundingClientRect().height > 0);"
        "if (!first || at < 0) return null;"
        "const cell = first.parentElement.children[at]; const box = cell.getBoundingClientRect().toJSON();"
        "for (let e = cell.parentElement; e && e !== table.parentElement; e = e.parentElement) {"
        " if (getComputedStyle(e).overflowX === 'visible') continue; const r = e.getBoundingClientRect();"
        " box.left = Math.max(box.left, r.left); box.right = Math.min(box.right, r.right); }"
        "return [cell, box];",
        column,
        first,
    )


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
        load_example(browser, wait)  # with a table given: the example's questions only, the upload kept
        assert "tickets.csv" in browser.find_element(By.ID, "sheet-file").text.replace("\n", "")
        assert pasted_rows(browser) == ""
        assert "200 rows" in browser.find_element(By.ID, "sheet-status").text
        seen = run_and_watch(browser, wait)
        assert any(0 < done < 200 for done, _ in seen), seen  # the progress moved chunk by chunk
        first = wait.until(lambda d: visible_text(d, "T0000"))  # the first labelled row's first cell
        assert in_view(browser, browser.find_element(By.CSS_SELECTOR, "#sheet-status .blink-summary"))
        assert in_view(browser, first), "the first labelled row is out of the window"
        answer, shown = shown_cell(browser, "blink.team", "T0000")  # beside the first column, not behind the text
        at = rect(browser, answer)
        assert answer.text in TEAMS and in_view(browser, answer), at
        assert shown["right"] - shown["left"] >= at["width"] - 1, (at, shown)  # in sight, no sideways scroll
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
        load_example(browser, wait)
        browser.find_element(By.ID, "sheet-run").click()
        wait.until(lambda d: (progress(d) or (0, 0))[0] > 0)
        # every text the status shows from now on, timed; Stop pressed where it is (the page scrolled to it)
        clicked = browser.execute_script(
            "window.told = []; const box = document.getElementById('sheet-status');"
            "new MutationObserver(() => window.told.push([performance.now(), box.innerText]))"
            ".observe(box, {subtree: true, childList: true, characterData: true});"
            "const stop = document.getElementById('sheet-stop'); stop.scrollIntoView({block: 'center'});"
            "const t = performance.now(); stop.click(); return t;"
        )
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#sheet-status .blink-stopped"))
        told = browser.execute_script("return window.told")
        stopping = next((t for t, text in told if "Stopping after this chunk" in text), math.inf) - clicked
        stopped_at = next((t for t, text in told if "Stopped after" in text), math.inf) - clicked
        assert stopping < 2000 and stopping < stopped_at, told  # told at once, before the chunk in flight ends
        stopped = browser.find_element(By.CSS_SELECTOR, "#sheet-status .blink-stopped")
        assert "blink-error" not in stopped.get_attribute("class")  # asked for: no error, in the page's colour
        colour = "return getComputedStyle(arguments[0]).color"
        page = browser.find_element(By.CSS_SELECTOR, "#sheet-charts .blink-summary")
        assert browser.execute_script(colour, stopped) == browser.execute_script(colour, page)
        assert browser.find_element(By.TAG_NAME, "body").text.count("Stopped after") == 1  # said once
        assert in_view(browser, stopped), rect(browser, stopped)
        done = int(re.search(r"Stopped after ([\d,]+) of", stopped.text)[1].replace(",", ""))
        assert 0 < done < MAX_ROWS
        assert len(downloaded_csv(browser, wait)) == done


@browser_test
def test_the_example_rows_run_and_are_shown_plainly(space, browser):
    """Before a run no table (no placeholder headers); with no table given, the example button loads its rows and
    questions. A row with an empty state is counted in the status line; the bar is as wide as its column, in the
    theme's colour; a chart gives a share of rows as a percentage."""
    from PIL import Image
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from theme import ACCENT

    with screenshot_on_failure(browser, "laptop-sheet-example"):
        wait = open_sheet(browser, space, "laptop")
        assert not [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#sheet-table th") if th.is_displayed()]
        load_example(browser, wait)
        assert pasted_rows(browser).startswith("id,text\nT1,")
        pasted = browser.find_element(By.CSS_SELECTOR, "#sheet-paste textarea")
        pasted.send_keys(Keys.CONTROL, Keys.END, Keys.NULL)
        pasted.send_keys("\nT6,")  # a row whose state is empty
        wait.until(lambda d: "6 rows; columns: id, text" in d.find_element(By.ID, "sheet-status").text)
        browser.find_element(By.ID, "sheet-run").click()
        wait.until(lambda d: progress(d) == (6, 6))
        status = browser.find_element(By.ID, "sheet-status")
        assert "1 row refused: see blink.error" in status.text, status.text
        bar = browser.find_element(By.CSS_SELECTOR, "#sheet-status progress")
        at, column = rect(browser, bar), rect(browser, status)
        assert at["width"] >= 0.95 * column["width"], (at, column)
        shot = Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("RGB")
        filled = shot.getpixel((int(at["left"] + at["width"] / 2), int(at["top"] + at["height"] / 2)))
        assert all(abs(a - b) <= 12 for a, b in zip(filled, bytes.fromhex(ACCENT[1:]), strict=True)), filled
        shares = [p.text for p in browser.find_elements(By.CSS_SELECTOR, "#sheet-charts .blink-p")]
        assert len(shares) == 6 and all(re.fullmatch(r"(\d{1,3}|<1) %", p) for p in shares), shares
        assert "how the 5 answers fall" in browser.find_element(By.ID, "sheet-charts").text  # the refused row not


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
        load_example(browser, wait)
        browser.find_element(By.ID, "sheet-run").click()  # and on Run, where the person looks
        told = "Nothing was run. bad.csv: the first line" if case == "no header" else "Nothing was run. The table"
        wait.until(lambda d: (e := error_shown(d)) and told in e.text and words in e.text and in_view(d, e))
        assert not visible_text(browser, "T0000")  # no table


@browser_test
def test_tables_as_spreadsheets_write_them_are_read_or_refused_in_words(space, browser, tmp_path):
    """Excel's European CSV (semicolons, Windows-1252) is read in its columns and said so on upload; a picture
    renamed .csv is "not a text table", not a codec's complaint."""
    from selenium.webdriver.common.by import By

    europe = tmp_path / "europe.csv"
    europe.write_bytes("id;text;channel\r\nT1;Caf\u00e9, cr\u00e8me;mail\r\nT2;late parcel;web\r\n".encode("cp1252"))
    picture = tmp_path / "picture.csv"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(32))
    with screenshot_on_failure(browser, "laptop-sheet-dialects"):
        wait = open_sheet(browser, space, "laptop")
        upload(browser, wait, europe)
        status = browser.find_element(By.ID, "sheet-status").text
        read = "(read as Windows-1252 text, columns separated by semicolons)"
        assert f"2 rows; columns: id, text, channel {read}" in status, status
        wait = open_sheet(browser, space, "laptop")
        upload(browser, wait, picture)
        said = error_shown(browser).text
        assert "picture.csv is not a text table (it holds binary data)" in said and "codec" not in said, said


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
    csv_refund = [float(r["blink.refund"]) for r in got]  # another Sheet run: within blink's 1e-6
    assert table.column("blink.refund").to_pylist() == pytest.approx(csv_refund, abs=1e-6, rel=0)


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
