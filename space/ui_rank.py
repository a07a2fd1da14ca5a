"""The Rank view: a query and documents (one per line) -> the documents reordered by relevance, a bar each, and the
raw response. The Rank button goes through the same steps as POST /v1/rerank (blink.api.rerank.rerank_body: check,
admission with a place per document, the decision service, its batcher and GPU function): each document is a
decision's state and one `noul` question carries the query, so a relevance is the probability of "yes"."""

import html
import logging
import re

import gradio as gr

from blink.api.rerank import render, rerank_body
from blink.context import Context
from blink.errors import BlinkError
from space.ui_answers import bar_html
from space.ui_shared import PRIVATE, caveat_html, error_html, reveal_js, reveal_refused_js, ui_class

log = logging.getLogger("blink.space")
SHOWN_CHARS = 400  # of a document, under its bar

EXAMPLES = {
    "Late parcel": (
        "My parcel is five days late, what can I do?",
        [
            "Refunds are paid to the original card within 5 working days of the return being received.",
            "If a parcel is more than three days late, contact us and we reship it or refund the shipping cost.",
            "Our shop opens at 9:00 and closes at 18:00, Monday to Saturday.",
            "Tracking numbers are emailed when the parcel leaves the warehouse; delays show on the carrier's page.",
        ],
    ),
    "Python sorting": (
        "How do I sort a list of numbers in Python?",
        [
            "sorted(numbers) returns a new sorted list; numbers.sort() sorts the list in place.",
            "A Python dictionary maps keys to values and keeps insertion order.",
            "The Great Barrier Reef is the world's largest coral reef system.",
            "Pass reverse=True to sorted() or list.sort() for descending order.",
        ],
    ),
}


def documents_of(text: str) -> list[str]:
    """The Documents box: one document per non-empty line."""
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def form_problem(query: str, documents: list[str], most: int) -> str | None:
    """What the form lacks, in the boxes' words (the wire would refuse it too, in its field names)."""
    if not (query or "").strip():
        return "Query: write what the documents are ranked for."
    if not documents:
        return "Documents: write at least one document, one per line."
    if len(documents) > most:
        return f"Documents: {len(documents)} lines; this Space ranks at most {most} documents at once."
    return None


def form_check(query: str, documents: str, most: int) -> list:
    """Before the request: the form's gap shown on its box (Query or Documents), as Decide shows its own."""
    problem = form_problem(query, documents_of(documents), most) or ""
    return [gr.validate(not problem.startswith(box), problem) for box in ("Query:", "Documents:")]


def error_message(error: BlinkError) -> str:
    """A refusal from the rerank wire, naming the box (and the document's line) rather than the API field."""
    loc = list(getattr(error, "loc", None) or [])
    message = error.message
    if loc[:2] == ["body", "query"]:
        return f"Query: {message}"
    if loc[:2] == ["body", "documents"] and len(loc) > 2 and isinstance(loc[2], int):
        if error.kind == "context_length_exceeded":  # the wire's advice names its fields: here, what the page offers
            limit = re.search(r"limit of (\d[\d,]*) tokens", message)
            most = f" ({limit.group(1)} tokens for the document, the query and the framing together)" if limit else ""
            return (
                f"Document {loc[2] + 1}: too long to rank with this query on this Space{most}. Nothing was cut: "
                "shorten the line, or split it over several lines (each line is a document of its own)."
            )
        return f"Document {loc[2] + 1}: " + re.sub(r"documents\[\d+\]", "this document", message)
    if loc[:2] == ["body", "documents"]:
        return f"Documents: {message}"
    return f"Error {error.status}: {message}"


def ranking_html(response: dict, wording: str) -> str:
    """The documents in the answer's order, a bar each (its relevance), the first highlighted."""
    results = response["results"]
    parts = [
        '<div class="blink-results blink-rank">',
        f'<div class="blink-summary">{len(results)} document{"s" if len(results) != 1 else ""}, most relevant first. '
        f"Relevance = P(yes) to: <i>{html.escape(wording)}</i></div>",
    ]
    for rank, result in enumerate(results):
        name = f"#{rank + 1} · document {result['index'] + 1}"
        text = result.get("document", {}).get("text") or ""
        text = text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"  # the raw response has it whole
        parts.append(bar_html(name, result["relevance_score"], top=rank == 0, desc=text))
    parts.append("</div>")
    return "".join(parts)


async def rank(ctx: Context, request: gr.Request | None, query: str, documents: str) -> tuple:
    """The Rank button: the same steps as POST /v1/rerank; the bars and the raw response, or an error and None."""
    texts = documents_of(documents)
    problem = form_problem(query, texts, ctx.limits.max_documents)
    if problem:
        return error_html(problem), None
    body = {"model": ctx.served_name, "query": query, "documents": texts}
    caller = ctx.caller_of(request) if request is not None else None
    try:
        response = await rerank_body(ctx, body, caller=caller, caller_class=ui_class(ctx, request))
    except BlinkError as error:
        return error_html(error_message(error)), render(error)[1]
    except Exception as exc:  # noqa: BLE001 - shown to the user, logged, the UI keeps working
        log.exception("UI rerank failed")
        return error_html(f"Internal error: {type(exc).__name__}"), None
    return ranking_html(response, ctx.rerank_question.replace("{query}", query)), response


def rank_tab(ctx: Context, caveat: str) -> None:
    """A query, documents one per line, one-click examples; the documents reordered with their bars."""

    async def ui_rank(request: gr.Request, query: str, documents: str):
        return await rank(ctx, request, query, documents)

    with gr.Row():
        with gr.Column(scale=1):
            query = gr.Textbox(label="Query", elem_id="rank-query", placeholder="What the documents are ranked for")
            documents = gr.Textbox(
                label="Documents, one per line",
                lines=8,
                elem_id="rank-documents",
                info=f"Each line is a document (at most {ctx.limits.max_documents}); empty lines are left out.",
            )
            with gr.Row():
                example_buttons = {
                    name: gr.Button(name, size="sm", elem_id="rank-example-" + name.split()[0].lower())
                    for name in EXAMPLES
                }
            rank_button = gr.Button("Rank", variant="primary", elem_id="rank-button")
        with gr.Column(scale=1):
            gr.HTML(caveat_html(caveat))
            results = gr.HTML(elem_id="rank-results", value="")
            raw = gr.JSON(label="Raw response (what POST /v1/rerank returns)", elem_id="rank-raw")

    for name, button in example_buttons.items():
        button.click(  # a new form: the previous ranking goes
            lambda n=name: (EXAMPLES[n][0], "\n".join(EXAMPLES[n][1]), "", None),
            None,
            [query, documents, results, raw],
            api_name="rank_example_" + name.split()[0].lower(),
            api_visibility=PRIVATE,
        )
    # the previous ranking goes first, whatever follows: a new one or an error
    rank_button.click(None, None, None, js=reveal_refused_js(), api_visibility=PRIVATE)  # a refused box into view
    rank_button.click(lambda: ("", None), None, [results, raw], queue=False, api_visibility=PRIVATE).then(
        ui_rank,
        [query, documents],
        [results, raw],
        api_name="rank_form",
        validator=lambda q, docs: form_check(q, docs, ctx.limits.max_documents),
        show_progress_on=results,
        api_visibility=PRIVATE,
    ).then(None, js=reveal_js("rank-results"))  # the answer (or the error) brought into view
