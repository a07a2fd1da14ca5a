"""`POST /v1/moderations`: OpenAI's moderation wire (`client.moderations.create`, LiteLLM's moderation call,
LibreChat, NeMo Guardrails) answered by decisions.

Each input is one decision: the input is the state, and each category of the server's policy
(blink.moderation_policy) a `noul` question over it, so the categories share one pass over the input's prefix.
Its probabilities are reported as every decision's are (calibration and the prior as the server applies them);
a category is true at or above its threshold, and `flagged` when any is. `input` is a string (one result), a list
of strings (one result each, in order) or a list of `text` / `image_url` parts (one result for them all; images
where the model reads them). Every category reads the whole input, so `category_applied_input_types` names the
input's types (text, image) for each.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from starlette.routing import Route

from blink.api.openai.protocol import WIRE, bad, data_url
from blink.context import Context
from blink.errors import BlinkError, InvalidRequest
from blink.moderation_policy import Policy
from blink.web.admission import KEYED
from blink.web.endpoint import CHEAP_CHECK_BYTES, Body, Call, Endpoint

FIELDS = ("model", "input")


@dataclass
class Input:
    """One input as a System One body (the state, the policy's questions, its images), and where it was sent."""

    body: dict
    types: list[str]  # the input types it holds, as OpenAI names them: "text", "image"
    loc: tuple  # ("input",) or ("input", i)

    def relocate(self, error: InvalidRequest) -> InvalidRequest:
        """A decision's error, located at this input in this wire's words: the policy's questions were checked at
        start-up, so what a request can get wrong is its input (its length, its images)."""
        loc = list(error.loc)
        if loc[:2] in (["body", "state"], ["body", "assets"], ["body", "questions"]):
            loc = ["body", *self.loc]
        message = re.sub(r"^question ('[^']*') with the state", r"the input with category \1", error.message)
        message = message.replace("Split the questions over several requests.", "Shorten the input.")
        message = message.replace("(state + question)", "(the input and a category's question)")
        message = message.replace("`state`", "`input`").replace("the state", "the input")
        return InvalidRequest(message, loc=loc, kind=error.kind)


def _text(value: Any, *loc) -> str:
    if not isinstance(value, str):
        raise bad("a text input must be a string", *loc)
    if not value.strip():
        raise bad("an input must not be empty", *loc, kind="empty_input")
    return value


def _parts(parts: list, questions: dict) -> Input:
    """A list of `text` / `image_url` parts: one input, images standing at their places in the text."""
    texts, assets, types = [], {}, []
    for i, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(_text(part.get("text"), "input", i, "text"))
            kind_seen = "text"
        elif kind == "image_url":
            image_url = part.get("image_url")
            if not isinstance(image_url, dict) or set(image_url) != {"url"}:
                raise bad('an image_url part is {"type": "image_url", "image_url": {"url": ...}}', "input", i)
            fmt, data = data_url(part, "input", i)
            placeholder = f"<image:input-{len(assets)}>"
            assets[placeholder] = {"type": "image", "format": fmt, "data_base64": data}
            texts.append(placeholder)
            kind_seen = "image"
        else:
            raise bad(
                f"input part type {kind!r} is not supported: a part is text or image_url",
                "input",
                i,
                "type",
                kind="unsupported_content",
            )
        if set(part) - {"type", kind}:
            extra = sorted(set(part) - {"type", kind})[0]
            raise bad(f"unknown field {extra!r} in a {kind} part", "input", i, extra, kind="unknown_parameter")
        if kind_seen not in types:
            types.append(kind_seen)
    body = {"state": "\n".join(texts), "questions": questions}
    if assets:
        body["assets"] = assets
    return Input(body, sorted(types, key=("text", "image").index), ("input",))


def inputs_of(body: Any, policy: Policy, most: int) -> list[Input]:
    """The request's inputs, each a decision's body; everything refusable by its shape refused here."""
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object with `input` (and `model`)")
    unknown = [key for key in body if key not in FIELDS]
    if unknown:
        raise bad(
            f"unknown field {unknown[0]!r}: /v1/moderations takes `model` and `input`",
            unknown[0],
            kind="unknown_parameter",
        )
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise bad("`model` must be a string", "model")
    value = body.get("input")
    if value is None:
        raise bad("`input` is required: a string, a list of strings or a list of parts", "input", kind="missing")
    questions = policy.questions()
    if isinstance(value, str):
        return [Input({"state": _text(value, "input"), "questions": questions}, ["text"], ("input",))]
    if not isinstance(value, list) or not value:
        raise bad("`input` must be a string, or a non-empty list of strings or of parts", "input")
    if all(isinstance(item, dict) for item in value):
        return [_parts(value, questions)]
    if not all(isinstance(item, str) for item in value):
        raise bad("`input` is a list of strings or a list of parts, not both", "input")
    if len(value) > most:
        raise bad(
            f"{len(value)} inputs; this server moderates at most {most} per request",
            "input",
            kind="too_many_inputs",
        )
    return [
        Input({"state": _text(text, "input", i), "questions": questions}, ["text"], ("input", i))
        for i, text in enumerate(value)
    ]


def result(policy: Policy, answers: dict, types: list[str]) -> dict:
    """One input's result in OpenAI's shape, the categories in the policy's order."""
    scores = {c.name: answers[c.name]["noul"] for c in policy.categories}
    categories = {c.name: scores[c.name] >= c.threshold for c in policy.categories}
    return {
        "flagged": any(categories.values()),
        "categories": categories,
        "category_scores": scores,
        "category_applied_input_types": {c.name: list(types) for c in policy.categories},
    }


def check_inputs(ctx: Context, body, arrival=None) -> list[tuple[Input, Any]]:
    """A moderation body (already read) checked: each input a checked decision; `arrival` (the request's count on
    its way to the batcher) goes with the first."""
    inputs = inputs_of(body, ctx.moderation, ctx.limits.max_moderation_inputs)
    checked = []
    for i, item in enumerate(inputs):
        try:
            checked.append((item, ctx.service.check(item.body, None, arrival if i == 0 else None)))
        except InvalidRequest as error:
            raise item.relocate(error) from None
    return checked


async def moderated(ctx: Context, checked: list[tuple[Input, Any]], ticket, caller=None, timing=None) -> dict:
    """An admitted moderation's answer: a result per input, in order (the first input's error, if any fails)."""
    inputs = [item for item, _ in checked]
    decisions = [one for _, one in checked]
    if len(decisions) == 1:  # one decision: planned on the event loop when it is small, as /v1/decisions is
        try:
            decided = [await ctx.service.run(decisions[0], ticket, caller, timing)]
        except InvalidRequest as error:
            raise inputs[0].relocate(error) from None
    else:  # a place each (the gate's `units`), queued together, each answered as it would be alone

        def located(i: int, error: BlinkError) -> BlinkError:
            return inputs[i].relocate(error) if isinstance(error, InvalidRequest) else error

        decided = await ctx.service.run_many(decisions, ticket, caller, timing, at=located)
    results = [result(ctx.moderation, d.answers, item.types) for item, d in zip(inputs, decided, strict=True)]
    return {"id": "modr-" + uuid.uuid4().hex, "model": ctx.served_name, "results": results}


async def moderation_body(ctx: Context, body, *, caller=None, caller_class: str = KEYED) -> dict:
    """A moderation body (already read) answered exactly as `/v1/moderations` answers it, through the same steps:
    check, admit (a place per input), plan, batch, answer (the Space's Moderate view). No entry point bypasses
    them."""
    check = lambda body, on_its_way: check_inputs(ctx, body, on_its_way)  # noqa: E731
    async with ctx.admitted_decisions(check, body, caller_class, units=len, caller=caller) as (checked, ticket):
        return await moderated(ctx, checked, ticket, caller)


def routes(ctx: Context) -> list[Route]:
    async def moderations(call: Call) -> dict:
        return await moderated(ctx, call.checked, call.ticket, call.caller, call.timing)

    endpoint = Endpoint(
        ctx,
        WIRE,
        moderations,
        body=Body("moderation requests"),
        check=lambda call: check_inputs(ctx, call.body, call.arrival),
        admit="decide",
        units=len,  # one place per input: each is a decision
        inline_below=CHEAP_CHECK_BYTES,
        arriving=ctx.service.on_its_way,
    )
    return [Route("/v1/moderations", endpoint, methods=["POST"])]
