"""`python app.py` (the Space) with the demo model on CPU: the API routes and the UI's Gradio endpoints answer
from the same server and port, with real clients (typesafe-sdk, openai, gradio_client); the optional key."""

from __future__ import annotations

import sys

import httpx
import pytest

from conftest import ARTIFACTS, ROOT, running

KEY = "sk-space-Zq81-unusual-key-value"
APP = [sys.executable, str(ROOT / "app.py")]
SPACE_ENV = {"BLINK_MODEL": "demo", "BLINK_UI_CHAT_MAX_TOKENS": "6", "BLINK_MAX_OUTPUT_TOKENS": "64"}


@pytest.fixture(scope="module")
def space(demo_root):
    with running(APP, demo_root, env=SPACE_ENV, name="space") as url:
        yield url


@pytest.fixture(scope="module")
def keyed_space(demo_root):
    with running(APP, demo_root, env={**SPACE_ENV, "BLINK_API_KEY": KEY}, name="space-keyed") as url:
        yield url


def test_models_systemone_and_gradio_on_one_port(space):
    from gradio_client import Client
    from openai import OpenAI
    from typesafe_sdk import Choice, Noul, Score, TypeSafeClient

    # GET /v1/models: both client families read the one body
    models = OpenAI(base_url=space + "/v1", api_key="unused").models.list()
    assert [m.id for m in models.data] == ["blink-4b"]
    with TypeSafeClient(base_url=space, api_key="unused", model="blink-4b") as client:
        assert [m.name for m in client.models.list().models] == ["blink-4b"]
        # POST /v1/systemone through TypeSafe's SDK
        r = client.system_one(
            state={"ticket": "I was charged twice for order #8812."},
            questions={"team": Choice(instructions="Which team?", criteria={"billing": None, "shipping": None}),
                       "urgent": Noul(instructions="Reply today?"),
                       "mood": Score(instructions="How upset?", criteria=["Calm", "Annoyed", "Angry"])})
    assert set(r.answers["team"].probabilities) == {"billing", "shipping"}
    assert 0.0 <= r.answers["urgent"].noul <= 1.0

    # the UI's Gradio endpoints, same server and port
    ui = Client(space, verbose=False)
    example = ui.predict(api_name="/example_ticket")
    bars, raw = ui.predict(*example, api_name="/decide")
    assert raw["model"] == "blink-4b"
    team = raw["answers"]["team"]["probabilities"]
    assert set(team) == {"billing", "shipping", "returns", "technical"}
    for option in team:
        assert f'data-option="{option}"' in bars  # a probability bar per option
    assert "urgent" in raw["answers"]
    for name in ("/example_moderation", "/example_sentiment"):
        values = ui.predict(api_name=name)
        _, raw = ui.predict(*values, api_name="/decide")
        assert raw["answers"], name
    reply = ui.predict("Hello there", api_name="/chat")
    assert isinstance(reply, str) and reply
    health = ui.predict(api_name="/health")
    assert health["gpu_seconds"]["decide"]["calls"] >= 4


def test_ui_decision_and_api_decision_are_the_same_code_path(space):
    """A UI decision goes through the batcher like an API one (the batcher counts both)."""
    from gradio_client import Client

    before = httpx.get(space + "/healthz").json()["batching"]["requests"]
    body = {"state": "The parcel is late.", "questions": {"late": {"type": "noul", "instructions": "Is it late?"}}}
    api = httpx.post(space + "/v1/systemone", json=body, timeout=60).json()
    ui = Client(space, verbose=False)
    _, raw = ui.predict("The parcel is late.", 1, "late", "noul", "Is it late?", "", "q2", "noul", "", "",
                        "q3", "noul", "", "", "q4", "noul", "", "", api_name="/decide")
    assert raw["answers"] == api["answers"]  # same engine, same prompt: same probabilities
    assert httpx.get(space + "/healthz").json()["batching"]["requests"] == before + 2


def test_health_shows_requested_vs_used_gpu_seconds(space):
    httpx.post(space + "/v1/systemone", json={"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}},
               timeout=60)
    gpu = httpx.get(space + "/healthz").json()["gpu_seconds"]
    decide = gpu["decide"]
    assert decide["calls"] >= 1 and decide["requested_s"] >= decide["calls"] and decide["used_s"] > 0
    assert isinstance(decide["last_requested_s"], int) and decide["last_requested_s"] >= gpu["bounds_s"][0]
    assert gpu["calibrated_from"]["prefill"] >= 1


def test_ui_page_serves_with_theme_and_caveat(space):
    import space_config

    page = httpx.get(space + "/", timeout=30)
    assert page.status_code == 200
    config = httpx.get(space + "/config", timeout=30).json()
    text = str(config)
    assert space_config.CAVEAT in text  # shown where users read answers (Decide and Chat tabs)
    assert "blink-caveat" in config.get("css", "") or "blink-caveat" in httpx.get(space + "/theme.css").text \
        or "blink-caveat" in text


def test_unrouted_v1_requests_answer_in_the_wire_shape_on_the_space(space):
    """The routes grafted onto Gradio answer unknown /v1/ paths and methods themselves, in each wire's shape."""
    from test_bad_input import UNROUTED, check_unrouted

    for method, path, status in UNROUTED:
        check_unrouted(httpx.request(method, space + path), path, status)
    assert httpx.get(space + "/config").status_code == 200  # Gradio's own routes are untouched


def test_api_key_guards_v1_only_and_never_leaks(keyed_space, demo_root):
    from gradio_client import Client
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
            model="blink-4b", messages=[{"role": "user", "content": "hi"}])
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
    _, raw = Client(url, verbose=False).predict("hello", 1, "q", "noul", "Greeting?", "", "q2", "noul", "", "",
                                                "q3", "noul", "", "", "q4", "noul", "", "", api_name="/decide")
    assert raw["answers"]["q"]["type"] == "noul"
    # the key appears nowhere: health, error bodies, the UI's config, the log
    assert KEY not in health.text and KEY not in r.text and KEY not in m.text
    assert KEY not in httpx.get(url + "/config").text
    port = url.rsplit(":", 1)[1]
    log = (ARTIFACTS / f"space-keyed-{port}.log").read_text()
    assert KEY not in log
