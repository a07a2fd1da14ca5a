"""Gemini's decisions wire: `POST /v1beta/decisions` (google-genai's `client.decisions.create`), `GET /v1beta/models`
and `GET /v1beta/models/{name}`, translated onto the decision service `/v1/systemone` uses, through the same
pipeline (body, check, admission, batcher), so both wires give the same probabilities for the same question.

Gemini's request is System One's but for its words: `input` (a string, a content block or a list of them: `text`,
and `image` with base64 `data`) for `state`; `model` as `models/{name}` or a bare name; `questions` keyed by id in
System One's shapes, `noul` criteria as `{true_description, false_description}`, a choice option's empty
description meaning none, `instructions` a string or text blocks. Answers are keyed by the same ids in Gemini's
shapes: `confidence` is the probability of the winning outcome (`max(noul, 1 - noul)`; choice and score: the highest
probability), `noul` is clamped to `[0.01, 0.99]` as Gemini documents it. `x_calibration` and `x_order` are read as
on `/v1/systemone`, and the answer's `x_calibration` says what the probabilities got.

Errors are Google's: `{"error": {"code", "message", "status", "details"}}` (`details`: an `ErrorInfo` whose `reason`
is blink's kind, a `BadRequest` naming the field, a `RetryInfo` on a 429). A full queue is 429
`RESOURCE_EXHAUSTED` with `Retry-After` (google-genai retries 408, 409, 429 and 5xx, waiting what `Retry-After` says),
never 529. The API key is read from `x-goog-api-key` (google-genai's header) as well as a bearer token.

`/v1/decisions` answers Gemini's body too (`input` and a `questions` object: blink.api.openai.decisions), which is
where google-genai posts with `api_version="v1"`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.routing import Route

from blink.context import Context
from blink.errors import BlinkError, InvalidRequest, NoRoute, param_of
from blink.limits import public as public_limits
from blink.web.endpoint import CHEAP_CHECK_BYTES, Body, Call, Endpoint, Wire

KEY_HEADERS = ("x-goog-api-key",)
JSON_ONLY = Body("Gemini decision requests")
# HTTP status -> google.rpc status, as Google's APIs answer them; 422 is answered 400 and blink's 529 is 429
STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
NOUL_RANGE = (0.01, 0.99)  # Gemini's documented range of `noul`
READS = "blink reads `text` and `image` (base64 `data`) blocks in `input`, `text` blocks in instructions"
NOT_READ = ("audio", "video", "document", "file")
# the fields each object takes (Google's APIs refuse a field they don't know; so does blink: never ignored)
FIELDS = {
    "the request": ("model", "input", "questions", "x_calibration", "x_order"),
    "a question": ("type", "instructions", "criteria"),
    "a text block": ("type", "text"),
    "an image block": ("type", "data", "mime_type", "uri"),
}
NOT_HONOURED = {
    "annotations": "a text block's `annotations` are not read: send its `text` alone",
    "resolution": "an image block's `resolution` is not honoured: blink reads an image at the model's own "
    "resolution; leave it out",
}
TYPE_URL = "type.googleapis.com/google.rpc."


# errors -----------------------------------------------------------------------------------------------------
def http_status(error: BlinkError) -> int:
    if isinstance(error, InvalidRequest):
        return 400
    return 429 if error.status == 529 else error.status


def render(error: BlinkError) -> tuple[int, dict]:
    """The status and body Google's clients read: `code` (the HTTP status), `message`, `status`, `details`."""
    status = http_status(error)
    name = STATUSES.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
    details: list[dict] = [{"@type": TYPE_URL + "ErrorInfo", "reason": error.kind, "domain": "blink"}]
    field_path = param_of(error.loc)
    if status == 400 and field_path:
        violation = {"field": field_path, "description": error.message}
        details.append({"@type": TYPE_URL + "BadRequest", "fieldViolations": [violation]})
    if "Retry-After" in error.headers:
        details.append({"@type": TYPE_URL + "RetryInfo", "retryDelay": f"{error.headers['Retry-After']}s"})
    return status, {"error": {"code": status, "message": error.message, "status": name, "details": details}}


