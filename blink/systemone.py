"""TypeSafe's System One wire: `POST /v1/systemone`, answered exactly as TypeSafe's SDKs and jevcompat read it.

Bodies: success `{"model","answers","usage"}` (compact, live key order); validation errors 422
`{"error": <message>, "detail": [{"type","loc","msg"}]}`; other errors
`{"error": <message>, "detail": {"error_type","message"}}`. The SDKs show the top-level `error` string.
Every response carries `x-typesafe-request-id: req_<32 hex>` and `server-timing`.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.routing import Route

from .context import Context
from .errors import BlinkError, EngineFailure, InvalidRequest, Unauthorized
from .http import json_response, new_request_id, read_request
from .service import Timing

log = logging.getLogger("blink")

UNAUTHORIZED = "missing or invalid API key: send Authorization: Bearer <key>"


def error_body(error: BlinkError) -> dict:
    if isinstance(error, InvalidRequest):
        return {"error": error.message, "detail": [{"type": error.kind, "loc": error.loc, "msg": error.message}]}
    return {"error": error.message, "detail": {"error_type": error.error_type, "message": error.message}}


def error_response(error: BlinkError, request_id: str, timing: Timing):
    headers = {"x-typesafe-request-id": request_id, "server-timing": timing.header(), **error.headers}
    if isinstance(error, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    return json_response(error_body(error), error.status, headers)


def routes(ctx: Context) -> list[Route]:
    async def systemone(request: Request):
        request_id, timing = new_request_id(), Timing()
        try:
            if not ctx.auth.allows(request.headers.get("authorization")):
                raise Unauthorized(UNAUTHORIZED)
            body, parts = await read_request(request, ctx.limits)
            decided = await ctx.service.decide(body, timing, parts)
        except BlinkError as error:
            if isinstance(error, EngineFailure):
                log.error("request %s failed: %s", request_id, error.message)
            return error_response(error, request_id, timing)
        except Exception as exc:  # noqa: BLE001 - our fault: say so, log it, keep serving
            log.exception("request %s failed", request_id)
            return error_response(EngineFailure(f"internal error: {type(exc).__name__}: {exc}"), request_id, timing)
        usage = {"input_tokens": decided.input_tokens, "output_tokens": 0}
        if decided.image_usage:  # image requests only: text-only responses stay exactly as before
            usage.update(decided.image_usage)
        body = {"model": ctx.served_name, "answers": decided.answers, "usage": usage,
                "x_calibration": decided.calibration}
        return json_response(body, 200, {"x-typesafe-request-id": request_id, "server-timing": timing.header()})

    return [Route("/v1/systemone", systemone, methods=["POST"])]
