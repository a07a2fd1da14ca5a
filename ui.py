"""The Space's web UI: the Decide, Chat and API tabs (Gradio Blocks) and their handlers.

`build(ctx, ...)` makes the Blocks from the context the API routes serve (the same decision service, batcher and
GPU functions, and the same chat function) and the text users read; it reads nothing else. Each event passes
its caller (`ctx.caller_of(request)`: on ZeroGPU the user's own quota) explicitly, as the routes do.
Gradio endpoints (for `gradio_client`): `/decide`, `/example_ticket`, `/example_moderation`, `/example_sentiment`,
`/chat`, `/health`.
"""

import html
import json
import logging
import os
from typing import Any

import gradio as gr

from blink.auth import ApiKey
from blink.context import Context
from blink.errors import BlinkError
from blink.service import Timing
from blink.systemone import error_body

log = logging.getLogger("blink.space")

SLOTS = 4
TYPES = ["choice", "noul", "score"]

EXAMPLES = {
    "Ticket routing": {
        "state": "Hi, I was charged twice for order #8812 and the second charge still isn't refunded. "
                 "The parcel is also five days late. I need this sorted today.",
        "questions": [
            ("team", "choice", "Which team should handle this ticket?",
             "billing: Charges, refunds and invoices\nshipping: Late, lost or damaged parcels\n"
             "returns: Returns and exchanges\ntechnical: Website and app problems"),
            ("urgent", "noul", "Does this ticket need a reply today?", ""),
        ],
    },
    "Moderation": {
        "state": "Great guide, thanks! Anyone who still disagrees is an idiot and should get off this forum. "
                 "Buy cheap followers at spam-followers.example!!!",
        "questions": [
            ("remove", "noul", "Should a moderator remove this comment?", ""),
            ("category", "choice", "What is the main problem with this comment?",
             "none: Nothing wrong\nharassment: Insults or attacks on people\nspam: Advertising or scams\n"
             "hate: Hate speech against a group"),
        ],
    },
    "Sentiment score": {
        "state": json.dumps({"product": "Trail running shoes", "rating_text":
                             "Comfortable from day one, but the sole started peeling after a month."}, indent=2),
        "questions": [
            ("sentiment", "score", "How positive is this review?",
             "Very negative\nNegative\nMixed\nPositive\nVery positive"),
        ],
    },
}


def parse_state(text: str):
    text = (text or "").strip()
    if text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass
    return text


def build_question(kind: str, instructions: str, options: str) -> dict:
    question: dict[str, Any] = {"type": kind, "instructions": (instructions or "").strip()}
    lines = [line.strip() for line in (options or "").splitlines() if line.strip()]
    if kind == "choice":
        criteria = {}
        for line in lines:
            name, sep, desc = line.partition(":")
            criteria[name.strip()] = desc.strip() or None if sep else None
        question["criteria"] = criteria
    elif kind == "score":
        question["criteria"] = lines
    return question


def bars_html(answers: dict, questions: dict) -> str:
    """One block per question: a bar per option with its probability (the top option highlighted)."""
    parts = ['<div class="blink-results">']
    for qid, ans in answers.items():
        kind = ans.get("type")
        if kind == "noul":
            probs = {"yes": ans["noul"], "no": 1.0 - ans["noul"]}
            summary = f"P(yes) = {ans['noul']:.3f}"
        elif kind == "choice":
            probs = dict(ans["probabilities"])
            summary = f"choice: <b>{html.escape(str(ans['choice']))}</b> · confidence {ans['confidence']:.3f}"
        else:
            legend = ans.get("legend") or {}
            probs = {str(legend.get(k, k)): p for k, p in ans["probabilities"].items()}
            summary = f"score {ans['score']:.3f} (0 = first level) · confidence {ans['confidence']:.3f}"
        top = max(probs, key=probs.get) if probs else None
        title = html.escape(str(questions.get(qid, {}).get("instructions") or qid))
        parts.append(f'<div class="blink-question" data-question="{html.escape(qid)}">'
                     f'<h4>{html.escape(qid)} — {title}</h4><div class="blink-summary">{summary}</div>')
        for option, p in probs.items():
            pct = max(0.0, min(100.0, 100.0 * float(p)))
            cls = "blink-bar blink-top" if option == top else "blink-bar"
            parts.append(f'<div class="{cls}" data-option="{html.escape(option)}" data-p="{p:.6f}">'
                         f'<span class="blink-option">{html.escape(option)}</span>'
                         f'<span class="blink-track"><span class="blink-fill" style="width:{pct:.1f}%;display:block">'
                         f'</span></span><span class="blink-p">{p:.3f}</span></div>')
        parts.append("</div>")
    parts.append("</div>")
    return "".join(parts)


