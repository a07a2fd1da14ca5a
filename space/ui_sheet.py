"""The Sheet view: a table in (a CSV, JSONL or Parquet upload, or CSV rows pasted), the state column(s) picked from
its header, the questions written in Decide's editor; Run labels every row (space/sheet.py) and shows the progress,
the table filling chunk by chunk, a chart per question of how the answers fall, and the downloads (CSV and
Parquet). Stop lets the running chunk finish and keeps the rows done.

The same run is the Gradio endpoint `sheet(table, state_columns, questions, output_format="csv")` (a file in, the
labelled file out) for gradio_client: callable, under the same key rules as `decide`, but not listed by
`view_api()` and so not an MCP tool (docs/space.md says why).
"""

import html
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import gradio as gr

import auth
from blink.context import Context
from blink.errors import Unauthorized
from blink.settings import SpaceSettings
from blink.web.callers import NOBODY
from space.sheet import (
    SheetLimits,
    SheetRefused,
    SheetRun,
    answers_for,
    count_rows,
    how_answers_fall,
    open_table,
    state_columns_problem,
)
from space.tool import error_of
from space.ui_answers import bar_html
from space.ui_decide import EXAMPLES
from space.ui_form import active_slots, box_name, build_question, form_problems, question_id
from space.ui_questions import filled, question_editor
from space.ui_shared import PRIVATE, caveat_html, error_html, reveal_js, ui_class

log = logging.getLogger("blink.space")
WORK = Path(tempfile.gettempdir()) / "blink-sheet"  # a folder per run; Gradio copies the downloads to its cache
KEEP_S = 3600  # a run's folder is removed this long after it was made
SHOWN_CHARS = 60  # the labelled rows' table cuts a longer cell here, with an ellipsis (the downloads keep it whole)
LIKELY_STATE = ("text", "state", "content", "message", "body", "review", "comment", "ticket")
EXAMPLE_CSV = """id,text
T1,"I was charged twice for order #8812, please refund the second charge."
T2,My parcel is five days late and the tracking page has not changed.
T3,The app logs me out every time I open the settings page.
T4,"I'd like to return the shoes, they are one size too small."
T5,Thanks for the quick help yesterday!
"""


@dataclass(frozen=True)
class SheetSettings:
    limits: SheetLimits
    runs: int = 4  # Sheet runs at once (the view's and the endpoint's); more wait in Gradio's queue

    @classmethod
    def of(cls, space: SpaceSettings | None = None) -> "SheetSettings":
        """From the Space's knobs (`sheet_max_rows`, `sheet_max_bytes`, `sheet_runs`; None: their defaults)."""
        space = space or SpaceSettings()
        return cls(SheetLimits(space.sheet_max_rows, space.sheet_max_bytes), space.sheet_runs)


def workdir() -> Path:
    """A new folder for one run (or one look at a header); folders older than KEEP_S go first."""
    WORK.mkdir(parents=True, exist_ok=True)
    for old in WORK.iterdir():
        if time.time() - old.stat().st_mtime > KEEP_S:
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(dir=WORK))


def source(file: str | None, pasted: str | None) -> str:
    """The table's path: the upload, or the pasted rows written as a CSV file."""
    if file and (pasted or "").strip():
        raise SheetRefused("Both a file and pasted rows are given: clear one of them.")
    if file:
        return file
    if not (pasted or "").strip():
        raise SheetRefused("Upload a table (CSV, JSONL or Parquet) or paste CSV rows, a header line first.")
    path = workdir() / "pasted.csv"
    path.write_text(pasted.strip() + "\n", encoding="utf-8")
    return str(path)


def status_html(text: str, done: int = 0, total: int = 0, cls: str = "blink-summary") -> str:
    """The status line (`cls`: blink-summary, in the page's colour; blink-error for a run that failed), under a
    bar as wide as its column while there are rows to count."""
    bar = f'<progress value="{done}" max="{max(total, 1)}"></progress>' if total else ""
    return f'<div class="blink-sheet-status">{bar}<div class="{cls}">{html.escape(text)}</div></div>'


