"""ZeroGPU glue for the Space: whose quota a GPU call spends, and what ZeroGPU's refusals mean over HTTP.

Kept apart from app.py so it can be tested without loading a model; blink/ itself stays free of gradio and
spaces (it passes the caller along as an opaque value: `Context.caller_of(request)`, a batcher job's `caller`).

Identity. `spaces` charges a GPU call to the caller whose `x-ip-token` header it finds on Gradio's
`LocalContext.request`. Custom routes (/v1/*) have no Gradio request, and decisions are run by blink's
batcher thread, so: `caller_from_headers` reads the caller's identity headers from each request (the routes
pass it to the decision service and to chat; the batcher only batches one caller's jobs together and hands
that caller to the GPU step), and `as_caller` sets `LocalContext.request` in the thread that makes the GPU
call. The token is only ever passed on, never logged.

Errors. `spaces` raises `gr.Error` with a title; `zerogpu_error` turns each into a blink error, which every
wire renders in its own body shape: quota (and illegal duration, pending credits) 429 with Retry-After and
`x-should-retry: false`; no GPU, queue timeout, expired proxy token 503 with Retry-After; worker failure 500
(the worker's traceback is already in the log; we log the summary).
"""

from __future__ import annotations

import logging
import re
from contextlib import contextmanager

import gradio as gr
from gradio.context import LocalContext
from starlette.requests import Request

from blink.errors import BlinkError, EngineFailure, GPUUnavailable, QuotaExceeded

log = logging.getLogger("blink.space")

IDENTITY_HEADERS = ("x-ip-token",)  # what ZeroGPU reads to charge the caller


# --- identity ----------------------------------------------------------------------------------------------
def caller_from_headers(headers) -> tuple | None:
    """The opaque caller a job carries: its identity headers as (name, value) pairs, or None (anonymous)."""
    if headers is None:
        return None
    pairs = tuple((name, headers.get(name)) for name in IDENTITY_HEADERS if headers.get(name))
    return pairs or None


def gradio_request(caller: tuple | None):
    """A `gr.Request` carrying the caller's identity headers (what `spaces` reads), or None."""
    if not caller:
        return None
    scope = {"type": "http", "method": "POST", "path": "/", "query_string": b"",
             "headers": [(name.encode("latin-1"), value.encode("latin-1")) for name, value in caller]}
    return gr.Request(request=Request(scope))


@contextmanager
def as_caller(caller: tuple | None):
    """In this thread, make `spaces` see `caller` as the Gradio request (it reads x-ip-token from there)."""
    token = LocalContext.request.set(gradio_request(caller))
    try:
        yield
    finally:
        LocalContext.request.reset(token)


_TOKEN_IN_URL = re.compile(r"([?&](?:token|allowToken)=)[^&\s\"']+")


def keep_tokens_out_of_logs() -> None:
    """Callers' ZeroGPU tokens travel in the scheduler's URLs (`/schedule?...&token=...`), which httpx logs
    at INFO: keep httpx quiet, and scrub any such URL from every log record as well."""
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
    previous = logging.getLogRecordFactory()
    if getattr(previous, "zerogpu_scrub", False):
        return

    def factory(*args, **kwargs):
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001
            return record
        if "token=" in message.lower():
            record.msg, record.args = _TOKEN_IN_URL.sub(r"\1[redacted]", message), ()
        return record

    factory.zerogpu_scrub = True
    logging.setLogRecordFactory(factory)


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
            return GPUUnavailable(f"no GPU was available in time: {message}", retry_after=30,
                                  kind="gpu_queue_timeout")
        default = 3600 if title == "ZeroGPU quota exceeded" else 60
        return QuotaExceeded(f"{title}: {message}", retry_after=retry_after_from(message, default),
                             kind="gpu_quota_exceeded")
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