def caveat_html(caveat: str) -> str:
    return f'<div class="blink-caveat">{html.escape(caveat)}</div>' if caveat else ""


def base_url(request: gr.Request | None) -> str:
    host = os.environ.get("SPACE_HOST")
    if host:
        return f"https://{host}"
    headers = getattr(request, "headers", None) or {}
    local = headers.get("host") if hasattr(headers, "get") else None
    return f"http://{local}" if local else f"http://127.0.0.1:{os.environ.get('GRADIO_SERVER_PORT', '7860')}"


def key_note_md(key: ApiKey) -> str:
    """Whether callers need a key (never the key)."""
    if key.required:
        return "This Space requires an API key for /v1/*: send `Authorization: Bearer <key>`."
    return "This Space's API is open: no key needed (any `Authorization` header is ignored)."


def snippets_md(url: str, name: str, key: ApiKey) -> str:
    """The API tab: copy-paste snippets with this Space's own URL, served name and key note."""
    key_note = key_note_md(key)
    required = key.required
    key = "$BLINK_API_KEY" if required else "none"
    return f"""
**Base URL:** `{url}` · OpenAI base URL: `{url}/v1` · {key_note}

**TypeSafe SDK** (`pip install typesafe-sdk`)
```python
from typesafe_sdk import Choice, Noul, TypeSafeClient

with TypeSafeClient(base_url="{url}", api_key="{key}", model="{name}") as client:
    r = client.system_one(
        state="I was charged twice for order #8812. Please fix this today.",
        questions={{
            "team": Choice(instructions="Which team should handle this?",
                           criteria={{"billing": None, "shipping": None, "technical": None}}),
            "urgent": Noul(instructions="Does this need a reply today?"),
        }},
    )
print(r.answers["team"].probabilities)
```

**OpenAI SDK** (`pip install openai`)
```python
from openai import OpenAI

client = OpenAI(base_url="{url}/v1", api_key="{key}")
chat = client.chat.completions.create(model="{name}", messages=[{{"role": "user", "content": "Hello!"}}])
print(chat.choices[0].message.content)
decision = client.decisions.create(
    model="{name}", input="I was charged twice for order #8812.",
    questions=[{{"type": "choice", "name": "team", "instructions": "Which team?",
                 "choices": [{{"value": "billing"}}, {{"value": "shipping"}}]}}],
)
print(decision)
```

**curl**
```bash
curl -s {url}/v1/systemone -H 'Content-Type: application/json' \\
  -H "Authorization: Bearer {key}" \\
  -d '{{"model": "{name}", "state": "I was charged twice.",
       "questions": {{"urgent": {{"type": "noul", "instructions": "Does this need a reply today?"}}}}}}'
curl -s {url}/v1/models
curl -s {url}/healthz
```

**Open WebUI**: Admin Panel → Settings → Connections → OpenAI API → **+** (add connection):
1. URL: `{url}/v1`
2. Key: {"your BLINK_API_KEY" if required else "anything (this Space's API is open)"}
3. Save; the model `{name}` appears in the model list (click *Verify connection* to check). To spend your own
   ZeroGPU quota rather than the shared pool, add the header `X-HF-Authorization: Bearer hf_…` under the
   connection's Headers.
"""


