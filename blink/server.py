"""The standalone server (`python -m blink serve`) and the pieces the Space reuses.

`load_served` loads the model with its decision planner and chat engine; `build_context` puts them over one
backend (blink.backend: in this process, the Space's ZeroGPU worker, or vLLM replicas) and runs the warm-up;
`api_routes` is the list of routes both the standalone app and the Space (grafted ahead of Gradio's) serve,
ending with the routes that answer unknown paths and methods under /v1/ and /v2/ in each wire's shape;
`create_app` wraps them in a plain FastAPI app for uvicorn and tests, and answers the rest of its root.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from blink.context import Context
from blink.settings import Settings
from blink.web.admission import Admission
from blink.web.auth import ApiKey
from blink.web.callers import Peers

log = logging.getLogger("blink")


@dataclass
class ServedModel:
    """One loaded model and what serves from it in this process: the decision planner (blink.decide.planner; an
    `Engine`,
    with blink's executor, when the weights are here) and the chat engine (render, budget, generate)."""

    loaded: Any
    planner: Any
    chat_engine: Any


def load_served(settings: Settings, *, zero_gpu: bool = False) -> ServedModel:
    """The model as the settings name it, with its planner and chat engine. With `engine vllm` only the tokenizer
    and templates are loaded (the replicas hold the weights). `zero_gpu`: no prefix-state cache (a state would live
    only in the forked worker that computed it, and the next call may run in a fresh fork that never saw it)."""
    from blink.model.loading import load

    local = settings.engine == "local"
    loaded = load(
        settings.model,
        settings.revision,
        settings.adapter,
        settings.adapter_revision,
        vision=settings.vision,
        vision_tower=settings.vision_tower,
        max_image_pixels=settings.max_image_pixels,
        weights=local,
    )
    engine_settings = dataclasses.replace(settings, prefix_cache_mib=0) if zero_gpu else settings
    planner = build_engine(engine_settings, loaded) if local else build_planner(settings, loaded)
    return ServedModel(loaded, planner, build_chat_engine(settings, loaded))


def build_planner(settings: Settings, loaded):
    """The main-process side of decisions (check, plan, answer): tokenizer and templates, no weights."""
    from blink.decide.planner import DecisionPlanner

    return DecisionPlanner(
        loaded,
        settings.limits,
        settings.image_limits,
        settings.image_layout,
        calibration=calibration_for(settings, loaded),
        order=settings.x_order,
        x_calibration=settings.x_calibration,
        prior_states=settings.prior_states,
    )


def build_engine(settings: Settings, loaded):
    """The planner with blink's executor over the loaded weights, as the settings configure it."""
    from blink.decide.planner import Engine

    def mib(value):
        return None if value is None else int(value * 2**20)

    return Engine(
        loaded,
        settings.limits,
        settings.image_limits,
        settings.image_layout,
        pass_cost_tokens=settings.pass_cost_tokens,
        pass_cache_bytes=mib(settings.pass_cache_mib),
        prefix_cache_bytes=mib(settings.prefix_cache_mib),
        prefix_block_tokens=settings.prefix_block_tokens,
        calibration=calibration_for(settings, loaded),
        order=settings.x_order,
        x_calibration=settings.x_calibration,
        prior_states=settings.prior_states,
    )


def build_chat_engine(settings: Settings, loaded):
    """The chat engine: render, token budget, and the generator the GPU step runs."""
    from blink.generate.chat_engine import ChatEngine

    return ChatEngine(
        loaded,
        settings.limits,
        system_prompt=settings.system_prompt,
        max_output_tokens=settings.max_output_tokens,
        enable_thinking=settings.enable_thinking,
        image_limits=settings.image_limits,
    )


def backend_for(settings: Settings, served: ServedModel):
    """The backend the settings name (blink.backend): in this process, or the vLLM replicas at `engine_url`."""
    if settings.engine == "local":
        from blink.backend import LocalBackend

        return LocalBackend(served.planner, served.chat_engine)
    from blink.vllm import Replicas, VllmBackend

    replicas = Replicas(
        list(settings.engine_url),
        timeout_s=settings.engine_timeout_s,
        assumed_s_per_token=settings.engine_assumed_s_per_token,
        failure_threshold=settings.engine_failure_threshold,
        health_interval_s=settings.engine_health_interval_s,
        api_key=settings.engine_api_key,
    )
    return VllmBackend(replicas, served.chat_engine)


def build_context(
    settings: Settings,
    served: ServedModel | None = None,
    backend=None,
    *,
    warmup: bool = True,
    caller_of: Callable | None = None,
    description: str | None = None,
    extra_health: Iterable[Callable[[], dict]] = (),
) -> Context:
    """The complete context over one backend: `served` and `backend` are built from the settings unless given
    (the Space builds the model first, at module scope, for its GPU functions, and passes its ZeroGPU backend).
    `warmup=False`: the Space on ZeroGPU, where the main process holds only emulated CUDA tensors."""
    from blink.decide.planner import Engine
    from blink.decide.service import DecisionService
    from blink.generate.service import ChatService
    from blink.model.loading import versions

    policy = moderation_policy(settings)  # before the model loads: a broken file refuses at once
    served = served or load_served(settings)
    backend = backend or backend_for(settings, served)
    planner, loaded = served.planner, served.loaded
    repeat_identical = planner.warmup() if warmup and isinstance(planner, Engine) else None
    tasks = task_book(settings, served)
    service = DecisionService(
        planner,
        backend,
        window_ms=settings.batch_window_ms,
        max_batch=settings.max_batch_requests,
        max_queued=settings.max_queued_requests,
        model_name=settings.served_name,
        bulk_call_s=settings.batch_call_s,
        tasks=tasks,
    )
    info = loaded.info
    health = {
        "ok": True,
        "engine": settings.engine,
        "model": public_name(info["model"]),
        "served_model_name": settings.served_name,
        "revision": info["revision"],
        "adapter": public_name(info["adapter"]),
        "weights_verified": info["weights_verified"],
        "hub_offline": info["hub_offline"],
        "warmup": {"repeat_identical": repeat_identical},
        "kernels": info["kernels"],
        "device": info["device"],
        "dtype": info["dtype"],
        "versions": versions(),
        "accepts_images": planner.accepts_images,
        "limits": vars(settings.limits),
        "calibration": planner.calibration.health(),
        "x_order": planner.order,
        "x_calibration": planner.x_calibration,
        "prior_states": list(planner.prior_states),
        "moderation": {"policy": public_name(policy.source), "categories": [c.name for c in policy.categories]},
        "tasks": len(tasks.tasks) if tasks is not None else 0,  # how many: what they are is behind the key
    }
    if planner.accepts_images:
        health.update(
            image_layout=planner.image_layout,
            image_limits=vars(settings.image_limits),
            vision_tower=public_name(settings.vision_tower),
        )
    return Context(
        service=service,
        chats=ChatService(served.chat_engine, backend, settings.sse_keepalive_s, settings.served_name),
        served_name=settings.served_name,
        auth=ApiKey(settings.api_key),
        limits=settings.limits,
        aliases=settings.model_aliases,
        health=health,
        admission=admission_of(settings),
        caller_of=caller_of or Peers(settings.trusted_proxies).caller_of,
        description=description or Context.description,
        live_health=[backend.health, *extra_health],
        moderation=checked_policy(policy, planner),
        rerank_question=settings.rerank_question,
    )


def moderation_policy(settings: Settings):
    """/v1/moderations' policy: the knob's file, or the default; a file it cannot serve stops start-up, naming the
    file and the fault."""
    from blink.errors import StartupError
    from blink.moderation_policy import load_policy

    try:
        return load_policy(settings.moderation_policy)
    except ValueError as error:
        raise StartupError(str(error)) from None


def checked_policy(policy, planner):
    """The policy's questions checked as the planner checks them on every request (against max_questions)."""
    from blink.errors import InvalidRequest, StartupError

    try:
        planner.check({"state": "a", "questions": policy.questions()})
    except InvalidRequest as error:
        raise StartupError(f"moderation policy {policy.source}: {error.message}") from None
    return policy


def public_name(model: str | None) -> str | None:
    """A model as /healthz shows it: a Hub id as it is, a local folder by its name only (no local paths)."""
    if model and (os.path.isabs(model) or model.startswith(("~", "."))):
        return os.path.basename(os.path.normpath(os.path.expanduser(model)))
    return model


def admission_of(settings: Settings) -> Admission:
    """The gates every entry point enters: a decision holds a place from its first byte to its answer."""
    return Admission.standard(
        max_queued=settings.max_queued_requests,
        max_batch=settings.max_batch_requests,
        max_chats=settings.max_concurrent_chats,
        chat_wait_s=settings.chat_slot_wait_s,
        preparing=settings.max_preparing,
        decide_wait_s=settings.decide_wait_s,
        per_caller_decide=settings.max_places_per_caller,
    )


def task_book(settings: Settings, served: ServedModel):
    """The tasks to serve (--tasks), each bound to these weights and answer settings; None without any."""
    if not settings.tasks:
        return None
    from blink.decide.calibration import weights_fingerprint
    from blink.tasks.served import TaskBook
    from blink.tasks.task_file import served_as

    planner = served.planner
    fingerprint = weights_fingerprint(served.loaded.root, settings.adapter, settings.adapter_revision)
    answers = {"x_order": planner.order, "x_calibration": planner.x_calibration, "prior_states": planner.prior_states}
    served_with = served_as(planner.calibration.health(), answers)
    return TaskBook.load(settings.tasks, fingerprint, served_with, settings.suspend_certified_on_drift)


def calibration_for(settings: Settings, loaded):
    """--calibration FILE (or `off`), else calibration.json beside the weights; checked against these weights."""
    from blink.decide.calibration import for_model, weights_fingerprint

    fingerprint = weights_fingerprint(loaded.root, settings.adapter, settings.adapter_revision)
    return for_model(settings.calibration, loaded.root, fingerprint)


def api_routes(ctx: Context, metrics: bool = True, jobs=None) -> list:
    """Every API route; `metrics`: `GET /metrics` too (the `metrics` knob: on for `serve`, off on a Space unless
    set); `jobs`: the Batch API's (blink.batch.jobs.Jobs), or None: its paths answer why it is off."""
    from blink.api import batches, catalog, files, gemini, moderations, openai, rerank, systemone, tasks
    from blink.api.openai import protocol, tokenize
    from blink.web.endpoint import not_routed

    routes = catalog.routes(ctx) + systemone.routes(ctx) + openai.routes(ctx) + tokenize.routes(ctx)
    routes += rerank.routes(ctx) + moderations.routes(ctx) + gemini.routes(ctx)
    routes += (files.routes(ctx, jobs) + batches.routes(ctx, jobs)) if jobs is not None else batches.off_routes(ctx)
    routes += tasks.routes(ctx)
    # off (a Space's default), /metrics still answers: in the API's error shape, saying how to turn it on
    routes.append(catalog.metrics_route(ctx) if metrics else metrics_off_route(ctx))
    # the more specific prefix first: /v1/systemone* answers in System One's shape, rerank and score in theirs
    # (root paths too), the rest of /v1/ in OpenAI's; /v2/ (Cohere's and vLLM's versioned paths) is no Gradio
    # path, so the Space answers it in OpenAI's shape too; /v1beta/ is Gemini's, in Google's shape
    return routes + [
        not_routed(ctx, "/v1/systemone", systemone.WIRE, routes),
        *rerank.not_routed_here(ctx, routes),
        not_routed(ctx, "/v1/", protocol.WIRE, routes),
        not_routed(ctx, "/v2/", protocol.WIRE, routes),
        not_routed(ctx, "/v1beta/", gemini.WIRE, routes),
    ]


METRICS_OFF = (
    "GET /metrics is off on this server (a Space's default). Turn it on with BLINK_METRICS=true: on a Space, a "
    "variable in its settings; `python -m blink serve`: --metrics true."
)


def metrics_off_route(ctx: Context):
    """`GET /metrics` while the `metrics` knob is off: a 404 in the API's error shape that says how to turn it on
    (rather than the bare 404 of a path nothing serves)."""
    from starlette.routing import Route

    from blink.api import catalog
    from blink.errors import NoRoute
    from blink.web.endpoint import Endpoint

    async def off(call):
        raise NoRoute(METRICS_OFF, kind="metrics_off")

    return Route("/metrics", Endpoint(ctx, catalog.WIRE, off, auth=False), methods=["GET"])


def mcp_endpoint(ctx: Context):
    """The `decide` tool over MCP (blink.api.mcp), answered from `ctx` as /v1/systemone is, behind the API key: the
    standalone server's /mcp and the Space's. Its lifespan (`.running()`) must run for as long as it serves."""
    from blink.api.mcp import McpEndpoint, build_mcp
    from blink.api.systemone import decide_body

    return McpEndpoint(
        build_mcp(lambda body, caller: decide_body(ctx, body, caller=caller), ctx.caller_of, ctx.served_name),
        ctx.auth.allows,
    )


def create_app(ctx: Context, cors_origins: Iterable[str] = (), metrics: bool = True, jobs=None):
    """The standalone app: the API routes, and the `decide` tool over MCP at /mcp (the Space serves the same /mcp,
    and Gradio's MCP server too); any other path answers 404 (405 with `Allow` for a known path) in OpenAI's shape,
    never FastAPI's `{"detail": "Not Found"}`, which clients that read an `error` object crash on.

    Large non-streamed bodies are compressed when the client accepts it (zstd, else gzip; starlette-compress);
    server-sent events never are, so each event reaches the client as it is sent. CORS is opt-in: with
    `cors_origins` browsers on those origins may call the API (preflights answered, our headers readable). `jobs`:
    the Batch API (blink.batch.jobs), its worker running with the app."""
    from fastapi import FastAPI
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.routing import Route
    from starlette_compress import CompressMiddleware, remove_compress_type

    from blink.api.openai import protocol
    from blink.web.endpoint import not_routed

    mcp = mcp_endpoint(ctx)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with mcp.running(), jobs.running(app) if jobs is not None else contextlib.nullcontext():
            yield

    remove_compress_type("text/event-stream")
    middleware = [Middleware(CompressMiddleware, minimum_size=1024, brotli=False)]
    if cors_origins:
        origins = list(cors_origins)
        middleware.insert(
            0,
            Middleware(
                CORSMiddleware,
                allow_origins=origins,
                allow_methods=["*"],
                allow_headers=["*"],
                allow_credentials="*" not in origins,
                expose_headers=["x-request-id", "x-typesafe-request-id", "server-timing", "retry-after"],
                max_age=600,
            ),
        )
    routes = [Route("/mcp", mcp, methods=["GET", "POST", "DELETE"]), *api_routes(ctx, metrics, jobs)]
    # the root is ours here (on the Space it is Gradio's): any other path or method in OpenAI's error shape
    routes.append(not_routed(ctx, "/", protocol.WIRE, routes, redirect_slashes=True))
    app = FastAPI(
        title="blink",
        routes=routes,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
        middleware=middleware,
    )
    app.state.blink = ctx
    return app


def serve(settings: Settings, host: str, port: int, log_level: str = "info", cors_origins: Iterable[str] = ()) -> None:
    import uvicorn

    from blink.batch.jobs import BatchSettings, Jobs

    ctx = build_context(settings)
    batch_settings = BatchSettings.of(settings)
    jobs = Jobs(batch_settings) if batch_settings is not None else None
    if jobs is not None:
        ctx.live_health.append(jobs.health)
    app = create_app(ctx, cors_origins, settings.metrics, jobs)
    if settings.engine == "local":
        runs = f"{ctx.health['device']}, {ctx.health['kernels']}; weights_verified={ctx.health['weights_verified']}"
    else:
        runs = f"{settings.engine} at {', '.join(settings.engine_url)}"
    print(
        f"blink serving {settings.served_name} ({ctx.health['model']}) on http://{host}:{port} "
        f"[{runs}; api key {'required' if ctx.auth.required else 'not required'}; batch api {'on' if jobs else 'off'}]",
        flush=True,
    )
    from blink.web import guard

    # a key sent as ?api_key= is never written to the access log
    logging.getLogger("uvicorn.access").addFilter(guard.ScrubQuery())
    # slow clients: a deadline for the request head and the body, idle keep-alive, a bound on connections
    uvicorn.run(guard.BodyDeadline(app), host=host, port=port, log_level=log_level, **guard.uvicorn_options())
