"""`GET /v1/models` and `GET /healthz`: answered from memory, never touching the GPU.

`/v1/models` is ONE body for both client families: OpenAI's `object`/`data[].id` (Open WebUI, the openai
SDK) and TypeSafe's `models[].name/description/release_date` (its SDKs, jevcompat). Each reads its keys
and ignores the others'; its errors (a 401) carry both shapes at once too.
"""

from __future__ import annotations

from starlette.routing import Route

from . import systemone
from .context import Context
from .errors import BlinkError
from .http import Call, Endpoint, Wire
from .openai import protocol


def both_shapes(error: BlinkError) -> tuple[int, dict]:
    """OpenAI's `error` object and System One's `detail` object in one body."""
    status, body = protocol.render(error)
    return status, {"error": body["error"], "detail": systemone.error_body(error)["detail"]}


WIRE = Wire(both_shapes, id_headers=("x-request-id", "x-typesafe-request-id"))


def listing(ctx: Context) -> dict:
    names = [ctx.served_name, *[a for a in ctx.aliases if a != ctx.served_name]]
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "created": ctx.created, "owned_by": "blink"} for name in names],
        "models": [{"name": name, "description": ctx.description, "release_date": ctx.release_date}
                   for name in names],
    }


def routes(ctx: Context) -> list[Route]:
    async def models(call: Call) -> dict:
        return listing(ctx)

    async def healthz(call: Call) -> dict:
        return ctx.current_health()

    return [Route("/v1/models", Endpoint(ctx, WIRE, models, read_body=False), methods=["GET"]),
            Route("/healthz", Endpoint(ctx, WIRE, healthz, auth=False, read_body=False), methods=["GET"])]
