"""The Decide tab: a state, up to SLOTS questions, one-click examples, the Calibration menu; a probability bar per
option and the raw response. The Decide button goes through the same decision service (and batcher, and GPU
function) as POST /v1/systemone."""

import html
import json
import logging

import gradio as gr

from blink.api.systemone import decide_body, error_body
from blink.context import Context
from blink.errors import BlinkError
from space.ui_answers import bars_html
from space.ui_calibration import (
    CALIBRATION_INFO,
    SPACE_DEFAULT,
    calibration_choices,
    chosen_calibration,
    decide_caveat,
)
from space.ui_form import (
    SLOTS,
    active_slots,
    box_name,
    build_question,
    form_problems,
    question_id,
    state_note,
    state_value,
    wire_error_message,
)
from space.ui_questions import filled, question_editor
from space.ui_shared import PRIVATE, caveat_html, error_html, reveal_js, reveal_refused_js, ui_class

log = logging.getLogger("blink.space")

EXAMPLES = {
    "Ticket routing": {
        "state": "Hi, I was charged twice for order #8812 and the second charge still isn't refunded. "
        "The parcel is also five days late. I need this sorted today.",
        "questions": [
            (
                "team",
                "choice",
                "Which team should handle this ticket?",
                "billing: Charges, refunds and invoices\nshipping: Late, lost or damaged parcels\n"
                "returns: Returns and exchanges\ntechnical: Website and app problems",
            ),
            ("urgent", "noul", "Does this ticket need a reply today?", ""),
        ],
    },
    "Moderation": {
        "state": "Great guide, thanks! Anyone who still disagrees is an idiot and should get off this forum. "
        "Buy cheap followers at spam-followers.example!!!",
        "questions": [
            ("remove", "noul", "Should a moderator remove this comment?", ""),
            (
                "category",
                "choice",
                "What is the main problem with this comment?",
                "none: Nothing wrong\nharassment: Insults or attacks on people\nspam: Advertising or scams\n"
                "hate: Hate speech against a group",
            ),
        ],
    },
    "Sentiment score": {
        "state": json.dumps(
            {
                "product": "Trail running shoes",
                "rating_text": "Comfortable from day one, but the sole started peeling after a month.",
            },
            indent=2,
        ),
        "questions": [
            (
                "sentiment",
                "score",
                "How positive is this review?",
                "Very negative\nNegative\nMixed\nPositive\nVery positive",
            ),
        ],
    },
}


def load_example(name: str):
    """The example's state, then the questions editor's values."""
    example = EXAMPLES[name]
    return [example["state"], *filled(example["questions"])]


async def decide(
    ctx: Context, request: gr.Request | None, state: str, count: float, slots, calibration: str | None = None
) -> tuple:
    """The Decide button: the same service (and batcher, and GPU function) as POST /v1/systemone.
    `slots`: (id, type, instructions, options) for each question slot; the first `count` are asked;
    `calibration`: the Calibration menu's value (sent as `x_calibration`, unless it is the Space's default)."""
    problems = form_problems(state, count, slots, ctx.limits)
    if problems:  # the validator shows them next to their boxes; a caller without the page gets them here
        return error_html(" · ".join(f"{box_name(i)}: {m}" for i, m in sorted(problems.items()))), None
    questions: dict[str, dict] = {}
    for i in range(active_slots(count)):
        name, kind, instructions, options = slots[4 * i : 4 * i + 4]
        questions[question_id(name, i)] = build_question(kind or "noul", instructions, options)
    value, note = state_value(state)
    body = {"model": ctx.served_name, "state": value, "questions": questions}
    if (mode := chosen_calibration(calibration)) is not None:
        body["x_calibration"] = mode
    caller = ctx.caller_of(request) if request is not None else None
    try:
        response = await decide_body(ctx, body, caller=caller, caller_class=ui_class(ctx, request))
    except BlinkError as error:
        return error_html(wire_error_message(error, list(questions))), error_body(error)
    except Exception as exc:  # noqa: BLE001 - shown to the user, logged, the UI keeps working
        log.exception("UI decision failed")
        return error_html(f"Internal error: {type(exc).__name__}"), None
    # the notes sit above the answers (a toast would cover the bars, and outlive them)
    notice = "".join(f'<div class="blink-note">{html.escape(n)}</div>' for n in (state_note(state), note) if n)
    return notice + bars_html(response["answers"], questions), response


