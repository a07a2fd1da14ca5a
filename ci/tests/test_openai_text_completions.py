"""The legacy `/v1/completions` and vLLM's /tokenize, /detokenize and /tokenizer_info, with real clients against the
standalone server (`python -m blink serve --model demo ...`, a real process on loopback): a string or token ids,
streamed and not, echo, lists of prompts and prompt_logprobs (loglikelihood evaluation, checked against a plain
forward of the demo model in this process), each refusal naming its field.

The server is conftest.py's `surface` (session-scoped, started once), shared with test_openai_surface.py, which runs
right before this file.
"""

from __future__ import annotations

import httpx
import openai
import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def client(surface):
    return openai.OpenAI(base_url=surface + "/v1", api_key="anything", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def name(surface):
    return httpx.get(surface + "/healthz", timeout=30).json()["served_model_name"]


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
