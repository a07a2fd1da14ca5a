"""`python app.py` (the Space) with the demo model on CPU and an API key (BLINK_API_KEY): the key guards /v1/* only
and never leaks; with BLINK_GRADIO_API_NEEDS_KEY the Gradio endpoint `decide` and the Space's MCP tool ask for it too,
and with BLINK_GRADIO_UI_NEEDS_KEY a login with the key stands in front of the UI; with real clients (openai,
gradio_client, @gradio/client, mcp). The open Space: test_space_app.py."""

from __future__ import annotations

import httpx
import pytest
from gradio_page import page_call

from helpers import (
    APP,
    ARTIFACTS,
    QUESTIONS,
    SERVERS,
    SPACE_ENV,
    STATE,
    assert_close,
    form_args,
    js_decide,
    mcp_decide,
    running,
    systemone,
    tool_body,
    uncached,
)

pytestmark = [pytest.mark.e2e, pytest.mark.space]

KEY = "sk-space-Zq81-unusual-key-value"


@pytest.fixture(scope="module")
def keyed_space(demo_root):
    """The two Spaces of this module each stop after their last test (helpers.SERVERS), not at its end."""
    env = {**SPACE_ENV, "BLINK_API_KEY": KEY, "BLINK_GRADIO_API_NEEDS_KEY": "true"}
    yield SERVERS.start("keyed_space", running(APP, demo_root, env=env, name="space-keyed"))
    SERVERS.stop("keyed_space")


@pytest.fixture(scope="module")
def login_space(demo_root):
    env = {**SPACE_ENV, "BLINK_API_KEY": KEY, "BLINK_GRADIO_UI_NEEDS_KEY": "1"}
    yield SERVERS.start("login_space", running(APP, demo_root, env=env, name="space-login"))
    SERVERS.stop("login_space")


