"""bench/labels/grammar.py's schemas: the feature schemas (each with valid and invalid instances, for coverage) and
the real-world ones (pydantic, zod, OpenAI's examples, for compile time and random walks). Data only, apart from
the engines and the measurements that use them."""

from __future__ import annotations


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
