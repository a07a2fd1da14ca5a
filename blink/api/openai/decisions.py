"""`POST /v1/decisions`: OpenAI's Decisions wire (`client.decisions.create`) mapped onto the decision service
`/v1/systemone` uses (predicate -> noul, choice -> criteria, score -> levels), so both wires give the same
probabilities for the same question. System One's validation errors come back with OpenAI's field names.
`prompt_cache_key`, `prompt_cache_options` and `safety_identifier` are accepted and passed on as `x_` hints.

The route also takes System One's body (`state` and a `questions` object; JSON or TypeSafe's multipart) and answers
it exactly as `/v1/systemone` does, errors in System One's shape: LiveKit Agents' `inference.DecisionModel` posts
that to `{base_url}/decisions`. And Gemini's (`input` and a `questions` object), answered as `/v1beta/decisions`
answers it (blink.api.gemini), errors in Google's shape: google-genai posts there with `api_version="v1"`, and sends
its key as `x-goog-api-key`, which this route reads too. The shapes never collide: an OpenAI body always carries
`input` and a list, System One's a `state` and never `input`. What is refused before the body is read (the key,
the body's size) is answered in OpenAI's shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from starlette.routing import Route

from blink.api import gemini, systemone
from blink.api.openai.protocol import IMAGE_PARTS, WIRE, bad, data_url, input_items, require_model
from blink.context import Context
from blink.errors import InvalidRequest
from blink.web.endpoint import CHEAP_CHECK_BYTES, Body, Call, Endpoint


@dataclass(frozen=True)
class QuestionPlan:
    """One OpenAI question as the way back needs it: its kind and name, and the typed values of its answer."""

    kind: str  # predicate | choice | score
    name: str | None
    keys: list[str] = field(default_factory=list)  # choice: System One's option names, in order
    values: list = field(default_factory=list)  # choice: the values as sent (strings or booleans), by `keys`
    labels: list[str] = field(default_factory=list)  # score: the levels' labels, lowest first


@dataclass
class Mapped:
    """An OpenAI Decisions request as a System One body, and the way back for its answers and errors."""

    body: dict
    questions: list[QuestionPlan]  # per question, in request order
    images: dict = field(default_factory=dict)  # per image placeholder, the image part's location in `input`

    def relocate(self, error: InvalidRequest) -> InvalidRequest:
        """System One locations (["body","questions","questions[3]",...]) and names -> OpenAI params; an image's
        refusal (["body","assets",...]) points at its part (the first image's when it names none)."""
        loc = list(error.loc)
        message = error.message
        if loc[:2] == ["body", "assets"] and self.images:
            placeholder = loc[2] if len(loc) > 2 and loc[2] in self.images else next(iter(self.images))
            loc = ["body", *self.images[placeholder]]
        elif loc[:2] == ["body", "questions"] and len(loc) > 2 and str(loc[2]).startswith("questions["):
            qid = str(loc[2])
            message = message.replace(f"question {qid!r}", qid)
            loc = ["body", qid, *loc[3:]]
        elif loc[:2] == ["body", "state"]:
            loc = ["body", "input"]
            message = message.replace("`state`", "`input`").replace("the state", "the input")
        else:
            message = message.replace("the state", "the input")
        return InvalidRequest(message, loc=loc, kind=error.kind)

    def answers(self, answers: dict) -> list[dict]:
        out = []
        for i, q in enumerate(self.questions):
            raw = answers[f"questions[{i}]"]
            if q.kind == "predicate":
                out.append({"type": "predicate", "name": q.name, "probability": raw["noul"]})
            elif q.kind == "choice":
                probs = raw["probabilities"]
                by_key = dict(zip(q.keys, q.values))
                out.append(
                    {
                        "type": "choice",
                        "name": q.name,
                        "choice": by_key[raw["choice"]],
                        "confidence": raw["confidence"],
                        "probabilities": [{"value": v, "probability": probs[k]} for k, v in zip(q.keys, q.values)],
                    }
                )
            else:
                probs = raw["probabilities"]
                out.append(
                    {
                        "type": "score",
                        "name": q.name,
                        "score": raw["score"],
                        "confidence": raw["confidence"],
                        "probabilities": [
                            {"value": j, "label": label, "probability": probs[str(j)]}
                            for j, label in enumerate(q.labels)
                        ],
                    }
                )
        return out


def _image_placeholder(part: dict, images: list, loc: tuple) -> str:
    """An `input_image` / `image_url` part as a System One asset: the data URL's bytes under a placeholder
    that stands where the image was (the engine refuses it if the model reads text only)."""
    fmt, data = data_url(part, *loc)
    placeholder = f"<image:input-{len(images)}>"
    images.append((placeholder, {"type": "image", "format": fmt, "data_base64": data}, loc))
    return placeholder


def _parts_text(content: Any, *loc, allow_json: bool = True, images: list | None = None) -> Any:
    """Decision input content: a string, or text/JSON/image parts. A lone JSON part stays JSON; images
    become placeholders (collected in `images`)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad("content must be a string or a list of parts", *loc)
    if len(content) == 1 and isinstance(content[0], dict) and content[0].get("type") == "input_json" and allow_json:
        data = content[0].get("data")
        if not isinstance(data, (dict, list)):
            raise bad("an input_json part needs `data` (an object or a list of objects)", *loc, 0, "data")
        return data
    texts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            if not isinstance(part.get("text"), str):
                raise bad("a text part needs a string `text`", *loc, i, "text")
            texts.append(part["text"])
        elif kind == "input_json":
            texts.append(json_text(part.get("data")))
        elif kind == "refusal":
            texts.append(str(part.get("refusal", "")))
        elif kind in IMAGE_PARTS and images is not None:
            texts.append(_image_placeholder(part, images, (*loc, i)))
        else:
            raise bad(f"unsupported content part type {kind!r}", *loc, i, "type")
    return "\n".join(texts)


def json_text(value: Any) -> str:
    """JSON inside a transcript's text, written as the chat template writes a JSON state (`tojson`): UTF-8 as it
    came, not \\u escapes, so the model reads the same characters whichever wire carried them."""
    return json.dumps(value, ensure_ascii=False)


class _StateItems:
    """Decision input items as the state's ("role", text) items: messages (their images become placeholders),
    tool calls as `name(arguments)`, tool outputs as text."""

    def __init__(self, images: list, allow_json: bool):
        self.items: list[tuple[str, Any]] = []
        self.images = images
        self.allow_json = allow_json  # a lone message may be JSON (`input_json`): it stays JSON

    @property
    def handlers(self) -> dict:
        return {
            "message": self.message,
            "function_call": lambda item, i: self.tool_call(item, item.get("arguments")),
            "custom_tool_call": lambda item, i: self.tool_call(item, item.get("input")),
            "function_call_output": self.tool_output,
            "custom_tool_call_output": self.tool_output,
        }

    def message(self, item: dict, i: int) -> None:
        role = item.get("role")
        if role not in ("user", "developer", "system", "assistant"):
            raise bad(f"`role` must be user, developer, system or assistant; got {role!r}", "input", i, "role")
        content = _parts_text(
            item.get("content"), "input", i, "content", allow_json=self.allow_json, images=self.images
        )
        self.items.append((role, content))

    def tool_call(self, item: dict, args: Any) -> None:
        self.items.append(("tool call", f"{item.get('name')}({args if isinstance(args, str) else json_text(args)})"))

    def tool_output(self, item: dict, i: int) -> None:
        self.items.append(("tool output", _parts_text(item.get("output"), "input", i, "output", allow_json=False)))


def _unsupported_item(kind: Any, i: int) -> InvalidRequest:
    return bad(f"unsupported input item type {kind!r}", "input", i, "type")


def _input_state(value: Any, images: list) -> Any:
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not value:
        raise bad(
            "`input` must be a string or a non-empty list of messages",
            "input",
            kind="missing" if value is None else "invalid_value",
        )
    state = _StateItems(images, allow_json=len(value) == 1)
    input_items(value, state.handlers, _unsupported_item)
    items = state.items
    if len(items) == 1 and items[0][0] == "user":
        return items[0][1]  # one user message: its text (or JSON) is the state, as /v1/systemone would take it
    return "\n\n".join(f"{role}: {text if isinstance(text, str) else json_text(text)}" for role, text in items)


def hints(body: dict) -> dict:
    """`prompt_cache_key`, `prompt_cache_options` and `safety_identifier` (openai 3.57's `decisions.create` sends
    them), checked and passed on as `x_` hints. They change no probability, and route nothing: one process holds
    one prefix-state cache, keyed by the exact tokens."""
    out = {}
    for name, kind, what in (
        ("prompt_cache_key", str, "a string"),
        ("prompt_cache_options", dict, "an object"),
        ("safety_identifier", str, "a string"),
    ):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, kind):
            raise bad(f"`{name}` must be {what}", name)
        if kind is str and len(value) > 512:
            raise bad(f"`{name}` is at most 512 characters, got {len(value)}", name)
        out["x_" + name] = value
    return out


def _predicate(q: dict, qid: str, name: str | None, instructions: Any) -> tuple[dict, QuestionPlan]:
    return {"type": "noul", "instructions": instructions}, QuestionPlan("predicate", name)


def _choice(q: dict, qid: str, name: str | None, instructions: Any) -> tuple[dict, QuestionPlan]:
    """A choice question's `choices` as System One criteria (a value's key: the string, or "true"/"false")."""
    choices = q.get("choices")
    if not isinstance(choices, list) or len(choices) < 2:
        raise bad("a choice question needs `choices`: a list of at least 2 {value, description}", qid, "choices")
    criteria, keys, values = {}, [], []
    for j, c in enumerate(choices):
        value = c.get("value") if isinstance(c, dict) else None
        if not isinstance(value, (str, bool)):
            raise bad("a choice needs a `value` (a string or a boolean)", qid, "choices", j, "value")
        key = value if isinstance(value, str) else ("true" if value else "false")
        if key in criteria:
            raise bad(f"choice values must be unique; {key!r} appears twice", qid, "choices", j, "value")
        criteria[key] = _description(c, qid, "choices", j)
        keys.append(key)
        values.append(value)
    question = {"type": "choice", "instructions": instructions, "criteria": criteria}
    return question, QuestionPlan("choice", name, keys=keys, values=values)


def _score(q: dict, qid: str, name: str | None, instructions: Any) -> tuple[dict, QuestionPlan]:
    """A score question's `levels` as System One criteria ("label: description"), lowest first."""
    levels = q.get("levels")
    if not isinstance(levels, list) or not levels:
        raise bad("a score question needs `levels`: a list of {label, description}, lowest first", qid, "levels")
    criteria, labels = [], []
    for j, level in enumerate(levels):
        label = level.get("label") if isinstance(level, dict) else None
        if not isinstance(label, str):
            raise bad("a level needs a string `label`", qid, "levels", j, "label")
        description = _description(level, qid, "levels", j)
        criteria.append(f"{label}: {description}" if description else label)
        labels.append(label)
    return {"type": "score", "instructions": instructions, "criteria": criteria}, QuestionPlan(
        "score", name, labels=labels
    )