def test_api_key_guards_v1_only_and_never_leaks(keyed_space, demo_root):
    from openai import AuthenticationError, OpenAI

    url = keyed_space
    body = {"state": "hello", "questions": {"q": {"type": "noul", "instructions": "Is this a greeting?"}}}
    # System One: its own 401 body
    r = httpx.post(url + "/v1/systemone", json=body, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    assert r.json()["detail"]["error_type"] == "authentication_error" and isinstance(r.json()["error"], str)
    # OpenAI: its own 401 body
    with pytest.raises(AuthenticationError) as info:
        OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0).chat.completions.create(
            model="blink-4b", messages=[{"role": "user", "content": "hi"}]
        )
    assert info.value.body["type"] == "authentication_error"
    # /v1/models: both shapes in one body
    m = httpx.get(url + "/v1/models")
    assert m.status_code == 401 and "error" in m.json() and "detail" in m.json()
    # the right key works
    ok = httpx.post(url + "/v1/systemone", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert ok.status_code == 200
    assert [x.id for x in OpenAI(base_url=url + "/v1", api_key=KEY).models.list().data] == ["blink-4b"]
    # /healthz and the UI stay open
    health = httpx.get(url + "/healthz")
    assert health.status_code == 200 and health.json()["api_key_required"] is True
    _, raw = page_call(url, "decide_form", *form_args("hello", ("q", "noul", "Greeting?", "")))
    assert raw["answers"]["q"]["type"] == "noul"
    # the key appears nowhere: health, error bodies, the UI's config, the log
    assert KEY not in health.text and KEY not in r.text and KEY not in m.text
    assert KEY not in httpx.get(url + "/config").text
    port = url.rsplit(":", 1)[1]
    log = (ARTIFACTS / f"space-keyed-{port}.log").read_text()
    assert KEY not in log


def test_with_gradio_api_needs_key_decide_and_mcp_ask_for_the_key(keyed_space):
    """BLINK_GRADIO_API_NEEDS_KEY: the Gradio endpoint and the Space's MCP tool ask for the /v1 key (the UI's own
    events stay open: test_api_key_guards_v1_only_and_never_leaks)."""
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    url = keyed_space
    with pytest.raises(AppError) as info:
        Client(url, verbose=False).predict(state=STATE, questions=QUESTIONS, api_name="/decide")
    assert "API key" in str(info.value)
    keyed = Client(url, verbose=False, headers={"Authorization": f"Bearer {KEY}"})
    assert_close(uncached(keyed.predict(state=STATE, questions=QUESTIONS, api_name="/decide")), systemone(url, KEY))

    refused = mcp_decide(url)
    assert refused.isError and "API key" in refused.content[0].text
    wrong = mcp_decide(url, "wrong")
    assert wrong.isError
    result = mcp_decide(url, KEY)
    assert_close(uncached(tool_body(result)), systemone(url, KEY))

    assert "API key" in js_decide(url)["error"]
    assert_close(uncached(js_decide(url, KEY)["body"]), systemone(url, KEY))
    port = url.rsplit(":", 1)[1]
    assert KEY not in (ARTIFACTS / f"space-keyed-{port}.log").read_text()


FORM = form_args("The parcel is late.", ("late", "noul", "Is it late?", ""))


def test_with_gradio_ui_needs_key_the_ui_and_its_api_ask_for_a_login_with_the_key(login_space):
    """BLINK_GRADIO_UI_NEEDS_KEY: Gradio's login page in front of the UI, its queue and its API, the API key as the
    password; MCP clients (who cannot log in) send the bearer key; /v1/* keep the bearer key, not the login."""
    from gradio_client import Client
    from gradio_client.exceptions import AuthenticationError

    url = login_space
    page = httpx.get(url + "/", timeout=30)
    assert page.status_code == 200 and '"auth_required":true' in page.text.replace(" ", "")  # the login form
    assert "log in with any user name and the key as the password" in page.text
    assert httpx.get(url + "/config", timeout=30).status_code == 401
    session = {"data": [], "fn_index": 0, "session_hash": "anonymous", "event_data": None, "trigger_id": None}
    assert httpx.post(url + "/gradio_api/queue/join", json=session, timeout=30).status_code == 401
    assert httpx.post(url + "/gradio_api/upload", files={"files": b"x"}, timeout=30).status_code == 401
    with pytest.raises(AuthenticationError):
        Client(url, verbose=False)

    # a wrong key does not log in; neither does a bearer header on the page's routes
    assert httpx.post(url + "/login", data={"username": "me", "password": "wrong"}, timeout=30).status_code == 400
    assert httpx.post(url + "/login", data={"username": "me", "password": KEY[:-1]}, timeout=30).status_code == 400
    with pytest.raises(ValueError, match="Could not login"):
        Client(url, verbose=False, auth=("me", "wrong"))
    assert httpx.get(url + "/config", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).status_code == 401

    # the key logs in (any user name): the page's events answer, and gradio_client's decide
    login = httpx.post(url + "/login", data={"username": "anyone", "password": KEY}, timeout=30)
    assert login.status_code == 200 and login.json() == {"success": True}
    _, raw = page_call(url, "decide_form", *FORM, cookies=login.cookies)
    assert set(raw["answers"]) == {"late"}
    reply = page_call(url, "chat", "Hello there", [], cookies=login.cookies)[0]
    assert isinstance(reply, str) and reply
    client = Client(url, verbose=False, auth=("me", KEY))
    assert_close(uncached(client.predict(state=STATE, questions=QUESTIONS, api_name="/decide")), systemone(url, KEY))

    # MCP: the tool asks for the bearer key
    refused = mcp_decide(url)
    assert refused.isError and "API key" in refused.content[0].text
    result = mcp_decide(url, KEY)
    assert_close(uncached(tool_body(result)), systemone(url, KEY))

    # /v1/* answer to the bearer key only (a logged-in page's cookie is not a key); /healthz stays open
    body = {"state": "hello", "questions": {"q": {"type": "noul", "instructions": "Is this a greeting?"}}}
    r = httpx.post(url + "/v1/systemone", json=body, cookies=login.cookies, timeout=60)
    assert r.status_code == 401 and r.json()["detail"]["error_type"] == "authentication_error"
    assert httpx.get(url + "/healthz", timeout=30).json()["api_key_required"] is True
    port = url.rsplit(":", 1)[1]
    assert KEY not in (ARTIFACTS / f"space-login-{port}.log").read_text()
