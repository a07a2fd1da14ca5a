"""The Space's API key: one optional key (the Space secret BLINK_API_KEY) for /v1/*.

The check itself is blink's (`blink.auth.ApiKey`: `Authorization: Bearer <key>`, constant-time compare),
and each route answers a missing or wrong key with its own wire's 401 body: System One
`{"error", "detail": {"error_type", "message"}}`, OpenAI `{"error": {"message", "type", "code"}}`,
`/v1/models` both at once. `/healthz` and the web UI stay open (the UI calls the engine in-process).

What this module adds for the Space: the key is read once from the settings, and every log record of the
process is scrubbed of it (defence in depth: nothing should log it, and if anything ever does, the Space
log still won't show it). Health shows only whether a key is required, never the key.
"""

from __future__ import annotations

import logging

from blink.auth import ApiKey

REDACTED = "[redacted]"
_installed: list[str] = []


def api_key(settings) -> ApiKey:
    """The key guard for the routes; `settings.api_key` already comes from BLINK_API_KEY (or space_config)."""
    key = ApiKey(settings.api_key)
    if settings.api_key:
        scrub_logs(settings.api_key)
    return key


def scrub_logs(secret: str) -> None:
    """Make every log record created from now on in this process unable to carry `secret`."""
    if not secret or secret in _installed:
        return
    _installed.append(secret)
    previous = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is the logging module's to report
            return record
        if secret in message:
            record.msg, record.args = message.replace(secret, REDACTED), ()
        return record

    logging.setLogRecordFactory(factory)


def describe(key: ApiKey) -> str:
    """For the UI's API tab: whether callers need a key (never the key)."""
    if key.required:
        return "This Space requires an API key for /v1/*: send `Authorization: Bearer <key>`."
    return "This Space's API is open: no key needed (any `Authorization` header is ignored)."