def _description(entry: dict, *loc) -> str | None:
    description = entry.get("description")
    if description is not None and not isinstance(description, str):
        raise bad("`description` must be a string", *loc, "description")
    return description


QUESTION_KINDS = {"predicate": _predicate, "choice": _choice, "score": _score}


def _question(qid: str, q: Any) -> tuple[dict, QuestionPlan]:
    """One OpenAI question as a System One question, and its plan for the way back."""
    if not isinstance(q, dict):
        raise bad("a question must be an object with a `type`", qid)
    kind = q.get("type")
    name = q.get("name")
    if name is not None and not isinstance(name, str):
        raise bad("`name` must be a string", qid, "name")
    if "instructions" not in q:
        raise bad("`instructions` is required", qid, "instructions", kind="missing")
    instructions = _parts_text(q["instructions"], qid, "instructions", allow_json=False)
    parse = QUESTION_KINDS.get(kind) if isinstance(kind, str) else None
    if parse is None:
        raise bad(f"`type` must be predicate, choice or score; got {kind!r}", qid, "type")
    return parse(q, qid, name, instructions)


def to_systemone(body: Any, served: list[str]) -> Mapped:
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object with `model`, `input` and `questions`")
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise bad("`model` must be a string", "model")
    require_model(body, served)
    if "input" not in body:
        raise bad("`input` is required", "input", kind="missing")
    images: list = []
    state = _input_state(body["input"], images)
    questions = body.get("questions")
    if questions is None:
        raise bad("`questions` is required", "questions", kind="missing")
    if not isinstance(questions, list) or not questions:
        raise bad("`questions` must be a non-empty list of questions", "questions")
    out_questions: dict = {}
    plan: list[QuestionPlan] = []
    for i, q in enumerate(questions):
        out_questions[f"questions[{i}]"], planned = _question(f"questions[{i}]", q)
        plan.append(planned)
    mapped = {"state": state, "questions": out_questions}
    if images:
        mapped["assets"] = {placeholder: asset for placeholder, asset, _ in images}
    mapped.update(hints(body))
    if isinstance(body.get("model"), str):
        mapped["model"] = body["model"]
    for extension in ("x_task", "x_abstain"):  # never ignored: said, with where a task is served
        if extension in body:
            raise bad(
                f"`{extension}` is taken in System One's shape (`state` and a `questions` object, on this route or "
                "/v1/systemone), not yet in OpenAI's (docs/tasks.md)",
                extension,
                kind="unsupported_field",
            )
    for extension in ("x_calibration", "x_order"):  # read (and checked) by the decision service as on /v1/systemone
        if extension in body:
            mapped[extension] = body[extension]
    return Mapped(mapped, plan, {placeholder: loc for placeholder, _, loc in images})


