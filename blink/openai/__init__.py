"""The OpenAI wire, split as vLLM splits its entrypoints: `protocol` (request parsing, content parts, the error
shape), `chat` (`POST /v1/chat/completions`, streamed and not) and `decisions` (`POST /v1/decisions`).
`GET /v1/models` is blink.catalog's: one body for both wire families.
"""

from __future__ import annotations

from starlette.routing import Route

from ..context import Context
from . import chat, decisions


def routes(ctx: Context) -> list[Route]:
    return chat.routes(ctx) + decisions.routes(ctx)
