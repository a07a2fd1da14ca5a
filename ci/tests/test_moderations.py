"""`POST /v1/moderations` (blink.api.moderations): the openai SDK's `moderations.create` and LiteLLM's `moderation()`
(in .venv-labels) against the real server, the list and parts forms, images on the vision demo and through
`--engine vllm`, a custom policy served with the knob, the start-up check of a broken policy, and bad input.

A category's score is its `noul` question's probability over the input, so it equals the same decision asked through
`/v1/systemone`; the demo model's weights are random, so which categories it flags says nothing, but each flag must
follow from its score and threshold.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time

import httpx
import openai
import pytest
import zstandard

from blink.moderation_policy import DEFAULT_FILE, load_policy
from helpers import ROOT, assert_close, blink_serve, png, running, server_env, start_scripted, stop_group

OPENAI_KEYS = [
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/intent",
    "self-harm/instructions",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
]
POLICY = load_policy(None)
THRESHOLDS = {c.name: c.threshold for c in POLICY.categories}
CUSTOM = {
    "format": "blink-moderation-policy",
    "version": 1,
    "categories": {
        "spam": {"definition": "Unsolicited advertising or repeated promotional messages.", "threshold": 0.0},
        "personal-data": {"definition": "A phone number, home address or ID number of a person.", "threshold": 1.0},
        "hate": {"definition": "Attacks on people for who they are.", "threshold": 0.5},
    },
}


def post(url: str, body, headers: dict | None = None, timeout: float = 120) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        url + "/v1/moderations",
        content=content,
        headers={"content-type": "application/json", **(headers or {})},
        timeout=timeout,
    )


def assert_consistent(result: dict, thresholds: dict, types: list[str]) -> None:
    """Every category scored in [0, 1], flagged exactly at or above its threshold, in the policy's order."""
    assert set(result["category_scores"]) == set(thresholds) == set(result["categories"])
    for name, score in result["category_scores"].items():
        assert 0.0 <= score <= 1.0
        assert result["categories"][name] is (score >= thresholds[name])
    assert result["flagged"] is any(result["categories"].values())
    assert result["category_applied_input_types"] == {name: types for name in thresholds}


# the policy file -------------------------------------------------------------------------------------------------
def test_the_default_policy_has_openais_thirteen_keys_with_our_definitions():
    assert [c.name for c in POLICY.categories] == OPENAI_KEYS
    from openai.types.moderation import Categories

    aliases = [f.alias or name for name, f in Categories.model_fields.items()]
    assert sorted(aliases) == sorted(OPENAI_KEYS)
    for category in POLICY.categories:
        assert 0 < category.threshold < 1 and category.definition
        assert category.definition not in (
            Categories.model_fields[n].description or "" for n in Categories.model_fields
        )


@pytest.mark.parametrize(
    "text, says",
    [
        ("format = 'blink-moderation-policy'\nversion = 1\n[categories.spam]\ndefinition = 'x'\nthreshold = 1.5\n",
         "category 'spam': `threshold` must be from 0 to 1, got 1.5"),
        ("format = 'blink-moderation-policy'\nversion = 1\n[categories.spam]\nthreshold = 0.5\n",
         "category 'spam': `definition` must be a non-empty string"),
        ("format = 'blink-moderation-policy'\nversion = 1\n[categories.spam]\ndefinition = 'x'\nthreshold = 0.5\n"
         "color = 'red'\n", "category 'spam': unknown field 'color'"),
        ("format = 'blink-moderation-policy'\nversion = 1\ncategories = {}\n", "at least one category"),
        ("version = 1\n[categories.spam]\ndefinition = 'x'\nthreshold = 0.5\n", 'format = "blink-moderation-policy"'),
        ("format = 'blink-moderation-policy'\nversion = 1\nmode = 'strict'\n", "unknown key 'mode'"),
        ("[categories.spam\n", "not valid TOML"),
    ],
)  # fmt: skip
def test_a_broken_policy_file_is_refused_naming_the_file_and_the_fault(tmp_path, text, says):
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_policy(path)
    message = str(info.value)
    assert message.startswith(f"moderation policy {path}: ") and says in message and "\n" not in message


def test_a_json_policy_reads_like_toml(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(CUSTOM))
    policy = load_policy(path)
    assert [(c.name, c.threshold) for c in policy.categories] == [("spam", 0.0), ("personal-data", 1.0), ("hate", 0.5)]
    assert load_policy(DEFAULT_FILE) == POLICY


