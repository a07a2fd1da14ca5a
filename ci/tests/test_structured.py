"""Structured outputs and logprobs in `ChatEngine.generate`, in-process on the random-weight demo model.

Constraints (`blink.generate.structured`): the random model's text is schema-valid JSON for json_schema requests (hand
written, pydantic-generated), a JSON object for json_object, a tool call `blink.generate.toolcalls.parse` recovers
with valid arguments for a tool_call constraint (in the demo template's JSON markup and in Qwen3.5's XML markup), and
what the engine cannot enforce is refused by `check_constraint` before any generation. Logprobs: the entries line
up with the text, and equal a reference computed from one plain forward of the model over the same tokens.
"""

from __future__ import annotations

import json
import math
from enum import StrEnum
from typing import Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field

from blink.errors import InvalidRequest
from blink.generate.chat_engine import ChatEnd, ChatEngine, Delta, _sample
from blink.generate.logprobs import token_bytes
from blink.generate.structured import Grammars, check_constraint
from blink.generate.toolcalls import parse
from blink.plan import GenerationParams

PROMPT = [{"role": "user", "content": "Describe a person as JSON."}]
SAMPLING = [{"temperature": 0}, {"temperature": 1.0, "seed": 7}, {"temperature": 0.8, "top_p": 0.9, "seed": 11}]


class Role(StrEnum):
    admin = "admin"
    guest = "guest"


class Address(BaseModel):
    city: str = Field(min_length=1, max_length=12)
    zip: str = Field(pattern=r"^[0-9]{5}$")


class Person(BaseModel):
    name: str = Field(max_length=16)
    age: int = Field(ge=0, le=130)
    role: Role
    kind: Literal["person"] = "person"
    nickname: str | None = Field(default=None, max_length=8)
    address: Address
    tags: list[Literal["a", "b", "c"]] = Field(max_length=3)


HAND = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 20},
        "done": {"type": "boolean"},
        "priority": {"enum": ["low", "high"]},
        "estimate": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 9}, {"type": "null"}]},
        "steps": {"type": "array", "items": {"$ref": "#/$defs/step"}, "minItems": 1, "maxItems": 2},
    },
    "required": ["title", "done", "priority", "estimate", "steps"],
    "additionalProperties": False,
    "$defs": {
        "step": {
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 0, "maximum": 99},
                "what": {"type": "string", "format": "uuid"},
            },
            "required": ["n", "what"],
            "additionalProperties": False,
        }
    },
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 10}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}, "hours24": {"type": "boolean"}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def chat(engine):
    import torch

    # one thread: on this shared 2-core machine a second torch thread makes each step several times slower
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield ChatEngine(engine.loaded)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def prompt(chat):
    return chat.render(PROMPT).ids


def sibling(grammars: Grammars, **kwargs) -> Grammars:
    """Another Grammars on the same llguidance tokenizer view (it takes seconds to build)."""
    other = Grammars(
        grammars.hf_tokenizer, grammars.vocab_size, grammars.eos_ids, **{"tool_format": grammars.tool_format, **kwargs}
    )
    other._tokenizer, other.mask_size = grammars.tokenizer, grammars.mask_size
    return other


def run(chat, ids, **params) -> tuple[str, ChatEnd, list]:
    items = list(chat.generate(ids, GenerationParams(**params)))
    end = items[-1]
    assert isinstance(end, ChatEnd) and not any(isinstance(i, ChatEnd) for i in items[:-1])
    return "".join(i if isinstance(i, str) else i.text for i in items[:-1]), end, items[:-1]


def tool_constraint(*tools, parallel=True):
    return check_constraint(
        {
            "type": "tool_call",
            "parallel": parallel,
            "tools": [{"name": t["function"]["name"], "parameters": t["function"]["parameters"]} for t in tools],
        },
        loc=["body", "tools"],
    )


# json_schema / json_object ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "schema, sampling",
    [
        (HAND, SAMPLING[0]),
        (HAND, SAMPLING[1]),
        (Person.model_json_schema(), SAMPLING[0]),
        (Person.model_json_schema(), SAMPLING[2]),
    ],
    ids=["hand-written-greedy", "hand-written-t1", "pydantic-greedy", "pydantic-top_p"],
)
def test_json_schema_output_is_valid(chat, prompt, schema, sampling):
    constraint = check_constraint({"type": "json_schema", "schema": schema, "strict": True})
    text, end, _ = run(chat, prompt, max_tokens=400, constraint=constraint, **sampling)
    assert end.finish_reason == "stop", text
    jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.FormatChecker())
    if schema is not HAND:
        Person.model_validate_json(text)  # what the openai SDK's `parse` does with it


