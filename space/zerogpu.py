"""The Space's glue around ZeroGPU: whose quota a GPU call spends, what ZeroGPU's refusals mean over HTTP, the
main-process side of every GPU call (the secrets kept out of the Space log are auth.py's).

Kept apart from app.py so it can be tested without loading a model; blink/ itself stays free of gradio and
spaces (it passes the caller along as an opaque value: `Context.caller_of(request)`, a batcher job's `caller`).

Identity. `spaces` charges a GPU call to the caller whose `x-ip-token` header it finds on Gradio's
`LocalContext.request`. Custom routes (/v1/*) have no Gradio request, and decisions are run by blink's
batcher thread, so: `space_caller` reads the caller from each request (a `Caller` whose quota is its identity
headers, `caller_from_headers`; the routes pass it to the decision service and to chat; the batcher only batches
one quota's jobs together and hands that caller to the GPU step), and `as_caller` sets `LocalContext.request` in
the thread that makes the GPU call. The token is only ever passed on, never logged; fair shares count it by a
digest.

Errors. `spaces` raises `gr.Error` with a title; `zerogpu_error` turns each into a blink error, which every
wire renders in its own body shape: quota (and illegal duration, pending credits) 429 with Retry-After and
`x-should-retry: false`; no GPU, queue timeout, expired proxy token 503 with Retry-After; worker failure 500
(the worker's traceback is already in the log; we log the summary).

Calls. `GpuCall` wraps one call of a `@spaces.GPU` function: the seconds it asks for, the caller it runs as,
its errors, and its requested-vs-charged-vs-used accounting (space/durations.py), the same for decisions and chat.

Charge. `platform_charge` reads what the platform will make of a call from `spaces`' own configuration for the card
it found (`spaces/zero/configs.json`: `duration_factor`, `xlarge_threshold`) and the size a call gets: the one
configured, or with `auto` the platform's default (`xlarge` once the packed weights pass the threshold), known
after launch.

"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

import gradio as gr
from gradio.context import LocalContext
from starlette.requests import Request

from blink.errors import BlinkError, EngineFailure, GPUUnavailable, QuotaExceeded
from blink.generate.chat_engine import ChatEnd
from blink.plan import GenerationParams, processed_tokens
from blink.web.callers import NOBODY, Caller, Peers, quota_of
from space.durations import Charge

log = logging.getLogger("blink.space")

IDENTITY_HEADERS = ("x-ip-token",)  # what ZeroGPU reads to charge the caller


# --- identity ----------------------------------------------------------------------------------------------
def caller_from_headers(headers) -> tuple | None:
    """The opaque caller a job carries: its identity headers as (name, value) pairs, or None (anonymous)."""
    if headers is None:
        return None
    pairs = tuple((name, headers.get(name)) for name in IDENTITY_HEADERS if headers.get(name))
    return pairs or None


def space_caller(request, peers: Peers) -> Caller:
    """Who a request to the Space is from, for fair shares and quota alike (blink.web.callers): the ZeroGPU identity
    behind `X-IP-Token` (the platform's proxy sets it and answers for it; read here only, never on `serve`, where a
    client could mint a new one per request), else the signed-in user (`gr.Request.username`, the UI's and Gradio
    API's callers), else the address the Space's proxy reports (the right-most `X-Forwarded-For` entry, then further
    left only through the operator's `trusted_proxies`). Its quota is the identity headers, as ZeroGPU reads them."""
    if request is None:
        return NOBODY
    quota = caller_from_headers(getattr(request, "headers", None))
    if quota:
        digest = hashlib.sha256(repr(quota).encode("utf-8", "surrogatepass")).hexdigest()[:16]
        return Caller("zerogpu:" + digest, quota)  # a digest: the token itself is never kept or shown
    username = getattr(request, "username", None)
    if isinstance(username, str) and username:
        return Caller("user:" + username)
    return Caller("ip:" + peers.of(request, behind_proxy=True))


def gradio_request(caller):
    """A `gr.Request` carrying the caller's identity headers (what `spaces` reads), or None."""
    caller = quota_of(caller)
    if not caller:
        return None
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "query_string": b"",
        "headers": [(name.encode("latin-1"), value.encode("latin-1")) for name, value in caller],
    }
    return gr.Request(request=Request(scope))


@contextmanager
def as_caller(caller):
    """In this thread, make `spaces` see `caller` as the Gradio request (it reads x-ip-token from there)."""
    token = LocalContext.request.set(gradio_request(caller))
    try:
        yield
    finally:
        LocalContext.request.reset(token)


# --- what a call is charged --------------------------------------------------------------------------------
def decorator_size(setting: str) -> str | None:
    """The `size=` of every `@spaces.GPU` here: the one configured, or None (`auto`: the platform decides)."""
    return None if setting == "auto" else setting


def platform_charge(setting: str, zero_gpu: bool) -> Charge:
    """What the platform makes of a call's seconds, as `spaces` itself will compute it (client.py's
    get_duration_seconds: the factor of the card it runs on, for every call that is not `xlarge`)."""
    if not zero_gpu:
        return Charge(size="large" if setting == "auto" else setting, setting=setting, source="assumed")
    try:
        import spaces.zero as zero
        from spaces.zero import config
    except Exception:  # noqa: BLE001 - a `spaces` without that module: assume the pinned one's Blackwell card
        return Charge(size="large" if setting == "auto" else setting, factor=1.5, setting=setting, source="assumed")
    card = config.get_config()
    size = (zero.default_gpu_size() or "large") if setting == "auto" else setting
    return Charge(
        size=size,
        factor=float(card["duration_factor"]),
        setting=setting,
        card=card["model"],
        threshold_bytes=card.get("xlarge_threshold"),
        source="platform",
    )


# --- errors ------------------------------------------------------------------------------------------------
QUOTA_TITLES = ("ZeroGPU quota exceeded", "ZeroGPU pending credits exceeded", "ZeroGPU illegal duration")


def retry_after_from(message: str, default: int) -> int:
    """ZeroGPU says 'Try again in H:MM:SS' (a timedelta, maybe '1 day, H:MM:SS')."""
    m = re.search(r"Try again in (?:(\d+) days?, )?(\d+):(\d{2}):(\d{2})", message)
    if not m:
        return default
    days, hours, minutes, seconds = (int(g or 0) for g in m.groups())
    return max(1, days * 86400 + hours * 3600 + minutes * 60 + seconds)


def zerogpu_error(exc: BaseException) -> BlinkError:
    """A ZeroGPU `gr.Error` (or scheduler failure) as the blink error the wires render."""
    title = str(getattr(exc, "title", "") or "")
    message = re.sub(r"<[^>]+>", "", str(getattr(exc, "message", None) or exc)).strip()
    if title in QUOTA_TITLES:
        if "No GPU was available" in message:  # queued, then refused (what anonymous callers are told)
            return GPUUnavailable(f"no GPU was available in time: {message}", retry_after=30, kind="gpu_queue_timeout")
        default = 3600 if title == "ZeroGPU quota exceeded" else 60
        return QuotaExceeded(
            f"{title}: {message}", retry_after=retry_after_from(message, default), kind="gpu_quota_exceeded"
        )
    if title == "ZeroGPU queue timeout":
        return GPUUnavailable(f"no GPU was available in time: {message}", retry_after=30, kind="gpu_queue_timeout")
    if title == "ZeroGPU client error":  # the scheduler's 503 ("No GPU was available"), an expired proxy token
        return GPUUnavailable(f"{title}: {message}", retry_after=10, kind="gpu_unavailable")
    if title == "ZeroGPU worker error":
        log.error("ZeroGPU worker error: %s (the worker's traceback, if any, is printed above in this log)", message)
        return EngineFailure(f"the GPU worker failed: {message}", kind="gpu_worker_error")
    if isinstance(exc, RuntimeError) and "ZeroGPU" in message:
        log.error("ZeroGPU scheduler error: %s", message)
        return GPUUnavailable(f"the GPU scheduler failed: {message}", retry_after=10, kind="gpu_unavailable")
    log.error("GPU call failed: %s: %s", title or type(exc).__name__, message)
    return EngineFailure(f"the GPU call failed: {title + ': ' if title else ''}{message}")


def map_gpu_errors(exc: BaseException, zero_gpu: bool) -> BaseException:
    """What a GPU call's exception becomes: blink errors pass; ZeroGPU's are mapped; others stay as they are
    (the routes answer them as internal errors, logged)."""
    if isinstance(exc, BlinkError):
        return exc
    if isinstance(exc, gr.Error) or (zero_gpu and isinstance(exc, RuntimeError) and "ZeroGPU" in str(exc)):
        return zerogpu_error(exc)
    return exc


# --- one GPU call, its main-process side -------------------------------------------------------------------
class GpuCall:
    """The main-process side of one GPU call, decisions and chat alike. It asks for the seconds its work needs
    (estimated once, accounted as requested, and passed to the GPU function as `seconds=`, which its `duration`
    callable, `GpuCall.duration`, reads back: what ZeroGPU is asked for is what the ledger records), runs the
    call's first step as the caller, maps ZeroGPU's errors to the wire's, and accounts the compute seconds the
    worker reports as used, calibrating the estimate from them. Use it as a context manager: a call that
    fails or is abandoned is accounted as having used nothing that came back."""

    def __init__(
        self,
        kind: str,
        estimator,
        *,
        zero_gpu: bool,
        caller,  # a blink.web.callers.Caller (its quota: the identity headers), or the headers as they are
        prefill_tokens: int,
        decode_tokens: int = 0,
        max_s: int | None = None,
    ):
        self.kind, self.estimator, self.zero_gpu, self.caller = kind, estimator, zero_gpu, caller
        self.prefill_tokens, self.decode_tokens = prefill_tokens, decode_tokens
        self.charge = estimator.charge()
        self.seconds = estimator.seconds(prefill_tokens, decode_tokens, max_s, self.charge)
        estimator.requested(kind, self.seconds, self.charge)
        self.started = time.perf_counter()
        self.scheduled = False  # ZeroGPU schedules the GPU at the call's first step
        self.accounted = False

    @staticmethod
    def duration(*args, seconds: int, **kwargs) -> int:
        """The `duration` callable of every `@spaces.GPU` function here: the seconds its GpuCall asked for."""
        return seconds

    def __enter__(self) -> GpuCall:
        return self

    def __exit__(self, *exc_info) -> None:
        if not self.accounted:
            self.estimator.used(self.kind, 0.0, time.perf_counter() - self.started)
            self.accounted = True

    @contextmanager
    def step(self):
        """One step of the call: the whole of a plain function, or one item of a generator. The first runs as
        the caller (its ZeroGPU identity is read then); any step's error leaves as the wire's error."""
        try:
            if self.scheduled:
                yield
            else:
                self.scheduled = True
                with as_caller(self.caller):
                    yield
        except Exception as exc:  # noqa: BLE001 - mapped to the wire's status; the caller renders it
            raise self.failure(exc) from None

    def failure(self, exc: BaseException) -> BaseException:
        """The error as the wire's; a failure in the worker (not a refusal by the scheduler) makes the next
        call cold again: ZeroGPU does not reuse a failed worker."""
        mapped = map_gpu_errors(exc, self.zero_gpu)
        if not isinstance(mapped, (QuotaExceeded, GPUUnavailable)):
            self.estimator.failed()
        return mapped

    def used(self, compute_s: float, prefill_tokens: int | None = None, decode_tokens: int | None = None) -> None:
        """The compute seconds the worker measured (for the token counts it really processed, when known)."""
        prefill = self.prefill_tokens if prefill_tokens is None else prefill_tokens
        decode = self.decode_tokens if decode_tokens is None else decode_tokens
        self.estimator.observe(prefill, decode, compute_s)
        self.estimator.used(self.kind, compute_s, time.perf_counter() - self.started)
        self.accounted = True

    def run(self, function, *args):
        """A plain GPU function, called once."""
        with self.step():
            return function(*args, seconds=self.seconds)

    def stream(self, generator: Iterator) -> Iterator:
        """A GPU generator's items as they come; the last is a `ChatEnd`, whose compute seconds are accounted.
        Closing this stream (a client that left) closes the GPU generator, which stops the worker."""
        try:
            while True:
                with self.step():
                    item = next(generator, None)
                if item is None:
                    return
                if isinstance(item, ChatEnd):
                    with self.step():
                        next(generator, None)  # let the GPU generator finish, so the worker ends cleanly
                    self.used(item.compute_s, item.prompt_tokens, item.completion_tokens)
                yield item
        finally:
            generator.close()


class ZeroGpuBackend:
    """The Space's backend (blink.backend's contract): each batch of decisions and each chat turn is one call of
    a `@spaces.GPU` function (declared at module scope in app.py), as the caller who asked, asking for the seconds
    its tokens need. Off ZeroGPU the functions are plain calls in this process."""

    def __init__(
        self,
        gpu_score,
        gpu_generate,
        estimator,
        *,
        zero_gpu: bool,
        gpu_size: str,
        score_max_s: int,
        generate_max_s: int,
        max_output_tokens: int,
        runs=None,
        gpu_prompt_logprobs=None,
    ):
        """`runs`: the in-process backend the GPU functions run (blink.backend.LocalBackend over the same engines),
        whose figures (passes, prefix-state cache) /healthz shows."""
        self.gpu_score, self.gpu_generate, self.estimator = gpu_score, gpu_generate, estimator
        self.gpu_prompt_logprobs = gpu_prompt_logprobs  # (prompts, top, ranks, seconds=) -> PromptLogprobs each
        self.runs = runs
        self.zero_gpu, self.gpu_size = zero_gpu, gpu_size
        self.score_max_s, self.generate_max_s = score_max_s, generate_max_s
        self.max_output_tokens = max_output_tokens

    def score(self, plans, caller) -> list:
        """One call for a batch of one caller's requests, asking for its prefill tokens' worth of seconds (shared
        prefixes counted once)."""
        tokens = sum(processed_tokens(plan) for plan in plans)
        with GpuCall(
            "decide",
            self.estimator,
            zero_gpu=self.zero_gpu,
            caller=caller,
            prefill_tokens=tokens,
            max_s=self.score_max_s,
        ) as call:
            out = call.run(self.gpu_score, plans, getattr(caller, "saves_state", True))
            call.used(out[0].compute_s)  # a blink.plan.Scored per plan, each carrying the call's seconds
        return out

    def generate(self, ids, params: GenerationParams, caller) -> Iterator:
        """A chat turn as a plain generator (str deltas, then one ChatEnd), asking for its prompt tokens (prefill)
        and output budget (decode). Closing it (a client that disconnected) closes the GPU generator, which stops
        the worker and releases the GPU."""
        budget = int(params.max_tokens or self.max_output_tokens)
        with GpuCall(
            "chat",
            self.estimator,
            zero_gpu=self.zero_gpu,
            caller=caller,
            prefill_tokens=len(ids),
            decode_tokens=budget,
            max_s=self.generate_max_s,
        ) as call:
            yield from call.stream(self.gpu_generate(list(ids), params, seconds=call.seconds))

    def prompt_logprobs(self, prompts: list[list[int]], top: int, caller, ranks: bool = False) -> list:
        """Every token of each prompt scored (echo, loglikelihood): one call, asking for the prompts' tokens as
        prefill (shared starts are computed once, so this overestimates, never under)."""
        with GpuCall(
            "decide",
            self.estimator,
            zero_gpu=self.zero_gpu,
            caller=caller,
            prefill_tokens=sum(map(len, prompts)),
            max_s=self.score_max_s,
        ) as call:
            out = call.run(self.gpu_prompt_logprobs, prompts, top, ranks)
            call.used(out[0].compute_s)
        return out

    def health(self) -> dict:
        charge = self.estimator.charge()
        return {
            **(self.runs.health() if self.runs is not None else {}),
            "gpu_seconds": self.estimator.health(),
            "zero_gpu": self.zero_gpu,
            "gpu_size": charge.size if self.zero_gpu else None,  # with `auto`, the size the platform chose
            "gpu_size_setting": self.gpu_size,
            "gpu_charge": charge.describe() if self.zero_gpu else "not on ZeroGPU: no GPU quota is charged",
        }
