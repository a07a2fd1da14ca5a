"""`python app.py` (the Space) with the demo model on CPU, open (no key): the API routes, the UI's events and the
Space as a tool (the Gradio endpoint `decide` and Gradio's MCP server) answer from the same server and port, with real
clients (typesafe-sdk, openai, gradio_client, @gradio/client, mcp). The Space with a key: test_space_app_key.py."""

from __future__ import annotations

import httpx
import pytest
from gradio_page import PageValidationError, page_call, values_only

from helpers import (
    APP,
    QUESTIONS,
    SERVERS,
    SPACE_ENV,
    STATE,
    UNROUTED,
    assert_close,
    check_unrouted,
    example_form,
    form_args,
    js_decide,
    mcp_call,
    mcp_decide,
    running,
    systemone,
    tool_body,
    uncached,
)

pytestmark = [pytest.mark.e2e, pytest.mark.space]


@pytest.fixture(scope="module")
def space(demo_root):
    """The open Space, stopped after its last test (helpers.SERVERS)."""
    yield SERVERS.start("space", running(APP, demo_root, env=SPACE_ENV, name="space"))
    SERVERS.stop("space")


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
            questions={
                "team": Choice(instructions="Which team?", criteria={"billing": None, "shipping": None}),
                "urgent": Noul(instructions="Reply today?"),
                "mood": Score(instructions="How upset?", criteria=["Calm", "Annoyed", "Angry"]),
            },
        )
    assert set(r.answers["team"].probabilities) == {"billing", "shipping"}
    assert 0.0 <= r.answers["urgent"].noul <= 1.0

    # the UI's events (private: called as the page calls them), same server and port
    example = example_form(values_only(page_call(space, "example_ticket")))
    bars, raw = page_call(space, "decide_form", *example)
    assert raw["model"] == "blink-4b"
    team = raw["answers"]["team"]["probabilities"]
    assert set(team) == {"billing", "shipping", "returns", "technical"}
    for option in team:
        assert f'data-option="{option}"' in bars  # a probability bar per option
    assert "urgent" in raw["answers"]
    for name in ("example_moderation", "example_sentiment"):
        values = example_form(values_only(page_call(space, name)))
        _, raw = page_call(space, "decide_form", *values)
        assert raw["answers"], name
    reply = page_call(space, "chat", "Hello there", [])[0]
    assert isinstance(reply, str) and reply
    # the one documented endpoint, through gradio_client
    assert (
        Client(space, verbose=False).predict(
            state="hi", questions={"q": {"type": "noul", "instructions": "?"}}, api_name="/decide"
        )["model"]
        == "blink-4b"
    )
    health = page_call(space, "health")[0]
    assert health["gpu_seconds"]["decide"]["calls"] >= 4


def test_ui_decision_and_api_decision_are_the_same_code_path(space):
    """A UI decision goes through the batcher like an API one (the batcher counts both)."""
    before = httpx.get(space + "/healthz").json()["batching"]["requests"]
    body = {"state": "The parcel is late.", "questions": {"late": {"type": "noul", "instructions": "Is it late?"}}}
    api = httpx.post(space + "/v1/systemone", json=body, timeout=60).json()
    _, raw = page_call(space, "decide_form", *form_args("The parcel is late.", ("late", "noul", "Is it late?", "")))
    assert_close(raw["answers"], api["answers"])  # same engine, same prompt: same probabilities (within 1e-6)
    assert httpx.get(space + "/healthz").json()["batching"]["requests"] == before + 2


