"""The standalone server (`python -m blink serve`) and the pieces the Space reuses.

`build_context` loads the model and the engine and runs the warm-up; `api_routes` is the list of routes
both the standalone app and the Space (grafted ahead of Gradio's) serve; `create_app` wraps them in a
plain FastAPI app for uvicorn and tests. The GPU functions are injected (`decide=`, `chat=`), so the Space
passes its `@spaces.GPU` wrappers and everything else passes the engine's own methods.
"""

from __future__ import annotations

import logging
from typing import Callable

from .auth import ApiKey
from .context import Context
from .settings import Settings

log = logging.getLogger("blink")


def build_context(settings: Settings, decide: Callable | None = None, chat: Callable | None = None,
                  loaded=None, warmup: bool = True, chat_engine=None) -> Context:
    from .chat import ChatEngine
    from .engine import Engine
    from .loading import load, versions
    from .service import DecisionService

    loaded = loaded or load(settings.model, settings.revision, settings.adapter, settings.adapter_revision,
                            vision=settings.vision, vision_tower=settings.vision_tower)
    cache_bytes = None if settings.pass_cache_mib is None else int(settings.pass_cache_mib * 2**20)
    calibration = calibration_for(settings, loaded)
    engine = Engine(loaded, settings.limits, settings.image_limits, settings.image_layout,
                    pass_cost_tokens=settings.pass_cost_tokens, pass_cache_bytes=cache_bytes,
                    calibration=calibration, order=settings.x_order)
    # warmup=False: the Space on ZeroGPU, where the main process holds only emulated CUDA tensors
    repeat_identical = engine.warmup() if warmup else None
    service = DecisionService(engine, decide, window_ms=settings.batch_window_ms,
                              max_batch=settings.max_batch_requests, max_queued=settings.max_queued_requests)
    info = loaded.info
    health = {
        "ok": True, "model": info["model"], "served_model_name": settings.served_name, "revision": info["revision"],
        "adapter": info["adapter"], "weights_verified": info["weights_verified"], "hub_offline": info["hub_offline"],
        "warmup": {"repeat_identical": repeat_identical}, "kernels": info["kernels"], "device": info["device"],
        "dtype": info["dtype"], "versions": versions(), "accepts_images": engine.accepts_images,
        "limits": vars(settings.limits),
        "passes": {"pass_cost_tokens": engine.executor.pass_cost_tokens, "max_rows": engine.executor.max_rows,
                   "pass_cache_mib": engine.executor.pass_cache_bytes / 2**20},
        "calibration": calibration.health(), "x_order": engine.order,
    }
    if engine.accepts_images:
        health.update(image_layout=engine.image_layout, image_limits=vars(settings.image_limits),
                      vision_tower=settings.vision_tower)
    chat_engine = chat_engine or ChatEngine(loaded, settings.limits, system_prompt=settings.system_prompt,
                                            max_output_tokens=settings.max_output_tokens,
                                            enable_thinking=settings.enable_thinking,
                                            image_limits=settings.image_limits)
    return Context(service=service, served_name=settings.served_name, auth=ApiKey(settings.api_key),
                   limits=settings.limits, aliases=settings.model_aliases, health=health,
                   chat=chat or chat_engine.generate, chat_engine=chat_engine,
                   max_concurrent_chats=settings.max_concurrent_chats)


def calibration_for(settings: Settings, loaded):
    """--calibration FILE (or `off`), else calibration.json beside the weights; checked against these weights."""
    from .calibration import for_model, weights_fingerprint

    fingerprint = weights_fingerprint(loaded.root, settings.adapter, settings.adapter_revision)
    return for_model(settings.calibration, loaded.root, fingerprint)


def api_routes(ctx: Context) -> list:
    from . import catalog, systemone

    routes = catalog.routes(ctx) + systemone.routes(ctx)
    try:
        from . import openai_routes
    except ImportError:  # pragma: no cover - the OpenAI wire is optional for the engine
        return routes
    return routes + openai_routes.routes(ctx)


def create_app(ctx: Context):
    from fastapi import FastAPI
    from starlette.middleware.base import BaseHTTPMiddleware

    from .http import new_request_id

    app = FastAPI(title="blink", routes=api_routes(ctx), docs_url=None, redoc_url=None, openapi_url=None)

    class RequestId(BaseHTTPMiddleware):
        """Responses our routes didn't build (404, 405) get a request id too."""

        async def dispatch(self, request, call_next):
            response = await call_next(request)
            response.headers.setdefault("x-typesafe-request-id", new_request_id())
            return response

    app.add_middleware(RequestId)
    app.state.blink = ctx
    return app


def serve(settings: Settings, host: str, port: int, log_level: str = "info") -> None:
    import uvicorn

    ctx = build_context(settings)
    app = create_app(ctx)
    print(f"blink serving {settings.served_name} ({ctx.health['model']}) on http://{host}:{port} "
          f"[{ctx.health['device']}, {ctx.health['kernels']}; weights_verified={ctx.health['weights_verified']}; "
          f"api key {'required' if ctx.auth.required else 'not required'}]", flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_keep_alive=30)