WIRE = Wire(render, id_headers=("x-request-id", "x-typesafe-request-id"))


def bad(message: str, *loc, kind: str = "invalid_value") -> InvalidRequest:
    return InvalidRequest(message, loc=["body", *loc], kind=kind)


def known_fields(value: dict, what: str, *loc) -> None:
    """A field `what` does not take is a 400 naming it (one that blink knows but doesn't honour says why)."""
    fields = FIELDS[what]
    unknown = next((key for key in value if key not in fields), None)
    if unknown is None:
        return
    if unknown in NOT_HONOURED:
        raise bad(NOT_HONOURED[unknown], *loc, unknown, kind="unsupported_field")
    raise bad(f"unknown field `{unknown}`: {what} takes {', '.join(fields)}", *loc, unknown, kind="unknown_field")


# the request ------------------------------------------------------------------------------------------------
@dataclass
class Mapped:
    """A Gemini request as a System One body, and where its images were (for refusals that name them)."""

    body: dict
    images: dict = field(default_factory=dict)  # placeholder -> the image block's location in `input`

    def relocate(self, error: InvalidRequest) -> InvalidRequest:
        """System One's `state` is `input` here; an image's refusal (["body","assets",...]) points at its block."""
        loc, message = list(error.loc), error.message
        if loc[:2] == ["body", "assets"] and self.images:
            placeholder = loc[2] if len(loc) > 2 and loc[2] in self.images else next(iter(self.images))
            loc = ["body", *self.images[placeholder]]
        elif loc[:2] == ["body", "state"]:
            loc = ["body", "input", *loc[2:]]
        message = message.replace("`state`", "`input`").replace("the state", "the input")
        return InvalidRequest(message, loc=loc, kind=error.kind)


@dataclass
class Checked:
    """A checked Gemini request: its mapping and the decision service's checked decision."""

    mapped: Mapped
    decision: Any


def model_name(body: dict, served: list[str]) -> str:
    """`model` as `models/{name}` or a bare name: the name (any answers; the one model served answers it)."""
    model = body.get("model")
    if model is None:
        serves = f"this server serves models/{served[0]}"
        raise bad(f"`model` is required (models/{{name}}): {serves}", "model", kind="missing")
    name = model.removeprefix("models/") if isinstance(model, str) else None
    if not name:
        raise bad(f"`model` must name a model (models/{{name}}), got {model!r}", "model")
    return name


def _image(block: dict, images: list, loc: tuple) -> str:
    """An `image` block as a System One asset under a placeholder that stands where the image was."""
    if block.get("data") is None:
        if block.get("uri") is not None:
            raise bad(
                "an image block's `uri` is not fetched (this server fetches nothing): send the image's bytes as "
                "`data`, base64",
                *loc,
                "uri",
                kind="unsupported_uri",
            )
        raise bad("an image block needs `data`: the image's bytes, base64", *loc, "data", kind="missing")
    if not isinstance(block["data"], str):
        raise bad("an image block's `data` must be a base64 string", *loc, "data")
    known_fields(block, "an image block", *loc)
    mime = block.get("mime_type", "image/png")
    if not isinstance(mime, str) or not mime.startswith("image/"):
        raise bad(f"an image block's `mime_type` must be image/..., got {mime!r}", *loc, "mime_type")
    placeholder = f"<image:input-{len(images)}>"
    images.append((placeholder, {"type": "image", "format": mime[len("image/") :], "data_base64": block["data"]}, loc))
    return placeholder


