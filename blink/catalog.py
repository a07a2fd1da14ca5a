"""`GET /v1/models` and `GET /healthz`: answered from memory, never touching the GPU.

`/v1/models` is ONE body for both client families: OpenAI's `object`/`data[].id` (Open WebUI, the openai
SDK) and TypeSafe's `models[].name/description/release_date` (its SDKs, jevcompat). Each reads its keys
and ignores the others'.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from .context import Context
from .http import json_response, new_request_id

UNAUTHORIZED = "missing or invalid API key: send Authorization: Bearer <key>"


def unauthorized_both_wires(request_id: str):
    """A 401 both families read: OpenAI's `error` object and TypeSafe's `detail` object."""
    body = {"error": {"message": UNAUTHORIZED, "type": "authentication_error", "param": None,
                      "code": "invalid_api_key"},
            "detail": {"error_type": "authentication_error", "message": UNAUTHORIZED}}
    return json_response(body, 401, {"x-typesafe-request-id": request_id, "WWW-Authenticate": "Bearer"})


def listing(ctx: Context) -> dict:
    names = [ctx.served_name, *[a for a in ctx.aliases if a != ctx.served_name]]
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "created": ctx.created, "owned_by": "blink"} for name in names],
        "models": [{"name": name, "description": ctx.description, "release_date": ctx.release_date}
                   for name in names],
    }


def routes(ctx: Context) -> list[Route]:
    async def models(request: Request):
        request_id = new_request_id()
        if not ctx.auth.allows(request.headers.get("authorization")):
            return unauthorized_both_wires(request_id)
        return json_response(listing(ctx), 200, {"x-typesafe-request-id": request_id})

    async def healthz(request: Request):
        return json_response(ctx.current_health(), 200, {"x-typesafe-request-id": new_request_id()})

    return [Route("/v1/models", models, methods=["GET"]), Route("/healthz", healthz, methods=["GET"])]
