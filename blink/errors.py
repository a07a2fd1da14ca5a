"""Errors that carry their HTTP meaning from the engine to whichever wire answers.

The engine raises these; each wire family (System One, OpenAI) renders them in its own body shape.
"""

from __future__ import annotations


def param_of(loc: list) -> str | None:
    """A location as the field name OpenAI's clients read: ["body", "messages", 2, "content"] ->
    "messages[2].content" (the wire's `param`, and the name an image is refused under)."""
    parts = list(loc[1:] if loc and loc[0] == "body" else loc)
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or None


class BlinkError(Exception):
    """A request blink won't answer. `status` is the HTTP status; `loc` locates the fault in the body
    (FastAPI style, starting with "body"); `kind` is the machine-readable reason."""

    status = 400
    error_type = "api_usage_error"

    def __init__(
        self,
        message: str,
        *,
        loc: list | tuple = ("body",),
        kind: str = "value_error",
        status: int | None = None,
        headers: dict | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.loc = list(loc)
        self.kind = kind
        if status is not None:
            self.status = status
        self.headers = headers or {}


class InvalidRequest(BlinkError):
    """Malformed or over a limit: 422, with the location of the question (or field) at fault."""

    status = 422
    error_type = "invalid_request_error"


class NoRoute(BlinkError):
    """No route here: an unknown path (404), or a known one asked with another method (405)."""

    status = 404
    error_type = "not_found_error"


class NotFound(BlinkError):
    """A thing the request names that is not here (a task)."""

    status = 404
    error_type = "not_found_error"


class PayloadTooLarge(BlinkError):
    status = 413
    error_type = "payload_too_large"


class Unauthorized(BlinkError):
    status = 401
    error_type = "authentication_error"


class Overloaded(BlinkError):
    """The decision queue is full: 529 with Retry-After, which TypeSafe's SDKs retry."""

    status = 529
    error_type = "overloaded_error"

    def __init__(
        self,
        message: str = "blink is overloaded: too many requests are waiting. Retry after a short delay.",
        retry_after: int = 1,
        **kwargs,
    ):
        super().__init__(message, headers={"Retry-After": str(retry_after)}, **kwargs)


class GPUUnavailable(BlinkError):
    """The accelerator could not be had (ZeroGPU: no GPU free, queue timeout): 503 with Retry-After."""

    status = 503
    error_type = "gpu_unavailable"

    def __init__(
        self,
        message: str = "no GPU is available right now. Retry after a short delay.",
        retry_after: int = 10,
        **kwargs,
    ):
        super().__init__(message, headers={"Retry-After": str(int(retry_after))}, **kwargs)


class QuotaExceeded(BlinkError):
    """The caller's GPU quota (ZeroGPU) is spent: 429 with Retry-After, and `x-should-retry: false` so SDKs
    don't silently retry into the same refusal."""

    status = 429
    error_type = "rate_limit_error"

    def __init__(self, message: str = "GPU quota exceeded", retry_after: int = 60, **kwargs):
        super().__init__(message, headers={"Retry-After": str(int(retry_after)), "x-should-retry": "false"}, **kwargs)


class EngineFailure(BlinkError):
    """Our fault, not the client's: the model failed. Logged with its real reason."""

    status = 500
    error_type = "internal_error"


class StartupError(Exception):
    """The server cannot start as configured (a bad setting, a model blink cannot drive, weights that do not
    match): raised by library code, shown by the entry points (`python -m blink`, app.py) as one line."""


def startup_errors_in_one_line() -> None:
    """From here on, a StartupError that ends the process prints one line (`blink cannot start: ...`) instead of a
    traceback; any other exception keeps the interpreter's usual report (app.py, which has no main to catch it)."""
    import sys

    def report(kind, error, trace) -> None:
        if issubclass(kind, StartupError):
            print(f"blink cannot start: {error}", file=sys.stderr, flush=True)
        else:
            sys.__excepthook__(kind, error, trace)

    sys.excepthook = report