def progress_line(snap, error_column: str = "the error column") -> str:
    left = (snap.total - snap.done) / snap.rate if snap.rate else 0
    eta = f" · about {left:.0f} s to go" if snap.done < snap.total else ""
    return (
        f"{snap.done:,} of {snap.total:,} rows labelled · {snap.rate:.1f} rows/s{eta}{errors_note(snap, error_column)}"
    )


def errors_note(snap, error_column: str) -> str:
    """The rows done that got no answer (an empty state, one too long…), counted where the person looks."""
    if not snap.errors:
        return ""
    return f" · {snap.errors:,} {'row' if snap.errors == 1 else 'rows'} refused: see {error_column}"


def share(part: int, whole: int) -> str:
    """A share of rows as a percentage (not a probability's 0-1): 100 %, 37 %, <1 %."""
    if not whole or not part:
        return "0 %"
    pct = 100 * part / whole
    return "<1 %" if pct < 1 else f"{pct:.0f} %"


def charts_html(answers, rows: list[dict]) -> str:
    """A bar chart per question: the share of the rows done that got each answer, as a percentage."""
    parts = ['<div class="blink-results blink-sheet-charts">']
    for qid, counts in how_answers_fall(answers, rows).items():
        n = sum(count for _, count in counts)
        parts.append(f'<div class="blink-summary">{html.escape(qid)}: how the {n:,} answers fall</div>')
        for name, count in counts:
            p = count / n if n else 0.0
            bar = bar_html(name, p, desc=f"{count:,} rows")
            parts.append(
                bar.replace(f'<span class="blink-p">{p:.3f}</span>', f'<span class="blink-p">{share(count, n)}</span>')
            )
    parts.append("</div>")
    return "".join(parts)


