"""The Vercel AI SDK (npm `ai` with `@ai-sdk/openai`'s `createOpenAI({baseURL})`, ci/js/ai-sdk.mjs) asking blink for
an object of a zod schema over both OpenAI wires, the Responses API (`openai(model)`, the provider's default) and
chat completions (`openai.chat(model)`): `generateObject` and `streamObject` (deprecated in ai 7, still shipped),
and their successors `generateText` / `streamText` with `output: Output.object(...)`.

The demo model never closes a JSON object, so the network is scripted (ci/tests/helpers/scripted.py, script
`weather`: an instance of the schema); everything after it is the real code: the decode loop under the grammar the
SDK's `json_schema` format compiles to (blink.generate.structured), the app on uvicorn on loopback, the wire. The
script records every request the SDK sent (its body and HTTP status) and the JSON answers, so the format on the wire
is checked as well as what the SDK made of the answer.
"""

from __future__ import annotations

import json

import pytest

from helpers import Served, node_script
from helpers.scripted import SCRIPTS, scripted_context

pytestmark = pytest.mark.e2e

PROMPT = "The weather in Paris, as JSON? script=weather"
WEATHER = json.loads(SCRIPTS["weather"])
CALLS = ["generateObject", "streamObject", "generateTextOutput", "streamTextOutput"]
ROUTES = {"responses": "/v1/responses", "chat": "/v1/chat/completions"}


@pytest.fixture(scope="module")
def scripted(demo_dir):
    from blink.server import create_app

    scripted = scripted_context(demo_dir, "blink-scripted")
    served = Served(create_app(scripted.ctx))
    try:
        # one node process for all eight calls (each test reads its own)
        scripted.got = node_script("ai-sdk.mjs", served.url + "/v1", "blink-scripted", PROMPT)
    finally:
        served.stop()
    return scripted


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("api", ROUTES)
def test_the_ai_sdk_gets_the_object_the_model_wrote(scripted, api, call):
    got = scripted.got[api][call]
    assert "error" not in got, got
    assert got["object"] == WEATHER, got
    assert got["finishReason"] == "stop" and got["warnings"] == [], got
    usage = got["usage"]
    assert usage["inputTokens"] >= len(scripted.tokenizer.encode(PROMPT)), usage
    assert usage["outputTokens"] == len(scripted.tokenizer.encode(SCRIPTS["weather"])), usage
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"], usage
    if call.startswith("stream"):
        assert got["partials"] > 1, got  # the object grew over several deltas


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("api", ROUTES)
def test_the_ai_sdk_sends_a_strict_json_schema_that_blink_accepts(scripted, api, call):
    """One request per call, to the API's route, answered 200: nothing the SDK sends is refused. Its format is a
    strict `json_schema` with the schema zod wrote (draft-07, the integer bounded by ±(2^53-1)), name and
    description; blink enforces it, and on Responses says so in the answer's `text.format`."""
    got = scripted.got[api][call]
    [sent] = got["sent"]
    assert sent["path"] == ROUTES[api] and sent["status"] == 200, sent
    body, answer, streamed = sent["body"], sent["answer"], call.startswith("stream")
    assert body["model"] == "blink-scripted" and body.get("stream", False) is streamed, body
    if api == "responses":
        fmt = body["text"]["format"]
        assert fmt["type"] == "json_schema", fmt
    else:
        assert body["response_format"]["type"] == "json_schema", body
        fmt = body["response_format"]["json_schema"]
        assert body.get("stream_options") == ({"include_usage": True} if streamed else None), body
    assert (fmt["name"], fmt["description"], fmt["strict"]) == ("weather", "The weather in a city", True), fmt
    schema = fmt["schema"]
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#" and schema["additionalProperties"] is False
    assert list(schema["properties"]) == schema["required"] == list(WEATHER), schema
    assert schema["properties"]["temperature_c"] == {"type": "integer", "minimum": -(2**53 - 1), "maximum": 2**53 - 1}
    if streamed:
        assert answer is None  # an event stream, read by the SDK
    elif api == "responses":
        assert answer["status"] == "completed" and answer["text"]["format"] == fmt, answer
        assert answer["output"][-1]["content"][0]["text"] == SCRIPTS["weather"], answer
    else:
        assert answer["choices"][0]["message"]["content"] == SCRIPTS["weather"], answer
        assert answer["choices"][0]["finish_reason"] == "stop", answer
