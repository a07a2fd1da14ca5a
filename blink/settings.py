"""Every knob, declared once: its name, parser and bounds, default, one doc line, and where it applies.

A knob is a dataclass field whose metadata says the rest (its parser is one of `knob_parsers.py`'s). From these
declarations come the `serve` flags (each defaulting to its `BLINK_<NAME>` variable), the Space's values
(`space_config.py`, each overridden by the same variable), `spaces.toml`'s checks in `build.py` (the `fleet`
location: the same parser, the same bounds) and the README's tables (`python build.py --readme`).

- `Settings`: the server's knobs; the standalone server and the Space both run on them.
- `SpaceSettings`: what only the Space reads (its card, the GPU duration requests, the Gradio queue).
- `Listen`: where and to whom `python -m blink serve` listens (server only).

The command-line flags made from them (`add_arguments`, `from_args`) are `settings_flags.py`'s.

Nothing heavy is imported here: `build.py` runs these parsers without torch, transformers or Pillow.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

from blink.errors import StartupError
from blink.knob_parsers import (
    Choice,
    Integer,
    Number,
    QueryTemplate,
    TextList,
    api_key,
    flag,
    names,
    networks,
    optional_text,
    plain_text,
    urls,
)
from blink.limits import ImageLimits, Limits
from blink.moderation_policy import PolicyFile


class BadSetting(ValueError):
    """A value its knob refuses; `name` is the knob (or the first knob of a pair that disagrees)."""

    def __init__(self, name: str, message: str):
        self.name = name
        super().__init__(message)


# --- the declaration ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Knob:
    name: str
    parse: Callable[[Any], Any]
    default: Any
    doc: str
    fleet: str | None  # where spaces.toml sets it ("limits.max_questions"); None: the fleet does not
    shown: str | None  # the default as the docs say it, where the value alone would mislead
    space_default: Any  # the Space's default where it differs from the server's
    secret: bool

    @property
    def env(self) -> str:
        return f"BLINK_{self.name.upper()}"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def constant(self) -> str:
        """Its name in space_config.py."""
        return self.name.upper()


def knob(
    default,
    parse,
    doc: str,
    *,
    fleet: str | None = None,
    shown: str | None = None,
    space_default=MISSING,
    secret: bool = False,
):
    return field(default=default, metadata={"knob": (parse, doc, fleet, shown, space_default, secret)})


def knobs(schema) -> list[Knob]:
    out = []
    for f in fields(schema):
        parse, doc, fleet, shown, space_default, secret = f.metadata["knob"]
        space_default = f.default if space_default is MISSING else space_default
        out.append(Knob(f.name, parse, f.default, doc, fleet, shown, space_default, secret))
    return out


IMAGE = ImageLimits()
# each document is the state; the question carries the query (the model's trained shape: content, then criterion)
RERANK_QUESTION = "Does this text hold information that helps answer the query: {query}"
LIMITS = Limits()
# knobs /healthz never shows, though they are no secret: where the server keeps its callers' files
PRIVATE = {"data_dir"}


@dataclass
class Settings:
    """The server's knobs (the standalone server and the Space)."""

    # a table, one knob per entry: kept as written
    # fmt: off
    model: str = knob("demo", str, "Hub repo id, local folder, `demo` or `demo-vision` (the offline demo models); "
                      "a local folder or a demo switches the Hub libraries offline", fleet="model")
    revision: str | None = knob(None, optional_text, "Hub revision of `model` (tag, branch or commit)",
                                fleet="revision")
    adapter: str | None = knob(None, optional_text, "LoRA adapter (Hub repo or folder), merged into the model on "
                               "CPU before it moves; one that does not fit the model refuses to start",
                               fleet="adapter")
    adapter_revision: str | None = knob(None, optional_text, "Hub revision of `adapter`", fleet="adapter_revision")
    served_model_name: str | None = knob(None, optional_text, "the name answers and /v1/models carry",
                                         fleet="served_model_name", shown="the model's folder name")
    model_aliases: tuple[str, ...] = knob((), names, "extra names listed in /v1/models",
                                          fleet="model_aliases")
    api_key: str | None = knob(None, api_key, "require `Authorization: Bearer <key>` on /v1/* (without one, any "
                               "Authorization header is accepted; /healthz stays open); prefer the variable: on a "
                               "Space, a secret", shown="open", secret=True)
    batch_window_ms: float = knob(0.0, Number(0, 1000), "cross-request batching: requests arriving within the window "
                                  "are decided in one GPU call (0 = off)", fleet="limits.batch_window_ms")
    max_batch_requests: int = knob(16, Integer(1, 64), "most requests decided in one call",
                                   fleet="limits.max_batch_requests")
    max_queued_requests: int = knob(64, Integer(1, 1024), "decisions waiting beyond a full batch: a decision holds "
                                    "one of max-queued + max-batch places from its first byte to its answer; past "
                                    "them 529 + Retry-After",
                                    fleet="limits.max_queued_requests")
    pass_cost_tokens: float | None = knob(None, Number(0, 1e6, auto=True), "the fixed cost of one more forward pass, "
                                          "in tokens, against the padding it saves when rows are grouped into "
                                          "passes (auto: 32 on CPU, 256 on CUDA; bench/gpu/gpu.sh sweeps it)",
                                          fleet="limits.pass_cost_tokens", shown="auto")
    pass_cache_mib: float | None = knob(None, Number(16, 1 << 20, auto=True), "attention cache one forward pass may "
                                        "hold (MiB): passes are cut to fit (auto: 2048 on CPU, 4096 on CUDA)",
                                        fleet="limits.pass_cache_mib", shown="auto")
    prefix_cache_mib: float | None = knob(None, Number(0, 1 << 20, auto=True), "prefilled states kept across requests "
                                          "(MiB), so a state seen before is not prefilled again; counted as what "
                                          "they cost the process (tensors and the objects holding them); 0 = off "
                                          "(auto: 512 on CPU, 4096 on CUDA; always off on ZeroGPU)",
                                          fleet="limits.prefix_cache_mib", shown="auto")
    prefix_block_tokens: int = knob(32, Integer(1, 65536), "scoring prompts (echo, prompt_logprobs) keep their "
                                    "prefilled state at their last two multiples of this many tokens, so a prompt "
                                    "starting alike (the next choice of an item sent alone) resumes there",
                                    fleet="limits.prefix_block_tokens")
    max_questions: int = knob(LIMITS.max_questions, Integer(1, 1024), "questions per request",
                              fleet="limits.max_questions")
    max_prompts: int = knob(LIMITS.max_prompts, Integer(1, 1024), "prompts per completion request (one choice "
                            "each)")
    max_options: int = knob(LIMITS.max_options, Integer(2, 255), "options per choice question",
                            fleet="limits.max_options")
    max_levels: int = knob(LIMITS.max_levels, Integer(2, 255), "levels per score question", fleet="limits.max_levels")
    max_context_tokens: int = knob(LIMITS.max_context_tokens, Integer(64, 262144), "tokens per prompt (state + one "
                                   "question)", fleet="limits.max_context_tokens")
    max_request_tokens: int = knob(LIMITS.max_request_tokens, Integer(64, 1048576), "tokens the model runs per "
                                   "request (a shared state counted once)", fleet="limits.max_request_tokens")
    max_body_bytes: int = knob(LIMITS.max_body_bytes, Integer(1024, 1 << 30), "request body as sent; past it 413",
                               fleet="limits.max_body_bytes")
    max_documents: int = knob(LIMITS.max_documents, Integer(1, 1024), "documents (or pairs) per rerank or score "
                              "request: each is a decision and holds one of the max-queued + max-batch places",
                              fleet="limits.max_documents")
    rerank_question: str = knob(RERANK_QUESTION, QueryTemplate(), "rerank and score: the yes/no question asked of "
                                "each document (the decision's state), `{query}` standing for the query; a "
                                "document's relevance is the probability of yes", fleet="rerank.question")
    system_prompt: str | None = knob(None, optional_text, "chat: system message prepended when a conversation has "
                                     "none", fleet="system_prompt")
    max_output_tokens: int = knob(4096, Integer(1, 32768), "chat: most tokens per reply (a larger `max_tokens` is "
                                  "lowered and the reply ends with `length`)", fleet="limits.max_output_tokens",
                                  space_default=1024)
    max_concurrent_chats: int = knob(4, Integer(1, 64), "chat: generations at once; past it 529 + Retry-After",
                                     fleet="limits.max_concurrent_chats")
    decide_wait_s: float = knob(5.0, Number(0, 120), "decisions: seconds a decision waits for a place (queued or "
                                "running) before 529 + Retry-After; waiting costs no parsing")
    max_places_per_caller: int = knob(0, Integer(0, 2048), "decisions: places one caller (blink's caller "
                                      "identity, docs/hardening.md) holds and waits for at once; past it 529 + "
                                      "Retry-After (0 = no cap of its own: the places are still shared fairly "
                                      "between the callers waiting)")
    trusted_proxies: tuple[str, ...] = knob((), networks, "addresses or networks (CIDR) of the reverse proxies in "
                                            "front of the server: only a request from one of them has its caller "
                                            "read from `X-Forwarded-For`", shown="none")
    chat_slot_wait_s: float = knob(30.0, Number(0, 300), "chat: seconds a chat waits for a free slot before 529 + "
                                   "Retry-After (the expected wait)")
    max_preparing: int = knob(2, Integer(1, 64), "requests of one kind (decide, chat) parsed and tokenized at once: "
                              "the CPU work before the queue")
    sse_keepalive_s: float = knob(5.0, Number(0.5, 60), "chat streams: seconds between keep-alive comments while "
                                  "the reply is waiting for the GPU")
    enable_thinking: bool = knob(False, flag, "chat: let the model think (Qwen3.5's `<think>` block) before it answers",
                                 fleet="chat_template.enable_thinking")
    vision: bool = knob(False, flag, "accept images with the model's own vision tower", fleet="vision.enabled")
    vision_tower: str | None = knob(None, optional_text, "accept images with a matching base model's vision tower, "
                                    "`repo@revision` (or a folder)", fleet="vision.tower")
    image_layout: str = knob("inline", Choice(("inline", "first")), "image tokens at their placeholders (inline) or "
                             "before the state (first)", fleet="vision.image_layout")
    max_images: int = knob(IMAGE.max_images, Integer(1, 16), "images per request", fleet="limits.max_images")
    max_image_bytes: int = knob(IMAGE.max_image_bytes, Integer(1024, 32 << 20), "bytes per image; past it 413",
                                fleet="limits.max_image_bytes")
    max_image_pixels: int = knob(IMAGE.max_image_pixels, Integer(65_536, 16_777_216), "pixels per image after "
                                 "resizing (larger images are scaled down)", fleet="limits.max_image_pixels")
    max_image_source_pixels: int = knob(IMAGE.max_image_source_pixels, Integer(65_536, 64_000_000), "declared pixels "
                                        "per image before decoding (more is refused unread)",
                                        fleet="limits.max_image_source_pixels")
    calibration: str | None = knob(None, optional_text, "calibration file to apply (`python -m blink calibrate` "
                                   "writes one); default: calibration.json beside the weights when there is one; "
                                   "`off`: none", shown="beside the weights")
    x_order: str = knob("fixed", Choice(("fixed", "rotate")), "default `x_order` of a decision: fixed (options read "
                        "as given) or rotate (each choice read once per rotation of its options, probabilities "
                        "averaged); a request's own `x_order` wins", fleet="limits.x_order")
    x_calibration: str = knob("fitted", Choice(("fitted", "prior", "fitted+prior", "raw")), "what a decision's "
                              "answers get when it asks for no `x_calibration` (or `calibrated`): fitted (the "
                              "calibration file's temperatures), prior (divided by the content-free prior), "
                              "fitted+prior (both) or raw; a request's own `x_calibration` wins")
    prior_states: tuple[str, ...] = knob(("N/A", "", "[MASK]"), TextList(), "the content-free states a question's "
                                         "prior is read from (averaged) for `x_calibration` prior",
                                         shown='["N/A", "", "[MASK]"]')
    tasks: tuple[str, ...] = knob((), names, "task files to serve (`python -m blink task fit` writes one; "
                                  "docs/tasks.md): a decision names one with `x_task`; each is refused at "
                                  "start-up unless fitted on these weights and answer settings", shown="none")
    suspend_certified_on_drift: bool = knob(False, flag, "a task's answers are not certified while its drift monitor "
                                            "alarms (the answer says so; docs/tasks.md)")
    moderation_policy: str | None = knob(None, PolicyFile(), "/v1/moderations: the policy file (TOML or JSON; "
                                         "docs/api-moderations.md): its categories, each a definition and a "
                                         "threshold; checked whole at start-up", fleet="moderation.policy",
                                         shown="OpenAI's 13 categories (blink/policies/openai.toml)")
    metrics: bool = knob(True, flag, "serve `GET /metrics` (Prometheus' text format, vLLM's names where they mean the "
                         "same; behind the API key when one is set)", space_default=False, shown="on (Space: off)")
    data_dir: str | None = knob(None, optional_text, "the Batch API's folder (`/v1/files`, `/v1/batches`): its "
                                "SQLite job store and the files; the routes are on only with it and an API key "
                                "(docs/batch.md); never shown in /healthz", shown="none (the Batch API off)")
    max_upload_bytes: int = knob(200 << 20, Integer(1, 1 << 40), "Batch API: bytes per uploaded file, streamed to "
                                 "disk (not the request-body caps); past it 413")
    data_quota_bytes: int = knob(10 << 30, Integer(1, 1 << 50), "Batch API: bytes all its files may take in "
                                 "data_dir (uploads, outputs); an upload past it is refused (400)")
    retention_hours: float = knob(720.0, Number(0.001, 1e6), "Batch API: hours files and batches are kept; past "
                                  "them they expire and are deleted")
    batch_chunk_rows: int = knob(16, Integer(1, 1024), "Batch API: rows of a batch sent to admission at once (as "
                                 "their own caller) and recorded together: what resumes after a restart")
    batch_call_s: float = knob(1.0, Number(0.01, 60), "Batch API: seconds one model call of batch rows may take "
                               "(sized by the speed such calls ran at): an interactive decision, always taken "
                               "before batch rows and never in a call with them, waits at most this long")
    batch_retry_s: float = knob(600.0, Number(0.01, 86400), "run-batch and the Batch API: seconds in all a row is "
                                "sent again while the routes have no room for it (529, 429, 503 with Retry-After); "
                                "past them the row is written as an error that names this knob")
    engine: str = knob("local", Choice(("local", "vllm")), "who runs the model: local (blink's own engine, the "
                       "weights in this process) or vllm (the replicas at `engine_url`; this process loads only the "
                       "model's tokenizer, templates and config, no weights)")
    engine_url: tuple[str, ...] = knob((), urls, "vllm: the replicas' base URLs, decisions and chat routed "
                                       "among them by prefix affinity; required with engine vllm", shown="none")
    engine_timeout_s: float = knob(300.0, Number(1, 3600), "vllm: the most seconds a replica may take on one "
                                   "request (a chat stream: between tokens) before it is tried on the next; within "
                                   "it, a call's timeout follows the replicas' measured speed")
    engine_assumed_s_per_token: float = knob(0.01, Number(0, 10, above=True), "vllm: seconds per prompt token a "
                                             "replica is assumed to take until one is measured (conservative: a CPU "
                                             "replica's speed); a call's timeout is then 5 s + 4 x its tokens x "
                                             "this, so a replica hung from the start costs seconds, not "
                                             "engine_timeout_s")
    engine_failure_threshold: int = knob(3, Integer(1, 100), "vllm: failed requests in a row (a 5xx, 429) that "
                                         "open a replica's circuit (one that can't be reached or times out opens it "
                                         "at once); a trial request that succeeds closes it again")
    engine_health_interval_s: float = knob(2.0, Number(0.1, 300), "vllm: seconds between the background checks of "
                                           "each replica (its /health; the trial request of an open circuit)")
    engine_api_key: str | None = knob(None, optional_text, "vllm: the key the replicas require (vLLM's "
                                      "`--api-key`); set the variable, not the flag", shown="none", secret=True)
    # fmt: on

    def __post_init__(self):
        if self.engine == "vllm":
            if not self.engine_url:
                raise BadSetting("engine_url", "engine vllm needs the replicas' URLs (engine_url)")
            # what the replicas cannot be sent: weights merged here, pixels for a vision tower here
            for name in ("adapter", "vision", "vision_tower"):
                if getattr(self, name):
                    raise BadSetting(name, f"{name} needs engine local: vLLM serves its own weights, text only here")
        elif self.engine_url:
            raise BadSetting("engine_url", "engine_url is only read with engine vllm (set engine too)")

    @property
    def image_limits(self) -> ImageLimits:
        return ImageLimits(self.max_images, self.max_image_bytes, self.max_image_pixels, self.max_image_source_pixels)

    @property
    def limits(self) -> Limits:
        return Limits(
            max_questions=self.max_questions,
            max_prompts=self.max_prompts,
            max_options=self.max_options,
            max_levels=self.max_levels,
            max_context_tokens=self.max_context_tokens,
            max_request_tokens=self.max_request_tokens,
            max_body_bytes=self.max_body_bytes,
            max_documents=self.max_documents,
        )

    @property
    def served_name(self) -> str:
        return self.served_model_name or self.model.rstrip("/").split("/")[-1]

    def public(self) -> dict:
        """Every knob but the secret ones (the key shows only as whether one is required), for /healthz."""
        out = {k.name: getattr(self, k.name) for k in knobs(Settings) if not k.secret and k.name not in PRIVATE}
        return {**out, "model_aliases": list(self.model_aliases), "api_key_required": bool(self.api_key)}

    @classmethod
    def from_values(cls, values: dict | None = None, env: dict | None = None) -> Settings:
        """`values` (space_config's, by knob name) with every `BLINK_<NAME>` variable taking precedence;
        a bad value stops start-up naming the variable or the knob."""
        return resolve(cls, values or {}, os.environ if env is None else env)