def test_health_shows_requested_vs_used_gpu_seconds(space):
    httpx.post(
        space + "/v1/systemone",
        json={"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}},
        timeout=60,
    )
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
    assert (
        "blink-caveat" in config.get("css", "")
        or "blink-caveat" in httpx.get(space + "/theme.css").text
        or "blink-caveat" in text
    )


def test_unrouted_v1_requests_answer_in_the_wire_shape_on_the_space(space):
    """The routes grafted onto Gradio answer unknown /v1/ paths and methods themselves, in each wire's shape."""
    for method, path, status in UNROUTED:
        check_unrouted(httpx.request(method, space + path), path, status)
    assert httpx.get(space + "/config").status_code == 200  # Gradio's own routes are untouched


@pytest.mark.parametrize(
    "state,questions,box,words",
    [
        (
            "A ticket.",
            [("team", "choice", "Which team?", "billing\nbilling\nshipping")],
            "Question 1 options",
            "listed more than once",
        ),
        ("A ticket.", [("team", "choice", "Which team?", "billing")], "Question 1 options", "at least two options"),
        (
            "A ticket.",
            [("x", "noul", "Urgent?", ""), ("x", "noul", "Angry?", "")],
            "Question 2 id",
            "already has the id",
        ),
        ("A ticket.", [("mood", "score", "How upset?", "calm\ncalm")], "Question 1 options", "listed more than once"),
        ("A ticket.", [("urgent", "noul", "Urgent?", "yes\nno")], "Question 1 options", "takes no options"),
        ("A ticket.", [("team", "choice", "  ", "billing\nshipping")], "Question 1 instructions", "Write the question"),
        ("", [("urgent", "noul", "", "")], "Question 1 instructions", "model is asked nothing"),
    ],
)
def test_ui_refuses_a_bad_form_naming_the_box(space, state, questions, box, words):
    """The Decide form is checked before the request (Gradio's validator: the message sits next to the box it
    concerns, and the page gets it as a 422 naming the box); nothing reaches the model."""
    before = httpx.get(space + "/healthz").json()["batching"]["requests"]
    with pytest.raises(PageValidationError) as info:
        page_call(space, "decide_form", *form_args(state, *questions))
    assert f"{box}: " in str(info.value) and words in str(info.value), str(info.value)
    assert httpx.get(space + "/healthz").json()["batching"]["requests"] == before


def test_ui_says_so_when_the_state_is_empty_and_answers_as_the_api_does(space):
    """An empty state is told, not refused (the wire accepts a question about nothing; in the form it is almost
    always a slip): the note above the answers, and the answers the API's own. Beside the box the page shows it
    as soon as the state is empty (the state's change event)."""
    bars, raw = page_call(space, "decide_form", *form_args("   ", ("urgent", "noul", "Is 2 + 2 = 4?", "")))
    api = httpx.post(
        space + "/v1/systemone",
        json={"state": "", "questions": {"urgent": {"type": "noul", "instructions": "Is 2 + 2 = 4?"}}},
        timeout=60,
    )
    assert api.status_code == 200 and set(raw["answers"]) == set(api.json()["answers"]) == {"urgent"}
    assert "The state is empty" in bars and "blink-bar" in bars
    bars, _ = page_call(space, "decide_form", *form_args("A ticket.", ("urgent", "noul", "Urgent?", "")))
    assert "The state is empty" not in bars and "blink-bar" in bars
    config = httpx.get(space + "/config", timeout=30).json()
    (note,) = [c["props"] for c in config["components"] if c.get("props", {}).get("elem_id") == "blink-state-note"]
    assert not note["value"] and note["visible"] is False  # a fresh page: nothing done yet, nothing told


def test_ui_answers_name_the_level_and_warn_about_broken_json(space):
    bars, raw = page_call(space, "decide_form", *example_form(values_only(page_call(space, "example_sentiment"))))
    levels = ["Very negative", "Negative", "Mixed", "Positive", "Very positive"]
    top = max(raw["answers"]["sentiment"]["probabilities"].items(), key=lambda kv: kv[1])[0]
    assert f"level: <b>{levels[int(top)]}</b> (level {int(top)} on a scale of 0 (Very negative) to 4" in bars
    assert f"score {raw['answers']['sentiment']['score']:.2f} (the expected level)" in bars  # 0-based, as the JSON
    bars, raw = page_call(
        space, "decide_form", *form_args('{"ticket": "charged twice",', ("urgent", "noul", "Urgent?", ""))
    )
    assert "looks like JSON but does not parse" in bars and "sent as plain text" in bars
    assert raw["answers"]["urgent"]["type"] == "noul"


def test_the_rank_and_moderate_views_answer_as_their_routes_do(space):
    """The Rank and Moderate views' events go through the routes' own steps (the batcher counts them) and give
    the routes' answers: the documents in /v1/rerank's order with its scores, each category's /v1/moderations
    score with its threshold drawn; a refusal is shown by box with the wire's body beside it, no bars."""
    before = httpx.get(space + "/healthz").json()["batching"]["requests"]
    query, documents = values_only(page_call(space, "rank_example_late"))[:2]
    bars, raw = page_call(space, "rank_form", query, documents)
    api = httpx.post(
        space + "/v1/rerank", json={"query": query, "documents": documents.splitlines()}, timeout=60
    ).json()
    assert_close(
        [(r["index"], r["relevance_score"]) for r in raw["results"]],
        [(r["index"], r["relevance_score"]) for r in api["results"]],
    )
    first, second = raw["results"][:2]  # what drew the bars (api's are another request's: within 1e-6)
    assert bars.index(f'document {first["index"] + 1}"') < bars.index(f'document {second["index"] + 1}"')
    assert f'data-p="{first["relevance_score"]:.6f}"' in bars
    (text,) = values_only(page_call(space, "moderate_example_threat"))[:1]
    bars, raw = page_call(space, "moderate_form", text)
    api = httpx.post(space + "/v1/moderations", json={"input": text}, timeout=60).json()
    assert_close(raw["results"][0]["category_scores"], api["results"][0]["category_scores"])
    assert bars.count('class="blink-mark"') == len(api["results"][0]["categories"]) == 13
    flagged = [name for name, on in api["results"][0]["categories"].items() if on]
    assert bars.count("blink-flagged") == len(flagged)
    # one queued request each: a rerank's documents are queued together, a moderation's input is one decision
    assert httpx.get(space + "/healthz").json()["batching"]["requests"] == before + 4
    # the form's gaps are refused before any request, each on its box (the page's validator, as Decide's)
    with pytest.raises(PageValidationError, match="^Query: write what the documents are ranked for"):
        page_call(space, "rank_form", "  ", "a document")
    with pytest.raises(PageValidationError, match="^Documents: 1000 lines; this Space ranks at most"):
        page_call(space, "rank_form", "q", "\n".join(["doc"] * 1000))
    with pytest.raises(PageValidationError, match="^Text: write the text to moderate"):
        page_call(space, "moderate_form", " \n")
    bars, raw = page_call(space, "moderate_form", "word " * 40_000)  # past the context: refused, nothing cut
    assert bars.startswith('<div class="blink-error">Text: ') and "blink-bar" not in bars
    assert raw is not None and raw["error"]["message"], raw


def test_the_calibration_menu_sends_x_calibration_and_the_caveat_follows_it(space):
    """The Decide form's Calibration menu: the Space's default sends no `x_calibration` (the answers are the API's
    without it), any other choice sends it (the API's answers with it); the caveat beside the answers says what the
    choice does, and answers got another way go with the old caveat."""
    config = httpx.get(space + "/config", timeout=30).json()
    (menu,) = [c["props"] for c in config["components"] if c.get("props", {}).get("elem_id") == "blink-calibration"]
    assert [value for _, value in menu["choices"]] == ["default", "fitted", "prior", "fitted+prior", "raw"]
    # the demo has no calibration file, and the server's default (fitted) applies none
    assert menu["value"] == "default" and menu["choices"][0][0] == "Space default (none)"
    state, question = "The parcel is late.", ("late", "noul", "Is it late?", "")
    body = {"state": state, "questions": {"late": {"type": "noul", "instructions": "Is it late?"}}}

    def api(**fields) -> dict:
        reply = httpx.post(space + "/v1/systemone", json={**body, **fields}, timeout=120)
        assert reply.status_code == 200, reply.text
        return uncached(reply.json())

    _, default = page_call(space, "decide_form", *form_args(state, question))
    assert_close(uncached(default), api())
    assert "prior" not in default["x_calibration"]
    _, raw = page_call(space, "decide_form", *form_args(state, question, calibration="raw"))
    assert_close(uncached(raw), api(x_calibration="raw"))
    wire = api(x_calibration="prior")["x_calibration"]
    bars, prior = page_call(space, "decide_form", *form_args(state, question, calibration="prior"))
    assert prior["x_calibration"]["applied"] is True and 'data-option="yes"' in bars
    assert prior["x_calibration"]["prior"] == {**wire["prior"], "tokens": 0}  # the wire's prior, kept
    with pytest.raises(httpx.HTTPStatusError) as info:  # not one of the menu's choices: Gradio refuses the event
        page_call(space, "decide_form", *form_args(state, question, calibration="cooked"))
    assert info.value.response.status_code == 400 and "cooked" in info.value.response.text

    caveat, results, answers = page_call(space, "calibration", "prior")
    assert "lean towards some options" in caveat and "no temperature scaling" in caveat
    assert (results, answers) == ("", None)  # the answers shown were got another way
    assert "no calibration is applied to these answers" in page_call(space, "calibration", "raw")[0]
    assert "no calibration is applied on this server" in page_call(space, "calibration", "default")[0]


def test_ui_page_has_the_demo_banner_chat_examples_and_its_own_chat_caveat(space):
    import html

    from space import ui_chat

    text = str(httpx.get(space + "/config", timeout=30).json())
    assert "blink-demo-banner" in text and "random weights" in text  # the served model is the demo
    assert html.escape(ui_chat.CHAT_CAVEAT) in text and ui_chat.CHAT_EXAMPLES[0] in text
    assert "`name: description`" not in text  # no literal backticks in the options label
    assert "noul: a yes/no question" in text  # the type explained where it is picked
    assert "blink-chat-speed" in text and "generates on the CPU" in text  # a slow reply is announced before it


# --- the Space as a tool: `decide(state, questions, x_calibration=None)` over gradio_client, @gradio/client, MCP -
BAD = {"pick": {"type": "choice", "instructions": "Pick one", "criteria": {}}}


def test_the_gradio_api_is_one_documented_decide_endpoint(space):
    """gradio_client sees one endpoint, `decide(state, questions, x_calibration=None)`, documented, and keyword
    arguments give the body /v1/systemone gives; the UI's own events are private."""
    from gradio_client import Client

    client = Client(space, verbose=False)
    api = client.view_api(print_info=False, return_format="dict")
    assert list(api["named_endpoints"]) == ["/decide"] and not api["unnamed_endpoints"]
    decide = api["named_endpoints"]["/decide"]
    assert [p["parameter_name"] for p in decide["parameters"]] == ["state", "questions", "x_calibration"]
    assert [p["parameter_has_default"] for p in decide["parameters"]] == [False, False, True]
    assert decide["parameters"][2]["parameter_default"] is None  # left out: the server's default
    assert "probability for every option" in decide["description"] and "x_calibration" in decide["description"]
    body = client.predict(state=STATE, questions=QUESTIONS, api_name="/decide")
    assert_close(uncached(body), systemone(space))  # the same engine, the same prompts: the same body (1e-6)
    # the two-argument call, as before: by position too, and Gradio's REST path with two values
    assert_close(uncached(client.predict(STATE, QUESTIONS, api_name="/decide")), systemone(space))
    rest = httpx.post(space + "/gradio_api/run/decide", json={"data": [STATE, QUESTIONS]}, timeout=120)
    assert rest.status_code == 200
    assert_close(uncached(rest.json()["data"][0]), systemone(space))
    assert (
        client.predict(state="plain text works too", questions={"q": QUESTIONS["spam"]}, api_name="/decide")["answers"][
            "q"
        ]["type"]
        == "noul"
    )


def test_decide_takes_x_calibration_as_v1_systemone_does(space):
    """`x_calibration` through gradio_client (by keyword and by position) and Gradio's REST path: the body
    /v1/systemone gives with the same field."""
    from gradio_client import Client

    client = Client(space, verbose=False)
    raw = systemone(space, x_calibration="raw")
    assert raw["x_calibration"] == {"applied": False, "temperatures": {}}
    by_name = client.predict(state=STATE, questions=QUESTIONS, x_calibration="raw", api_name="/decide")
    assert_close(uncached(by_name), raw)
    assert_close(uncached(client.predict(STATE, QUESTIONS, "raw", api_name="/decide")), raw)
    rest = httpx.post(space + "/gradio_api/run/decide", json={"data": [STATE, QUESTIONS, "raw"]}, timeout=120)
    assert rest.status_code == 200
    assert_close(uncached(rest.json()["data"][0]), raw)
    # the value reaches the decision (on the demo, with no calibration file, raw and the default read alike): the
    # prior divides the answers, the body says so as /v1/systemone's does, and the prior is the one it computed (the
    # same content-free prompts: kept, so none ran again)
    wire = systemone(space, x_calibration="prior")["x_calibration"]
    fact = client.predict(state=STATE, questions=QUESTIONS, x_calibration="prior", api_name="/decide")["x_calibration"]
    assert fact["applied"] is True and fact["prior"]["states"] == ["N/A", "", "[MASK]"]
    assert set(fact["prior"]["answers"]) == set(QUESTIONS)
    assert fact["prior"] == {**wire["prior"], "tokens": 0}


def test_decide_refuses_bad_input_with_the_wire_message(space):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as info:
        Client(space, verbose=False).predict(state="x", questions=BAD, api_name="/decide")
    assert "question 'pick'" in str(info.value) and "criteria" in str(info.value)
    # an x_calibration the wire does not take: its 422, with the message /v1/systemone gives
    wire = httpx.post(space + "/v1/systemone", json={"state": "x", "questions": QUESTIONS, "x_calibration": "cooked"})
    assert wire.status_code == 422
    with pytest.raises(AppError) as info:
        Client(space, verbose=False).predict(state="x", questions=QUESTIONS, x_calibration="cooked", api_name="/decide")
    assert str(info.value) == wire.json()["error"] and "`x_calibration` must be" in str(info.value)
    rest = httpx.post(space + "/gradio_api/run/decide", json={"data": ["x", QUESTIONS, "cooked"]}, timeout=60)
    assert rest.json()["title"] == "Error 422" and rest.json()["error"] == wire.json()["error"]
    assert httpx.get(space + "/healthz").json()["ok"] is True  # and the Space keeps serving


def test_the_js_client_calls_decide_with_keyword_arguments(space):
    out = js_decide(space)
    assert out["endpoints"] == ["/decide"]
    assert_close(uncached(out["body"]), systemone(space))
    assert_close(uncached(js_decide(space, x_calibration="raw")["body"]), systemone(space, x_calibration="raw"))


def test_mcp_on_the_space_lists_and_calls_decide(space):
    tools = mcp_call(space + "/gradio_api/mcp/", lambda mcp: mcp.list_tools()).tools
    assert [t.name for t in tools] == ["decide"]  # the UI's events are not tools
    tool = tools[0]
    assert "probability for every option" in tool.description
    schema = tool.inputSchema
    assert schema["required"] == ["state", "questions"]  # x_calibration is optional
    assert "JSON value" in schema["properties"]["state"]["description"]
    assert "noul" in schema["properties"]["questions"]["description"]
    calibration = schema["properties"]["x_calibration"]
    assert {"enum": ["calibrated", "raw", "fitted", "prior", "fitted+prior"], "type": "string"} in calibration["anyOf"]
    assert calibration["default"] is None and "x_calibration" in tool.description
    result = mcp_decide(space)
    assert_close(uncached(tool_body(result)), systemone(space))
    raw = mcp_call(
        space + "/gradio_api/mcp/",
        lambda mcp: mcp.call_tool("decide", {"state": STATE, "questions": QUESTIONS, "x_calibration": "raw"}),
    )
    assert_close(uncached(tool_body(raw)), systemone(space, x_calibration="raw"))
    cooked = mcp_call(
        space + "/gradio_api/mcp/",
        lambda mcp: mcp.call_tool("decide", {"state": "x", "questions": QUESTIONS, "x_calibration": "cooked"}),
    )
    assert cooked.isError and "cooked" in cooked.content[0].text  # refused by the schema, as a tool error
    refused = mcp_call(
        space + "/gradio_api/mcp/", lambda mcp: mcp.call_tool("decide", {"state": "x", "questions": BAD})
    )
    assert refused.isError and "question 'pick'" in refused.content[0].text


def test_a_stalled_body_on_the_space_gets_408_and_its_connection_ends(space):
    """Gradio's uvicorn takes no body deadline, so app.py wraps Gradio's app in BodyDeadline (launch's
    `app_kwargs` middleware): a body that stops arriving is cut off after 10 s of silence, here as standalone."""
    import socket
    import time

    port = int(space.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=40) as sock:
        sock.sendall(
            b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"state": '
        )
        t = time.perf_counter()
        reply = b""
        while chunk := sock.recv(65536):  # until the server closes the connection
            reply += chunk
        took = time.perf_counter() - t
    assert reply.startswith(b"HTTP/1.1 408"), reply[:300]
    assert b'"error_type":"request_timeout"' in reply
    assert 8 < took < 30, took


def test_the_api_tabs_shell_snippets_run_as_written(space):
    """The API tab's shell snippets (System One, rerank, moderation), with this Space's URL filled in as the page
    fills it, run as a person pastes them into a shell: each prints its route's answer."""
    import re
    import subprocess

    snippets, *_ = page_call(space, "ui_load")
    blocks = re.findall(r"```bash\n(.*?)```", snippets, re.S)
    assert len(blocks) == 3 and all(space in block for block in blocks)
    printed = [
        subprocess.run(["bash", "-c", block], capture_output=True, text=True, timeout=120, check=True).stdout
        for block in blocks
    ]
    assert '"answers"' in printed[0] and '"relevance_score"' in printed[1] and '"category_scores"' in printed[2]