class Sheet:
    """The view's and the endpoint's runs, and the Stop button's way to them (by the page's session)."""

    def __init__(self, ctx: Context, settings: SheetSettings):
        self.ctx, self.settings = ctx, settings
        self.running: dict[str, SheetRun] = {}
        self.done: dict[str, int] = {}  # the rows a running run has done (for Stop's line)

    def prepare(self, path: str, columns: list[str], questions: dict, request) -> SheetRun:
        limits = self.settings.limits
        table = open_table(path, limits)
        total = count_rows(table, limits)
        problem = state_columns_problem(table, columns)
        if problem:
            raise SheetRefused(problem)
        answers = answers_for(self.ctx, questions, table.columns)
        # the table's rows save a state in the prefix-state cache only where it repeats: others' states stay
        caller = replace(self.ctx.caller_of(request) if request is not None else NOBODY, table_rows=True)
        run = SheetRun(self.ctx, table, columns, questions, answers, workdir(), caller, ui_class(self.ctx, request))
        run.total = total
        return run

    def header(self, file: str | None, pasted: str | None):
        """On upload (or paste): the state column menu filled from the header, and what the table holds."""
        try:
            path = source(file, pasted)
            table = open_table(path, self.settings.limits)
            rows = count_rows(table, self.settings.limits)
        except SheetRefused as refused:
            empty = not file and not (pasted or "").strip()
            return gr.update(choices=[], value=[]), "" if empty else error_html(str(refused))
        named = {c.lower(): c for c in table.columns}
        guess = next((named[name] for name in LIKELY_STATE if name in named), table.columns[0])
        note = table.dialect.note()  # a semicolon or Windows-1252 CSV, say, read as such
        read = f" ({note})" if note else ""
        named_all = ", ".join(table.columns)
        told = status_html(f"{rows:,} rows; columns: {named_all}{read}. Pick the state column(s), then Run.")
        return gr.update(choices=table.columns, value=[guess]), told

    async def ui_run(self, request: gr.Request, file, pasted, columns, count, *boxes):
        """The Run button: (status, table, charts, downloads) after each chunk."""
        problems = form_problems("-", count, boxes, self.ctx.limits)
        if problems:
            yield error_html(" · ".join(f"{box_name(i)}: {m}" for i, m in sorted(problems.items()))), None, "", None
            return
        questions = {
            question_id(boxes[4 * i], i): build_question(boxes[4 * i + 1] or "noul", boxes[4 * i + 2], boxes[4 * i + 3])
            for i in range(active_slots(count))
        }
        try:
            run = self.prepare(source(file, pasted), list(columns or []), questions, request)
        except SheetRefused as refused:
            yield error_html(f"Nothing was run. {refused}"), None, "", None
            return
        key = request.session_hash if request is not None else None
        self.running[key] = run
        self.done[key] = 0
        try:
            yield status_html(f"Labelling {run.total:,} rows…", 0, run.total), None, "", None
            async for snap in run.run():
                self.done[key] = snap.done
                yield (
                    self.snap_status(run, snap),
                    rows_table(snap.rows, run),
                    charts_html(run.answers, snap.rows),
                    snap.downloads or None,
                )
        finally:
            self.running.pop(key, None)
            self.done.pop(key, None)

    @staticmethod
    def snap_status(run: SheetRun, snap) -> str:
        """Where the run stands: its progress, or once why it stopped early: a Stop the person pressed in the page's
        colour (marked blink-stopped, which the page scrolls into view), a quota or a failure as an error."""
        error_column = run.answers.error_column
        if not snap.stopped:
            return status_html(progress_line(snap, error_column), snap.done, snap.total)
        told = snap.stopped + errors_note(snap, error_column)
        cls = "blink-summary blink-stopped" if run.stop.is_set() else "blink-error blink-stopped"
        return status_html(told, snap.done, snap.total, cls)

    async def ui_stop(self, request: gr.Request):
        """The Stop button (off the queue, so at once): the run stops after the chunk in flight; told so now. (On
        the event loop, as the run: its stop is set before this answer leaves, so the run's last word comes later.)"""
        key = request.session_hash if request is not None else None
        run = self.running.get(key)
        if run is None or run.stop.is_set():
            return gr.update()
        run.stop.set()
        return status_html("Stopping after this chunk…", self.done.get(key, 0), run.total)

    def endpoint(self, needs_key: bool):
        async def sheet(table, state_columns, questions, output_format, request: gr.Request):
            if needs_key and not auth.presented_key(self.ctx.auth, request):
                raise error_of(Unauthorized("missing or invalid API key: send Authorization: Bearer <key>"))
            fmt = (output_format or "csv").lower()
            columns = [state_columns] if isinstance(state_columns, str) else list(state_columns or [])
            try:
                if fmt not in ("csv", "parquet"):
                    raise SheetRefused(f"output_format is {output_format!r}: csv or parquet")
                if not table:
                    raise SheetRefused("table: send a CSV, JSONL or Parquet file (gradio_client.handle_file(path))")
                if not isinstance(questions, dict):
                    raise SheetRefused("questions: a System One questions object (a dict)")
                run = self.prepare(table, columns, questions, request)
            except SheetRefused as refused:
                raise gr.Error(str(refused), title="Error 422", print_exception=False) from None
            last = None
            async for snap in run.run():
                last = snap
            if last is None or last.stopped:
                raise gr.Error(last.stopped if last else "nothing was labelled", title="Error 429")
            return next(p for p in last.downloads if p.endswith("." + fmt))

        return sheet


def rows_table(rows: list[dict], run: SheetRun | None = None):
    """The rows done as the page shows them (the downloads keep the table's order): the first column (an id, as a
    rule), then each question's answer and the error column, then the other columns, the probabilities last, so
    the answers are on screen beside a long text column (whose cells the table shows cut at SHOWN_CHARS). No rows:
    the table is hidden (an empty one would show placeholder headers)."""
    import pandas as pd

    if not rows:
        return gr.update(value=None, visible=False)
    frame = pd.DataFrame(rows)
    if run is not None:
        answers = run.answers
        first = [answers.name(q.name) for q in answers.parsed] + [answers.error_column]
        last = [name for name, _ in answers.columns if name not in first]
        inputs = [c for c in frame.columns if c not in first and c not in last]
        frame = frame[[c for c in inputs[:1] + first + inputs[1:] + last if c in frame.columns]]
    return gr.update(value=frame.round(4), visible=True)


