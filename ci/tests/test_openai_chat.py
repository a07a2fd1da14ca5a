"""/v1/chat/completions, /v1/models and /v1/decisions with the real `openai` SDK against the standalone server
(`python -m blink serve --model demo`, a real process on loopback) running the demo model."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

pytestmark = pytest.mark.e2e

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello to the team."}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="anything", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def tokenizer(demo_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_dir)


@pytest.fixture(scope="module")
def served_name(server):
    return httpx.get(server + "/healthz", timeout=30).json()["served_model_name"]


def prompt_tokens(tokenizer, messages) -> int:
    out = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, enable_thinking=False, tokenize=True, return_dict=True
    )
    return len(out["input_ids"])


def test_models_list_serves_the_model(client, served_name):
    ids = [m.id for m in client.models.list().data]
    assert ids[0] == served_name


def test_non_streamed_length_and_usage(client, tokenizer, served_name):
    out = client.chat.completions.create(model=served_name, messages=MESSAGES, max_tokens=8, temperature=0)
    choice = out.choices[0]
    assert out.object == "chat.completion" and out.model == served_name
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason == "length"
    assert out.usage.completion_tokens == 8
    assert out.usage.prompt_tokens == prompt_tokens(tokenizer, MESSAGES)
    assert out.usage.total_tokens == out.usage.prompt_tokens + 8


def test_streamed_equals_non_streamed_and_reports_usage(client, tokenizer, served_name):
    kwargs = dict(model=served_name, messages=MESSAGES, max_completion_tokens=10, temperature=0)
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    stream = client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) >= 3 and "".join(pieces) == whole
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.completion_tokens == 10
    assert usage.prompt_tokens == prompt_tokens(tokenizer, MESSAGES)


def test_a_temperature_too_small_to_scale_by_decodes_greedily(client, served_name):
    """A temperature so small that the logits divided by it overflow (schemathesis found 1.66e-151) is its limit,
    greedy decoding: the same tokens as temperature 0, never a 500 from a distribution of inf and nan."""
    greedy = client.chat.completions.create(model=served_name, messages=MESSAGES, max_tokens=4, temperature=0)
    cold = client.chat.completions.create(model=served_name, messages=MESSAGES, max_tokens=4, temperature=1.66e-151)
    assert cold.choices[0].message.content == greedy.choices[0].message.content


def test_seed_makes_sampling_repeatable(client, served_name):
    kwargs = dict(model=served_name, messages=MESSAGES, max_tokens=6, temperature=1.0, top_p=0.9)
    a = client.chat.completions.create(**kwargs, seed=1234).choices[0].message.content
    b = client.chat.completions.create(**kwargs, seed=1234).choices[0].message.content
    assert a == b


def test_multimodal_text_parts_and_unknown_fields(client, served_name):
    messages = [{"role": "user", "content": [{"type": "text", "text": "Say hello"}, {"type": "text", "text": "now"}]}]
    out = client.chat.completions.create(
        model=served_name,
        messages=messages,
        max_tokens=2,
        extra_body={"min_p": 0.1, "logit_bias": {}, "custom_param": [1, 2], "reasoning_effort": "low"},
    )
    assert out.choices[0].finish_reason in ("length", "stop")


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(n=2), "`n`"),
        (dict(temperature=5), "`temperature`"),
        (dict(top_p=1.5), "`top_p`"),
        (dict(max_tokens=0), "`max_tokens`"),
        (dict(stop=["a", "b", "c", "d", "e"]), "`stop`"),
        (dict(extra_body={"messages": "hello"}), "`messages`"),
        (dict(extra_body={"messages": [{"role": "robot", "content": "x"}]}), "`role`"),
        (dict(tools=[{"type": "function", "function": {"description": "no name"}}]), "`name`"),
    ],
)
def test_bad_requests_name_the_field(client, served_name, kwargs, field):
    args = dict(model=served_name, messages=MESSAGES, max_tokens=2)
    args.update(kwargs)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**args)
    assert field in info.value.message
    assert info.value.status_code == 400 and info.value.type == "invalid_request_error"


def test_image_parts_are_refused_with_a_reason(client, served_name):
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        }
    ]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=served_name, messages=messages)
    assert "text only" in info.value.message and info.value.param == "messages[0].content[1]"


def test_over_long_conversation_is_refused_not_cut(client, served_name):
    long_text = "lorem ipsum dolor sit amet " * 9000  # ~45k tokens, over the 32768-token window
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=served_name, messages=[{"role": "user", "content": long_text}], max_tokens=2
        )
    assert "context window" in info.value.message and info.value.code == "context_length_exceeded"
    assert info.value.param == "messages"


def test_validation_errors_are_openai_shaped_never_422(server):
    r = httpx.post(
        server + "/v1/chat/completions", content=b"{not json", timeout=30, headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and "JSON" in err["message"]
    r = httpx.post(server + "/v1/chat/completions", json={"model": "m"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"


# decisions ------------------------------------------------------------------------------------------------------
STATE = "Order 4471 arrived with a cracked screen. The customer attached photos and wants a replacement today."
OPENAI_QUESTIONS = [
    {"type": "predicate", "name": "urgent", "instructions": "Does this need a reply today?"},
    {
        "type": "choice",
        "name": "route",
        "instructions": "Which team should handle this?",
        "choices": [
            {"value": "returns", "description": "Damaged or wrong items"},
            {"value": "billing", "description": "Charges and refunds"},
            {"value": "shipping"},
        ],
    },
    {
        "type": "score",
        "instructions": "How upset is the customer?",
        "levels": [{"label": "Calm"}, {"label": "Annoyed"}, {"label": "Angry", "description": "Threatens to leave"}],
    },
]
SYSTEMONE_QUESTIONS = {
    "urgent": {"type": "noul", "instructions": "Does this need a reply today?"},
    "route": {
        "type": "choice",
        "instructions": "Which team should handle this?",
        "criteria": {"returns": "Damaged or wrong items", "billing": "Charges and refunds", "shipping": None},
    },
    "tone": {
        "type": "score",
        "instructions": "How upset is the customer?",
        "criteria": ["Calm", "Annoyed", "Angry: Threatens to leave"],
    },
}


def test_decisions_typed_answers(client, served_name):
    out = client.decisions.create(model=served_name, input=STATE, questions=OPENAI_QUESTIONS)
    assert out.model == served_name and len(out.answers) == 3
    urgent, route, tone = out.answers
    assert urgent.type == "predicate" and urgent.name == "urgent" and 0 <= urgent.probability <= 1
    assert route.type == "choice" and route.choice in ("returns", "billing", "shipping")
    assert [p.value for p in route.probabilities] == ["returns", "billing", "shipping"]
    assert abs(sum(p.probability for p in route.probabilities) - 1) < 1e-9 and 0 <= route.confidence <= 1
    assert tone.type == "score" and tone.name is None and 0 <= tone.score <= 2
    assert [(p.value, p.label) for p in tone.probabilities] == [(0, "Calm"), (1, "Annoyed"), (2, "Angry")]
    assert out.usage.input_tokens > 0 and out.usage.total_tokens == out.usage.input_tokens


def test_decisions_equal_systemone(client, server, served_name):
    mine = client.decisions.create(
        model=served_name, input=[{"role": "user", "content": STATE}], questions=OPENAI_QUESTIONS
    )
    so = httpx.post(
        server + "/v1/systemone",
        timeout=60,
        json={"model": served_name, "state": STATE, "questions": SYSTEMONE_QUESTIONS},
    ).json()["answers"]
    urgent, route, tone = mine.answers  # another request than systemone's: within blink's 1e-6
    assert urgent.probability == pytest.approx(so["urgent"]["noul"], abs=1e-6)
    assert route.choice == so["route"]["choice"] and route.confidence == pytest.approx(so["route"]["confidence"])
    for p in route.probabilities:
        assert p.probability == pytest.approx(so["route"]["probabilities"][p.value], abs=1e-6)
    assert tone.score == pytest.approx(so["tone"]["score"], abs=1e-6)
    for p in tone.probabilities:
        assert p.probability == pytest.approx(so["tone"]["probabilities"][str(p.value)], abs=1e-6)


JSON_DATA = {"city": "Zürich", "note": "café ☕"}
JSON_IN_TRANSCRIPTS = {  # a transcript carrying JSON as a value, and the state /v1/systemone takes for it
    "tool call arguments as an object": (
        [
            {"role": "user", "content": "Weather for the trip?"},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": JSON_DATA},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        ],
        "user: Weather for the trip?\n\ntool call: get_weather("
        + json.dumps(JSON_DATA, ensure_ascii=False)
        + ")\n\ntool output: sunny",
    ),
    "a lone system message's input_json": (
        [{"role": "system", "content": [{"type": "input_json", "data": JSON_DATA}]}],
        "system: " + json.dumps(JSON_DATA, ensure_ascii=False),
    ),
    "a lone user message's input_json": (  # the state is the JSON itself
        [{"role": "user", "content": [{"type": "input_json", "data": JSON_DATA}]}],
        JSON_DATA,
    ),
}


@pytest.mark.parametrize("case", list(JSON_IN_TRANSCRIPTS))
def test_decisions_write_json_in_a_transcript_as_its_text(server, served_name, case):
    """JSON that a transcript item carries as a value is written into the state as the chat template writes a JSON
    state: UTF-8, not \\u escapes. The same state through /v1/systemone decides exactly alike."""
    transcript, state = JSON_IN_TRANSCRIPTS[case]
    mine = httpx.post(
        server + "/v1/decisions",
        timeout=60,
        json={"model": served_name, "input": transcript, "questions": OPENAI_QUESTIONS},
    )
    so = httpx.post(
        server + "/v1/systemone",
        timeout=60,
        json={"model": served_name, "state": state, "questions": SYSTEMONE_QUESTIONS},
    )
    assert mine.status_code == 200 and so.status_code == 200, (mine.text, so.text)
    assert mine.json()["usage"]["input_tokens"] == so.json()["usage"]["input_tokens"]
    urgent = mine.json()["answers"][0]  # another request: within blink's 1e-6
    assert urgent["probability"] == pytest.approx(so.json()["answers"]["urgent"]["noul"], abs=1e-6)


def test_decisions_boolean_choice_values_stay_typed(client, served_name):
    out = client.decisions.create(
        model=served_name,
        input=STATE,
        questions=[
            {"type": "choice", "instructions": "Is it damaged?", "choices": [{"value": True}, {"value": False}]}
        ],
    )
    assert out.answers[0].choice in (True, False)
    assert [p.value for p in out.answers[0].probabilities] == [True, False]


@pytest.mark.parametrize(
    "questions, field",
    [
        ([{"type": "choice", "instructions": "x", "choices": [{"value": "only"}]}], "questions[0].choices"),
        ([{"type": "predicate"}], "questions[0].instructions"),
        ([{"type": "verdict", "instructions": "x"}], "questions[0].type"),
        (
            [{"type": "score", "instructions": "x", "levels": [{"description": "no label"}]}],
            "questions[0].levels[0].label",
        ),
        ([], "questions"),
    ],
)
def test_decisions_bad_requests_name_the_field(client, served_name, questions, field):
    with pytest.raises(openai.BadRequestError) as info:
        client.decisions.create(model=served_name, input=STATE, questions=questions)
    assert info.value.param == field and info.value.message


def test_decisions_images_are_refused(client, served_name):
    with pytest.raises(openai.BadRequestError) as info:
        client.decisions.create(
            model=served_name,
            questions=OPENAI_QUESTIONS[:1],
            input=[
                {
                    "role": "user",
                    "content": [{"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}],
                }
            ],
        )
    assert "text only" in info.value.message


def test_decisions_too_many_options_is_400_naming_the_question(server):
    choices = [{"value": f"option {i}"} for i in range(300)]
    r = httpx.post(
        server + "/v1/decisions",
        timeout=60,
        json={
            "model": "m",
            "input": STATE,
            "questions": [{"type": "choice", "instructions": "pick", "choices": choices}],
        },
    )
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "questions[0]" and "questions[0]" in err["message"] and "255" in err["message"]
    assert json.dumps(err)  # plain JSON, OpenAI-shaped


# the decode loop itself ---------------------------------------------------------------------------------------
def test_greedy_decode_loop_equals_transformers_generate(engine):
    """ChatEngine's hand-written loop (hybrid cache, one token a step) picks the same tokens as
    `model.generate` with greedy decoding."""
    import torch

    from blink.generate.chat_engine import ChatEngine
    from blink.plan import GenerationParams

    chat = ChatEngine(engine.loaded)
    ids = chat.render(MESSAGES).ids
    items = list(chat.generate(ids, GenerationParams(max_tokens=12, temperature=0)))
    final = items[-1]
    assert (final.finish_reason, final.prompt_tokens, final.completion_tokens) == ("length", len(ids), 12)
    assert final.compute_s > 0
    with torch.inference_mode():
        out = engine.loaded.model.generate(
            torch.tensor([ids]), max_new_tokens=12, do_sample=False, pad_token_id=chat.tokenizer.pad_token_id
        )
    new = [t for t in out[0, len(ids) :].tolist() if t not in chat.hidden_ids]
    assert "".join(items[:-1]) == chat.tokenizer.decode(new)


def test_generation_resumed_on_other_threads(engine):
    """Servers resume the chat generator from whichever worker thread is free (anyio, Gradio): every step
    on a different thread must work and give the same text as one thread."""
    from concurrent.futures import ThreadPoolExecutor

    from blink.generate.chat_engine import ChatEngine
    from blink.plan import GenerationParams

    chat = ChatEngine(engine.loaded)
    ids = chat.render(MESSAGES).ids
    same_thread = list(chat.generate(ids, GenerationParams(max_tokens=10, temperature=0)))
    gen = chat.generate(ids, GenerationParams(max_tokens=10, temperature=0))
    hopping = []
    for _ in range(40):
        with ThreadPoolExecutor(1) as pool:  # a fresh thread for every step
            item = pool.submit(next, gen, None).result()
        if item is None:
            break
        hopping.append(item)

    def comparable(items):  # the compute seconds differ from run to run; everything else must not
        return [i if isinstance(i, str) else (i.finish_reason, i.prompt_tokens, i.completion_tokens) for i in items]

    assert comparable(hopping) == comparable(same_thread)
