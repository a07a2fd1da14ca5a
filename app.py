"""The blink Space: decision models over HTTP and in a web UI, on ZeroGPU, a GPU box, a laptop or CPU.

`python app.py` is the whole thing (port from GRADIO_SERVER_PORT, default 7860; `BLINK_MODEL=demo` for an
offline try-out). One process: Gradio launches (ZeroGPU schedules only what a launched Gradio app calls),
and blink's API routes (/v1/systemone, /v1/models, /healthz, /v1/chat/completions, /v1/decisions) are
grafted ahead of Gradio's with `launch(app_kwargs={"routes": ...})`, so they answer from the first request.

Order matters on ZeroGPU, and this file follows it:
1. `import spaces` before anything touches CUDA (it patches torch in ZeroGPU mode);
2. settings from space_config.py, each overridable by its BLINK_* environment variable;
3. the model loaded at module scope (an adapter merged on CPU, then moved once: on ZeroGPU `.to("cuda")`
   is emulated and the weights are packed at launch);
4. the GPU functions decorated at module scope, each asking for the seconds its work needs (its token
   counts, blink/durations.py, calibrated from the compute times the calls report);
5. the UI, the queue with explicit limits, `launch()`.

Only plain data crosses into the GPU worker: token ids and read plans in, floats or text out. Decisions
(API and UI alike) go through blink's batcher, the one thread that makes decision GPU calls; a batch holds
one caller's requests, and that caller's ZeroGPU identity (`x-ip-token`) is set for the call, so users
spend their own quota rather than the Space's anonymous pool. ZeroGPU's refusals become HTTP statuses in
each wire's error shape: quota 429 (Retry-After, x-should-retry: false), no GPU / queue timeout 503
(Retry-After), worker failure 500 (the reason logged).
"""

import spaces  # noqa: I001 - first, before anything imports torch (ZeroGPU patches it on import)

import html
import json
import logging
import os
import time
from typing import Any

import space_config
from blink.loading import go_offline_if_local
from blink.settings import KNOBS, Settings

log = logging.getLogger("blink.space")
logging.basicConfig(level=os.environ.get("BLINK_LOG_LEVEL", "info").upper(),
                    format="%(asctime)s %(name)s %(levelname)s %(message)s")


def config_values(module) -> dict:
    """space_config's values for blink's knobs (`MODEL` -> `model`, ...)."""
    return {name: getattr(module, name.upper()) for name, *_ in KNOBS if hasattr(module, name.upper())}


def space_value(name: str, kind=str):
    """A Space-only setting: env BLINK_<NAME> overrides space_config.<NAME>."""
    default = getattr(space_config, name, None)
    raw = os.environ.get(f"BLINK_{name}")
    if raw is None:
        return default
    try:
        return kind(raw)
    except ValueError:
        raise SystemExit(f"BLINK_{name}={raw!r}: expected {kind.__name__}") from None


def settings_values() -> dict:
    values = config_values(space_config)
    if "enable_thinking" not in values:  # older configs say it as a chat-template variable
        kwargs = getattr(space_config, "CHAT_TEMPLATE_KWARGS", None) or {}
        if "enable_thinking" in kwargs:
            values["enable_thinking"] = bool(kwargs["enable_thinking"])
    if os.environ.get("BLINK_MODEL") and os.environ["BLINK_MODEL"] != values.get("model"):
        # the configured revision and adapter belong to the configured model, not to an override
        for name in ("revision", "adapter", "adapter_revision"):
            values.pop(name, None)
    return values


SETTINGS = Settings.from_values(settings_values())
go_offline_if_local(SETTINGS.model)  # before the Hub libraries are imported

ZERO_GPU = bool(spaces.config.Config.zero_gpu)
TITLE = space_value("TITLE") or SETTINGS.served_name
DESCRIPTION = space_value("DESCRIPTION") or ""
CAVEAT = space_value("CAVEAT") or ""
GPU_SIZE = space_value("GPU_SIZE") or None
MAX_OUTPUT_TOKENS = SETTINGS.max_output_tokens
UI_CHAT_MAX_TOKENS = space_value("UI_CHAT_MAX_TOKENS", int) or 512
DURATION_MAX_S = space_value("DURATION_MAX_S", int)
CHAT_DURATION_MAX_S = space_value("CHAT_DURATION_MAX_S", int)

import gradio as gr  # noqa: E402