@dataclass(frozen=True)
class SpaceSettings:
    """What only the Space reads. The duration knobs shape each GPU call's request (space/durations.py)."""

    # fmt: off
    title: str | None = knob(None, optional_text, "the UI's heading", fleet="title", shown="the served name")
    description: str = knob("", plain_text, "what the model does, under the title", fleet="description")
    caveat: str = knob("", plain_text, "shown in the UI next to answers", fleet="caveat", shown="none")
    ui_chat_max_tokens: int = knob(512, Integer(1, 32768), "tokens per Chat-tab turn",
                                   fleet="limits.ui_chat_max_tokens")
    queue_max_size: int = knob(64, Integer(1, 10000), "Gradio queue size (UI events; the API has its own queue)",
                               fleet="limits.queue_max_size")
    queue_concurrency: int = knob(8, Integer(1, 64), "Gradio queue concurrency", fleet="limits.queue_concurrency")
    sheet_max_rows: int = knob(1000, Integer(1, 1_000_000), "rows one Sheet run labels (the view and its Gradio "
                               "endpoint); a longer table is refused", fleet="limits.sheet_max_rows")
    sheet_max_bytes: int = knob(10 << 20, Integer(1024, 1 << 30), "bytes per table the Sheet takes",
                                fleet="limits.sheet_max_bytes")
    sheet_runs: int = knob(4, Integer(1, 64), "Sheet runs at once (each a Gradio queue slot); past it a run is "
                           "refused, saying to try again shortly", fleet="limits.sheet_runs")
    gradio_api_needs_key: bool = knob(False, flag, "the Gradio `decide` endpoint and the Space's MCP tool ask for "
                                      "the API key too (the UI stays open); off, on ZeroGPU each caller spends "
                                      "their own quota", fleet="limits.gradio_api_needs_key")
    gradio_ui_needs_key: bool = knob(False, flag, "the web UI asks for the API key too (a login page: any user "
                                     "name, the key as password), and so do its queue, its Gradio API and the "
                                     "MCP tool; for a GPU box, where the UI spends the API's GPU (off, on "
                                     "ZeroGPU each caller pays their own quota); needs an API key",
                                     fleet="limits.gradio_ui_needs_key")
    gpu_size: str = knob("large", Choice(("large", "xlarge", "auto")), "ZeroGPU size: large (half a GPU, each "
                         "second charged x the card's duration factor, 1.5 on the RTX PRO 6000), xlarge (a whole GPU, "
                         "2x quota) or auto (the platform's rule: xlarge past its threshold of packed weights)",
                         fleet="hardware.size")
    duration_min_s: int = knob(2, Integer(1, 600), "fewest GPU seconds a call requests",
                               fleet="hardware.duration_min_s")
    duration_max_s: int = knob(60, Integer(1, 600), "most GPU seconds a decision batch is scheduled "
                               "and charged (after the card's factor)",
                               fleet="hardware.duration_max_s")
    chat_duration_max_s: int = knob(120, Integer(1, 600), "most GPU seconds a chat turn is scheduled and "
                                    "charged (after the card's factor)",
                                    fleet="hardware.chat_duration_max_s")
    duration_cold_s: float = knob(30.0, Number(0, 600), "added to the first call and the one after a failed call "
                                  "(a fresh worker moves the weights and compiles kernels first)",
                                  fleet="hardware.duration_cold_s")
    duration_overhead_s: float = knob(0.0, Number(0, 600), "seconds added to every call",
                                      fleet="hardware.duration_overhead_s")
    duration_headroom: float = knob(1.3, Number(1, 100), "multiple of the calibrated compute estimate",
                                    fleet="hardware.duration_headroom")
    prefill_s_per_token: float = knob(1e-3, Number(0, 10, above=True), "prefill seconds per token a fresh Space "
                                      "assumes until its calls calibrate it", fleet="hardware.prefill_s_per_token")
    decode_s_per_token: float = knob(0.08, Number(0, 10, above=True), "decode seconds per token, likewise",
                                     fleet="hardware.decode_s_per_token")
    # fmt: on

    def __post_init__(self):
        for cap in ("duration_max_s", "chat_duration_max_s"):
            if self.duration_min_s > getattr(self, cap):
                raise BadSetting("duration_min_s", f"{self.duration_min_s} is above {cap} ({getattr(self, cap)})")


