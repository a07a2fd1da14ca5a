"""The standalone server (`python -m blink serve`) and the pieces the Space reuses.

`build_context` loads the model and the engine and runs the warm-up; `api_routes` is the list of routes
both the standalone app and the Space (grafted ahead of Gradio's) serve, ending with the routes that answer
unknown paths and methods under /v1/ in each wire's shape; `create_app` wraps them in a plain FastAPI app
for uvicorn and tests. The GPU functions are injected into `build_context` (`decide=`, `chat=`), so the
Space passes its `@spaces.GPU` wrappers and everything else passes the engine's own methods.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable

from .admission import Admission
from .auth import ApiKey
from .context import Context, anonymous
from .settings import Settings

log = logging.getLogger("blink")


def build_engine(settings: Settings, loaded):
    """The decision engine over a loaded model, as the settings configure it."""
    from .engine import Engine

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
        calibration=calibration_for(settings, loaded),
        order=settings.x_order,
        local=settings.engine == "local",
    )


def build_chat_engine(settings: Settings, loaded):
    """The main-process half of chat (render, token budget) and the generator the GPU step runs."""
    from .chat import ChatEngine

    return ChatEngine(
        loaded,
        settings.limits,
        system_prompt=settings.system_prompt,
        max_output_tokens=settings.max_output_tokens,
        enable_thinking=settings.enable_thinking,
        image_limits=settings.image_limits,
    )


def vllm_backend(settings: Settings, chat_engine) -> tuple[Callable, Callable, Callable[[], dict]]:
    """`engine vllm`: (decide, chat, live health) answered by the replicas at `engine_url` (see blink/vllm)."""
    from .vllm import Replicas, VllmChat, VllmScorer

    replicas = Replicas(list(settings.engine_url), timeout_s=settings.engine_timeout_s, api_key=settings.engine_api_key)
    remote_chat = VllmChat(replicas, chat_engine)

    def chat(ids, params, caller=None):
        return remote_chat.generate(ids, params)

    return VllmScorer(replicas).score_many, chat, lambda: {"vllm": replicas.health()}


def build_context(
    settings: Settings,
    decide: Callable | None = None,
    chat: Callable | None = None,
    loaded=None,
    warmup: bool = True,
    chat_engine=None,
    caller_of: Callable | None = None,
    engine=None,
    description: str | None = None,
    live_health: Iterable[Callable[[], dict]] = (),
) -> Context:
    """The complete context: `engine`, `chat_engine` and `loaded` are built from the settings unless given
    (the Space builds them first, at module scope, for its GPU functions). With `engine vllm`, decisions and chat
    go to the replicas and no weights are loaded here."""
    from .loading import load, versions
    from .service import DecisionService

    local = settings.engine == "local"
    loaded = engine.loaded if engine is not None else loaded
    loaded = loaded or load(
        settings.model,
        settings.revision,
        settings.adapter,
        settings.adapter_revision,
        vision=settings.vision,
        vision_tower=settings.vision_tower,
        max_image_pixels=settings.max_image_pixels,
        weights=local,
    )
    engine = engine or build_engine(settings, loaded)
    chat_engine = chat_engine or build_chat_engine(settings, loaded)
    if local:
        prefix_cache = engine.executor.prefix_cache
        live_health = [lambda: {"prefix_cache": prefix_cache.stats()}, *live_health]
    else:
        remote_decide, remote_chat, replicas_health = vllm_backend(settings, chat_engine)
        decide, chat, live_health = decide or remote_decide, chat or remote_chat, [replicas_health, *live_health]
    # warmup=False: the Space on ZeroGPU, where the main process holds only emulated CUDA tensors
    repeat_identical = engine.warmup() if warmup and local else None
    service = DecisionService(
        engine,
        decide,
        window_ms=settings.batch_window_ms,
        max_batch=settings.max_batch_requests,
        max_queued=settings.max_queued_requests,
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
        "accepts_images": engine.accepts_images,
        "limits": vars(settings.limits),
        "calibration": engine.calibration.health(),
        "x_order": engine.order,
    }
    if local:
        health["passes"] = {
            "pass_cost_tokens": engine.executor.pass_cost_tokens,
            "max_rows": engine.executor.max_rows,
            "pass_cache_mib": engine.executor.pass_cache_bytes / 2**20,
        }
    if engine.accepts_images:
        health.update(
            image_layout=engine.image_layout,
            image_limits=vars(settings.image_limits),
            vision_tower=public_name(settings.vision_tower),
        )
    return Context(
        service=service,
        served_name=settings.served_name,
        auth=ApiKey(settings.api_key),
        limits=settings.limits,
        aliases=settings.model_aliases,
        health=health,
        chat=chat or local_chat(chat_engine),
        chat_engine=chat_engine,
        admission=admission_of(settings),
        sse_keepalive_s=settings.sse_keepalive_s,
        caller_of=caller_of or anonymous,
        description=description or Context.description,
        live_health=live_health,
    )


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
    )


def local_chat(chat_engine):
    """Chat in this process: the caller chooses no quota here."""

    def chat(ids, params, caller=None):
        return chat_engine.generate(ids, params)

    return chat


def calibration_for(settings: Settings, loaded):
    """--calibration FILE (or `off`), else calibration.json beside the weights; checked against these weights."""
    from .calibration import for_model, weights_fingerprint

    fingerprint = weights_fingerprint(loaded.root, settings.adapter, settings.adapter_revision)
    return for_model(settings.calibration, loaded.root, fingerprint)


def api_routes(ctx: Context) -> list:
    from . import catalog, openai, systemone
    from .http import not_routed
    from .openai import protocol

    routes = catalog.routes(ctx) + systemone.routes(ctx) + openai.routes(ctx)
    # the more specific prefix first: /v1/systemone* answers in System One's shape, the rest of /v1/ in OpenAI's
    return routes + [
        not_routed(ctx, "/v1/systemone", systemone.WIRE, routes),
        not_routed(ctx, "/v1/", protocol.WIRE, routes),
    ]


def create_app(ctx: Context, cors_origins: Iterable[str] = ()):
    """The standalone app: the API routes, and the `decide` tool over MCP at /mcp (the Space serves it through
    Gradio's MCP server instead).

    Large non-streamed bodies are compressed when the client accepts it (zstd, else gzip; starlette-compress);
    server-sent events never are, so each event reaches the client as it is sent. CORS is opt-in: with
    `cors_origins` browsers on those origins may call the API (preflights answered, our headers readable)."""
    from fastapi import FastAPI
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.routing import Route
    from starlette_compress import CompressMiddleware, remove_compress_type

    from .mcp_tool import McpEndpoint, build_mcp
    from .systemone import decide_body

    mcp = McpEndpoint(
        build_mcp(lambda body, caller: decide_body(ctx, body, caller), ctx.caller_of, ctx.served_name), ctx.auth.allows
    )

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with mcp.running():
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
    routes = [Route("/mcp", mcp, methods=["GET", "POST", "DELETE"]), *api_routes(ctx)]
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

    ctx = build_context(settings)
    app = create_app(ctx, cors_origins)
    if settings.engine == "local":
        runs = f"{ctx.health['device']}, {ctx.health['kernels']}; weights_verified={ctx.health['weights_verified']}"
    else:
        runs = f"{settings.engine} at {', '.join(settings.engine_url)}"
    print(
        f"blink serving {settings.served_name} ({ctx.health['model']}) on http://{host}:{port} "
        f"[{runs}; api key {'required' if ctx.auth.required else 'not required'}]",
        flush=True,
    )
    from . import guard

    # a key sent as ?api_key= is never written to the access log
    logging.getLogger("uvicorn.access").addFilter(guard.ScrubQuery())
    # slow clients: a deadline for the request head and the body, idle keep-alive, a bound on connections
    uvicorn.run(guard.BodyDeadline(app), host=host, port=port, log_level=log_level, **guard.uvicorn_options())