def example_loaded(file, pasted) -> list:
    """The example button: with a table given (an upload or pasted rows) the example's questions only, the table
    left as it is; with none, the example's rows too, to run as they are."""
    has_table = bool(file) or bool((pasted or "").strip())
    rows = [gr.update(), gr.update()] if has_table else [None, EXAMPLE_CSV]
    return [*rows, *filled(EXAMPLES["Ticket routing"]["questions"])]


def reveal_stopped_js() -> str:
    """After a run: a run that stopped early (its status marked blink-stopped) has its status scrolled into view; a
    run that ended leaves the page where the person put it."""
    return f"() => {{ if (document.querySelector('#sheet-status .blink-stopped')) ({reveal_js('sheet-status')})(); }}"


def sheet_tab(ctx: Context, caveat: str, settings: SheetSettings, needs_key: bool = False) -> None:
    """The view, and the `sheet` endpoint."""
    sheet = Sheet(ctx, settings)
    limits = settings.limits
    with gr.Row():
        with gr.Column(scale=1):
            upload = gr.File(
                label="Table (CSV, JSONL or Parquet)",
                file_types=[".csv", ".jsonl", ".json", ".ndjson", ".parquet", ".pq"],
                type="filepath",
                elem_id="sheet-file",
            )
            pasted = gr.Textbox(label="…or paste CSV rows, a header line first", lines=4, elem_id="sheet-paste")
            columns = gr.Dropdown(
                [],
                multiselect=True,
                label="State column(s)",
                info="What the questions are about; several columns make a JSON state.",
                elem_id="sheet-columns",
            )
            example = gr.Button("Example: support tickets", size="sm", elem_id="sheet-example")
            editor = question_editor("sheet-")
            with gr.Row():
                run = gr.Button("Run", variant="primary", elem_id="sheet-run")
                stop = gr.Button("Stop", elem_id="sheet-stop")
            gr.Markdown(
                f"At most {limits.max_rows:,} rows and {limits.max_bytes / 1e6:.0f} MB per table. For more, "
                "python -m blink run-batch labels a table on your own machine."
            )
        with gr.Column(scale=1):
            gr.HTML(caveat_html(caveat))
            status = gr.HTML("", elem_id="sheet-status")
            table = gr.Dataframe(
                label="Labelled rows",
                interactive=False,
                max_height=360,
                max_chars=SHOWN_CHARS,
                visible=False,
                elem_id="sheet-table",
            )
            charts = gr.HTML("", elem_id="sheet-charts")
            downloads = gr.File(label="Downloads", file_count="multiple", interactive=False, elem_id="sheet-downloads")
    # the Gradio endpoint's inputs and output (never shown)
    api_in = [
        gr.File(label="table", visible=False),
        gr.JSON(label="state_columns", visible=False),
        gr.JSON(label="questions", visible=False),
        gr.Textbox("csv", label="output_format", visible=False),
    ]
    api_out = gr.File(label="labelled", visible=False)

    for box in (upload, pasted):
        box.change(sheet.header, [upload, pasted], [columns, status], queue=False, api_visibility=PRIVATE)
    example.click(example_loaded, [upload, pasted], [upload, pasted, *editor.outputs], api_visibility=PRIVATE)
    shown = [status, table, charts, downloads]
    run.click(
        lambda: (status_html("Reading the table…"), rows_table([]), "", None),
        None,
        shown,
        queue=False,
        api_visibility=PRIVATE,
    ).then(None, js=reveal_js("sheet-status")).then(
        sheet.ui_run,
        [upload, pasted, columns, editor.count, *editor.boxes],
        shown,
        api_name="sheet_form",
        concurrency_limit=settings.runs,
        concurrency_id="sheet",
        show_progress="hidden",
        api_visibility=PRIVATE,
    ).then(None, js=reveal_stopped_js())
    stop.click(sheet.ui_stop, None, status, queue=False, show_progress="hidden", api_visibility=PRIVATE).then(
        None, js=reveal_js("sheet-status")
    )
    gr.Button(visible=False).click(
        sheet.endpoint(needs_key),
        api_in,
        api_out,
        api_name="sheet",
        concurrency_limit=settings.runs,
        concurrency_id="sheet",
        api_visibility="undocumented",
    )