def _block_text(block: Any, loc: tuple, images: list | None) -> str:
    """One content block as text: a `text` block's text, an `image` block's placeholder (where `images` collects
    them); anything else a 400 saying what blink reads."""
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise bad("a text block needs a string `text`", *loc, "text")
        known_fields(block, "a text block", *loc)
        return block["text"]
    if kind == "image" and images is not None:
        return _image(block, images, loc)
    if kind in NOT_READ or kind == "image":
        where = "`input`" if images is not None else "instructions"
        message = f"this `{kind}` block is not read in {where}: {READS}"
        raise bad(message, *loc, "type", kind="unsupported_content")
    raise bad(f"unsupported content block type {kind!r}: {READS}", *loc, "type")


def content_text(value: Any, loc: tuple, images: list | None = None) -> str:
    """A string, a content block or a non-empty list of blocks, as text (blocks joined by newlines)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return _block_text(value, loc, images)
    if not isinstance(value, list) or not value:
        kind = "missing" if value is None else "invalid_value"
        message = f"`{loc[-1]}` must be a string, a content block or a non-empty list of content blocks"
        raise bad(message, *loc, kind=kind)
    return "\n".join(_block_text(block, (*loc, i), images) for i, block in enumerate(value))


def _noul_criteria(qid: str, criteria: dict) -> dict:
    """`{true_description, false_description}` as System One's `{true, false}` (an empty description is none)."""
    unknown = sorted(set(criteria) - {"true_description", "false_description"})
    if unknown:
        raise bad(
            f"question {qid!r}: noul `criteria` takes true_description and false_description, not {unknown[0]}",
            *("questions", qid, "criteria", unknown[0]),
        )
    return {side: criteria[f"{side}_description"] for side in ("true", "false") if criteria.get(f"{side}_description")}


def _question(qid: str, q: Any) -> Any:
    """One Gemini question as System One's (what System One checks, it checks: the same locations)."""
    if not isinstance(q, dict):
        return q  # refused by System One's check, naming the question
    known_fields(q, "a question", "questions", qid)
    out = dict(q)
    if "instructions" in q:
        out["instructions"] = content_text(q["instructions"], ("questions", qid, "instructions"))
    criteria = q.get("criteria")
    if q.get("type") == "noul" and isinstance(criteria, dict):
        out["criteria"] = _noul_criteria(qid, criteria)
    elif q.get("type") == "choice" and isinstance(criteria, dict):
        out["criteria"] = {option: (text if text != "" else None) for option, text in criteria.items()}
    return out


def to_systemone(body: Any, served: list[str]) -> Mapped:
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object with `model`, `input` and `questions`", kind="invalid_type")
    known_fields(body, "the request")
    name = model_name(body, served)
    if "input" not in body:
        raise bad("`input` is required", "input", kind="missing")
    images: list = []
    state = content_text(body["input"], ("input",), images)
    questions = body.get("questions")
    if questions is None:
        raise bad("`questions` is required: question ids mapped to questions", "questions", kind="missing")
    if not isinstance(questions, dict):
        raise bad("`questions` maps question ids to questions", "questions", kind="invalid_type")
    mapped = {"model": name, "state": state, "questions": {qid: _question(qid, q) for qid, q in questions.items()}}
    if images:
        mapped["assets"] = {placeholder: asset for placeholder, asset, _ in images}
    for extension in ("x_calibration", "x_order"):  # read (and checked) by the decision service
        if extension in body:
            mapped[extension] = body[extension]
    return Mapped(mapped, {placeholder: loc for placeholder, _, loc in images})


def shaped(body: Any) -> bool:
    """Gemini's body: `input` and a `questions` object (OpenAI's always carries a list, System One's a `state`)."""
    return isinstance(body, dict) and "input" in body and isinstance(body.get("questions"), dict)