def state_note_html(state: str) -> str:
    """Beside the State box: what the form says about it (an empty state), or nothing."""
    note = state_note(state)
    return f'<div class="blink-note" id="blink-state-empty">{html.escape(note)}</div>' if note else ""


def decide_tab(ctx: Context, caveat: str) -> None:
    """A state, up to SLOTS questions, one-click examples; a probability bar per option and the raw response."""

    # the event's inputs: the state, the number of questions shown, the question slots' boxes, then the Calibration
    # menu (ui_form numbers the boxes in this order)
    async def ui_decide(request: gr.Request, state: str, count: float, *boxes: str):
        return await decide(ctx, request, state, count, boxes[: 4 * SLOTS], boxes[4 * SLOTS])

    def check_form(state: str, count: float, *boxes: str) -> list:
        """Before the request: each problem shown next to the box it concerns (the menu is always valid)."""
        problems = form_problems(state, count, boxes[: 4 * SLOTS], ctx.limits)
        return [
            gr.validate(i not in problems, f"{box_name(i)}: {problems[i]}" if i in problems else "")
            for i in range(2 + 4 * SLOTS)
        ] + [gr.validate(True, "")]

    loaded = bool(ctx.health.get("calibration", {}).get("loaded"))
    default = ctx.health.get("x_calibration") or "fitted"

    def caveat_for(value) -> str:
        return caveat_html(decide_caveat(caveat, chosen_calibration(value) or default, loaded))

    with gr.Row():
        with gr.Column(scale=1):
            state = gr.Textbox(
                label="State (text or JSON)",
                lines=6,
                elem_id="blink-state",
                placeholder="The text (or JSON) the questions are about",
            )
            # nothing on a fresh page: the note comes once the person empties the box (or presses Decide with it empty)
            state_box_note = gr.HTML("", visible=False, elem_id="blink-state-note", padding=False, container=False)
            with gr.Row():
                example_buttons = {
                    name: gr.Button(name, size="sm", elem_id="example-" + name.split()[0].lower()) for name in EXAMPLES
                }
            editor = question_editor()
            calibration = gr.Dropdown(
                calibration_choices(default, loaded),
                value=SPACE_DEFAULT,
                label="Calibration",
                info=CALIBRATION_INFO,
                elem_id="blink-calibration",
            )
            decide_button = gr.Button("Decide", variant="primary", elem_id="blink-decide")
        with gr.Column(scale=1):
            caveat_box = gr.HTML(caveat_for(SPACE_DEFAULT), elem_id="blink-caveat")
            results = gr.HTML(elem_id="blink-results", value="")
            raw = gr.JSON(label="Raw response (what POST /v1/systemone returns)", elem_id="blink-raw")

    for name, button in example_buttons.items():
        button.click(  # a new form: the previous answers go
            lambda n=name: [*load_example(n), "", None],
            None,
            [state, *editor.outputs, results, raw],
            api_name="example_" + name.split()[0].lower(),
            api_visibility=PRIVATE,
        )
    # an empty state is told beside its box as soon as it is empty (loaded, cleared or typed), not only on Decide
    # (hidden when there is nothing to say: an empty block still takes room between the box and the examples)
    state.change(
        lambda text: gr.update(value=state_note_html(text), visible=bool(state_note_html(text))),
        state,
        state_box_note,
        queue=False,
        api_visibility=PRIVATE,
    )
    # the caveat says what the chosen calibration does; answers got another way go with the old caveat
    calibration.change(
        lambda value: (caveat_for(value), "", None),
        calibration,
        [caveat_box, results, raw],
        queue=False,
        api_name="calibration",
        api_visibility=PRIVATE,
    )
    # the previous answers go first, whatever follows: new answers, a refusal next to its box, or an error
    decide_button.click(None, None, None, js=reveal_refused_js(), api_visibility=PRIVATE)  # a refused box into view
    decide_button.click(lambda: ("", None), None, [results, raw], queue=False, api_visibility=PRIVATE).then(
        ui_decide,
        [state, editor.count, *editor.boxes, calibration],
        [results, raw],
        api_name="decide_form",
        validator=check_form,
        show_progress_on=results,
        api_visibility=PRIVATE,
    ).then(None, js=reveal_js("blink-results"))  # the answer (or the error) brought into view