import auth  # noqa: E402
import theme  # noqa: E402
from zerogpu import as_caller, caller_from_headers, keep_tokens_out_of_logs, map_gpu_errors, with_caller  # noqa: E402
from blink.batching import batch_caller, request_caller  # noqa: E402
from blink.chat import ChatEnd, ChatEngine  # noqa: E402
from blink import durations  # noqa: E402
from blink.errors import BlinkError, GPUUnavailable, QuotaExceeded  # noqa: E402
from blink.loading import load  # noqa: E402
from blink.prompts import processed_tokens  # noqa: E402
from blink.server import api_routes, build_context  # noqa: E402
from blink.service import Timing  # noqa: E402
from blink.systemone import error_body  # noqa: E402

keep_tokens_out_of_logs()  # callers' ZeroGPU tokens ride in the scheduler's URLs

# --- the model, at module scope ----------------------------------------------------------------------------
LOADED = load(SETTINGS.model, SETTINGS.revision, SETTINGS.adapter, SETTINGS.adapter_revision,
              vision=SETTINGS.vision, vision_tower=SETTINGS.vision_tower)
CHAT_ENGINE = ChatEngine(LOADED, SETTINGS.limits, system_prompt=SETTINGS.system_prompt,
                         max_output_tokens=SETTINGS.max_output_tokens, enable_thinking=SETTINGS.enable_thinking,
                         image_limits=SETTINGS.image_limits)

ESTIMATOR = durations.configured(space_value)


# --- the GPU functions (module scope, plain def / plain generator) -----------------------------------------
def plan_tokens(plans) -> int:
    return sum(processed_tokens(plan) for plan in plans)


def decide_duration(plans) -> int:
    """Seconds a batch of decisions asks for: its prefill tokens (shared prefixes counted once)."""
    seconds = ESTIMATOR.seconds(plan_tokens(plans), 0, DURATION_MAX_S)
    ESTIMATOR.requested("decide", seconds)
    return seconds


@spaces.GPU(duration=decide_duration, size=GPU_SIZE)
def gpu_decide(plans):
    return CTX.engine.score_many(plans)


def chat_duration(ids, params) -> int:
    """Seconds a chat turn asks for: its prompt tokens (prefill) and its output budget (decode)."""
    budget = int(params.get("max_tokens") or MAX_OUTPUT_TOKENS)
    seconds = ESTIMATOR.seconds(len(ids), budget, CHAT_DURATION_MAX_S)
    ESTIMATOR.requested("chat", seconds)
    return seconds


@spaces.GPU(duration=chat_duration, size=GPU_SIZE)
def gpu_chat(ids, params):
    """ChatEngine.generate in the GPU worker; its final ChatEnd carries the compute seconds measured there."""
    yield from CHAT_ENGINE.generate(ids, params)


# --- what blink calls (main process) -----------------------------------------------------------------------
def gpu_failure(exc: BaseException) -> BaseException:
    """A GPU call's exception as the wire error; a failure in the worker (not a refusal by the scheduler)
    makes the next call cold again: ZeroGPU does not reuse a failed worker."""
    mapped = map_gpu_errors(exc, ZERO_GPU)
    if not isinstance(mapped, (QuotaExceeded, GPUUnavailable)):
        ESTIMATOR.failed()
    return mapped


def decide(plans) -> dict:
    """The batcher's GPU step: one call for a batch of one caller's requests, as that caller."""
    if not ZERO_GPU:
        decide_duration(plans)  # ZeroGPU calls it itself; elsewhere only for the accounting
    start = time.perf_counter()
    try:
        with as_caller(batch_caller.get()):
            out = gpu_decide(plans)
    except Exception as exc:  # noqa: BLE001 - mapped to the wire's status; the batcher hands it to each request
        raise gpu_failure(exc) from None
    compute = float(out.get("compute_s", 0.0))
    ESTIMATOR.observe(plan_tokens(plans), 0, compute)
    ESTIMATOR.used("decide", compute, time.perf_counter() - start)
    return out


def chat(ids, params):
    """A chat turn as a plain generator (str deltas, then one ChatEnd), as the caller who asked. Closing it
    (a client that disconnected) closes the GPU generator, which stops the worker and releases the GPU."""
    return _chat_stream(list(ids), dict(params), request_caller.get())