def decisions_calibration(fact: dict) -> dict:
    """System One's `x_calibration` in this wire's words (noul questions are `predicate` here)."""
    names = {"noul": "predicate", "choice": "choice", "score": "score"}
    out = {"applied": fact["applied"], "temperatures": {names[k]: t for k, t in fact["temperatures"].items()}}
    if "not_applied" in fact:  # questions past the levels the calibration was fitted on: served raw, and why
        out["not_applied"] = fact["not_applied"]
    if "prior" in fact:  # divided by the content-free prior: which states, the tokens run for it in this request
        out["prior"] = {"states": fact["prior"]["states"], "tokens": fact["prior"]["tokens"]}
    return out


def systemone_shaped(body: Any, parts: dict) -> bool:
    """System One's body: no `input`, and a `state`, a `questions` object or multipart assets. Every OpenAI body
    carries `input` and a list of questions, so a body is never both."""
    if not isinstance(body, dict) or "input" in body:
        return False
    return bool(parts) or "state" in body or isinstance(body.get("questions"), dict)


JSON_ONLY = Body("OpenAI decision requests")


def routes(ctx: Context) -> list[Route]:
    def check(call: Call) -> tuple[Mapped | None, Any] | gemini.Checked:
        if systemone_shaped(call.body, call.parts):
            call.wire = systemone.WIRE  # answered, errors too, as /v1/systemone answers
            return None, ctx.service.check(call.body, call.parts, call.arrival)
        if gemini.shaped(call.body):
            call.wire = gemini.WIRE  # answered, errors too, as /v1beta/decisions answers
            return gemini.check(ctx, call)
        JSON_ONLY.refuse_parts(call.parts)
        mapped = to_systemone(call.body, ctx.model_names())
        try:
            return mapped, ctx.service.check(mapped.body, None, call.arrival)
        except InvalidRequest as error:
            raise mapped.relocate(error) from None

    async def decisions(call: Call) -> dict:
        if isinstance(call.checked, gemini.Checked):
            return await gemini.decide(ctx, call)
        mapped, checked = call.checked
        if mapped is None:
            return systemone.response_body(ctx, await ctx.service.run(checked, call.ticket, call.caller, call.timing))
        try:
            decided = await ctx.service.run(checked, call.ticket, call.caller, call.timing)
        except InvalidRequest as error:
            raise mapped.relocate(error) from None
        n = decided.input_tokens
        return {
            "object": "decision",
            "model": ctx.served_name,
            "answers": mapped.answers(decided.answers),
            "usage": {
                "input_tokens": n,
                "input_tokens_details": {"cached_tokens": decided.cached_tokens, "cache_write_tokens": 0},
                "output_tokens": 0,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": n,
            },
            "calibration": decisions_calibration(decided.calibration),
        }

    endpoint = Endpoint(
        ctx,
        WIRE,
        decisions,
        body=Body(multipart=True),  # TypeSafe's multipart for System One's body; OpenAI's refuses it in `check`
        check=check,
        admit="decide",
        inline_below=CHEAP_CHECK_BYTES,
        arriving=ctx.service.on_its_way,
        key_headers=gemini.KEY_HEADERS,
    )
    return [Route("/v1/decisions", endpoint, methods=["POST"])]
