"""The blink Space: decision models over HTTP and in a web UI, on ZeroGPU, a GPU box, a laptop or CPU.

`python app.py` is the whole thing (port from GRADIO_SERVER_PORT, default 7860; `BLINK_MODEL=demo` for an
offline try-out). One process: Gradio launches (ZeroGPU schedules only what a launched Gradio app calls),
and blink's API routes are grafted ahead of Gradio's with `launch(app_kwargs={"routes": ...})`.

Order matters on ZeroGPU, and this file follows it:
1. `import spaces` before anything touches CUDA (it patches torch in ZeroGPU mode);
2. the settings (space_config.py, each value overridable by its BLINK_* environment variable);
3. the model and its engines at module scope (an adapter merged on CPU, then moved once: on ZeroGPU
   `.to("cuda")` is emulated and the weights are packed at launch);
4. the GPU functions, decorated at module scope, and their main-process side (zerogpu.GpuCall: the seconds
   each call asks for, the caller it runs as, its errors, requested vs used seconds);
5. the context every route and the UI serve from, complete when built;
6. the UI (ui.py) with the `decide` endpoint (space_tool.py), the queue with explicit limits, `launch()` with
   Gradio's MCP server (the same `decide` as a tool at /gradio_api/mcp/) and, with `gradio_ui_needs_key`,
   Gradio's login page (the API key as password) in front of the UI, its queue and its API.

With `BLINK_ENGINE=vllm` the replicas at `BLINK_ENGINE_URL` answer decisions and chat: no weights are loaded here
and no GPU function is called (blink/server.py's `vllm_backend`).

Only plain data crosses into the GPU worker: token ids and read plans in, floats or text out. Decisions
(API and UI alike) go through blink's batcher, one caller's requests per GPU call, run as that caller.
"""

import spaces  # noqa: I001 - first, before anything imports torch (ZeroGPU patches it on import)

import dataclasses
import logging
import os
from pathlib import Path

import space_config
from blink.loading import go_offline_if_local
from blink.settings import resolve_space

log = logging.getLogger("blink.space")
logging.basicConfig(
    level=os.environ.get("BLINK_LOG_LEVEL", "info").upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
)


SETTINGS, SPACE = resolve_space(space_config)
go_offline_if_local(SETTINGS.model)  # before the Hub libraries are imported

ZERO_GPU = bool(spaces.config.Config.zero_gpu)
TITLE, DESCRIPTION, CAVEAT, GPU_SIZE = SPACE.title, SPACE.description, SPACE.caveat, SPACE.gpu_size
MAX_OUTPUT_TOKENS, UI_CHAT_MAX_TOKENS = SETTINGS.max_output_tokens, SPACE.ui_chat_max_tokens
DURATION_MAX_S, CHAT_DURATION_MAX_S = SPACE.duration_max_s, SPACE.chat_duration_max_s

from starlette.middleware import Middleware  # noqa: E402

import theme  # noqa: E402
import ui  # noqa: E402
from blink import durations, guard  # noqa: E402
from blink.loading import load  # noqa: E402
from blink.plan import processed_tokens  # noqa: E402
from blink.server import api_routes, build_chat_engine, build_context, build_engine  # noqa: E402
from zerogpu import GpuCall, caller_from_headers, keep_secrets_out_of_logs  # noqa: E402

keep_secrets_out_of_logs(SETTINGS.api_key)  # the key, and callers' ZeroGPU tokens in the scheduler's URLs

ESTIMATOR = durations.configured(SPACE)

# --- the model, at module scope ----------------------------------------------------------------------------
# BLINK_ENGINE=vllm: the replicas at BLINK_ENGINE_URL answer decisions and chat (a CPU Space in front of a vLLM
# cluster); this process reads the model's tokenizer and templates only and makes no GPU call
REMOTE = SETTINGS.engine == "vllm"
LOADED = load(
    SETTINGS.model,
    SETTINGS.revision,
    SETTINGS.adapter,
    SETTINGS.adapter_revision,
    vision=SETTINGS.vision,
    vision_tower=SETTINGS.vision_tower,
    max_image_pixels=SETTINGS.max_image_pixels,
    weights=not REMOTE,
)
# No prefix-state cache on ZeroGPU: a state would live only in the forked worker that computed it, and the next
# call may run in a fresh fork (always after a failed call) that never saw it; off, every call is the same
ENGINE = build_engine(dataclasses.replace(SETTINGS, prefix_cache_mib=0) if ZERO_GPU else SETTINGS, LOADED)
CHAT_ENGINE = build_chat_engine(SETTINGS, LOADED)


# --- the GPU functions (module scope, plain def / plain generator) and their main-process side -------------
@spaces.GPU(duration=GpuCall.duration, size=GPU_SIZE)
def gpu_decide(plans, seconds: int):
    """A batch of decisions in the GPU worker (`seconds`: what its GpuCall asked for)."""
    return ENGINE.score_many(plans)