def load_example(name: str):
    example = EXAMPLES[name]
    out: list[Any] = [example["state"], len(example["questions"])]
    for i in range(SLOTS):
        if i < len(example["questions"]):
            qid, kind, instructions, options = example["questions"][i]
            out += [gr.update(visible=True), qid, kind, instructions, options]
        else:
            out += [gr.update(visible=False), f"q{i + 1}", "noul", "", ""]
    return out


def set_count(count: int, delta: int):
    count = max(1, min(SLOTS, int(count or 1) + delta))
    return [count] + [gr.update(visible=i < count) for i in range(SLOTS)]


def text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    if isinstance(content, dict):
        return str(content.get("text", ""))
    return "" if content is None else str(content)


async def decide(ctx: Context, request: gr.Request | None, state: str, count: float, slots) -> tuple:
    """The Decide button: the same service (and batcher, and GPU function) as POST /v1/systemone.
    `slots`: (id, type, instructions, options) for each question slot; the first `count` are asked."""
    questions: dict[str, dict] = {}
    count = max(1, min(SLOTS, int(count or 1)))
    for i in range(count):
        name, kind, instructions, options = slots[4 * i:4 * i + 4]
        qid = (name or "").strip() or f"q{i + 1}"
        questions[qid] = build_question(kind or "noul", instructions, options)
    body = {"model": ctx.served_name, "state": parse_state(state), "questions": questions}
    caller = ctx.caller_of(request) if request is not None else None
    try:
        decided = await ctx.service.decide(body, Timing(), caller=caller)
    except BlinkError as error:
        return (f'<div class="blink-error">Error {error.status}: {html.escape(error.message)}</div>',
                error_body(error))
    except Exception as exc:  # noqa: BLE001 - shown to the user, logged, the UI keeps working
        log.exception("UI decision failed")
        return f'<div class="blink-error">Internal error: {html.escape(type(exc).__name__)}</div>', None
    response = {"model": ctx.served_name, "answers": decided.answers,
                "usage": {"input_tokens": decided.input_tokens, "output_tokens": 0}}
    return bars_html(decided.answers, questions), response


def chat_reply(ctx: Context, max_tokens: int, message, history, request: gr.Request | None):
    """The Chat tab: the same model, the same chat function (GPU generator) as /v1/chat/completions."""
    messages = [{"role": m["role"], "content": text_of(m.get("content"))} for m in (history or [])
                if isinstance(m, dict) and m.get("role") in ("user", "assistant", "system")]
    messages.append({"role": "user", "content": text_of(message)})
    try:
        rendered = ctx.chat_engine.prepare(messages, None, max_tokens)
    except BlinkError as error:
        raise gr.Error(error.message) from None
    caller = ctx.caller_of(request) if request is not None else None
    text = ""
    try:
        for item in ctx.chat(rendered.ids, {"max_tokens": rendered.max_tokens}, caller):
            if isinstance(item, str):
                text += item
                yield text
    except BlinkError as error:
        raise gr.Error(error.message, title=f"Error {error.status}") from None
    if not text:
        yield "(no text)"


def build(ctx: Context, *, title: str, description: str = "", caveat: str = "",
          chat_max_tokens: int = 512) -> gr.Blocks:
    """The UI's Blocks: `ctx` serves it (as it serves the API routes); `title`, `description` and `caveat` are
    what users read (the caveat sits next to answers); `chat_max_tokens` caps a Chat-tab turn."""
    with gr.Blocks(title=title) as demo:
        gr.HTML(f'<div class="blink-header"><h1>{html.escape(title)}</h1><p>{html.escape(description)}</p></div>')
        with gr.Tabs():
            with gr.Tab("Decide", id="decide"):
                decide_tab(ctx, caveat)
            with gr.Tab("Chat", id="chat"):
                chat_tab(ctx, caveat, chat_max_tokens)
            with gr.Tab("API", id="api"):
                api_tab(ctx, demo)
    return demo


