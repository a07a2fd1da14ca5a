"""The blink Space: decision models over HTTP and in a web UI, on ZeroGPU, a GPU box, a laptop or CPU.

`python app.py` is the whole thing (port from GRADIO_SERVER_PORT, default 7860; `BLINK_MODEL=demo` for an
offline try-out). One process: Gradio launches (ZeroGPU schedules only what a launched Gradio app calls),
and blink's API routes are grafted ahead of Gradio's with `launch(app_kwargs={"routes": ...})`.

Order matters on ZeroGPU, and this file follows it:
1. `import spaces` before anything touches CUDA (it patches torch in ZeroGPU mode);
2. the settings (space_config.py, each value overridable by its BLINK_* environment variable);
3. the model and its engines at module scope (an adapter merged on CPU, then moved once: on ZeroGPU
   `.to("cuda")` is emulated and the weights are packed at launch);
4. the GPU functions, decorated at module scope, and the backend that calls them (zerogpu.ZeroGpuBackend, with
   GpuCall: the seconds each call asks for, the caller it runs as, its errors, requested vs used seconds);
5. the context every route and the UI serve from, over that backend, complete when built;
6. the UI (space/ui.py) with the `decide` endpoint (space/tool.py), the queue with explicit limits, `launch()` with
   Gradio's MCP server (the same `decide` as a tool at /gradio_api/mcp/, typed and answering JSON as blink's own
   /mcp, which is served too) and, with `gradio_ui_needs_key`, Gradio's login page (the API key as password) in
   front of the UI, its queue and its API.

With `BLINK_ENGINE=vllm` the replicas at `BLINK_ENGINE_URL` answer decisions and chat: no weights are loaded here
and no GPU function is called (blink.vllm's `VllmBackend`).

Only plain data crosses into the GPU worker: token ids and read plans in, floats or text out. Decisions
(API and UI alike) go through blink's batcher, one caller's requests per GPU call, run as that caller.
"""

import spaces  # noqa: I001 - first, before anything imports torch (ZeroGPU patches it on import)

import logging
import os
from pathlib import Path

import space_config
from blink.errors import startup_errors_in_one_line
from blink.model.loading import go_offline_if_local
from blink.settings import resolve_space

log = logging.getLogger("blink.space")
logging.basicConfig(
    level=os.environ.get("BLINK_LOG_LEVEL", "info").upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
)


startup_errors_in_one_line()  # a setting or a model the Space cannot start with: one line, not a traceback

SETTINGS, SPACE = resolve_space(space_config)
go_offline_if_local(SETTINGS.model)  # before the Hub libraries are imported

ZERO_GPU = bool(spaces.config.Config.zero_gpu)
TITLE, DESCRIPTION, CAVEAT, GPU_SIZE = SPACE.title, SPACE.description, SPACE.caveat, SPACE.gpu_size
MAX_OUTPUT_TOKENS, UI_CHAT_MAX_TOKENS = SETTINGS.max_output_tokens, SPACE.ui_chat_max_tokens
DURATION_MAX_S, CHAT_DURATION_MAX_S = SPACE.duration_max_s, SPACE.chat_duration_max_s

import contextlib  # noqa: E402
import functools  # noqa: E402

from starlette.middleware import Middleware  # noqa: E402
from starlette.routing import Route  # noqa: E402

import auth  # noqa: E402
import theme  # noqa: E402
from blink.backend import LocalBackend  # noqa: E402
from blink.plan import GenerationParams  # noqa: E402
from blink.server import api_routes, build_context, load_served, mcp_endpoint  # noqa: E402
from blink.web import guard  # noqa: E402
from blink.web.callers import Peers  # noqa: E402
from space import (
    durations,  # noqa: E402
    ui,  # noqa: E402
)
from space import tool as space_tool  # noqa: E402
from space.zerogpu import (  # noqa: E402
    GpuCall,
    ZeroGpuBackend,
    decorator_size,
    platform_charge,
    space_caller,
)

auth.keep_secrets_out_of_logs(SETTINGS.api_key)  # the key, and callers' ZeroGPU tokens in the scheduler's URLs

# what the platform makes of each call's seconds (the card's factor, the size: with `auto`, known after launch)
ESTIMATOR = durations.configured(SPACE, charge=lambda: platform_charge(GPU_SIZE, ZERO_GPU))

# --- the model, at module scope ----------------------------------------------------------------------------
# BLINK_ENGINE=vllm: the replicas at BLINK_ENGINE_URL answer decisions and chat (a CPU Space in front of a vLLM
# cluster); this process reads the model's tokenizer and templates only and makes no GPU call.
# On ZeroGPU no prefix-state cache: a state would live only in the forked worker that computed it.
REMOTE = SETTINGS.engine == "vllm"
SERVED = load_served(SETTINGS, zero_gpu=ZERO_GPU)
ENGINE, CHAT_ENGINE = SERVED.planner, SERVED.chat_engine


# --- the GPU functions (module scope, plain def / plain generator) -------------------------------------------
@spaces.GPU(duration=GpuCall.duration, size=decorator_size(GPU_SIZE))
def gpu_score(plans, saves: bool, seconds: int):
    """A batch of decisions in the GPU worker (`saves` False: bulk rows, whose states are saved in the prefix-state
    cache only where they repeat; `seconds`: what its GpuCall asked for)."""
    return ENGINE.score(plans, saves=saves)


@spaces.GPU(duration=GpuCall.duration, size=decorator_size(GPU_SIZE))
def gpu_generate(ids, params: GenerationParams, seconds: int):
    """ChatEngine.generate in the GPU worker; its final ChatEnd carries the compute seconds measured there."""
    yield from CHAT_ENGINE.generate(ids, params)


