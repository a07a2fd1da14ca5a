"""Gemini's decisions wire against real servers, driven by google-genai 3.3.0's own client (`client.decisions.create`,
`client.models`, in `.venv-genai`, built by ci/genai-venv.sh on first use, ~30 s): on both of its paths
(`/v1/decisions`, its default `api_version`, and `/v1beta/decisions`) with the answers `/v1/systemone` gives the
same questions, validated by google-genai's own response models; an image block read as System One reads the
image; audio, video, document, file and URI blocks a clear 400; the key sent as `x-goog-api-key`; a full queue
answered 429 `RESOURCE_EXHAUSTED` with `Retry-After`, which google-genai retries until it is answered; and bad
bodies answered 4xx in Google's error shape, never 5xx."""

from __future__ import annotations

import base64
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from helpers import ROOT, png, running
from helpers.images import vision_serve

pytestmark = pytest.mark.e2e

GENAI = ROOT / ".venv-genai" / "bin" / "python"
CLIENT = ROOT / "ci" / "tests" / "genai_client.py"
STATE = "I was charged twice for one order. Please fix this today."
QUESTIONS = {  # Gemini's shapes: noul criteria as descriptions, instructions as text blocks, "" as no description
    "refund": {
        "type": "noul",
        "instructions": "Is the customer asking for money back?",
        "criteria": {"true_description": "They want a refund", "false_description": "They do not"},
    },
    "team": {
        "type": "choice",
        "instructions": [{"type": "text", "text": "Which team?"}],
        "criteria": {"billing": "Charges and refunds", "technical": ""},
    },
    "anger": {"type": "score", "instructions": "How frustrated?", "criteria": ["Calm", "Frustrated", "Very angry"]},
}
SYSTEMONE = {  # the same questions in System One's words
    "refund": {
        "type": "noul",
        "instructions": "Is the customer asking for money back?",
        "criteria": {"true": "They want a refund", "false": "They do not"},
    },
    "team": {
        "type": "choice",
        "instructions": "Which team?",
        "criteria": {"billing": "Charges and refunds", "technical": None},
    },
    "anger": {"type": "score", "instructions": "How frustrated?", "criteria": ["Calm", "Frustrated", "Very angry"]},
}
NOUL = {"type": "noul", "instructions": "Is it urgent?"}
# two places for decisions (one waiting, one in the batch) and no wait for one: a burst is partly refused
TIGHT = ("--max-queued-requests", "1", "--max-batch-requests", "1", "--decide-wait-s", "0")