@dataclass(frozen=True)
class Listen:
    """Where `python -m blink serve` listens, and which browser origins it answers."""

    host: str = knob("127.0.0.1", str, "address to bind")
    port: int = knob(8000, Integer(0, 65535), "port to listen on")
    log_level: str = knob("info", Choice(("debug", "info", "warning", "error")), "log level")
    cors_origins: tuple[str, ...] = knob(
        (),
        names,
        "browser origins allowed to call the API (CORS, preflight answered), comma-separated, or `*` for any",
        shown="none (no CORS)",
    )


def resolve(schema, values: dict, env: dict, *, space: bool = False):
    """One schema's object from `values` (by knob name) and the environment (which wins); unset knobs take
    their (Space) default. Exits naming the variable or the knob at fault: a bad setting must not start."""
    out = {}
    for k in knobs(schema):
        raw = env.get(k.env)
        value = raw if raw is not None else values.get(k.name, k.space_default if space else k.default)
        try:
            out[k.name] = None if value is None else k.parse(value)
        except ValueError as exc:
            raise StartupError(f"{k.env}={raw!r}: {exc}" if raw is not None else f"{k.constant}: {exc}") from None
    try:
        return schema(**out)
    except BadSetting as exc:
        raise StartupError(f"{exc.name.upper()}: {exc}") from None


