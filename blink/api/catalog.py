"""`GET /v1/models`, `GET /healthz` and `GET /metrics`: answered from memory, never touching the GPU.

`/v1/models` is ONE body for both client families: OpenAI's `object`/`data[].id` (Open WebUI, the openai
SDK) and TypeSafe's `models[].name/description/release_date` (its SDKs, jevcompat). Each reads its keys
and ignores the others'; its errors (a 401) carry both shapes at once too. Each model says what it reads and
writes (`architecture.input_modalities` / `output_modalities`, as OpenRouter lists them): gateways find
decision models by `"decisions"`, and `limits` says what one decision request may ask (questions, options,
levels, tokens), the same on every wire. `GET /v1/models/{id}` is one model: every request may name any model and the
one served answers it, so any id a request could name has its card (one not listed says which model answers it,
under `root`, as vLLM's cards do); only an empty id is 404, in OpenAI's shape.

`/metrics` is Prometheus' text format (blink.web.metrics), behind the API key when one is set: the process's
series, with the requests held and waiting and each vLLM replica's state read as it is scraped.
"""

from __future__ import annotations

from starlette.responses import Response
from starlette.routing import Route

from blink.api import systemone
from blink.api.openai import protocol
from blink.context import Context
from blink.errors import BlinkError, NoRoute
from blink.limits import public as public_limits
from blink.web import metrics
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
        "limits": public_limits(ctx.limits),
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


def metrics_route(ctx: Context) -> Route:
    """`GET /metrics`: what this process recorded, and what it holds now."""
    metrics.prepare(ctx.served_name, ctx.admission.gates)
    collectors = [metrics.StateCollector(ctx.served_name, ctx.admission.state)]
    if (replicas := getattr(ctx.chats.backend, "replicas", None)) is not None:
        collectors.append(metrics.ReplicaCollector(replicas.states))
    if ctx.service.tasks is not None:  # each task's answers and drift signals (blink.tasks.served)
        collectors.append(ctx.service.tasks)

    async def scrape(call: Call) -> Response:
        return Response(metrics.exposition(*collectors), media_type=metrics.CONTENT_TYPE)

    return Route("/metrics", Endpoint(ctx, WIRE, scrape), methods=["GET"])