def test_unconstrained_output_is_not_json(chat, prompt):
    """The proof has teeth: without a constraint the random model writes no JSON."""
    text, _, _ = run(chat, prompt, max_tokens=30, temperature=0)
    with pytest.raises(ValueError):
        json.loads(text)


def test_json_object(chat, prompt):
    # a seed whose object closes: the random model's strings otherwise run on (no maxLength in json_object)
    text, end, _ = run(
        chat, prompt, max_tokens=200, constraint=check_constraint({"type": "json_object"}), temperature=1.0, seed=2
    )
    assert end.finish_reason == "stop"
    assert isinstance(json.loads(text), dict)


def test_max_tokens_mid_json_is_length(chat, prompt):
    constraint = check_constraint({"type": "json_schema", "schema": HAND})
    text, end, _ = run(chat, prompt, max_tokens=4, temperature=0, constraint=constraint)
    assert (end.finish_reason, end.completion_tokens) == ("length", 4)
    assert text.startswith('{"title": "')
    with pytest.raises(ValueError):
        json.loads(text)


def test_compiled_grammars_are_cached_and_bounded(chat):
    grammars = sibling(chat.grammars, size=2)
    constraints = [check_constraint({"type": "json_schema", "schema": {"enum": [i]}}) for i in range(3)]
    first = grammars.matcher(constraints[0])
    again = grammars.matcher(constraints[0])
    assert first is not again  # each request gets its own copy
    for c in constraints:
        grammars.matcher(c)
    assert len(grammars._cache) == 2


# tool calls ---------------------------------------------------------------------------------------------------
def check_calls(text: str, tools: list[dict]) -> list[dict]:
    parsed = parse(text, [t["function"]["name"] for t in tools])
    assert parsed.calls and parsed.content is None, text
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for call in parsed.calls:
        jsonschema.validate(json.loads(call["function"]["arguments"]), by_name[call["function"]["name"]])
    return parsed.calls


@pytest.mark.parametrize("sampling", SAMPLING[:2], ids=["greedy", "t1"])
def test_tool_choice_required(chat, sampling):
    """`tool_choice: "required"`: one or more calls to any offered tool, in the model's own markup."""
    tools = [WEATHER, TIME]
    ids = chat.render([{"role": "user", "content": "Weather in Paris?"}], tools).ids
    text, end, _ = run(chat, ids, max_tokens=300, constraint=tool_constraint(*tools), **sampling)
    assert text.startswith('<tool_call>\n{"name": ')
    check_calls(text, tools)
    assert end.finish_reason in ("stop", "length")


@pytest.mark.parametrize("sampling", [SAMPLING[0], SAMPLING[2]], ids=["greedy", "top_p"])
def test_named_function_without_parallel_calls_is_exactly_one_call(chat, sampling):
    tools = [WEATHER, TIME]
    ids = chat.render([{"role": "user", "content": "What time is it?"}], tools).ids
    text, end, _ = run(chat, ids, max_tokens=200, constraint=tool_constraint(TIME, parallel=False), **sampling)
    calls = check_calls(text, tools)
    assert [c["function"]["name"] for c in calls] == ["get_time"]
    assert end.finish_reason == "stop" and text.endswith("</tool_call>")


def test_tool_call_in_qwen35_xml_markup(chat):
    """A model whose template writes `<function=NAME><parameter=KEY>` calls gets that markup, and the parser
    recovers the arguments from it."""
    xml = ChatEngine.__new__(ChatEngine)
    xml.__dict__.update(chat.__dict__)
    xml.grammars = sibling(chat.grammars, tool_format="xml")
    ids = chat.render([{"role": "user", "content": "Weather?"}], [WEATHER]).ids
    for sampling in SAMPLING[:2]:
        text, end, _ = run(xml, ids, max_tokens=200, constraint=tool_constraint(WEATHER, parallel=False), **sampling)
        assert text.startswith("<tool_call>\n<function=get_weather>\n<parameter=city>\n"), text
        assert end.finish_reason == "stop"
        check_calls(text, [WEATHER])


