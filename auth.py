"""The Space's key: who counts as having shown it, Gradio's login with it, refusing Gradio's REST API without it,
and keeping it (and callers' ZeroGPU tokens) out of the Space log.

blink's own routes check the bearer key themselves (blink.web.auth.ApiKey); this module is what the Gradio side
adds: `presented_key` (a UI login or a bearer header makes a caller keyed), `login_with` (the password of Gradio's
login page is the API key, `gradio_ui_needs_key`), `KeyFirst` (`gradio_api_needs_key`: 401 before Gradio answers),
and one log record factory that scrubs the key and any credential-like query value from every record.
"""

from __future__ import annotations

import logging
import re

from blink.web.auth import ApiKey

LOGIN_MESSAGE = "This Space asks for its API key: log in with any user name and the key as the password."


def login_with(key: ApiKey):
    """Gradio's login check (`gradio_ui_needs_key`): the password is the API key, compared in constant time. It
    guards the page, its queue, uploads and Gradio's API; /v1/* are blink's routes and keep the bearer key."""

    def login(username: str, password: str) -> bool:
        return key.matches(password)

    return login


def presented_key(auth: ApiKey, request) -> bool:
    """Whether a Gradio caller has shown the API key (always, when none is set): `Authorization: Bearer <key>`, or
    a login to the UI, whose only password is the key (`gradio_ui_needs_key`; Gradio names the request's user only
    after its login). `request` is a gr.Request, or the Starlette request of an MCP call (it has no user name)."""
    if not auth.required or getattr(request, "username", None):
        return True
    headers = getattr(request, "headers", None) or {}
    return auth.allows(headers.get("authorization"))


REST_PATHS = frozenset(
    f"/gradio_api/{kind}/decide{slash}" for kind in ("run", "api") for slash in ("", "/")
)  # Gradio's direct-call routes, which answer every error with 500


class KeyFirst:
    """ASGI middleware (`gradio_api_needs_key`, without the UI's login): a direct `POST /gradio_api/run/decide`
    without the API key is refused with 401 (Gradio's error shape, `{"error": ...}`) before Gradio answers it 500."""

    MESSAGE = "missing or invalid API key: send Authorization: Bearer <key>"

    def __init__(self, app, allows):
        self.app, self.allows = app, allows

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("path") in REST_PATHS:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if not self.allows(headers.get("authorization")):
                from starlette.responses import JSONResponse

                response = JSONResponse({"error": self.MESSAGE}, 401, {"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


# --- secrets kept out of the log ---------------------------------------------------------------------------
REDACTED = "[redacted]"
# a query value whose name says it is a credential: ZeroGPU's `token=` and `allowToken=`, `api_key=`, `key=`,
# `access_token=`, `hf_token=`, `client_secret=`, `password=` ...
SECRET_IN_QUERY = re.compile(
    r"([?&][\w.\-]*(?:token|key|secret|password|signature)[\w.\-]*=)[^&#\s\"']+", re.IGNORECASE
)


def scrub(text: str, secrets=()) -> str:
    """`text` with every secret, and every credential-like query value, redacted."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return SECRET_IN_QUERY.sub(rf"\1{REDACTED}", text) if "=" in text else text


class ScrubbedRecords:
    """A log record factory: every record's message is scrubbed once it is made, whoever logs it (defence in
    depth: nothing should log a secret, and if anything ever does, the Space log still won't show it)."""

    def __init__(self, previous):
        self.previous = previous
        self.secrets: list[str] = []

    def __call__(self, *args, **kwargs):
        record = self.previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is the logging module's to report
            return record
        scrubbed = scrub(message, self.secrets)
        if scrubbed == message:
            return record
        # scrub the parts first, so a formatter that reads the arguments itself keeps working (uvicorn's access
        # log unpacks five); only a secret that the parts don't show alone flattens the record into its text
        if isinstance(record.msg, str) and isinstance(record.args, tuple):
            msg, args = record.msg, record.args
            record.msg = scrub(msg, self.secrets)
            record.args = tuple(scrub(a, self.secrets) if isinstance(a, str) else a for a in args)
            try:
                parts_ok = scrub(record.getMessage(), self.secrets) == record.getMessage()
            except Exception:  # noqa: BLE001 - a scrubbed part that no longer formats: flatten instead
                parts_ok = False
            if parts_ok:
                return record
        record.msg, record.args = scrubbed, ()
        return record


def keep_secrets_out_of_logs(*secrets: str | None) -> None:
    """From now on, no log record of this process carries `secrets` (the API key) or a credential in a URL
    (callers' ZeroGPU tokens travel in the scheduler's `/schedule?...&token=...`, which httpx logs at INFO:
    httpx is kept quiet as well)."""
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
    factory = logging.getLogRecordFactory()
    if not isinstance(factory, ScrubbedRecords):
        factory = ScrubbedRecords(factory)
        logging.setLogRecordFactory(factory)
    factory.secrets += [secret for secret in secrets if secret and secret not in factory.secrets]