@spaces.GPU(duration=GpuCall.duration, size=GPU_SIZE)
def gpu_chat(ids, params, seconds: int):
    """ChatEngine.generate in the GPU worker; its final ChatEnd carries the compute seconds measured there."""
    yield from CHAT_ENGINE.generate(ids, params)


def score_batch(plans, caller) -> list:
    """The batcher's GPU step: one call for a batch of one caller's requests, as that caller; it asks for its
    prefill tokens' worth of seconds (shared prefixes counted once)."""
    tokens = sum(processed_tokens(plan) for plan in plans)
    with GpuCall(
        "decide", ESTIMATOR, zero_gpu=ZERO_GPU, caller=caller, prefill_tokens=tokens, max_s=DURATION_MAX_S
    ) as call:
        out = call.run(gpu_decide, plans)
        call.used(out[0].compute_s)  # a blink.plan.Scored per plan, each carrying the call's seconds
    return out


def chat(ids, params, caller=None):
    """A chat turn as a plain generator (str deltas, then one ChatEnd), as the caller who asked; it asks for its
    prompt tokens (prefill) and output budget (decode). Closing it (a client that disconnected) closes the GPU
    generator, which stops the worker and releases the GPU."""
    budget = int(params.get("max_tokens") or MAX_OUTPUT_TOKENS)
    with GpuCall(
        "chat",
        ESTIMATOR,
        zero_gpu=ZERO_GPU,
        caller=caller,
        prefill_tokens=len(ids),
        decode_tokens=budget,
        max_s=CHAT_DURATION_MAX_S,
    ) as call:
        yield from call.stream(gpu_chat(list(ids), dict(params), seconds=call.seconds))


# --- the context every route and the UI serve from ---------------------------------------------------------
CTX = build_context(
    SETTINGS,
    decide=None if REMOTE else score_batch,  # None: build_context routes them to the replicas
    chat=None if REMOTE else chat,
    engine=ENGINE,
    chat_engine=CHAT_ENGINE,
    warmup=not ZERO_GPU and not REMOTE,
    caller_of=lambda request: caller_from_headers(request.headers),
    description=DESCRIPTION or None,
    live_health=[
        lambda: {"gpu_seconds": ESTIMATOR.health(), "zero_gpu": ZERO_GPU, "gpu_size": GPU_SIZE if ZERO_GPU else None}
    ],
)

# --- the UI, the queue, launch -----------------------------------------------------------------------------
demo = ui.build(
    CTX,
    title=TITLE,
    description=DESCRIPTION,
    caveat=CAVEAT,
    chat_max_tokens=UI_CHAT_MAX_TOKENS,
    demo_model=(Path(LOADED.root) / "blink_demo.json").is_file(),  # make-demo-model's marker
    api_needs_key=SPACE.gradio_api_needs_key or SPACE.gradio_ui_needs_key,  # resolve_space: only with a key set
)
LOGIN_MESSAGE = "This Space asks for its API key: log in with any user name and the key as the password."


def login(username: str, password: str) -> bool:
    """Gradio's login check (`gradio_ui_needs_key`): the password is the API key, compared in constant time. It
    guards the page, its queue, uploads and Gradio's API; /v1/* are blink's routes and keep the bearer key."""
    return CTX.auth.matches(password)


def main() -> None:
    demo.queue(max_size=SPACE.queue_max_size, default_concurrency_limit=SPACE.queue_concurrency)
    log.info(
        "serving %s (%s) [%s; ZeroGPU=%s; api key %s]",
        CTX.served_name,
        SETTINGS.model,
        f"vllm at {', '.join(SETTINGS.engine_url)}" if REMOTE else LOADED.info["device"],
        ZERO_GPU,
        "required" if CTX.auth.required else "not required",
    )
    demo.launch(
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        ssr_mode=False,
        theme=theme.THEME,
        css=theme.CSS,
        footer_links=["api", "gradio", "settings"],
        # the API grafted ahead of Gradio's routes; every body (API, uploads, queue) must keep arriving (408)
        app_kwargs={"routes": api_routes(CTX), "middleware": [Middleware(guard.BodyDeadline)]},
        show_error=True,
        mcp_server=True,  # Gradio's MCP server at /gradio_api/mcp/: the `decide` endpoint as a tool (space_tool.py)
        max_file_size=SETTINGS.image_limits.max_image_bytes,  # an upload bigger than one image is refused
        prevent_thread_lock=True,
        auth=login if SPACE.gradio_ui_needs_key else None,
        auth_message=LOGIN_MESSAGE if SPACE.gradio_ui_needs_key else None,
    )
    # Gradio starts uvicorn with none of its slow-client options: set the per-connection ones on the running
    # server (the request head's deadline stays with Hugging Face's proxy: blink/guard.py) and keep keys out of
    # the access log
    guard.tune(demo.server.config)
    logging.getLogger("uvicorn.access").addFilter(guard.ScrubQuery())
    demo.block_thread()


if __name__ == "__main__":
    main()