@pytest.fixture(scope="module")
def genai_venv() -> None:
    built = subprocess.run(["bash", "ci/genai-venv.sh"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, f"ci/genai-venv.sh could not build .venv-genai:\n{built.stdout}\n{built.stderr}"


@pytest.fixture(scope="module")
def tight_vision(vision_root):
    """The vision demo with two places for decisions: images, and a full queue."""
    with running(vision_serve(*TIGHT), vision_root, name="serve-gemini-tight") as url:
        yield url


def genai(job: dict) -> dict:
    """One job for google-genai's client (ci/tests/genai_client.py): what each call got, and every status it saw."""
    proc = subprocess.run([str(GENAI), str(CLIENT)], input=json.dumps(job), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def as_gemini(raw: dict) -> dict:
    """System One's answer with Gemini's semantics, as the wire maps it."""
    if raw["type"] == "noul":
        p = min(max(raw["noul"], 0.01), 0.99)
        return {"noul": p, "confidence": max(p, 1 - p)}
    probabilities = raw["probabilities"]
    out = {"confidence": max(probabilities.values()), "probabilities": probabilities}
    return {**out, "choice": raw["choice"]} if raw["type"] == "choice" else {**out, "score": raw["score"]}


def assert_same(gemini: dict, systemone: dict, tolerance: float = 1e-6) -> None:
    """Every answer of `gemini` equal to `systemone`'s mapped (numbers within `tolerance`)."""
    assert gemini.keys() == systemone.keys()
    for qid, raw in systemone.items():
        want, got = as_gemini(raw), gemini[qid]
        assert got["type"] == raw["type"], qid
        for name, value in want.items():
            if isinstance(value, dict):
                assert got[name].keys() == value.keys(), (qid, name)
                assert all(abs(got[name][k] - v) <= tolerance for k, v in value.items()), (qid, name)
            elif isinstance(value, str):
                assert got[name] == value, (qid, name)
            else:
                assert abs(got[name] - value) <= tolerance, (qid, name, got[name], value)


def google_error(r: httpx.Response, status: int) -> dict:
    """`r` is a `status` in Google's error shape; its `error` object."""
    assert r.status_code == status, (r.status_code, r.text[:400])
    error = r.json()["error"]
    assert error["code"] == status and isinstance(error["message"], str) and error["message"]
    assert isinstance(error["status"], str) and error["status"].isupper()
    assert r.headers["x-request-id"].startswith("req_")
    return error


# google-genai's own client -----------------------------------------------------------------------------------
def test_google_genai_decides_on_both_paths_as_systemone_answers(genai_venv, server):
    native = httpx.post(server + "/v1/systemone", json={"state": STATE, "questions": SYSTEMONE}, timeout=60)
    assert native.status_code == 200, native.text
    decide = {"decide": {"model": "models/demo", "input": STATE, "questions": QUESTIONS}}
    bare = {"decide": {"model": "demo", "input": [{"type": "text", "text": STATE}], "questions": QUESTIONS}}
    for api_version in (None, "v1beta"):  # google-genai 3.3.0 posts to /v1/decisions unless told v1beta
        out = genai({"url": server, "api_version": api_version, "calls": [decide, bare]})
        assert out["statuses"] == [200, 200]
        for result in out["results"]:
            assert result["answers"] == {"refund": "NoulAnswer", "team": "ChoiceAnswer", "anger": "ScoreAnswer"}
            assert result["request_id"].startswith("req_")
            raw = result["raw"]
            assert_same(raw["answers"], native.json()["answers"])
            assert raw["answers"]["anger"]["legend"] == {"0": "Calm", "1": "Frustrated", "2": "Very angry"}
            assert raw["usage"]["total_input_tokens"] == native.json()["usage"]["input_tokens"]
            assert raw["usage"]["total_tokens"] == raw["usage"]["total_input_tokens"]
            assert raw["usage"]["total_output_tokens"] == 0
            assert raw["x_calibration"] == native.json()["x_calibration"]


def test_google_genai_lists_the_served_model(genai_venv, server):
    out = genai({"url": server, "api_version": "v1beta", "calls": [{"models": True}]})
    listed = out["results"][0]
    assert listed["names"] == ["models/demo"]
    assert listed["get"]["name"] == "models/demo" and listed["get"]["actions"] == ["createDecision"]
    assert listed["get"]["input_token_limit"] > 0
    entry = httpx.get(server + "/v1beta/models/demo", timeout=30).json()
    assert entry["x_limits"] == httpx.get(server + "/v1/models", timeout=30).json()["limits"]


def test_an_image_block_is_read_as_systemone_reads_the_image(genai_venv, tight_vision):
    b64 = base64.b64encode(png()).decode()
    questions = {"red": {"type": "noul", "instructions": "Is the photo mostly red?"}}
    blocks = [{"type": "image", "data": b64, "mime_type": "image/png"}, {"type": "text", "text": "What arrived today"}]
    out = genai(
        {"url": tight_vision, "calls": [{"decide": {"model": "demo-vision", "input": blocks, "questions": questions}}]}
    )
    result = out["results"][0]
    assert result["answers"] == {"red": "NoulAnswer"}, result
    native = httpx.post(
        tight_vision + "/v1/systemone",
        timeout=120,
        json={
            "state": "<image:p>\nWhat arrived today",
            "questions": questions,
            "assets": {"<image:p>": {"type": "image", "format": "png", "data_base64": b64}},
        },
    )
    assert native.status_code == 200, native.text
    assert_same(result["raw"]["answers"], native.json()["answers"], tolerance=1e-5)
    modalities = {m["modality"]: m["tokens"] for m in result["raw"]["usage"]["input_tokens_by_modality"]}
    assert modalities["image"] == native.json()["usage"]["visual_tokens"] > 0


@pytest.mark.parametrize(
    "block",
    [
        {"type": "audio", "data": "UklGRg==", "mime_type": "audio/wav"},
        {"type": "video", "uri": "gs://bucket/clip.mp4"},
        {"type": "document", "data": "JVBERi0=", "mime_type": "application/pdf"},
        {"type": "image", "uri": "https://example.com/photo.png"},
    ],
    ids=["audio", "video", "document", "image-uri"],
)
def test_blocks_blink_does_not_read_are_a_clear_400(genai_venv, server, block):
    request = {"model": "demo", "input": [{"type": "text", "text": "Listen:"}, block], "questions": {"q": NOUL}}
    result = genai({"url": server, "calls": [{"decide": request}]})["results"][0]
    assert result["error"] == "BadRequestError" and result["status"] == 400, result
    error = result["body"]["error"]
    assert error["status"] == "INVALID_ARGUMENT" and error["code"] == 400
    assert "blink reads `text` and `image`" in error["message"] or "fetches nothing" in error["message"]
    violation = next(d for d in error["details"] if d["@type"].endswith("BadRequest"))["fieldViolations"][0]
    assert violation["field"].startswith("input[1].")


def test_the_key_is_read_from_x_goog_api_key(genai_venv, keyed_server):
    request = {"decide": {"model": "demo", "input": STATE, "questions": {"q": NOUL}}}
    for api_version in (None, "v1beta"):
        good = genai({"url": keyed_server, "key": "sekret-key-123", "api_version": api_version, "calls": [request]})
        assert good["results"][0]["answers"] == {"q": "NoulAnswer"}
        bad = genai({"url": keyed_server, "key": "wrong", "api_version": api_version, "calls": [request]})
        assert bad["results"][0]["error"] == "AuthenticationError" and bad["results"][0]["status"] == 401
    body = {"model": "demo", "input": STATE, "questions": {"q": NOUL}}
    with httpx.Client(base_url=keyed_server, timeout=60) as http:
        error = google_error(http.post("/v1beta/decisions", json=body), 401)
        assert error["status"] == "UNAUTHENTICATED" and "x-goog-api-key" in error["message"]
        assert (
            http.post("/v1beta/decisions", json=body, headers={"authorization": "Bearer sekret-key-123"}).status_code
            == 200
        )
        assert http.get("/v1beta/models", headers={"x-goog-api-key": "sekret-key-123"}).status_code == 200
        google_error(http.get("/v1beta/models", headers={"x-goog-api-key": "nope"}), 401)
        # refused before the body is read, /v1/decisions keeps OpenAI's shape
        r = http.post("/v1/decisions", json=body)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


def test_an_overloaded_gemini_route_answers_what_google_genai_retries(genai_venv, tight_vision):
    heavy = {"model": "demo-vision", "input": "word " * 3000, "questions": {f"q{i}": NOUL for i in range(16)}}
    with ThreadPoolExecutor(8) as pool:
        burst = list(
            pool.map(lambda _: httpx.post(tight_vision + "/v1beta/decisions", json=heavy, timeout=300), range(8))
        )
    codes = [r.status_code for r in burst]
    assert 429 in codes and 200 in codes and set(codes) <= {200, 429}, codes
    refused = next(r for r in burst if r.status_code == 429)
    error = google_error(refused, 429)
    assert error["status"] == "RESOURCE_EXHAUSTED" and int(refused.headers["retry-after"]) >= 1
    assert {
        "@type": "type.googleapis.com/google.rpc.RetryInfo",
        "retryDelay": refused.headers["retry-after"] + "s",
    } in (error["details"])
    # google-genai retries a 429 after its Retry-After (attempts raised from its 5 to outlast a 2-core burst)
    out = genai({"url": tight_vision, "attempts": 30, "threads": 6, "calls": [{"decide": heavy}]})
    assert all(result.get("answers") for result in out["results"][0]), out["results"][0]
    assert 429 in out["statuses"] and set(out["statuses"]) <= {200, 429}, out["statuses"]
    assert out["statuses"].count(200) == 6


# bad bodies: Google's error shape, never a 5xx -----------------------------------------------------------------
GOOD = {"model": "models/demo", "input": STATE, "questions": {"q": NOUL}}
BAD = {
    "an array": [GOOD],
    "no model": {k: v for k, v in GOOD.items() if k != "model"},
    "model prefix only": {**GOOD, "model": "models/"},
    "model a number": {**GOOD, "model": 5},
    "no input": {k: v for k, v in GOOD.items() if k != "input"},
    "input a number": {**GOOD, "input": 5},
    "input empty": {**GOOD, "input": []},
    "text block without text": {**GOOD, "input": [{"type": "text"}]},
    "unknown block": {**GOOD, "input": [{"type": "hologram"}]},
    "image without data": {**GOOD, "input": [{"type": "image", "mime_type": "image/png"}]},
    "image data a number": {**GOOD, "input": [{"type": "image", "data": 5}]},
    "image bad base64": {**GOOD, "input": [{"type": "image", "data": "!!!", "mime_type": "image/png"}]},
    "image of audio": {**GOOD, "input": [{"type": "image", "data": "AAAA", "mime_type": "audio/wav"}]},
    "image on a text model": {**GOOD, "input": [{"type": "image", "data": base64.b64encode(png()).decode()}]},
    "no questions": {k: v for k, v in GOOD.items() if k != "questions"},
    "questions empty": {**GOOD, "questions": {}},
    "a question a string": {**GOOD, "questions": {"q": "urgent?"}},
    "unknown question type": {**GOOD, "questions": {"q": {"type": "maybe", "instructions": "?"}}},
    "noul criteria unknown": {**GOOD, "questions": {"q": {**NOUL, "criteria": {"yes": "x"}}}},
    "choice criteria a list": {**GOOD, "questions": {"q": {"type": "choice", "instructions": "?", "criteria": ["a"]}}},
    "score criteria a string": {**GOOD, "questions": {"q": {"type": "score", "instructions": "?", "criteria": "a"}}},
    "instructions a number": {**GOOD, "questions": {"q": {"type": "noul", "instructions": 5}}},
    "instructions empty": {**GOOD, "questions": {"q": {"type": "noul", "instructions": []}}},
    "image in instructions": {**GOOD, "questions": {"q": {"type": "noul", "instructions": [{"type": "image"}]}}},
    "too many questions": {**GOOD, "questions": {f"q{i}": NOUL for i in range(5000)}},
    "bad x_calibration": {**GOOD, "x_calibration": "sometimes"},
}
# fields blink does not take, each refused where it stands (field path as Google's `fieldViolations` write it)
UNKNOWN = {
    "generation_config": ({**GOOD, "generation_config": {"temperature": 0}}, "generation_config"),
    "a question's weight": ({**GOOD, "questions": {"q": {**NOUL, "weight": 2}}}, "questions.q.weight"),
    "a text block's annotations": (
        {**GOOD, "input": [{"type": "text", "text": STATE, "annotations": []}]},
        "input[0].annotations",
    ),
    "an image's resolution": (
        {**GOOD, "input": [{"type": "image", "data": "AAAA", "mime_type": "image/png", "resolution": "high"}]},
        "input[0].resolution",
    ),
    "an instruction block's extra": (
        {**GOOD, "questions": {"q": {"type": "noul", "instructions": {"type": "text", "text": "?", "x": 1}}}},
        "questions.q.instructions.x",
    ),
}


@pytest.mark.parametrize("body", BAD.values(), ids=BAD.keys())
def test_bad_bodies_get_google_shaped_4xx(server, body):
    for path in ("/v1beta/decisions", "/v1/decisions"):
        r = httpx.post(server + path, json=body, timeout=60)
        if path == "/v1/decisions" and not (isinstance(body, dict) and isinstance(body.get("questions"), dict)):
            assert 400 <= r.status_code < 500, r.text  # not Gemini's shape there: another wire's 4xx
            continue
        if path == "/v1/decisions" and "input" not in body:
            continue  # System One's body there (a `questions` object without `input`)
        error = google_error(r, 400)
        assert error["status"] == "INVALID_ARGUMENT"
        assert {d["@type"].rsplit(".", 1)[1] for d in error["details"]} >= {"ErrorInfo"}


@pytest.mark.parametrize("case", UNKNOWN.values(), ids=UNKNOWN.keys())
def test_a_field_blink_does_not_take_is_a_400_naming_it(server, case):
    """Never silently ignored (Google's own API refuses a field it does not know): on both paths, the field named in
    the message and in the `BadRequest` detail."""
    body, field_path = case
    for path in ("/v1beta/decisions", "/v1/decisions"):
        error = google_error(httpx.post(server + path, json=body, timeout=60), 400)
        violation = next(d for d in error["details"] if d["@type"].endswith("BadRequest"))["fieldViolations"][0]
        assert violation["field"] == field_path, violation
        assert f"`{field_path.rsplit('.', 1)[-1]}`" in error["message"], error["message"]


def test_other_refusals_are_google_shaped(server):
    with httpx.Client(base_url=server, timeout=60) as http:
        assert google_error(http.post("/v1beta/decisions", content=b"{nope"), 400)["status"] == "INVALID_ARGUMENT"
        files = {"request": (None, json.dumps(GOOD), "application/json"), "asset-0": ("a.png", png(), "image/png")}
        assert google_error(http.post("/v1beta/decisions", files=files), 400)["status"] == "INVALID_ARGUMENT"
        assert google_error(http.get("/v1beta/nothing-here"), 404)["status"] == "NOT_FOUND"
        refused = http.get("/v1beta/decisions")
        assert google_error(refused, 405)["status"] == "UNIMPLEMENTED" and refused.headers["allow"] == "POST"
        assert http.post("/v1beta/decisions", json=GOOD).status_code == 200  # and it keeps serving
