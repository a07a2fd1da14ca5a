"""Side-by-side: xgrammar and llguidance as the constrained-decoding engine, on the demo model's tokenizer.

    .venv/bin/python bench/grammar.py [--walks 4] [--max-steps 200] [--json out.json]

Both engines run in this one process on the same schemas, the same tokenizer (Qwen3.5's byte-level BPE, 248k
tokens) and the same token streams. For every schema:

- compile: the seconds from the JSON schema to a matcher whose first mask is computed (llguidance builds its
  lexer lazily, so the first mask is counted in; xgrammar's compiler cache is off);
- coverage: a feature schema comes with valid and invalid instances. Each instance is tokenized and fed to the
  matcher token by token; `enforced` = every valid instance is accepted and every invalid one refused,
  `IGNORED` = an invalid instance got through (the engine compiled the schema but does not enforce the feature:
  the dangerous case), `refused` = the engine would not compile the schema, `WRONG` = a valid instance refused;
- random walks: a random "model" (noise logits, tilted toward JSON's punctuation so strings end) samples under the
  mask until EOS is allowed and drawn; every finished text is checked with `jsonschema` (format checker on);
- per token: mask computation, mask application to a float32 logits row of the full vocabulary (xgrammar's own
  CPU kernel; for llguidance the unpacking blink does), and accepting the drawn token, timed step by step over
  the walks (medians and p95, microseconds). torch runs on one thread.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path

import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split


# feature schemas: (name, schema, valid instances, invalid instances) ----------------------------------------
def _obj(props: dict, required=None, **extra) -> dict:
    return {
        "type": "object",
        "properties": props,
        "required": list(required if required is not None else props),
        "additionalProperties": False,
        **extra,
    }


FEATURES = [
    (
        "nested objects",
        _obj({"user": _obj({"name": {"type": "string"}, "age": {"type": "integer"}})}),
        [{"user": {"name": "Ada", "age": 36}}],
        [{"user": {"name": "Ada"}}, {"user": {"name": "Ada", "age": 1.5}}],
    ),
    ("additionalProperties false", _obj({"a": {"type": "integer"}}), [{"a": 1}], [{"a": 1, "b": 2}]),
    (
        "additionalProperties schema",
        {"type": "object", "additionalProperties": {"type": "integer"}},
        [{"x": 1, "y": 2}, {}],
        [{"x": "one"}],
    ),
    (
        "required",
        {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["b"]},
        [{"b": "x"}, {"a": "y", "b": "x"}],
        [{"a": "y"}],
    ),
    ("enum", {"enum": ["red", "green", 3]}, ["red", 3], ["blue", 4]),
    ("const", _obj({"kind": {"const": "circle"}}), [{"kind": "circle"}], [{"kind": "square"}]),
    ("type list", {"type": ["string", "null"]}, ["x", None], [1]),
    ("anyOf", {"anyOf": [{"type": "integer"}, {"type": "null"}]}, [3, None], ["3"]),
    (
        "oneOf",
        {"oneOf": [_obj({"cat": {"type": "string"}}), _obj({"dog": {"type": "integer"}})]},
        [{"cat": "tom"}, {"dog": 1}],
        [{"cat": 1}],
    ),
    (
        "allOf",
        {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]},
            ]
        },
        [{"a": 1, "b": 2}],
        [{"a": 1}],
    ),
    (
        "$ref/$defs",
        {
            "$defs": {"Pt": _obj({"x": {"type": "number"}, "y": {"type": "number"}})},
            **_obj({"a": {"$ref": "#/$defs/Pt"}, "b": {"$ref": "#/$defs/Pt"}}),
        },
        [{"a": {"x": 1, "y": 2.5}, "b": {"x": 0, "y": -1}}],
        [{"a": {"x": 1}, "b": {"x": 0, "y": 0}}],
    ),
    (
        "recursive $ref",
        {
            "$defs": {
                "Node": _obj({"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}})
            },
            "$ref": "#/$defs/Node",
        },
        [{"v": 1, "kids": [{"v": 2, "kids": []}]}],
        [{"v": 1, "kids": [{"v": "2", "kids": []}]}],
    ),
    ("pattern", {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}, ["ABC-12"], ["abc-12", "ABCD-1"]),
    ("minLength/maxLength", {"type": "string", "minLength": 2, "maxLength": 4}, ["ab", "abcd"], ["a", "abcde"]),
    ("format date-time", {"type": "string", "format": "date-time"}, ["2026-12-01T07:00:00Z"], ["yesterday"]),
    ("format date", {"type": "string", "format": "date"}, ["2026-12-01"], ["2026-13-45x"]),
    ("format email", {"type": "string", "format": "email"}, ["ada@example.com"], ["not an email"]),
    ("format uuid", {"type": "string", "format": "uuid"}, ["123e4567-e89b-12d3-a456-426614174000"], ["1234"]),
    ("format ipv4", {"type": "string", "format": "ipv4"}, ["10.0.0.1"], ["10.0.0"]),
    ("format uri", {"type": "string", "format": "uri"}, ["https://example.com/a"], ["no scheme"]),
    ("minimum/maximum", {"type": "integer", "minimum": 1, "maximum": 5}, [1, 5], [0, 6]),
    ("exclusiveMinimum (number)", {"type": "number", "exclusiveMinimum": 0, "maximum": 1}, [0.5, 1], [0, 1.5]),
    ("multipleOf", {"type": "integer", "multipleOf": 5}, [10, 0], [7]),
    (
        "minItems/maxItems",
        {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
        [[1], [1, 2]],
        [[], [1, 2, 3]],
    ),
    ("uniqueItems", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, [[1, 2]], [[1, 1]]),
    (
        "prefixItems",
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
        [["a", 1]],
        [[1, "a"], ["a", 1, 2]],
    ),
    ("contains", {"type": "array", "items": {"type": "integer"}, "contains": {"const": 7}}, [[1, 7]], [[1, 2]]),
    (
        "minProperties/maxProperties",
        {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1, "maxProperties": 1},
        [{"a": 1}],
        [{}, {"a": 1, "b": 2}],
    ),
    (
        "patternProperties",
        {"type": "object", "patternProperties": {"^x_": {"type": "integer"}}, "additionalProperties": False},
        [{"x_a": 1}],
        [{"y": 1}],
    ),
    (
        "propertyNames",
        {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}, "additionalProperties": {"type": "integer"}},
        [{"ab": 1}],
        [{"AB": 1}],
    ),
    (
        "dependentRequired",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "dependentRequired": {"a": ["b"]},
        },
        [{"a": 1, "b": 2}, {}],
        [{"a": 1}],
    ),
    (
        "if/then/else",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "if": {"properties": {"a": {"const": 1}}},
            "then": {"required": ["b"]},
        },
        [{"a": 2}, {"a": 1, "b": 0}],
        [{"a": 1}],
    ),
    ("not", {"type": "integer", "not": {"const": 3}}, [2], [3]),
]


def pydantic_schema() -> dict:
    """What pydantic 2 emits for a typical model: $defs, $ref, anyOf with null, enum, Literal, constrained fields."""
    from enum import StrEnum
    from typing import Literal

    from pydantic import BaseModel, Field

    class Role(StrEnum):
        admin = "admin"
        user = "user"

    class Address(BaseModel):
        street: str = Field(max_length=40)
        city: str = Field(min_length=1, max_length=30)
        zip: str = Field(pattern=r"^[0-9]{5}$")

    class Person(BaseModel):
        name: str = Field(max_length=40)
        age: int = Field(ge=0, le=150)
        role: Role
        kind: Literal["person"] = "person"
        email: str | None = Field(default=None, max_length=60)
        address: Address
        tags: list[str] = Field(default_factory=list, max_length=3)
        scores: dict[str, float] = Field(default_factory=dict)

    return Person.model_json_schema()


# what zod-to-json-schema (the AI SDK, openai-node's zodResponseFormat) emits: draft-07, additionalProperties false
ZOD = {
    "type": "object",
    "properties": {
        "recipe": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "ingredients": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "amount": {"type": "string"}},
                        "required": ["name", "amount"],
                        "additionalProperties": False,
                    },
                },
                "steps": {"type": "array", "items": {"type": "string"}},
                "difficulty": {"type": "string", "enum": ["easy", "medium", "hard"]},
                "servings": {"anyOf": [{"type": "number"}, {"type": "null"}]},
            },
            "required": ["name", "ingredients", "steps", "difficulty", "servings"],
            "additionalProperties": False,
        }
    },
    "required": ["recipe"],
    "additionalProperties": False,
    "$schema": "http://json-schema.org/draft-07/schema#",
}

# OpenAI's structured-outputs guide: chain-of-thought steps, and a function's `parameters` (strict)
MATH = _obj(
    {
        "steps": {"type": "array", "items": _obj({"explanation": {"type": "string"}, "output": {"type": "string"}})},
        "final_answer": {"type": "string"},
    }
)
WEATHER = _obj(
    {
        "location": {"type": "string", "description": "City and country e.g. Bogotá, Colombia"},
        "units": {"type": ["string", "null"], "enum": ["celsius", "fahrenheit", None]},
    }
)
# OpenAI's recursive UI example (a $ref to the root)
UI = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["div", "button", "header", "section", "field", "form"]},
        "label": {"type": "string"},
        "children": {"type": "array", "items": {"$ref": "#"}},
        "attributes": {"type": "array", "items": _obj({"name": {"type": "string"}, "value": {"type": "string"}})},
    },
    "required": ["type", "label", "children", "attributes"],
    "additionalProperties": False,
}

REAL = [
    (
        "pydantic Person",
        pydantic_schema(),
        [
            {
                "name": "Ada",
                "age": 36,
                "role": "admin",
                "kind": "person",
                "email": None,
                "address": {"street": "1 Main", "city": "X", "zip": "12345"},
                "tags": [],
                "scores": {},
            }
        ],
    ),
    (
        "zod recipe",
        ZOD,
        [
            {
                "recipe": {
                    "name": "soup",
                    "ingredients": [{"name": "salt", "amount": "1 g"}],
                    "steps": ["boil"],
                    "difficulty": "easy",
                    "servings": None,
                }
            }
        ],
    ),
    ("OpenAI math_reasoning", MATH, [{"steps": [{"explanation": "add", "output": "2"}], "final_answer": "2"}]),
    ("OpenAI get_weather parameters", WEATHER, [{"location": "Paris, France", "units": None}]),
    ("OpenAI recursive UI", UI, [{"type": "form", "label": "f", "children": [], "attributes": []}]),
    ("json_object", {"type": "object"}, [{"any": [1, {"b": None}]}]),
]


# the two engines behind one small interface -----------------------------------------------------------------
class XGrammar:
    name = "xgrammar"

    def __init__(self, tokenizer, vocab_size: int):
        import xgrammar as xgr

        self.xgr = xgr
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self.vocab_size = vocab_size

    def compile(self, schema: dict):
        compiler = self.xgr.GrammarCompiler(self.info, cache_enabled=False)
        return compiler.compile_json_schema(json.dumps(schema), strict_mode=True)

    def matcher(self, compiled):
        return self.xgr.GrammarMatcher(compiled)

    def bitmask(self):
        return self.xgr.allocate_token_bitmask(1, self.vocab_size)

    def fill(self, matcher, bitmask):
        matcher.fill_next_token_bitmask(bitmask)

    def apply(self, logits, bitmask):
        self.xgr.apply_token_bitmask_inplace(logits, bitmask)

    def accept(self, matcher, token: int) -> bool:
        return matcher.accept_token(token)

    def done(self, matcher) -> bool:  # EOS allowed here
        return matcher.is_completed() if hasattr(matcher, "is_completed") else matcher.is_terminated()


class LLGuidance:
    name = "llguidance"

    def __init__(self, tokenizer, vocab_size: int):
        import llguidance
        import llguidance.hf
        import llguidance.torch

        self.llg = llguidance
        self.tok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)
        self.vocab_size = vocab_size

    def compile(self, schema: dict):
        grammar = self.llg.LLMatcher.grammar_from_json_schema(schema)
        error = self.llg.LLMatcher.validate_grammar(grammar, self.tok)
        if error:
            raise ValueError(error)
        return grammar

    def matcher(self, compiled):
        matcher = self.llg.LLMatcher(self.tok, compiled, log_level=0)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return matcher

    def bitmask(self):
        return self.llg.torch.allocate_token_bitmask(1, self.vocab_size)

    def fill(self, matcher, bitmask):
        self.llg.torch.fill_next_token_bitmask(matcher, bitmask, 0)

    def apply(self, logits, bitmask):
        """What blink.generate.structured.Grammars.apply_mask does (llguidance's own applier is a torch.compile
        kernel)."""
        import numpy as np
        import torch

        allowed = np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[: logits.shape[-1]]
        logits.masked_fill_(torch.from_numpy(allowed) == 0, float("-inf"))

    def accept(self, matcher, token: int) -> bool:
        return matcher.consume_token(token)

    def done(self, matcher) -> bool:
        return matcher.is_accepting()


# the measurements ----------------------------------------------------------------------------------------------
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:[^\s]*$")


def format_checker():
    """jsonschema's format checker, plus RFC 3339 date-time and URI (it checks those only with extra packages)."""
    import jsonschema

    checker = jsonschema.FormatChecker()
    checker.checks("date-time")(lambda v: not isinstance(v, str) or bool(_DATE_TIME.match(v)))
    checker.checks("uri")(lambda v: not isinstance(v, str) or bool(_URI.match(v)))
    return checker


