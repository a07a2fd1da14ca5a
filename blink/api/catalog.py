"""`GET /v1/models` and `GET /healthz`: answered from memory, never touching the GPU.

`/v1/models` is ONE body for both client families: OpenAI's `object`/`data[].id` (Open WebUI, the openai
SDK) and TypeSafe's `models[].name/description/release_date` (its SDKs, jevcompat). Each reads its keys
and ignores the others'; its errors (a 401) carry both shapes at once too. Each model says what it reads and
writes (`architecture.input_modalities` / `output_modalities`, as OpenRouter lists them): gateways find
decision models by `"decisions"`. `GET /v1/models/{id}` is one model: every request may name any model and the
one served answers it, so any id a request could name has its card (one not listed says which model answers it,
under `root`, as vLLM's cards do); only an empty id is 404, in OpenAI's shape.
"""

from __future__ import annotations

from starlette.routing import Route

from blink.api import systemone
from blink.api.openai import protocol
from blink.context import Context
from blink.errors import BlinkError, NoRoute
from blink.web.endpoint import Call, Endpoint, Wire


def both_shapes(error: BlinkError) -> tuple[int, dict]:
    """OpenAI's `error` object and System One's `detail` object in one body."""
    status, body = protocol.render(error)
    return status, {"error": body["error"], "detail": systemone.error_body(error)["detail"]}


WIRE = Wire(both_shapes, id_headers=("x-request-id", "x-typesafe-request-id"))


def names(ctx: Context) -> list[str]:
    return ctx.model_names()


def model_card(ctx: Context, name: str) -> dict:
    inputs = ["text", "image"] if ctx.health.get("accepts_images") else ["text"]
    return {
        "id": name,
        "object": "model",
        "created": ctx.created,
        "owned_by": "blink",
        "architecture": {"input_modalities": inputs, "output_modalities": ["text", "decisions"]},
    }


def listing(ctx: Context) -> dict:
    return {
        "object": "list",
        "data": [model_card(ctx, name) for name in names(ctx)],
        "models": [
            {"name": name, "description": ctx.description, "release_date": ctx.release_date} for name in names(ctx)
        ],
    }


def routes(ctx: Context) -> list[Route]:
    async def models(call: Call) -> dict:
        return listing(ctx)

    async def model(call: Call) -> dict:
        name = call.request.path_params["name"]
        if not name:
            raise NoRoute(
                f"name a model: GET /v1/models/<id>; this server serves {', '.join(names(ctx))}",
                loc=["body", "model"],
                kind="model_not_found",
            )
        card = model_card(ctx, name)
        if name not in names(ctx):  # a request naming it is answered by the served model (POST takes any name)
            card["root"] = ctx.served_name
        return card

    async def healthz(call: Call) -> dict:
        return ctx.current_health()

    return [
        Route("/v1/models", Endpoint(ctx, WIRE, models), methods=["GET"]),
        Route("/v1/models/{name:path}", Endpoint(ctx, protocol.WIRE, model), methods=["GET"]),
        Route("/healthz", Endpoint(ctx, WIRE, healthz, auth=False), methods=["GET"]),
    ]