def resolve_space(config, env: dict | None = None) -> tuple[Settings, SpaceSettings]:
    """What app.py runs with: `config` (space_config, a module or dict of UPPERCASE constants), each value
    overridden by its BLINK_<NAME> variable. A constant no knob owns stops start-up (it would be ignored)."""
    env = os.environ if env is None else env
    constants = {k: v for k, v in (config if isinstance(config, dict) else vars(config)).items() if k.isupper()}
    owners = {k.constant: k.name for schema in (Settings, SpaceSettings) for k in knobs(schema)}
    unknown = sorted(set(constants) - set(owners) - {"SPACE"})
    if unknown:
        raise StartupError(f"space_config.py: {', '.join(unknown)} set no knob (known: {', '.join(owners)})")
    values = {owners[c]: v for c, v in constants.items() if c in owners}
    if env.get("BLINK_MODEL") and env["BLINK_MODEL"] != values.get("model"):
        for name in ("revision", "adapter", "adapter_revision"):  # they belong to the configured model
            values.pop(name, None)
    settings = resolve(Settings, values, env, space=True)
    space = resolve(SpaceSettings, values, env, space=True)
    for name in ("gradio_api_needs_key", "gradio_ui_needs_key"):
        if getattr(space, name) and not settings.api_key:  # what it asks for does not exist: it would leave all open
            raise StartupError(f"BLINK_{name.upper()} is on but no API key is set (BLINK_API_KEY)")
    return settings, replace(space, title=space.title or settings.served_name)
