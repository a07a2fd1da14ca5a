"""In-process checks of the Space's key (auth.py, no model): the key, and any credential in a query string or a
scheduler URL, scrubbed from every log record; what counts as having shown the key on the Gradio side."""

from __future__ import annotations

import logging

import gradio as gr
import pytest

import auth

pytestmark = pytest.mark.space


def test_the_key_is_scrubbed_from_every_log_record(capsys):
    from blink.settings import Settings
    from blink.web.auth import ApiKey
    from space import ui_api

    secret = "sk-unit-Wq93-never-logged"
    settings = Settings.from_values({"api_key": secret}, env={})
    key = ApiKey(settings.api_key)
    auth.keep_secrets_out_of_logs(settings.api_key)
    assert key.required and secret not in repr(key)
    handler = logging.StreamHandler()
    logger = logging.getLogger("blink.test-scrub")
    logger.addHandler(handler)
    try:
        logger.error("oops, the key is %s", secret)
        logger.error(f"inline {secret} too")
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert secret not in err and err.count(auth.REDACTED) == 2
    assert secret not in ui_api.key_note_md(key)


def test_scheduler_urls_are_scrubbed_from_logs(capsys):
    auth.keep_secrets_out_of_logs()
    handler = logging.StreamHandler()
    logger = logging.getLogger("blink.test-url-scrub")
    logger.addHandler(handler)
    try:
        logger.error('HTTP Request: POST http://x/schedule?taskId=1&durationSeconds=5&token=eyJ.secret.tok "200"')
        logger.error("POST http://x/release?allowToken=abc123&fail=false")
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert "eyJ.secret.tok" not in err and "abc123" not in err and "durationSeconds=5" in err
    assert logging.getLogger("httpx").level == logging.WARNING


@pytest.mark.parametrize(
    "line,secret,kept",
    [
        ('"GET /v1/models?api_key=sk-q-771 HTTP/1.1" 200', "sk-q-771", '"GET /v1/models?api_key='),
        ("GET /healthz?key=k-q-772&x=1", "k-q-772", "&x=1"),
        ("GET /v1/models?foo=1&access_token=at-q-773", "at-q-773", "?foo=1&access_token="),
        ("GET /v1/models?HF_TOKEN=hf_q774#frag", "hf_q774", "#frag"),
        ("GET /v1/models?x=1&client_secret=cs-q-775'", "cs-q-775", "?x=1&client_secret="),
    ],
)
def test_any_credential_in_a_query_string_is_scrubbed(capsys, line, secret, kept):
    """One scrubber for every record: a query value named like a key or token never reaches the log, while
    the rest of the line (path, other parameters, status) stays readable."""
    auth.keep_secrets_out_of_logs()
    handler = logging.StreamHandler()
    logger = logging.getLogger("blink.test-query-scrub")
    logger.addHandler(handler)
    try:
        logger.error("%s", line)
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert secret not in err and auth.REDACTED in err and kept in err


def test_one_log_record_factory_however_often_it_is_installed():
    auth.keep_secrets_out_of_logs("s-one")
    factory = logging.getLogRecordFactory()
    auth.keep_secrets_out_of_logs("s-two")
    auth.keep_secrets_out_of_logs("s-one")
    assert logging.getLogRecordFactory() is factory and isinstance(factory, auth.ScrubbedRecords)
    assert factory.secrets.count("s-one") == 1 and "s-two" in factory.secrets


def test_a_gradio_caller_has_shown_the_key_by_bearer_header_or_by_the_ui_login():
    """What counts as keyed on the Gradio side (the admission class and the decide endpoint's check)."""
    from starlette.requests import Request

    from auth import presented_key
    from blink.web.auth import ApiKey

    def starlette(headers: dict) -> Request:  # what Gradio's MCP server hands the tool
        raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        return Request({"type": "http", "method": "POST", "path": "/", "headers": raw, "query_string": b""})

    key = ApiKey("sk-unit-key")
    logged_in = gr.Request(request=starlette({}), username="anyone")
    assert presented_key(key, logged_in)  # Gradio names a user only after its login, whose password is the key
    assert not presented_key(key, gr.Request(request=starlette({})))
    assert presented_key(key, gr.Request(request=starlette({"Authorization": "Bearer sk-unit-key"})))
    assert not presented_key(key, gr.Request(request=starlette({"Authorization": "Bearer sk-unit-kez"})))
    assert presented_key(key, starlette({"Authorization": "Bearer sk-unit-key"}))  # an MCP call's own request
    assert not presented_key(key, starlette({}))
    assert not presented_key(key, None)
    assert presented_key(ApiKey(None), None)  # no key set: everyone is keyed
    assert key.matches("sk-unit-key") and not key.matches("sk-unit-key ") and not key.matches(None)
    assert not ApiKey(None).matches("")  # no key: no password logs in


def test_a_scrubbed_access_log_line_still_formats_as_uvicorn_formats_it():
    """The record factory scrubs a credential inside an argument and keeps the arguments, which uvicorn's access
    formatter unpacks (flattening them made every such line a logging error)."""
    from uvicorn.logging import AccessFormatter

    from blink.web.guard import ScrubQuery

    auth.keep_secrets_out_of_logs("sk-unit-secret")
    access = logging.getLogger("uvicorn.access")
    args = ("127.0.0.1:5", "GET", "/v1/models?api_key=sk-unit-secret&x=1", "1.1", 200)
    record = access.makeRecord(access.name, logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None)
    assert len(record.args) == 5 and "sk-unit-secret" not in record.getMessage()
    line = AccessFormatter("%(client_addr)s %(request_line)s %(status_code)s", use_colors=False).format(record)
    assert "sk-unit-secret" not in line and "GET /v1/models?api_key=[redacted]" in line
    ScrubQuery().filter(record)  # the access log's own filter then drops the query whole
    assert "?[query removed]" in record.getMessage()