# refusals -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "schema, path, named",
    [
        (
            {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}},
            ["properties", "tags", "uniqueItems"],
            "uniqueItems",
        ),
        ({"type": "object", "properties": {"not": {"not": {"type": "null"}}}}, ["properties", "not", "not"], "not"),
        (
            {"anyOf": [{"type": "string"}, {"type": "array", "contains": {"const": 1}}]},
            ["anyOf", 1, "contains"],
            "contains",
        ),
        ({"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}, ["if"], "if"),
        (
            {"$defs": {"x": {"type": "object", "propertyNames": {"pattern": "^a"}}}, "$ref": "#/$defs/x"},
            ["$defs", "x", "propertyNames"],
            "propertyNames",
        ),
        ({"type": "object", "dependentRequired": {"a": ["b"]}}, ["dependentRequired"], "dependentRequired"),
        (
            {"type": "object", "properties": {"when": {"type": "string", "format": "fancy-date"}}},
            ["properties", "when", "format"],
            "fancy-date",
        ),
        ({"type": "string", "pattern": "^(?=a)b$"}, ["pattern"], "look-around"),
        (
            {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}},
            ["properties", "x", "$ref"],
            "/$defs/missing",
        ),
        ({"type": "integer", "minimum": 5, "maximum": 1}, [], "minimum"),
    ],
)
def test_unenforceable_schema_is_refused_naming_it(schema, path, named):
    loc = ["body", "response_format", "json_schema", "schema"]
    with pytest.raises(InvalidRequest) as caught:
        check_constraint({"type": "json_schema", "schema": schema, "strict": True}, loc=loc)
    err = caught.value
    assert err.status < 500 and err.kind == "unsupported_schema_feature"
    assert err.loc == [*loc, *path] and named in err.message


def test_tool_parameters_and_shapes_are_checked():
    tool = {
        "name": "f",
        "parameters": {"type": "object", "properties": {"ids": {"type": "array", "uniqueItems": True}}},
    }
    with pytest.raises(InvalidRequest) as caught:
        check_constraint({"type": "tool_call", "tools": [{"name": "g"}, tool]}, loc=["body", "tools"])
    assert caught.value.loc == ["body", "tools", 1, "parameters", "properties", "ids", "uniqueItems"]
    for bad, where in [
        ({"type": "tool_call", "tools": []}, []),
        ({"type": "tool_call", "tools": [{"name": "a b"}]}, [0, "name"]),
        ({"type": "json_schema"}, []),
        ({"type": "regex"}, []),
        ("json", []),
    ]:
        with pytest.raises(InvalidRequest) as caught:
            check_constraint(bad, loc=["body", "x"])
        assert caught.value.loc == ["body", "x", *where] and caught.value.status < 500
    # annotations and the keywords pydantic and zod emit are fine
    assert check_constraint({"type": "json_schema", "schema": Person.model_json_schema()})["strict"] is True
    assert check_constraint(None) is None


# logprobs -----------------------------------------------------------------------------------------------------
def reference(chat, ids: list[int], tokens: list[int]):
    """Log-softmax of the model's logits after `ids + tokens[:i]`, for each i, from one plain forward."""
    import torch

    with torch.inference_mode():
        logits = chat.model(input_ids=torch.tensor([ids + tokens])).logits[0].float()
    return logits[len(ids) - 1 : len(ids) - 1 + len(tokens)]


def entries_of(items) -> list[dict]:
    assert all(isinstance(i, Delta) for i in items)
    return [e for i in items for e in i.logprobs]


@pytest.fixture(scope="module")
def token_of(chat):
    """Token id by its bytes (OpenAI's entries carry no ids): which tokens were drawn."""
    table = {}
    for i in range(len(chat.tokenizer)):
        table.setdefault(token_bytes(chat.tokenizer, i), i)
    return lambda entry: table[bytes(entry["bytes"])]


def test_greedy_logprobs_match_a_plain_forward(chat, prompt, token_of):
    import torch

    text, end, items = run(chat, prompt, max_tokens=12, temperature=0, logprobs=True, top_logprobs=5)
    entries = entries_of(items)
    assert len(entries) == end.completion_tokens == 12
    assert b"".join(bytes(e["bytes"]) for e in entries) == text.encode()
    plain = list(chat.generate(prompt, GenerationParams(max_tokens=12, temperature=0)))
    assert all(isinstance(i, str) for i in plain[:-1]) and "".join(plain[:-1]) == text  # unchanged without logprobs
    generated = [token_of(e) for e in entries]
    expected = torch.log_softmax(reference(chat, prompt, generated), dim=-1)
    for i, e in enumerate(entries):
        top = e["top_logprobs"]
        assert len(top) == 5 and [t["logprob"] for t in top] == sorted((t["logprob"] for t in top), reverse=True)
        assert top[0]["token"] == e["token"] and top[0]["logprob"] == e["logprob"]  # greedy: the chosen is the top
        assert int(torch.argmax(expected[i])) == generated[i]
        assert sum(math.exp(t["logprob"]) for t in top) <= 1 + 1e-5
        assert e["logprob"] == pytest.approx(float(expected[i, generated[i]]), abs=1e-4)
        values, indices = torch.topk(expected[i], 5)
        assert [t["logprob"] for t in top] == pytest.approx(values.tolist(), abs=1e-4)
        assert [token_of(t) for t in top] == indices.tolist()


