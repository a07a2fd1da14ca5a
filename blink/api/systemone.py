"""TypeSafe's System One wire: `POST /v1/systemone`, answered exactly as TypeSafe's SDKs and jevcompat read it.

Bodies: success `{"model","answers","usage"}` (compact, live key order); validation errors 422
`{"error": <message>, "detail": [{"type","loc","msg"}]}`; other errors
`{"error": <message>, "detail": {"error_type","message"}}`. The SDKs show the top-level `error` string.
Every response carries `x-typesafe-request-id: req_<32 hex>` and `server-timing` (blink.web.endpoint).
"""

from __future__ import annotations

from starlette.routing import Route

from blink.context import Context
from blink.errors import BlinkError, InvalidRequest
from blink.web.admission import KEYED
from blink.web.endpoint import CHEAP_CHECK_BYTES, Body, Call, Endpoint, Timing, Wire


def error_body(error: BlinkError) -> dict:
    if isinstance(error, InvalidRequest):
        return {"error": error.message, "detail": [{"type": error.kind, "loc": error.loc, "msg": error.message}]}
    return {"error": error.message, "detail": {"error_type": error.error_type, "message": error.message}}


WIRE = Wire(lambda error: (error.status, error_body(error)))


def response_body(ctx: Context, decided) -> dict:
    usage = {"input_tokens": decided.input_tokens, "output_tokens": 0}
    if decided.cached_tokens:  # an extension field, only when the prefix-state cache spared some
        usage["x_cached_tokens"] = decided.cached_tokens
    if decided.image_usage:  # image counts only when there are images
        usage.update(decided.image_usage)
    body = {"model": ctx.served_name, "answers": decided.answers, "usage": usage, "x_calibration": decided.calibration}
    if decided.task is not None:  # what served the answers: the task's name, version, fit and certificate
        body["x_task"] = decided.task
    return body


async def decide_body(
    ctx: Context, body, *, caller=None, caller_class: str = KEYED, timing: Timing | None = None
) -> dict:
    """A System One body (already read) decided and answered exactly as `/v1/systemone` answers it, through the
    same steps: check, admit, plan, batch, answer (MCP, Gradio's `decide`, the UI). No entry point bypasses them."""
    check = lambda body, on_its_way: ctx.service.check(body, None, on_its_way)  # noqa: E731
    async with ctx.admitted_decisions(check, body, caller_class, caller=caller) as (checked, ticket):
        return response_body(ctx, await ctx.service.run(checked, ticket, caller, timing))


def routes(ctx: Context) -> list[Route]:
    async def systemone(call: Call) -> dict:
        return response_body(ctx, await ctx.service.run(call.checked, call.ticket, call.caller, call.timing))

    endpoint = Endpoint(
        ctx,
        WIRE,
        systemone,
        body=Body(multipart=True),
        check=lambda call: ctx.service.check(call.body, call.parts, call.arrival),
        admit="decide",
        inline_below=CHEAP_CHECK_BYTES,
        arriving=ctx.service.on_its_way,
    )
    return [Route("/v1/systemone", endpoint, methods=["POST"])]
