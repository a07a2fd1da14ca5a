"""An OpenAPI 3.1 description of blink's /v1 routes, written by hand, for the tests only (it is no part of the
runtime package: the Spaces copy blink/ and serve no schema).

The routes read their own bodies (see blink/web/endpoint.py), so FastAPI cannot generate a schema for them, and the
app serves none (`openapi_url=None`). This one describes the request bodies the wires accept and the error
bodies they answer with; schemathesis fuzzes the live server from it (ci/tests/test_fuzz.py). It is deliberately
loose where the wires are (TypeSafe's criteria, OpenAI's content parts): the server, not the schema, is what
refuses bad input, and the fuzzing asserts that it does so with a 4xx in its own shape.
"""

from __future__ import annotations

TEXT = {"type": "string", "maxLength": 2000}
SYSTEMONE_ERROR = {
    "type": "object",
    "required": ["error", "detail"],
    "properties": {"error": {"type": "string"}, "detail": {}},
}
OPENAI_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {"message": {"type": "string"}, "type": {"type": "string"}, "param": {}, "code": {}},
        }
    },
}

SYSTEMONE_QUESTION = {
    "type": "object",
    "required": ["type"],
    "properties": {
        "type": {"type": "string", "enum": ["noul", "choice", "score"]},
        "instructions": TEXT,
        "criteria": {
            "oneOf": [
                {
                    "type": "object",
                    "maxProperties": 6,
                    "additionalProperties": {"type": ["string", "null"], "maxLength": 200},
                },
                {"type": "array", "maxItems": 6, "items": {"type": "string", "maxLength": 200}},
            ]
        },
    },
}

DECISION_QUESTION = {
    "type": "object",
    "required": ["type", "instructions"],
    "properties": {
        "type": {"type": "string", "enum": ["predicate", "choice", "score"]},
        "name": {"type": "string", "maxLength": 40},
        "instructions": TEXT,
        "choices": {
            "type": "array",
            "maxItems": 5,
            "items": {
                "type": "object",
                "required": ["value"],
                "properties": {
                    "value": {"type": "string", "maxLength": 40},
                    "description": {"type": "string", "maxLength": 200},
                },
            },
        },
        "levels": {
            "type": "array",
            "maxItems": 5,
            "items": {
                "type": "object",
                "required": ["label"],
                "properties": {
                    "label": {"type": "string", "maxLength": 40},
                    "description": {"type": "string", "maxLength": 200},
                },
            },
        },
    },
}

MESSAGE = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"type": "string", "enum": ["system", "user", "assistant"]},
        "content": {
            "oneOf": [
                TEXT,
                {
                    "type": "array",
                    "maxItems": 3,
                    "items": {
                        "type": "object",
                        "required": ["type", "text"],
                        "properties": {"type": {"const": "text"}, "text": TEXT},
                    },
                },
            ]
        },
    },
}


def _json(schema: dict) -> dict:
    return {"content": {"application/json": {"schema": schema}}}


def _post(summary: str, body: dict, ok: dict, error: dict) -> dict:
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, **_json(body)},
            "responses": {
                "200": {"description": "answered", **_json(ok)},
                "4XX": {"description": "refused: the wire's own error body", **_json(error)},
                "529": {"description": "overloaded: retry after Retry-After", **_json(error)},
            },
        }
    }


def schema() -> dict:
    systemone = {
        "type": "object",
        "required": ["state", "questions"],
        "properties": {
            "state": {"oneOf": [TEXT, {"type": "object", "maxProperties": 5, "additionalProperties": TEXT}]},
            "questions": {
                "type": "object",
                "minProperties": 1,
                "maxProperties": 4,
                "additionalProperties": SYSTEMONE_QUESTION,
            },
            "model": {"type": "string", "maxLength": 40},
        },
    }
    decisions = {
        "type": "object",
        "required": ["model", "input", "questions"],
        "properties": {
            "model": {"type": "string", "maxLength": 40},
            "input": {"oneOf": [TEXT, {"type": "array", "maxItems": 3, "items": MESSAGE}]},
            "questions": {"type": "array", "minItems": 1, "maxItems": 4, "items": DECISION_QUESTION},
        },
    }
    chat = {
        "type": "object",
        "required": ["model", "messages", "max_tokens"],
        "properties": {
            "model": {"type": "string", "maxLength": 40},
            "messages": {"type": "array", "minItems": 1, "maxItems": 4, "items": MESSAGE},
            # kept small: the fuzzer explores the wire, not the generation time
            "max_tokens": {"type": "integer", "minimum": 1, "maximum": 4},
            "temperature": {"type": "number", "minimum": 0, "maximum": 2},
            "top_p": {"type": "number", "minimum": 0, "maximum": 1},
            "stream": {"type": "boolean"},
            "seed": {"type": "integer", "minimum": 0, "maximum": 2**31},
            "stop": {
                "oneOf": [
                    {"type": "string", "maxLength": 10},
                    {"type": "array", "maxItems": 2, "items": {"type": "string", "maxLength": 10}},
                ]
            },
        },
    }
    models = {
        "get": {
            "summary": "served models",
            "responses": {
                "200": {
                    "description": "the models",
                    **_json({"type": "object", "required": ["data"], "properties": {"data": {"type": "array"}}}),
                }
            },
        }
    }
    health = {
        "get": {
            "summary": "health",
            "responses": {
                "200": {
                    "description": "healthy",
                    **_json({"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}),
                }
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "blink", "version": "1"},
        "paths": {
            "/v1/systemone": _post(
                "TypeSafe System One decision",
                systemone,
                {"type": "object", "required": ["model", "answers", "usage"]},
                SYSTEMONE_ERROR,
            ),
            "/v1/decisions": _post(
                "OpenAI-style decision",
                decisions,
                {"type": "object", "required": ["object", "answers", "usage"]},
                OPENAI_ERROR,
            ),
            "/v1/chat/completions": _post("chat completion", chat, {"type": "object"}, OPENAI_ERROR),
            "/v1/models": models,
            "/healthz": health,
        },
    }