def _chat_stream(ids, params, caller):
    if not ZERO_GPU:
        chat_duration(ids, params)
    start = time.perf_counter()
    gen = gpu_chat(ids, params)
    done = False
    try:
        first = True
        while True:
            try:
                if first:  # the GPU is scheduled at the first step: as the caller
                    with as_caller(caller):
                        item = next(gen)
                    first = False
                else:
                    item = next(gen)
            except StopIteration:
                break
            except Exception as exc:  # noqa: BLE001
                raise gpu_failure(exc) from None
            if isinstance(item, ChatEnd):  # the last item: let the GPU generator finish, so the worker ends cleanly
                try:
                    next(gen)
                except StopIteration:
                    pass
                except Exception as exc:  # noqa: BLE001
                    raise gpu_failure(exc) from None
                ESTIMATOR.observe(item.prompt_tokens, item.completion_tokens, item.compute_s)
                ESTIMATOR.used("chat", item.compute_s, time.perf_counter() - start)
                done = True
            yield item
    finally:
        gen.close()
        if not done:
            ESTIMATOR.used("chat", 0.0, time.perf_counter() - start)


# --- the context, the routes -------------------------------------------------------------------------------
CTX = build_context(SETTINGS, decide=decide, chat=chat, loaded=LOADED, warmup=not ZERO_GPU, chat_engine=CHAT_ENGINE)
CTX.auth = auth.api_key(SETTINGS)
CTX.description = DESCRIPTION or CTX.description
CTX.live_health.append(lambda: {"gpu_seconds": ESTIMATOR.health(), "zero_gpu": ZERO_GPU,
                                "gpu_size": GPU_SIZE if ZERO_GPU else None})


def routes() -> list:
    return [with_caller(route) for route in api_routes(CTX)]


# --- the web UI --------------------------------------------------------------------------------------------
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


def caveat_html() -> str:
    return f'<div class="blink-caveat">{html.escape(CAVEAT)}</div>' if CAVEAT else ""


def base_url(request: gr.Request | None) -> str:
    host = os.environ.get("SPACE_HOST")
    if host:
        return f"https://{host}"
    headers = getattr(request, "headers", None) or {}
    local = headers.get("host") if hasattr(headers, "get") else None
    return f"http://{local}" if local else f"http://127.0.0.1:{os.environ.get('GRADIO_SERVER_PORT', '7860')}"


def snippets_md(url: str) -> str:
    name = CTX.served_name
    key_note = auth.describe(CTX.auth)
    key = "$BLINK_API_KEY" if CTX.auth.required else "none"
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
  -d '{{"model": "{name}", "state": "I was charged twice.", "questions": {{"urgent": {{"type": "noul", "instructions": "Does this need a reply today?"}}}}}}'