def test_build_checks_a_spaces_policy_and_ships_it(tmp_path):
    """spaces.toml names a policy under blink/policies/ (shipped with every Space); build.py checks it whole."""
    from fleet import ConfigError
    from fleet.schema import load

    base = (ROOT / "spaces.toml").read_text()
    for value, says in (
        ("blink/policies/openai.toml", None),
        ("/tmp/policy.toml", "put the policy under blink/policies/"),
        ("blink/policies/missing.toml", "no such file"),
    ):
        config = tmp_path / "spaces.toml"
        config.write_text(base + f'\n[spaces.blink-4b.moderation]\npolicy = "{value}"\n')
        if says is None:
            assert load(config).spaces[0].settings.moderation_policy == value
        else:
            with pytest.raises(ConfigError, match=says):
                load(config)


# the start-up check ---------------------------------------------------------------------------------------------
def test_a_server_with_a_broken_policy_refuses_to_start_in_one_line(demo_root, tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text(
        "format = 'blink-moderation-policy'\nversion = 1\n[categories.spam]\ndefinition = 'x'\nthreshold = 2\n"
    )
    argv = blink_serve()
    argv[argv.index("{port}")] = "0"
    env = server_env(demo_root, {"BLINK_MODERATION_POLICY": str(path)})
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 1
    said = f"moderation policy {path}: category 'spam': `threshold` must be from 0 to 1, got 2"
    assert done.stderr.strip().splitlines()[-1] == said
    assert time.monotonic() - started < 60  # refused before the model loads


# the wire, with the openai SDK ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.mark.e2e
def test_the_sdk_answers_all_thirteen_categories_consistently_with_the_thresholds(client):
    out = client.moderations.create(model="omni-moderation-latest", input="I will find you after school.")
    assert out.id.startswith("modr-") and out.model == "demo"
    [result] = out.results
    assert_consistent(result.model_dump(by_alias=True), THRESHOLDS, ["text"])
    assert isinstance(result.categories.harassment_threatening, bool)
    assert 0 <= result.category_scores.self_harm_intent <= 1


@pytest.mark.e2e
def test_a_categorys_score_is_the_same_decision_through_systemone(server):
    text = "The parcel arrived crushed and I want my money back."
    scores = post(server, {"input": text}).json()["results"][0]["category_scores"]
    assert list(scores) == OPENAI_KEYS  # the policy's order
    answers = httpx.post(
        server + "/v1/systemone", json={"state": text, "questions": POLICY.questions()}, timeout=120
    ).json()["answers"]
    assert_close(scores, {name: answers[name]["noul"] for name in OPENAI_KEYS})  # two requests: within 1e-6


@pytest.mark.e2e
def test_a_list_of_strings_answers_one_result_each_in_order(client):
    texts = ["Have a lovely day.", "Buy cheap watches now!!!", "Where is my order?"]
    listed = client.moderations.create(input=texts).results
    assert len(listed) == 3
    for text, result in zip(texts, listed):
        alone = client.moderations.create(input=text).results[0].model_dump(by_alias=True)
        together = result.model_dump(by_alias=True)
        assert_consistent(together, THRESHOLDS, ["text"])
        for name in OPENAI_KEYS:  # batched or alone: the same pass within float tolerance
            assert abs(together["category_scores"][name] - alone["category_scores"][name]) < 1e-6


@pytest.mark.e2e
def test_text_parts_are_one_input(client):
    parts = [{"type": "text", "text": "First line."}, {"type": "text", "text": "Second line."}]
    [result] = client.moderations.create(input=parts).results
    [joined] = client.moderations.create(input="First line.\nSecond line.").results
    assert_close(result.category_scores.model_dump(), joined.category_scores.model_dump())  # two requests: 1e-6
    assert_consistent(result.model_dump(by_alias=True), THRESHOLDS, ["text"])


@pytest.mark.e2e
def test_an_image_on_a_text_only_model_is_a_clear_400(client):
    image = "data:image/png;base64," + base64.b64encode(png()).decode()
    with pytest.raises(openai.BadRequestError) as info:
        client.moderations.create(input=[{"type": "image_url", "image_url": {"url": image}}])
    assert info.value.status_code == 400
    assert info.value.body["code"] == "images_unsupported" and info.value.body["param"] == "input"
    assert "reads text only" in info.value.body["message"]


# bad input ------------------------------------------------------------------------------------------------------
@pytest.mark.e2e
@pytest.mark.parametrize(
    "body, param, code",
    [
        ({"model": "m"}, "input", "missing"),
        ({"input": None}, "input", "missing"),
        ({"input": ""}, "input", "empty_input"),
        ({"input": "   "}, "input", "empty_input"),
        ({"input": []}, "input", "invalid_value"),
        ({"input": ["fine", ""]}, "input[1]", "empty_input"),
        ({"input": ["fine", 3]}, "input", "invalid_value"),
        ({"input": 42}, "input", "invalid_value"),
        ({"input": ["x"] * 33}, "input", "too_many_inputs"),
        ({"input": [{"type": "audio", "audio": "x"}]}, "input[0].type", "unsupported_content"),
        ({"input": [{"type": "text"}]}, "input[0].text", "invalid_value"),
        ({"input": [{"type": "text", "text": ""}]}, "input[0].text", "empty_input"),
        ({"input": [{"type": "text", "text": "a", "extra": 1}]}, "input[0].extra", "unknown_parameter"),
        ({"input": [{"type": "image_url", "image_url": {"url": "https://x.example/a.png"}}]}, "input[0].image_url",
         "invalid_image_url"),
        ({"input": "hi", "stream": True}, "stream", "unknown_parameter"),
        ({"input": "hi", "model": 7}, "model", "invalid_value"),
        ({"input": "hi", "model": ["a"]}, "model", "invalid_value"),
        ([{"input": "hi"}], None, "invalid_value"),
    ],
)  # fmt: skip
def test_bad_input_is_a_400_in_openais_error_shape(server, body, param, code):
    r = post(server, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == code and error["param"] == param
    assert error["message"]


@pytest.mark.e2e
def test_a_small_body_that_decodes_huge_is_refused_at_once(server):
    """2 KB of zstd: past the decoded-bytes cap a 413; under it, one input of 8 million characters, refused as past
    the context after a capped count (never tokenized whole)."""
    bomb = zstandard.ZstdCompressor().compress(b'{"input": "' + b"a" * (80 * 1024 * 1024) + b'"}')
    assert len(bomb) < 4096
    r = post(server, bomb, {"content-encoding": "zstd"})
    assert r.status_code == 413 and r.json()["error"]["type"] == "invalid_request_error"
    big = zstandard.ZstdCompressor().compress(b'{"input": "' + b"word " * (1600 * 1024) + b'"}')
    assert len(big) < 4096
    started = time.monotonic()
    r = post(server, big, {"content-encoding": "zstd"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "input" and "context limit of 32768 tokens" in error["message"]
    assert time.monotonic() - started < 20
    assert post(server, {"input": "still serving"}).status_code == 200


# a custom policy -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def custom(demo_root, tmp_path_factory):
    path = tmp_path_factory.mktemp("policy") / "house.json"
    path.write_text(json.dumps(CUSTOM))
    env = {"BLINK_MODERATION_POLICY": str(path)}
    flags = ("--max-context-tokens", "256", "--max-queued-requests", "2", "--max-batch-requests", "1")  # 3 places
    with running(blink_serve(*flags), demo_root, env=env, name="serve-policy") as url:
        yield url


@pytest.mark.e2e
def test_a_custom_policy_adds_drops_and_renames_categories(custom):
    r = post(custom, {"model": "demo", "input": ["Call 555-0100 for a free cruise!", "See you tomorrow."]})
    assert r.status_code == 200, r.text
    thresholds = {name: entry["threshold"] for name, entry in CUSTOM["categories"].items()}
    for result in r.json()["results"]:
        assert_consistent(result, thresholds, ["text"])
        assert result["categories"]["spam"] is True  # threshold 0: always
        assert result["categories"]["personal-data"] is (result["category_scores"]["personal-data"] >= 1.0)
        assert result["flagged"] is True
    assert [list(result["category_scores"]) for result in r.json()["results"]] == [list(CUSTOM["categories"])] * 2
    health = httpx.get(custom + "/healthz", timeout=30).json()
    assert health["moderation"] == {"policy": "house.json", "categories": list(CUSTOM["categories"])}


@pytest.mark.e2e
@pytest.mark.parametrize("words, says", [(300, "the input alone is over"), (110, "the input with category 'spam'")])
def test_an_input_past_the_context_is_a_400_that_states_the_limit(custom, words, says):
    r = post(custom, {"input": ["short", "many words " * words]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "input[1]" and error["code"] == "context_length_exceeded"
    assert error["message"].startswith(says) and "256 tokens per prompt" in error["message"]
    assert "state" not in error["message"] and "Nothing was truncated" in error["message"]


# images, where the model reads them ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vision_server(demo_root):
    from blink.model.demo import demo_model_dir

    demo_model_dir(vision=True)  # built once, before the server starts
    argv = blink_serve("--vision", "1")
    argv[argv.index("demo")] = "demo-vision"
    with running(argv, demo_root, name="serve-moderation-vision") as url:
        yield url


@pytest.mark.e2e
@pytest.mark.slow
def test_text_and_image_parts_are_one_decision_on_a_vision_model(vision_server):
    data = base64.b64encode(png()).decode()
    parts = [
        {"type": "text", "text": "My new tattoo:"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}},
    ]
    r = post(vision_server, {"model": "demo-vision", "input": parts})
    assert r.status_code == 200, r.text
    [result] = r.json()["results"]
    assert_consistent(result, THRESHOLDS, ["text", "image"])
    same = httpx.post(  # the same decision through /v1/systemone: the image at its place in the state
        vision_server + "/v1/systemone",
        json={
            "state": "My new tattoo:\n<image:input-0>",
            "questions": POLICY.questions(),
            "assets": {"<image:input-0>": {"type": "image", "format": "png", "data_base64": data}},
        },
        timeout=120,
    ).json()["answers"]
    for name in OPENAI_KEYS:
        assert abs(result["category_scores"][name] - same[name]["noul"]) < 1e-6
    [alone] = post(vision_server, {"input": [parts[1]]}).json()["results"]
    assert alone["category_applied_input_types"] == {name: ["image"] for name in OPENAI_KEYS}


@pytest.mark.e2e
def test_a_list_of_k_inputs_holds_k_places(custom):
    """Each input is a decision and holds a place of the decide gate: a list the gate could never hold is refused at
    once, before admission, naming the limit; one that fits is served."""
    assert post(custom, {"input": ["one", "two", "three"]}).status_code == 200
    r = post(custom, {"input": ["one", "two", "three", "four"]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "too_much_work" and error["type"] == "invalid_request_error"
    assert "4 decide units" in error["message"] and "at most 3" in error["message"], error


# in front of vLLM replicas -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vllm_fronted(demo_root):
    """`serve --engine vllm` in front of a scripted replica (ci/tests/scripted_vllm.py: vLLM's wire, made-up
    log-probabilities): blink loads the tokenizer and templates only, and reads text only."""
    replica, proc = start_scripted("moderation", "--delay-ms", "5")
    try:
        with running(blink_serve("--engine", "vllm", "--engine-url", replica), demo_root, name="serve-vllm-mod") as url:
            yield url
    finally:
        stop_group(proc)


@pytest.mark.e2e
def test_through_vllm_text_is_moderated_and_an_image_is_a_clear_400(vllm_fronted):
    r = post(vllm_fronted, {"model": "demo", "input": ["Hello there.", "Watch your back."]})
    assert r.status_code == 200, r.text
    for result in r.json()["results"]:
        assert_consistent(result, THRESHOLDS, ["text"])
    image = "data:image/png;base64," + base64.b64encode(png()).decode()
    parts = [{"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": {"url": image}}]
    r = post(vllm_fronted, {"model": "demo", "input": parts})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "images_unsupported" and error["param"] == "input" and "text only" in error["message"]


# LiteLLM, in .venv-labels (ci/labels-venv.sh) ---------------------------------------------------------------------
LITELLM = """
import json, sys
import litellm

out = litellm.moderation(
    input=json.loads(sys.argv[2]), model="openai/omni-moderation-latest", api_base=sys.argv[1] + "/v1", api_key="k"
)
print(json.dumps({"id": out.id, "results": [r.model_dump() for r in out.results]}))
"""


@pytest.mark.e2e
def test_litellms_moderation_call_answers_all_thirteen_categories(server, tmp_path):
    """LiteLLM's `moderation()` (its OpenAI provider, `api_base` at blink) reads blink's answer: the 13 categories
    under LiteLLM's own field names, the scores blink's."""
    built = subprocess.run(["bash", "ci/labels-venv.sh"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, f"ci/labels-venv.sh could not build .venv-labels:\n{built.stdout}\n{built.stderr}"
    texts = ["I will find you after school.", "Have a lovely day."]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    done = subprocess.run(
        [str(ROOT / ".venv-labels" / "bin" / "python"), "-c", LITELLM, server, json.dumps(texts)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["id"].startswith("modr-") and len(out["results"]) == 2
    direct = post(server, {"input": texts}).json()["results"]
    for got, want in zip(out["results"], direct, strict=True):
        for name in OPENAI_KEYS:
            field = name.replace("/", "_").replace("-", "_")  # LiteLLM's name for the category
            assert abs(got["category_scores"][field] - want["category_scores"][name]) < 1e-6
            assert got["categories"][field] is want["categories"][name]
        assert got["flagged"] is want["flagged"]
