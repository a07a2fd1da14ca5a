"""OpenAI's Batch API: `POST /v1/batches`, `GET /v1/batches/{id}`, `GET /v1/batches?after=&limit=`,
`POST /v1/batches/{id}/cancel`, in OpenAI's shapes (the `batch` object, its statuses and `request_counts`, a list
page, the `error` object), so the openai SDK's `batches.create / retrieve / list / cancel` work unchanged.

A batch reads a file uploaded with `purpose: "batch"` (blink.api.files) whose every line's `url` is the batch's
`endpoint`: any POST route run-batch takes (`/v1/decisions`, `/v1/systemone`, rerank, score, moderations,
completions, chat, responses, tokenize). The work is the server's blink.batch.jobs.Jobs (a SQLite store under
`data_dir`, a worker in this process); these routes only read and write its records.

The routes are on only with an API key and a data dir: the files a caller uploads are kept on the server, and an
open server would hand each caller's files and answers to every other (one key is one tenant). Off, every path under
/v1/files and /v1/batches answers a 404 that says so and how to turn them on (`off_routes`).
"""

from __future__ import annotations

import asyncio

from starlette.routing import Route

from blink.api import files
from blink.api.openai import protocol
from blink.context import Context
from blink.errors import InvalidRequest, NoRoute
from blink.web.endpoint import Body, Call, Endpoint

FIELDS = ("input_file_id", "endpoint", "completion_window", "metadata")
MAX_LIST = 100  # OpenAI's largest `limit` for batches
# OpenAI's bounds on `metadata`
MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512


def bad(message: str, *loc, kind: str = "invalid_value") -> InvalidRequest:
    return InvalidRequest(message, loc=["body", *loc], kind=kind)


def check_create(body) -> dict:
    """The create body, checked whole before any record is written."""
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object: {input_file_id, endpoint, completion_window}")
    for name in body:
        if name not in FIELDS:
            raise bad(f"`{name}` is not supported here; a batch takes {', '.join(FIELDS)}", name, kind="unsupported")
    for name in ("input_file_id", "endpoint"):
        if not isinstance(body.get(name), str) or not body[name]:
            raise bad(f"`{name}` is required (a string)", name, kind="missing")
    if body.get("completion_window") != "24h":
        raise bad('`completion_window` must be "24h" (the only window there is)', "completion_window")
    return {"input_file_id": body["input_file_id"], "endpoint": body["endpoint"], "metadata": metadata(body)}


def metadata(body: dict) -> dict | None:
    value = body.get("metadata")
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > MAX_METADATA_PAIRS:
        raise bad(f"`metadata` must be an object of at most {MAX_METADATA_PAIRS} string pairs", "metadata")
    for key, item in value.items():
        if len(key) > MAX_METADATA_KEY or not isinstance(item, str) or len(item) > MAX_METADATA_VALUE:
            raise bad(
                f"`metadata` keys are at most {MAX_METADATA_KEY} characters and values strings of at most "
                f"{MAX_METADATA_VALUE}",
                "metadata",
                key,
            )
    return value


def routes(ctx: Context, jobs) -> list[Route]:
    async def create(call: Call) -> dict:
        return await asyncio.to_thread(jobs.create, **call.checked)

    async def retrieve(call: Call) -> dict:
        files.query(call, ())
        return await asyncio.to_thread(jobs.batch, call.request.path_params["batch_id"])

    async def listing(call: Call) -> dict:
        params = files.query(call, ("after", "limit"))
        limit = files.limit_of(params, 20, MAX_LIST)
        return files.page(*await asyncio.to_thread(jobs.store.batches, params.get("after"), limit))

    async def cancel(call: Call) -> dict:
        files.query(call, ())
        return await asyncio.to_thread(jobs.cancel, call.request.path_params["batch_id"])

    created = Endpoint(ctx, protocol.WIRE, create, body=Body("batches"), check=lambda call: check_create(call.body))
    return [
        Route("/v1/batches", created, methods=["POST"]),
        Route("/v1/batches", Endpoint(ctx, protocol.WIRE, listing), methods=["GET"]),
        Route("/v1/batches/{batch_id}", Endpoint(ctx, protocol.WIRE, retrieve), methods=["GET"]),
        Route("/v1/batches/{batch_id}/cancel", Endpoint(ctx, protocol.WIRE, cancel), methods=["POST"]),
    ]


def off_message(key_set: bool) -> str:
    missing = "a data dir" if key_set else "an API key and a data dir"
    return (
        "the Batch API (/v1/files, /v1/batches) is off on this server: it keeps the files callers upload, so it runs "
        "only behind an API key (one key is one tenant; an open server would hand every caller's uploads and answers "
        f"to every other). This server has no {missing}: start `python -m blink serve` with --api-key (or "
        "BLINK_API_KEY) and --data-dir DIR (or BLINK_DATA_DIR) to turn it on (docs/batch.md)."
    )


def off_routes(ctx: Context) -> list[Route]:
    """Every path under /v1/files and /v1/batches while the Batch API is off: a 404 that says why and how to turn
    it on, before the API key (there is nothing behind it to protect)."""

    async def off(call: Call):
        raise NoRoute(off_message(ctx.auth.required), kind="batch_api_off")

    endpoint = Endpoint(ctx, protocol.WIRE, off, auth=False)
    methods = ["GET", "POST", "DELETE"]
    return [Route(f"/v1/{name}{{rest:path}}", endpoint, methods=methods) for name in ("files", "batches")]