@pytest.mark.parametrize(
    "sampling",
    [{"temperature": 0.7, "top_k": 40, "seed": 5}, {"temperature": 1.3, "top_p": 0.8, "seed": 9}],
    ids=["top_k", "top_p"],
)
def test_sampled_logprobs_are_the_sampler_distribution(chat, prompt, sampling, token_of):
    """After temperature, top-k and top-p: the logprob is the chance the sampler gave the drawn token."""
    import torch

    text, end, items = run(chat, prompt, max_tokens=10, logprobs=True, top_logprobs=20, **sampling)
    entries = entries_of(items)
    assert b"".join(bytes(e["bytes"]) for e in entries) == text.encode()
    generated = [token_of(e) for e in entries]
    rows = reference(chat, prompt, generated)
    for i, e in enumerate(entries):
        _, dist = _sample(
            rows[i].clone(),
            sampling["temperature"],
            sampling.get("top_p", 1.0),
            sampling.get("top_k", 0),
            torch.Generator().manual_seed(0),
            keep_distribution=True,
        )
        assert e["logprob"] == pytest.approx(float(dist[generated[i]]), abs=1e-4)
        assert e["logprob"] > float("-inf") and len(e["top_logprobs"]) <= 20
        finite = int(torch.isfinite(dist).sum())
        assert len(e["top_logprobs"]) == min(20, finite)
        assert sum(math.exp(t["logprob"]) for t in e["top_logprobs"]) <= 1 + 1e-5


def test_logprobs_under_a_grammar_and_a_stop_string(chat, prompt):
    constraint = check_constraint({"type": "json_schema", "schema": HAND})
    text, end, items = run(
        chat, prompt, max_tokens=400, temperature=0, constraint=constraint, logprobs=True, top_logprobs=3
    )
    entries = entries_of(items)
    assert b"".join(bytes(e["bytes"]) for e in entries) == text.encode()
    assert all(e["logprob"] <= 0 and all(t["logprob"] > float("-inf") for t in e["top_logprobs"]) for e in entries)
    # a stop string inside the JSON: the text stops before it, and so do the entries
    stop = '"done"'
    cut, end, items = run(
        chat, prompt, max_tokens=400, temperature=0, constraint=constraint, logprobs=True, stop=[stop]
    )
    assert end.finish_reason == "stop" and cut == text[: text.index(stop)]
    sent = b"".join(bytes(e["bytes"]) for e in entries_of(items))
    assert sent.startswith(cut.encode()) and len(sent) < len(cut.encode()) + len(stop.encode()) + 8


def test_with_thinking_on_the_constraint_starts_after_the_reasoning(chat):
    """Thinking on: free reasoning up to `</think>`, then the constrained answer (JSON or a tool call)."""
    grammars = sibling(chat.grammars, reasoning=True)
    schema = check_constraint({"type": "json_schema", "schema": HAND["$defs"]["step"]})
    calls = tool_constraint(WEATHER, parallel=False)
    cases = [
        (schema, '<think>\nLet me think.\n</think>\n\n{"n": 3, "what": "123e4567-e89b-12d3-a456-426614174000"}', True),
        (schema, 'Short.\n</think>\n\n{"n": 3, "what": "123e4567-e89b-12d3-a456-426614174000"}', True),
        (schema, '{"n": 3, "what": "123e4567-e89b-12d3-a456-426614174000"}', False),  # still reasoning
        (schema, '<think>\nok\n</think>\n\n{"n": "3"}', False),
        (
            calls,
            '<think>\nok\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", '
            '"unit": "c"}}\n</tool_call>',
            True,
        ),
    ]
    for constraint, text, complete in cases:
        matcher = grammars.matcher(constraint)
        ids = chat.tokenizer(text, add_special_tokens=False)["input_ids"]
        consumed = all(matcher.consume_token(t) for t in ids)
        assert (consumed and matcher.is_accepting()) == complete, text