def feed(engine, compiled, tokenizer, eos: int, instance) -> bool:
    """Does the matcher accept this instance's tokens and then EOS?"""
    ids = tokenizer(json.dumps(instance), add_special_tokens=False)["input_ids"]
    matcher = engine.matcher(compiled)
    for token in ids:
        if not engine.accept(matcher, token):
            return False
    return engine.done(matcher) and engine.accept(matcher, eos)


def coverage(engine, tokenizer, eos: int) -> list[dict]:
    import jsonschema

    rows = []
    for name, schema, valid, invalid in FEATURES:
        for v in valid:
            jsonschema.validate(v, schema, format_checker=format_checker())
        for v in invalid:
            assert not jsonschema.Draft202012Validator(schema, format_checker=format_checker()).is_valid(v), (name, v)
        try:
            compiled = engine.compile(schema)
            engine.matcher(compiled)
        except Exception as exc:
            rows.append({"feature": name, "verdict": "refused", "detail": str(exc).splitlines()[0][:120]})
            continue
        wrong = [v for v in valid if not feed(engine, compiled, tokenizer, eos, v)]
        leaked = [v for v in invalid if feed(engine, compiled, tokenizer, eos, v)]
        verdict = "WRONG" if wrong else ("IGNORED" if leaked else "enforced")
        rows.append({"feature": name, "verdict": verdict, "detail": json.dumps((wrong or leaked)[:1])[:80]})
    return rows


