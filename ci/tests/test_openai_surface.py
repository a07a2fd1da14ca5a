"""The OpenAI surface beyond chat, with real clients against the standalone server (`python -m blink serve --model
demo --cors-origins ...`, a real process on loopback): `/v1/responses` (the openai SDK, streamed and not, and the
body Open WebUI sends on a Responses connection), the legacy `/v1/completions`, `GET /v1/models/{id}` and model
modalities, CORS, compression, and the Decisions fields openai 3.57 sends.
"""

from __future__ import annotations

import gzip
import json

import httpx
import openai
import pytest
import zstandard

from helpers import blink_serve, running, uncached

pytestmark = pytest.mark.e2e

ORIGIN = "https://app.example"


@pytest.fixture(scope="module")
def surface(demo_root):
    with running(
        blink_serve("--cors-origins", ORIGIN, "--model-aliases", "blink-alias"), demo_root, name="serve-surface"
    ) as url:
        yield url


@pytest.fixture(scope="module")
def client(surface):
    return openai.OpenAI(base_url=surface + "/v1", api_key="anything", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def name(surface):
    return httpx.get(surface + "/healthz", timeout=30).json()["served_model_name"]


# /v1/responses ----------------------------------------------------------------------------------------------
def test_responses_create_non_streamed(client, name):
    out = client.responses.create(
        model=name, input="Say hello", instructions="Be terse.", max_output_tokens=6, temperature=0
    )
    assert out.object == "response" and out.model == name and out.id.startswith("resp_")
    assert out.status == "incomplete" and out.incomplete_details.reason == "max_output_tokens"
    assert out.store is False and out.instructions == "Be terse."
    [message] = out.output
    assert message.type == "message" and message.role == "assistant"
    assert out.output_text and out.output_text == message.content[0].text
    assert out.usage.output_tokens == 6 and out.usage.input_tokens > 0
    assert out.usage.total_tokens == out.usage.input_tokens + 6


def test_responses_streamed_equals_non_streamed(client, name):
    kwargs = dict(
        model=name,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Say hello"}]}],
        max_output_tokens=8,
        temperature=0,
    )
    whole = client.responses.create(**kwargs)
    events = list(client.responses.create(**kwargs, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text
    final = events[-1].response
    assert final.output_text == whole.output_text and final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens == whole.usage.input_tokens


def test_responses_are_not_stored(client, name):
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=name, input="again", previous_response_id="resp_123")
    assert caught.value.body["param"] == "previous_response_id"
    assert "stores no" in caught.value.body["message"]


@pytest.mark.parametrize(
    "body,param",
    [
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "x", "temperature": 3}, "temperature"),
        ({}, "input"),
    ],
)
def test_responses_bad_requests_name_the_field(surface, name, body, param):
    r = httpx.post(surface + "/v1/responses", json={"model": name, **body}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and r.json()["error"]["type"] == "invalid_request_error"


def test_open_webui_responses_body(surface, name):
    """What Open WebUI's `convert_to_responses_payload` POSTs to `{base}/responses` on a connection with
    `api_type: "responses"`: the chat replayed as items (earlier output items, a reasoning item with no summary,
    a function call and its output), `instructions` from the system message, flat function tools."""
    body = {
        "model": name,
        "stream": True,
        "temperature": 0.7,
        "seed": 3,
        "max_output_tokens": 12,
        "instructions": "You are helpful.",
        "tools": [{"type": "function", "name": "run_skill_script", "parameters": {}}],
        "tool_choice": "auto",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "build an xlsx"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "call_1", "name": "run_skill_script", "arguments": "{}", "id": "fc_1"},
            {"type": "function_call_output", "call_id": "call_1", "output": "saved report.xlsx"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]},
        ],
    }
    with httpx.stream("POST", surface + "/v1/responses", json=body, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert "content-encoding" not in r.headers
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    events = [json.loads(line[6:]) for line in lines]
    assert events[0]["type"] == "response.created" and events[-1]["type"] in (
        "response.completed",
        "response.incomplete",
    )
    assert events[-1]["response"]["usage"]["output_tokens"] >= 1


# /v1/completions --------------------------------------------------------------------------------------------
def test_completions_string_and_token_ids_agree(client, name, demo_dir):
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(demo_dir)("Once upon a time", add_special_tokens=False)["input_ids"]
    text = client.completions.create(model=name, prompt="Once upon a time", max_tokens=6, temperature=0)
    by_ids = client.completions.create(model=name, prompt=ids, max_tokens=6, temperature=0)
    assert text.object == "text_completion" and text.choices[0].finish_reason == "length"
    assert text.choices[0].text and text.choices[0].text == by_ids.choices[0].text
    assert text.usage.prompt_tokens == len(ids) and text.usage.completion_tokens == 6


def test_completions_default_budget_and_streaming(client, name):
    whole = client.completions.create(model=name, prompt="Hello", temperature=0)
    assert whole.usage.completion_tokens <= 16  # OpenAI's default max_tokens
    chunks = list(
        client.completions.create(
            model=name, prompt="Hello", temperature=0, stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


@pytest.mark.parametrize(
    "extra,param",
    [
        ({"prompt": "a", "n": 2}, "n"),
        ({"prompt": [10**9]}, "prompt[0]"),
        ({"prompt": [[1, 2], [3, -1]]}, "prompt[1][1]"),
        ({"prompt": ["a", [1, 2]]}, "prompt"),
        ({"prompt": ["a", ""]}, "prompt[1]"),
        ({"prompt": [[]]}, "prompt[0]"),
        ({"prompt": ["a"] * 129}, "prompt"),
        ({"prompt": {"text": "a"}}, "prompt"),
        ({"prompt": "a", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "a", "echo": "yes"}, "echo"),
        ({"prompt": "a", "echo": True, "stream": True}, "stream"),
        ({"prompt": ["a", "b"], "stream": True}, "stream"),
        ({"prompt": "a", "prompt_logprobs": -1}, "prompt_logprobs"),
        ({"prompt": "a", "prompt_logprobs": 21}, "prompt_logprobs"),
        ({"prompt": "a", "echo": True, "logprobs": 6}, "logprobs"),
        ({"prompt": "a", "suffix": "z"}, "suffix"),
        ({}, "prompt"),
    ],
)
def test_completions_refuse_what_they_would_ignore(surface, name, extra, param):
    r = httpx.post(surface + "/v1/completions", json={"model": name, **extra}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == param


# /v1/completions: echo, lists of prompts, prompt_logprobs (loglikelihood evaluation) ---------------------------
@pytest.fixture(scope="module")
def reference(demo_dir):
    """The demo model in this process, float32: (tokenizer, ids -> log-softmax rows of a plain forward)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(demo_dir, dtype=torch.float32).eval()

    def rows(ids: list[int]):
        with torch.inference_mode():
            return torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)

    return AutoTokenizer.from_pretrained(demo_dir), rows


def completion(surface: str, body: dict) -> dict:
    r = httpx.post(surface + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_completions_echo_scores_every_prompt_token(surface, name, reference):
    """lm-eval's loglikelihood request: a question's answers as token-id lists in one request, echo, logprobs 1,
    max_tokens 1, temperature 0. Each prompt token's logprob equals a plain forward's (<= 1e-5), shared start and
    all; the last entry is the generated token (the most likely after the prompt), so `[ctxlen:-1]` is the answer."""
    tokenizer, rows = reference
    context = tokenizer("Question: what do cats say?\nAnswer:", add_special_tokens=False)["input_ids"]
    prompts = [context + tokenizer(a, add_special_tokens=False)["input_ids"] for a in (" meow", " woof", " a lot")]
    body = {"model": name, "prompt": prompts, "echo": True, "logprobs": 2, "max_tokens": 1, "temperature": 0}
    together = completion(surface, body)
    assert [c["index"] for c in together["choices"]] == [0, 1, 2]
    assert together["usage"]["prompt_tokens"] == sum(map(len, prompts))
    for ids, choice in zip(prompts, together["choices"]):
        lp, ref = choice["logprobs"], rows(ids)
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) == len(ids) + 1
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        assert max(abs(lp["token_logprobs"][i] - ref[i - 1, ids[i]].item()) for i in range(1, len(ids))) <= 1e-5
        assert all(len(top) == 2 for top in lp["top_logprobs"][1:])
        assert choice["text"].startswith(tokenizer.decode(ids))
        for token, offset in zip(lp["tokens"], lp["text_offset"]):
            assert choice["text"][offset : offset + len(token)] == token
        assert abs(lp["token_logprobs"][-1] - ref[-1].max().item()) <= 1e-5  # greedy: the most likely next token
        alone = completion(surface, {**body, "prompt": ids})["choices"][0]["logprobs"]
        assert max_diff(alone["token_logprobs"][1:], lp["token_logprobs"][1:]) <= 1e-5
    scored = completion(surface, {**body, "max_tokens": 0})["choices"]
    for ids, choice in zip(prompts, scored):
        assert len(choice["logprobs"]["tokens"]) == len(ids) and choice["text"] == tokenizer.decode(ids)


def max_diff(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b))


def test_completions_prompt_logprobs_in_vllms_shape(surface, name, reference):
    tokenizer, rows = reference
    prompt = "The quick brown fox jumps"
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    body = {"model": name, "prompt": prompt, "max_tokens": 2, "temperature": 0, "prompt_logprobs": 2}
    choice = completion(surface, body)["choices"][0]
    positions, ref = choice["prompt_logprobs"], rows(ids)
    assert len(positions) == len(ids) and positions[0] is None
    assert not choice["text"].startswith(prompt) and choice["logprobs"] is None  # no echo: the completion only
    for i, position in enumerate(positions[1:], start=1):
        own = position[str(ids[i])]
        assert abs(own["logprob"] - ref[i - 1, ids[i]].item()) <= 1e-5 and own["rank"] >= 1
        assert {v["rank"] for k, v in position.items() if k != str(ids[i])} <= {1, 2} and len(position) <= 3
        assert own["decoded_token"] == tokenizer.decode([ids[i]])
    plain = completion(surface, {**body, "prompt_logprobs": None})
    assert plain["choices"][0]["text"] == choice["text"] and "prompt_logprobs" not in plain["choices"][0]


def test_completions_lists_answer_each_prompt_in_order(surface, name, reference):
    """Strings, or token-id lists as lm-eval's generate_until sends them (`[[ids]]`): one choice per prompt, each
    what the prompt alone gets; echo without logprobs puts the prompt before the completion."""
    tokenizer, _ = reference
    prompts = ["Once upon a time", "Hello", "The answer is"]
    body = {"model": name, "max_tokens": 4, "temperature": 0, "stop": ["\n\n"]}
    listed = completion(surface, {**body, "prompt": prompts})["choices"]
    by_ids = completion(surface, {**body, "prompt": [tokenizer(prompts[0])["input_ids"]]})["choices"]
    assert [c["index"] for c in listed] == [0, 1, 2] and by_ids[0]["text"] == listed[0]["text"]
    for prompt, choice in zip(prompts, listed):
        assert completion(surface, {**body, "prompt": prompt})["choices"][0]["text"] == choice["text"]
    echoed = completion(surface, {**body, "prompt": prompts, "echo": True})["choices"]
    assert [c["text"] for c in echoed] == [p + c["text"] for p, c in zip(prompts, listed)]


@pytest.mark.parametrize(
    "prompt,param",
    [
        ([[1] * 33000], "prompt[0]"),  # past the context window
        ([[1] * 30000] * 3, "prompt"),  # past the tokens one request may run
        ("word " * 40000, "prompt"),
    ],
)
def test_completions_refuse_prompts_past_the_limits(surface, name, prompt, param):
    r = httpx.post(surface + "/v1/completions", json={"model": name, "prompt": prompt, "echo": True, "max_tokens": 0})
    assert r.status_code == 400 and r.json()["error"]["param"] == param
    assert r.json()["error"]["code"] == "context_length_exceeded"


# /tokenize, /detokenize, /tokenizer_info (vLLM's shapes) ---------------------------------------------------------
def test_tokenize_detokenize_and_tokenizer_info(surface, name, reference, client):
    tokenizer, _ = reference
    info = httpx.get(surface + "/tokenizer_info", timeout=30).json()
    assert info["eos_token"] == tokenizer.eos_token and info["model_max_length"] > 0 and info["chat_template"]
    out = httpx.post(surface + "/tokenize", json={"prompt": "Hello world", "return_token_strs": True}).json()
    assert out["tokens"] == tokenizer("Hello world")["input_ids"] and out["count"] == len(out["tokens"])
    assert out["max_model_len"] == info["model_max_length"] and "".join(out["token_strs"]).startswith("Hello")
    back = httpx.post(surface + "/detokenize", json={"model": name, "tokens": out["tokens"]}).json()
    assert back == {"prompt": "Hello world"}
    messages = [{"role": "user", "content": "Say hi"}]
    counted = httpx.post(surface + "/tokenize", json={"model": name, "messages": messages}).json()["count"]
    chat = client.chat.completions.create(model=name, messages=messages, max_tokens=1)
    assert counted == chat.usage.prompt_tokens


@pytest.mark.parametrize(
    "path,body,param",
    [
        ("/tokenize", {"prompt": 3}, "prompt"),
        ("/tokenize", {}, None),
        ("/tokenize", {"prompt": "a", "messages": []}, None),
        ("/tokenize", {"prompt": "a", "model": "gpt-9"}, "model"),
        ("/tokenize", {"prompt": "a", "add_special_tokens": "no"}, "add_special_tokens"),
        ("/tokenize", {"prompt": "word " * 40000}, "prompt"),
        ("/tokenize", {"messages": "hi"}, "messages"),
        ("/tokenize", [1, 2], None),
        ("/detokenize", {"tokens": [1, -1]}, "tokens[1]"),
        ("/detokenize", {"tokens": "abc"}, "tokens"),
        ("/detokenize", {"tokens": [1] * 40000}, "tokens"),
    ],
)
def test_tokenize_refuses_bad_input(surface, path, body, param):
    r = httpx.post(surface + path, json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_tokenize_needs_the_key(keyed_server):
    for method, path, body in [("POST", "/tokenize", {"prompt": "a"}), ("GET", "/tokenizer_info", None)]:
        r = httpx.request(method, keyed_server + path, json=body, timeout=30)
        assert r.status_code == 401 and "API key" in r.json()["error"]["message"]
        ok = httpx.request(
            method, keyed_server + path, json=body, headers={"Authorization": "Bearer sekret-key-123"}, timeout=30
        )
        assert ok.status_code == 200


# /v1/models -------------------------------------------------------------------------------------------------
def test_models_carry_modalities_and_resolve_by_id(client, surface, name):
    models = client.models.list().data
    assert [m.id for m in models] == [name, "blink-alias"]
    for m in models:
        assert m.architecture == {"input_modalities": ["text"], "output_modalities": ["text", "decisions"]}
    one = client.models.retrieve("blink-alias")
    assert one.id == "blink-alias" and one.architecture["output_modalities"] == ["text", "decisions"]
    assert "root" not in one.model_extra
    # any name a request may carry is answered by the served model: GET says so (POST takes it)
    other = client.models.retrieve("jev-latest")
    assert other.id == "jev-latest" and other.model_extra["root"] == name
    hi = [{"role": "user", "content": "hi"}]
    assert client.chat.completions.create(model="jev-latest", messages=hi, max_tokens=1).model == name
    r = httpx.get(surface + "/v1/models/", timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    body = httpx.get(surface + "/v1/models", timeout=30).json()
    assert [m["name"] for m in body["models"]] == [name, "blink-alias"]  # TypeSafe's list, same body


# standalone: CORS and compression ---------------------------------------------------------------------------
def test_cors_preflight_and_simple_request(surface):
    pre = httpx.options(
        surface + "/v1/chat/completions",
        timeout=30,
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in pre.headers["access-control-allow-methods"]
    got = httpx.get(surface + "/v1/models", headers={"Origin": ORIGIN}, timeout=30)
    assert got.headers["access-control-allow-origin"] == ORIGIN
    assert "x-request-id" in got.headers["access-control-expose-headers"]
    other = httpx.options(
        surface + "/v1/chat/completions",
        timeout=30,
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers


def test_no_cors_headers_without_the_knob(server):
    r = httpx.get(server + "/v1/models", headers={"Origin": ORIGIN}, timeout=30)
    assert "access-control-allow-origin" not in r.headers


def test_large_bodies_are_compressed_when_accepted(surface, name):
    body = {
        "model": name,
        "input": "x",
        "questions": [
            {"type": "choice", "instructions": f"Pick {i}", "choices": [{"value": f"option-{j}"} for j in range(20)]}
            for i in range(4)
        ],
    }
    raw = httpx.post(surface + "/v1/decisions", json=body, headers={"Accept-Encoding": "identity"}, timeout=120)
    assert raw.status_code == 200 and "content-encoding" not in raw.headers
    for encoding, decode in (
        ("zstd", lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b)),
        ("gzip", gzip.decompress),
    ):
        with httpx.stream(
            "POST", surface + "/v1/decisions", json=body, timeout=120, headers={"Accept-Encoding": encoding}
        ) as r:
            assert r.headers["content-encoding"] == encoding
            data = decode(b"".join(r.iter_raw()))  # as sent (httpx would decode it)
        assert json.loads(data)["answers"] == raw.json()["answers"]
    small = httpx.get(surface + "/healthz", headers={"Accept-Encoding": "gzip"}, timeout=30)
    assert small.status_code == 200


def test_event_streams_are_never_compressed(surface, name):
    with httpx.stream(
        "POST",
        surface + "/v1/chat/completions",
        timeout=120,
        headers={"Accept-Encoding": "gzip, zstd"},
        json={"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 40, "stream": True},
    ) as r:
        assert "content-encoding" not in r.headers
        assert r.read().decode().rstrip().endswith("data: [DONE]")


# /v1/decisions ----------------------------------------------------------------------------------------------
def test_decisions_accept_the_fields_openai_sends(client, surface, name):
    questions = [{"type": "predicate", "name": "damaged", "instructions": "Was the item damaged?"}]
    plain = client.decisions.create(model=name, input="The parcel arrived crushed.", questions=questions)
    hinted = client.decisions.create(
        model=name,
        input="The parcel arrived crushed.",
        questions=questions,
        prompt_cache_key="tenant-42",
        safety_identifier="user-7",
        prompt_cache_options={"ttl": "30m"},
    )
    assert hinted.answers[0].probability == pytest.approx(plain.answers[0].probability, abs=1e-6)
    r = httpx.post(
        surface + "/v1/decisions",
        timeout=60,
        json={"model": name, "input": "x", "questions": questions, "prompt_cache_key": 42},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt_cache_key"


SYSTEMONE_BODY = {
    "state": {"message": "I was charged twice. Please fix this today."},
    "questions": {
        "refund": {"type": "noul", "instructions": "Is the customer asking for money back?"},
        "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "Charges", "tech": None}},
        "anger": {"type": "score", "instructions": "How frustrated?", "criteria": ["Calm", "Frustrated", "Angry"]},
    },
}


def test_decisions_take_the_systemone_body_and_answer_as_systemone(surface):
    """LiveKit Agents' `inference.DecisionModel` posts System One's body (`state`, a `questions` object) to
    `{base_url}/decisions`: the same answer as /v1/systemone, to the last bit, in System One's shape."""
    for body in (SYSTEMONE_BODY, {**SYSTEMONE_BODY, "model": "jev-latest"}):
        one = httpx.post(surface + "/v1/systemone", json=body, timeout=60)
        two = httpx.post(surface + "/v1/decisions", json=body, timeout=60)
        assert one.status_code == two.status_code == 200, two.text
        assert uncached(two.json()) == uncached(one.json())
        assert two.headers["x-typesafe-request-id"].startswith("req_")
    # TypeSafe's multipart (a `request` part holding the JSON) is System One's too
    files = {"request": (None, json.dumps(SYSTEMONE_BODY), "application/json")}
    three = httpx.post(surface + "/v1/decisions", files=files, timeout=60)
    assert three.status_code == 200, three.text
    assert uncached(three.json())["answers"] == one.json()["answers"]


@pytest.mark.parametrize(
    "body",
    [
        {"state": "x", "questions": {"q": {"type": "nope", "instructions": "Is it?"}}},
        {"state": "x", "questions": {}},
        {"questions": {"q": {"type": "noul", "instructions": "Is it?"}}},
    ],
)
def test_decisions_refuse_a_bad_systemone_body_as_systemone_does(surface, body):
    one = httpx.post(surface + "/v1/systemone", json=body, timeout=60)
    two = httpx.post(surface + "/v1/decisions", json=body, timeout=60)
    assert one.status_code == two.status_code and 400 <= two.status_code < 500
    assert two.json() == one.json() and isinstance(two.json()["error"], str)


def test_decisions_with_input_stay_openai(surface, name):
    """`input` makes a body OpenAI's, whatever else it carries: its errors stay in OpenAI's shape."""
    body = {"model": name, "input": "x", "questions": SYSTEMONE_BODY["questions"]}
    r = httpx.post(surface + "/v1/decisions", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "questions"
    r = httpx.post(surface + "/v1/decisions", json={"model": name, "questions": []}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"
