"""The Moderate view: a text (and an image, where the model reads images) -> the moderation policy's categories as
bars, each category's threshold drawn across its bar, the flagged ones marked, and the raw response. The Moderate
button goes through the same steps as POST /v1/moderations (blink.api.moderations.moderation_body: check,
admission, the decision service, its batcher and GPU function): the input is one decision's state and each
category a `noul` question over it, answered in one pass."""

import base64
import html
import io
import logging

import gradio as gr

from blink.api.moderations import moderation_body
from blink.api.openai.protocol import render
from blink.context import Context
from blink.errors import BlinkError
from blink.moderation_policy import DEFAULT_FILE, Policy
from space.ui_answers import bar_html
from space.ui_shared import PRIVATE, caveat_html, error_html, reveal_js, reveal_refused_js, ui_class

log = logging.getLogger("blink.space")

EXAMPLES = {
    "Forum insult": "Great guide, thanks! Anyone who still disagrees is an idiot and should get off this forum.",
    "Threat": "If you post my address again I will come to your house and hurt you.",
    "Harmless": "The new bus timetable starts on Monday; the 42 now runs every ten minutes.",
}


def image_part(image) -> dict:
    """An image from the Image box (PIL) as an `image_url` part with a PNG data URL, as a client would send it."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
    return {"type": "image_url", "image_url": {"url": url}}


def input_of(text: str, image=None):
    """The request's `input`: the text alone as a string; with an image, a list of parts (the text first)."""
    if image is None:
        return text
    return ([{"type": "text", "text": text}] if (text or "").strip() else []) + [image_part(image)]


def form_problem(text: str, image=None) -> str | None:
    if not (text or "").strip() and image is None:
        return "Text: write the text to moderate."
    return None


def form_check(text: str, *image):
    """Before the request: an empty form shown on the Text box, as Decide shows its own (`image`: the Image box's
    value, where the view has one). With one input Gradio takes one result, not a list of one."""
    problem = form_problem(text, image[0] if image else None) or ""
    checks = [gr.validate(not problem, problem)] + [gr.validate(True, "") for _ in image]
    return checks if image else checks[0]


DEMO_NOTE = (
    "This Space serves blink's demo model: its random weights put every category's score near 0.5, at or above "
    "most thresholds, so any text is flagged, harmless or not. Real weights score each category on what the text "
    "says."
)


def error_message(error: BlinkError) -> str:
    """A refusal from the moderation wire, naming the box (Text or Image) rather than the API field."""
    loc = list(getattr(error, "loc", None) or [])
    if loc[:2] == ["body", "input"]:
        return f"{'Image' if 'image' in error.message.lower() else 'Text'}: {error.message}"
    return f"Error {error.status}: {error.message}"


def categories_html(policy: Policy, result: dict) -> str:
    """A bar per category in the policy's order, its threshold drawn across it; the flagged ones marked."""
    flagged = [c.name for c in policy.categories if result["categories"][c.name]]
    verdict = (
        f"<b>flagged</b>: {html.escape(', '.join(flagged))}"
        if flagged
        else "<b>not flagged</b>: no category at or above its threshold"
    )
    parts = [
        '<div class="blink-results blink-moderation">',
        f'<div class="blink-summary" id="moderate-verdict">{verdict} · the line across each bar is the '
        "category's threshold; a category is flagged at or above it</div>",
    ]
    for c in policy.categories:
        p = result["category_scores"][c.name]
        cls = "blink-flagged" if result["categories"][c.name] else ""
        parts.append(bar_html(c.name, p, desc=f"threshold {c.threshold:.2f}", mark=c.threshold, cls=cls))
    parts.append("</div>")
    return "".join(parts)


async def moderate(ctx: Context, request: gr.Request | None, text: str, image=None) -> tuple:
    """The Moderate button: the same steps as POST /v1/moderations; the bars and the raw response, or an error."""
    problem = form_problem(text, image)
    if problem:
        return error_html(problem), None
    body = {"model": ctx.served_name, "input": input_of(text, image)}
    caller = ctx.caller_of(request) if request is not None else None
    try:
        response = await moderation_body(ctx, body, caller=caller, caller_class=ui_class(ctx, request))
    except BlinkError as error:
        return error_html(error_message(error)), render(error)[1]
    except Exception as exc:  # noqa: BLE001 - shown to the user, logged, the UI keeps working
        log.exception("UI moderation failed")
        return error_html(f"Internal error: {type(exc).__name__}"), None
    return categories_html(ctx.moderation, response["results"][0]), response


def moderate_tab(ctx: Context, caveat: str, demo_model: bool = False) -> None:
    """A text (and an image where the model reads images), one-click examples; a bar per category. `demo_model`:
    the view says why the demo's random weights flag everything."""
    reads_images = ctx.service.planner.accepts_images

    async def ui_moderate(request: gr.Request, text: str, image=None):
        return await moderate(ctx, request, text, image)

    with gr.Row():
        with gr.Column(scale=1):
            text = gr.Textbox(label="Text", lines=5, elem_id="moderate-text", placeholder="The text to moderate")
            inputs = [text]
            if reads_images:  # a text-only model: no Image box (the wire would refuse the image)
                inputs.append(gr.Image(label="Image (optional)", type="pil", elem_id="moderate-image"))
            with gr.Row():
                example_buttons = {
                    name: gr.Button(name, size="sm", elem_id="moderate-example-" + name.split()[0].lower())
                    for name in EXAMPLES
                }
            moderate_button = gr.Button("Moderate", variant="primary", elem_id="moderate-button")
            gr.Markdown(f"Policy: {len(ctx.moderation.categories)} categories ({html.escape(policy_name(ctx))}).")
        with gr.Column(scale=1):
            gr.HTML(caveat_html(caveat))
            if demo_model:
                gr.HTML(f'<div class="blink-demo" id="moderate-demo-note">{html.escape(DEMO_NOTE)}</div>')
            results = gr.HTML(elem_id="moderate-results", value="")
            raw = gr.JSON(label="Raw response (what POST /v1/moderations returns)", elem_id="moderate-raw")

    for name, button in example_buttons.items():
        button.click(  # a new form: the previous bars go
            lambda n=name: (EXAMPLES[n], *([None] if reads_images else []), "", None),
            None,
            [*inputs, results, raw],
            api_name="moderate_example_" + name.split()[0].lower(),
            api_visibility=PRIVATE,
        )
    # the previous bars go first, whatever follows: new ones or an error
    moderate_button.click(None, None, None, js=reveal_refused_js(), api_visibility=PRIVATE)  # a refused box into view
    moderate_button.click(lambda: ("", None), None, [results, raw], queue=False, api_visibility=PRIVATE).then(
        ui_moderate,
        inputs,
        [results, raw],
        api_name="moderate_form",
        validator=form_check,
        show_progress_on=results,
        api_visibility=PRIVATE,
    ).then(None, js=reveal_js("moderate-results"))  # the answer (or the error) brought into view


def policy_name(ctx: Context) -> str:
    """The policy file's name: the default (OpenAI's categories) or the Space's own."""
    source = ctx.moderation.source
    return "OpenAI's categories, the default" if source == str(DEFAULT_FILE) else source.rsplit("/", 1)[-1]
