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


def slots(*questions):
    """The Decide event's 16 question-slot inputs: the given (id, type, instructions, options), then blanks."""
    out = [v for q in questions for v in q]
    for i in range(len(questions), 4):
        out += [f"q{i + 1}", "noul", "", ""]
    return out


@pytest.mark.parametrize("state,questions,box,words", [
    ("A ticket.", [("team", "choice", "Which team?", "billing\nbilling\nshipping")], "Question 1 options",
     "listed more than once"),
    ("A ticket.", [("team", "choice", "Which team?", "billing")], "Question 1 options", "at least two options"),
    ("A ticket.", [("x", "noul", "Urgent?", ""), ("x", "noul", "Angry?", "")], "Question 2 id", "already has the id"),
    ("   ", [("urgent", "noul", "Urgent?", "")], "State", "Write the text"),
    ("A ticket.", [("urgent", "noul", "  ", "")], "Question 1 instructions", "Say what the model should decide"),
    ("A ticket.", [("mood", "score", "How upset?", "calm\ncalm")], "Question 1 options", "listed more than once"),
    ("A ticket.", [("urgent", "noul", "Urgent?", "yes\nno")], "Question 1 options", "takes no options"),
])
def test_ui_refuses_a_bad_form_naming_the_box(space, state, questions, box, words):
    """The Decide form is checked before the request (Gradio's validator: the message sits next to the box it
    concerns, and gradio_client gets it as a ValidationError); nothing reaches the model."""
    from gradio_client import Client
    from gradio_client.exceptions import ValidationError

    before = httpx.get(space + "/healthz").json()["batching"]["requests"]
    with pytest.raises(ValidationError) as info:
        Client(space, verbose=False).predict(state, len(questions), *slots(*questions), api_name="/decide")
    assert f"{box}: " in str(info.value) and words in str(info.value), str(info.value)
    assert httpx.get(space + "/healthz").json()["batching"]["requests"] == before


def test_ui_answers_name_the_level_and_warn_about_broken_json(space):
    from gradio_client import Client

    ui = Client(space, verbose=False)
    bars, raw = ui.predict(*ui.predict(api_name="/example_sentiment"), api_name="/decide")
    levels = ["Very negative", "Negative", "Mixed", "Positive", "Very positive"]
    top = max(raw["answers"]["sentiment"]["probabilities"].items(), key=lambda kv: kv[1])[0]
    assert f"level: <b>{levels[int(top)]}</b> ({int(top) + 1} of 5)" in bars
    bars, raw = ui.predict('{"ticket": "charged twice",', 1, *slots(("urgent", "noul", "Urgent?", "")),
                           api_name="/decide")
    assert "looks like JSON but does not parse" in bars and "sent as plain text" in bars
    assert raw["answers"]["urgent"]["type"] == "noul"


def test_ui_page_has_the_demo_banner_chat_examples_and_its_own_chat_caveat(space):
    import html

    import ui

    text = str(httpx.get(space + "/config", timeout=30).json())
    assert "blink-demo-banner" in text and "random weights" in text  # the served model is the demo
    assert html.escape(ui.CHAT_CAVEAT) in text and ui.CHAT_EXAMPLES[0] in text
    assert "`name: description`" not in text  # no literal backticks in the options label
    assert "noul: a yes/no question" in text  # the type explained where it is picked
