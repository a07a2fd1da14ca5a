"""The OpenAI wire, split as vLLM splits its entrypoints: `protocol` (request parsing, content parts, the error
shape), `generation` (one generation behind a route: slot, stream, reasoning and tool calls), `chat`
(`POST /v1/chat/completions`), `responses` (`POST /v1/responses`), `completions` (the legacy
`POST /v1/completions`) and `decisions` (`POST /v1/decisions`). `GET /v1/models` is blink.api.catalog's: one body
for both wire families.
"""

from __future__ import annotations

from starlette.routing import Route

from blink.api.openai import chat, completions, decisions, responses
from blink.context import Context


def routes(ctx: Context) -> list[Route]:
    return chat.routes(ctx) + responses.routes(ctx) + completions.routes(ctx) + decisions.routes(ctx)