@spaces.GPU(duration=GpuCall.duration, size=decorator_size(GPU_SIZE))
def gpu_prompt_logprobs(prompts, top: int, ranks: bool, seconds: int):
    """Every token of each prompt scored (echo, loglikelihood) in the GPU worker: plain PromptLogprobs back."""
    return ENGINE.prompt_logprobs(prompts, top, ranks)


# --- the backend and the context every route and the UI serve from ---------------------------------------
BACKEND = (
    None  # build_context sends decisions and chat to the replicas
    if REMOTE
    else ZeroGpuBackend(
        gpu_score,
        gpu_generate,
        ESTIMATOR,
        zero_gpu=ZERO_GPU,
        gpu_size=GPU_SIZE,
        score_max_s=DURATION_MAX_S,
        generate_max_s=CHAT_DURATION_MAX_S,
        max_output_tokens=MAX_OUTPUT_TOKENS,
        runs=LocalBackend(ENGINE, CHAT_ENGINE),
        gpu_prompt_logprobs=gpu_prompt_logprobs,
    )
)
CTX = build_context(
    SETTINGS,
    SERVED,
    BACKEND,
    warmup=not ZERO_GPU and not REMOTE,
    caller_of=functools.partial(space_caller, peers=Peers(SETTINGS.trusted_proxies)),  # docs/hardening.md
    description=DESCRIPTION or None,
    # in front of vLLM the GPU ledger still shows, with no call in it
    extra_health=[lambda: {"gpu_seconds": ESTIMATOR.health(), "zero_gpu": ZERO_GPU, "gpu_size": None}]
    if REMOTE
    else (),
)

# --- the UI, the queue, launch -----------------------------------------------------------------------------
demo = ui.build(
    CTX,
    title=TITLE,
    description=DESCRIPTION,
    caveat=CAVEAT,
    chat_max_tokens=UI_CHAT_MAX_TOKENS,
    demo_model=(Path(SERVED.loaded.root) / "blink_demo.json").is_file(),  # make-demo-model's marker
    api_needs_key=SPACE.gradio_api_needs_key or SPACE.gradio_ui_needs_key,  # resolve_space: only with a key set
    sheet=ui.SheetSettings.of(SPACE),
)
# blink's own MCP endpoint, as the standalone server serves it (typed schemas, structured content, the /v1 key);
# its session manager runs in Gradio's app lifespan (launch(app_kwargs={"lifespan": ...}), which Gradio enters
# together with its own MCP server's)
MCP = mcp_endpoint(CTX)


@contextlib.asynccontextmanager
async def lifespan(app):
    async with MCP.running():
        yield


def middleware() -> list:
    """Every body (API, uploads, queue) must keep arriving (408); with `gradio_api_needs_key` (and no login in
    front), Gradio's direct REST call of `decide` without the key is refused with 401 (Gradio would answer 500)."""
    stack = [Middleware(guard.BodyDeadline)]
    if SPACE.gradio_api_needs_key and not SPACE.gradio_ui_needs_key:
        stack.append(Middleware(auth.KeyFirst, allows=CTX.auth.allows))
    return stack


def main() -> None:
    demo.queue(max_size=SPACE.queue_max_size, default_concurrency_limit=SPACE.queue_concurrency)
    log.info(
        "serving %s (%s) [%s; ZeroGPU=%s; api key %s]",
        CTX.served_name,
        SETTINGS.model,
        f"vllm at {', '.join(SETTINGS.engine_url)}" if REMOTE else SERVED.loaded.info["device"],
        ZERO_GPU,
        "required" if CTX.auth.required else "not required",
    )
    demo.launch(
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        ssr_mode=False,
        theme=theme.THEME,
        css=theme.CSS,
        head=theme.HEAD,
        footer_links=["api", "gradio", "settings"],
        # the API and blink's /mcp grafted ahead of Gradio's routes
        app_kwargs={
            "routes": [Route("/mcp", MCP, methods=["GET", "POST", "DELETE"]), *api_routes(CTX, SETTINGS.metrics)],
            "middleware": middleware(),
            "lifespan": lifespan,
        },
        show_error=True,
        mcp_server=True,  # Gradio's MCP server at /gradio_api/mcp/: the `decide` endpoint as a tool (space/tool.py)
        # an upload bigger than one image or one Sheet table is refused
        max_file_size=max(SETTINGS.image_limits.max_image_bytes, SPACE.sheet_max_bytes),
        prevent_thread_lock=True,
        quiet=True,  # Gradio's start-up advice (a public link with share=True) does not apply to a Space
        i18n=ui.STATUS_WORDS,  # a screen reader hears "Done", not Gradio's untranslated "common.complete"
        auth=auth.login_with(CTX.auth) if SPACE.gradio_ui_needs_key else None,
        auth_message=auth.LOGIN_MESSAGE if SPACE.gradio_ui_needs_key else None,
    )
    # Gradio starts uvicorn with none of its slow-client options: set the per-connection ones on the running
    # server (the request head's deadline stays with Hugging Face's proxy: blink/web/guard.py) and keep keys out of
    # the access log
    guard.tune(demo.server.config)
    log.info("the web UI and the API on %s (MCP: %smcp and %sgradio_api/mcp/)", *[demo.local_url] * 3)
    if demo.mcp_server_obj is not None:  # Gradio's MCP server: decide typed as at /mcp, answered in JSON
        space_tool.typed_mcp(demo.mcp_server_obj)
    logging.getLogger("uvicorn.access").addFilter(guard.ScrubQuery())
    demo.block_thread()


if __name__ == "__main__":
    main()