curl -s {url}/v1/models
curl -s {url}/healthz
```

**Open WebUI**: Admin Panel → Settings → Connections → OpenAI API → **+** (add connection):
1. URL: `{url}/v1`
2. Key: {"your BLINK_API_KEY" if CTX.auth.required else "anything (this Space's API is open)"}
3. Save; the model `{name}` appears in the model list (click *Verify connection* to check). To spend your own
   ZeroGPU quota rather than the shared pool, add the header `X-HF-Authorization: Bearer hf_…` under the
   connection's Headers.
"""


def health_json() -> dict:
    return CTX.current_health()


def ui_load(request: gr.Request):
    return snippets_md(base_url(request)), health_json()


async def ui_decide(request: gr.Request, state: str, count: float, *slots: str):
    """The Decide button: the same service (and batcher, and GPU function) as POST /v1/systemone.
    `slots`: (id, type, instructions, options) for each question slot; the first `count` are asked."""
    questions: dict[str, dict] = {}
    count = max(1, min(SLOTS, int(count or 1)))
    for i in range(count):
        name, kind, instructions, options = slots[4 * i:4 * i + 4]
        qid = (name or "").strip() or f"q{i + 1}"
        questions[qid] = build_question(kind or "noul", instructions, options)
    body = {"model": CTX.served_name, "state": parse_state(state), "questions": questions}
    request_caller.set(caller_from_headers(request.headers) if request is not None else None)
    try:
        decided = await CTX.service.decide(body, Timing())
    except BlinkError as error:
        return (f'<div class="blink-error">Error {error.status}: {html.escape(error.message)}</div>',
                error_body(error))
    except Exception as exc:  # noqa: BLE001 - shown to the user, logged, the UI keeps working
        log.exception("UI decision failed")
        return f'<div class="blink-error">Internal error: {html.escape(type(exc).__name__)}</div>', None
    response = {"model": CTX.served_name, "answers": decided.answers,
                "usage": {"input_tokens": decided.input_tokens, "output_tokens": 0},
                "x_calibration": decided.calibration}
    return bars_html(decided.answers, questions), response


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


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    if isinstance(content, dict):
        return str(content.get("text", ""))
    return "" if content is None else str(content)


def ui_chat(message, history, request: gr.Request):
    """The Chat tab: the same model, the same GPU generator as /v1/chat/completions (streamed)."""
    messages = [{"role": m["role"], "content": _text(m.get("content"))} for m in (history or [])
                if isinstance(m, dict) and m.get("role") in ("user", "assistant", "system")]
    messages.append({"role": "user", "content": _text(message)})
    try:
        rendered = CHAT_ENGINE.prepare(messages, None, UI_CHAT_MAX_TOKENS)
    except BlinkError as error:
        raise gr.Error(error.message) from None
    request_caller.set(caller_from_headers(request.headers) if request is not None else None)
    text = ""
    try:
        for item in chat(rendered.ids, {"max_tokens": rendered.max_tokens}):
            if isinstance(item, str):
                text += item
                yield text
    except BlinkError as error:
        raise gr.Error(error.message, title=f"Error {error.status}") from None
    if not text:
        yield "(no text)"


with gr.Blocks(title=TITLE) as demo:
    gr.HTML(f'<div class="blink-header"><h1>{html.escape(TITLE)}</h1><p>{html.escape(DESCRIPTION)}</p></div>')
    with gr.Tabs():
        with gr.Tab("Decide", id="decide"):
            with gr.Row():
                with gr.Column(scale=1):
                    STATE = gr.Textbox(label="State (text or JSON)", lines=6, elem_id="blink-state",
                                       placeholder="The text (or JSON) the questions are about")
                    with gr.Row():
                        example_buttons = {name: gr.Button(name, size="sm", elem_id="example-" + name.split()[0].lower())
                                           for name in EXAMPLES}
                    COUNT = gr.Number(value=1, visible=False, precision=0)
                    SLOT_COMPONENTS, GROUPS = [], []
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
                        GROUPS.append(group)
                        SLOT_COMPONENTS.append({"name": q_name, "type": q_type, "instructions": q_instr,
                                                "options": q_opts})
                    with gr.Row():
                        add = gr.Button("+ question", size="sm")
                        remove = gr.Button("− question", size="sm")
                    decide_button = gr.Button("Decide", variant="primary", elem_id="blink-decide")
                with gr.Column(scale=1):
                    gr.HTML(caveat_html())
                    RESULTS = gr.HTML(elem_id="blink-results", value="")
                    RAW = gr.JSON(label="Raw response (what POST /v1/systemone returns)", elem_id="blink-raw")
        with gr.Tab("Chat", id="chat"):
            gr.HTML(caveat_html())
            gr.ChatInterface(fn=ui_chat, api_name="chat")
        with gr.Tab("API", id="api"):
            SNIPPETS = gr.Markdown(elem_classes=["blink-snippet"])
            with gr.Row():
                gr.Markdown("**Live health** (`GET /healthz`): requested vs used GPU seconds under `gpu_seconds`.")
                refresh = gr.Button("Refresh", size="sm")
            HEALTH = gr.JSON(label="/healthz")

    slot_outputs = [c for slot, group in zip(SLOT_COMPONENTS, GROUPS)
                    for c in (group, slot["name"], slot["type"], slot["instructions"], slot["options"])]
    for name, button in example_buttons.items():
        button.click(lambda n=name: load_example(n), None, [STATE, COUNT, *slot_outputs],
                     api_name="example_" + name.split()[0].lower())
    add.click(lambda c: set_count(c, +1), COUNT, [COUNT, *GROUPS], api_visibility="undocumented")
    remove.click(lambda c: set_count(c, -1), COUNT, [COUNT, *GROUPS], api_visibility="undocumented")
    decide_inputs = [STATE, COUNT, *[slot[k] for slot in SLOT_COMPONENTS
                                     for k in ("name", "type", "instructions", "options")]]
    decide_button.click(ui_decide, decide_inputs, [RESULTS, RAW], api_name="decide")
    refresh.click(health_json, None, HEALTH, api_name="health")
    demo.load(ui_load, None, [SNIPPETS, HEALTH], api_visibility="undocumented")


def main() -> None:
    demo.queue(max_size=space_value("QUEUE_MAX_SIZE", int) or 64,
               default_concurrency_limit=space_value("QUEUE_CONCURRENCY", int) or 8)
    log.info("serving %s (%s) [%s; ZeroGPU=%s; api key %s]", CTX.served_name, SETTINGS.model, LOADED.info["device"],
             ZERO_GPU, "required" if CTX.auth.required else "not required")
    demo.launch(
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        ssr_mode=False,
        theme=theme.THEME,
        css=theme.CSS,
        footer_links=["api", "gradio", "settings"],
        app_kwargs={"routes": routes()},
        show_error=True,
    )


if __name__ == "__main__":
    main()