def punctuation_tilt(tokenizer, vocab_size: int):
    """+6 on tokens made of JSON punctuation, digits or short words, +9 on those that close a string, an object
    or an array: a random model whose texts end."""
    import torch

    tilt = torch.zeros(vocab_size)
    for token_id in range(len(tokenizer)):
        text = tokenizer.decode([token_id])
        if text and (all(c in '{}[]",: 0123456789.-' for c in text) or (text.isalpha() and len(text) <= 3)):
            tilt[token_id] = 9.0 if any(c in text for c in '"}]') else 6.0
    return tilt


def walk(engine, compiled, schema, tokenizer, eos: int, tilt, generator, max_steps: int, timings: dict):
    import jsonschema
    import torch

    matcher = engine.matcher(compiled)
    bitmask = engine.bitmask()
    produced = []
    for _ in range(max_steps):
        logits = torch.randn(tilt.shape[0], generator=generator) * 2 + tilt
        t0 = time.perf_counter()
        engine.fill(matcher, bitmask)
        t1 = time.perf_counter()
        engine.apply(logits, bitmask)
        t2 = time.perf_counter()
        token = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))
        t3 = time.perf_counter()
        ok = engine.accept(matcher, token)
        t4 = time.perf_counter()
        timings["mask"].append(t1 - t0)
        timings["apply"].append(t2 - t1)
        timings["accept"].append(t4 - t3)
        if not ok:
            return "refused its own token"
        if token == eos:
            text = tokenizer.decode(produced)
            try:
                jsonschema.validate(json.loads(text), schema, format_checker=format_checker())
            except Exception as exc:
                return f"INVALID: {type(exc).__name__}: {str(exc)[:80]} in {text[:80]!r}"
            return "valid"
        produced.append(token)
    return "unfinished"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model folder (default: the demo model)")
    parser.add_argument("--walks", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch
    from transformers import AutoConfig, AutoTokenizer

    from blink.model.demo import demo_model_dir

    torch.set_num_threads(1)
    folder = args.model or str(demo_model_dir())
    tokenizer = AutoTokenizer.from_pretrained(folder)
    vocab_size = AutoConfig.from_pretrained(folder).vocab_size
    eos = tokenizer.eos_token_id
    tilt = punctuation_tilt(tokenizer, vocab_size)
    report: dict = {"vocab_size": vocab_size, "engines": {}}
    import importlib.metadata as md

    for cls in (XGrammar, LLGuidance):
        t0 = time.perf_counter()
        engine = cls(tokenizer, vocab_size)
        setup = time.perf_counter() - t0
        version = md.version(engine.name)
        print(f"\n== {engine.name} {version}: tokenizer setup {setup:.2f} s")
        rows = coverage(engine, tokenizer, eos)
        for r in rows:
            print(f"  {r['feature']:32s} {r['verdict']:9s} {r['detail']}")
        timings = {"mask": [], "apply": [], "accept": []}
        real = []
        generator = torch.Generator().manual_seed(0)
        for name, schema, valid in REAL:
            try:
                t0 = time.perf_counter()
                compiled = engine.compile(schema)
                m = engine.matcher(compiled)
                engine.fill(m, engine.bitmask())
                compile_s = time.perf_counter() - t0
            except Exception as exc:
                real.append({"schema": name, "compile_s": None, "error": str(exc)[:120]})
                print(f"  {name:32s} refused: {str(exc)[:100]}")
                continue
            accepts = all(feed(engine, compiled, tokenizer, eos, v) for v in valid)
            outcomes = [
                walk(engine, compiled, schema, tokenizer, eos, tilt, generator, args.max_steps, timings)
                for _ in range(args.walks)
            ]
            real.append({"schema": name, "compile_s": compile_s, "accepts_valid": accepts, "walks": outcomes})
            summary = {o: outcomes.count(o) for o in dict.fromkeys(outcomes)}
            print(
                f"  {name:32s} compile {compile_s * 1000:7.1f} ms  valid example accepted: {accepts}  walks: {summary}"
            )
        us = {k: (statistics.median(v) * 1e6, sorted(v)[int(0.95 * (len(v) - 1))] * 1e6) for k, v in timings.items()}
        total = [a + b + c for a, b, c in zip(timings["mask"], timings["apply"], timings["accept"])]
        print(
            f"  per token over {len(total)} steps (median / p95 us): mask {us['mask'][0]:.0f} / {us['mask'][1]:.0f}"
            f"  apply {us['apply'][0]:.0f} / {us['apply'][1]:.0f}  accept {us['accept'][0]:.0f} / "
            f"{us['accept'][1]:.0f}  total {statistics.median(total) * 1e6:.0f} / "
            f"{sorted(total)[int(0.95 * (len(total) - 1))] * 1e6:.0f}"
        )
        report["engines"][engine.name] = {
            "version": version,
            "setup_s": setup,
            "coverage": rows,
            "real": real,
            "per_token_us": us,
        }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