def decide_tab(ctx: Context, caveat: str) -> None:
    """A state, up to SLOTS questions, one-click examples; a probability bar per option and the raw response."""

    async def ui_decide(request: gr.Request, state: str, count: float, *slots: str):
        return await decide(ctx, request, state, count, slots)

    with gr.Row():
        with gr.Column(scale=1):
            state = gr.Textbox(label="State (text or JSON)", lines=6, elem_id="blink-state",
                               placeholder="The text (or JSON) the questions are about")
            with gr.Row():
                example_buttons = {name: gr.Button(name, size="sm", elem_id="example-" + name.split()[0].lower())
                                   for name in EXAMPLES}
            count = gr.Number(value=1, visible=False, precision=0)
            slots, groups = [], []
            for i in range(SLOTS):
                with gr.Group(visible=i == 0) as group:
                    with gr.Row():
                        q_name = gr.Textbox(label=f"Question {i + 1} id", value=f"q{i + 1}", scale=1,
                                            elem_id=f"q{i}-name")
                        q_type = gr.Dropdown(TYPES, value="noul", label="Type", scale=1, elem_id=f"q{i}-type")
                    q_instr = gr.Textbox(label="Instructions", elem_id=f"q{i}-instructions",
                                         placeholder="What should the model decide?")
                    q_opts = gr.Textbox(label="Options (choice: one per line, `name: description`) · levels "
                                              "(score: one per line, lowest first) · unused for noul",
                                        lines=3, elem_id=f"q{i}-options")
                groups.append(group)
                slots.append((q_name, q_type, q_instr, q_opts))
            with gr.Row():
                add = gr.Button("+ question", size="sm")
                remove = gr.Button("− question", size="sm")
            decide_button = gr.Button("Decide", variant="primary", elem_id="blink-decide")
        with gr.Column(scale=1):
            gr.HTML(caveat_html(caveat))
            results = gr.HTML(elem_id="blink-results", value="")
            raw = gr.JSON(label="Raw response (what POST /v1/systemone returns)", elem_id="blink-raw")

    slot_outputs = [c for slot, group in zip(slots, groups) for c in (group, *slot)]
    for name, button in example_buttons.items():
        button.click(lambda n=name: load_example(n), None, [state, count, *slot_outputs],
                     api_name="example_" + name.split()[0].lower())
    add.click(lambda c: set_count(c, +1), count, [count, *groups], api_visibility="undocumented")
    remove.click(lambda c: set_count(c, -1), count, [count, *groups], api_visibility="undocumented")
    decide_button.click(ui_decide, [state, count, *[c for slot in slots for c in slot]], [results, raw],
                        api_name="decide")


def chat_tab(ctx: Context, caveat: str, max_tokens: int) -> None:
    def ui_chat(message, history, request: gr.Request):
        yield from chat_reply(ctx, max_tokens, message, history, request)

    gr.HTML(caveat_html(caveat))
    gr.ChatInterface(fn=ui_chat, api_name="chat")


def api_tab(ctx: Context, demo: gr.Blocks) -> None:
    """Snippets with this Space's own URL (filled in when the page loads) and the live /healthz figures."""

    def health_json() -> dict:
        return ctx.current_health()

    def ui_load(request: gr.Request):
        return snippets_md(base_url(request), ctx.served_name, ctx.auth), health_json()

    snippets = gr.Markdown(elem_classes=["blink-snippet"])
    with gr.Row():
        gr.Markdown("**Live health** (`GET /healthz`): requested vs used GPU seconds under `gpu_seconds`.")
        refresh = gr.Button("Refresh", size="sm")
    health = gr.JSON(label="/healthz")
    refresh.click(health_json, None, health, api_name="health")
    demo.load(ui_load, None, [snippets, health], api_visibility="undocumented")