# the answer -------------------------------------------------------------------------------------------------
def answer(raw: dict) -> dict:
    """System One's answer in Gemini's shape and semantics."""
    kind = raw["type"]
    if kind == "noul":
        p = min(max(raw["noul"], NOUL_RANGE[0]), NOUL_RANGE[1])
        return {"type": "noul", "noul": p, "confidence": max(p, 1 - p)}
    probabilities = raw["probabilities"]
    if kind == "choice":
        return {
            "type": "choice",
            "choice": raw["choice"],
            "confidence": probabilities[raw["choice"]],
            "probabilities": probabilities,
        }
    return {
        "type": "score",
        "score": raw["score"],
        "confidence": max(probabilities.values()),
        "legend": raw["legend"],
        "probabilities": probabilities,
    }


def usage(decided) -> dict:
    n = decided.input_tokens
    out = {"total_input_tokens": n, "total_cached_tokens": decided.cached_tokens, "total_output_tokens": 0}
    out["total_tokens"] = n
    if decided.image_usage:  # the input's tokens by what they read
        visual = decided.image_usage["visual_tokens"]
        out["input_tokens_by_modality"] = [
            {"modality": "text", "tokens": n - visual},
            {"modality": "image", "tokens": visual},
        ]
    return out


def check(ctx: Context, call: Call) -> Checked:
    """The route's check (and `/v1/decisions`' for Gemini's body): mapped, then checked as System One's body."""
    JSON_ONLY.refuse_parts(call.parts)
    mapped = to_systemone(call.body, ctx.model_names())
    try:
        return Checked(mapped, ctx.service.check(mapped.body, None, call.arrival))
    except InvalidRequest as error:
        raise mapped.relocate(error) from None


async def decide(ctx: Context, call: Call) -> dict:
    checked: Checked = call.checked
    try:
        decided = await ctx.service.run(checked.decision, call.ticket, call.caller, call.timing)
    except InvalidRequest as error:
        raise checked.mapped.relocate(error) from None
    return {
        "answers": {qid: answer(raw) for qid, raw in decided.answers.items()},
        "usage": usage(decided),
        "model_version": ctx.served_name,
        "x_calibration": decided.calibration,
    }


# the models -------------------------------------------------------------------------------------------------
def model_entry(ctx: Context, name: str) -> dict:
    """A model as Gemini's `models.list` / `models.get` read it (camelCase, as the v1beta API writes it)."""
    return {
        "name": f"models/{name}",
        "baseModelId": name,
        "version": ctx.release_date,
        "displayName": name,
        "description": ctx.description,
        "inputTokenLimit": ctx.limits.max_context_tokens,
        "outputTokenLimit": 0,
        "supportedGenerationMethods": ["createDecision"],
        "x_limits": public_limits(ctx.limits),
    }


def routes(ctx: Context) -> list[Route]:
    async def models(call: Call) -> dict:
        return {"models": [model_entry(ctx, name) for name in ctx.model_names()]}

    async def model(call: Call) -> dict:
        name = call.request.path_params["name"].removeprefix("models/")
        if not name:
            serves = f"this server serves models/{ctx.served_name}"
            raise NoRoute(
                f"name a model: GET /v1beta/models/{{name}}; {serves}", loc=["body", "model"], kind="model_not_found"
            )
        return model_entry(ctx, name)  # any name answers: the one model served answers every request

    decisions = Endpoint(
        ctx,
        WIRE,
        lambda call: decide(ctx, call),
        body=JSON_ONLY,
        check=lambda call: check(ctx, call),
        admit="decide",
        inline_below=CHEAP_CHECK_BYTES,
        arriving=ctx.service.on_its_way,
        key_headers=KEY_HEADERS,
    )
    return [
        Route("/v1beta/decisions", decisions, methods=["POST"]),
        Route("/v1beta/models", Endpoint(ctx, WIRE, models, key_headers=KEY_HEADERS), methods=["GET"]),
        Route("/v1beta/models/{name:path}", Endpoint(ctx, WIRE, model, key_headers=KEY_HEADERS), methods=["GET"]),
    ]
