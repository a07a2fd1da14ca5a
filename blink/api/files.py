"""OpenAI's Files API, as the Batch API needs it: `POST /v1/files` (multipart: `file`, `purpose: "batch"`),
`GET /v1/files`, `GET /v1/files/{id}`, `GET /v1/files/{id}/content`, `DELETE /v1/files/{id}`; OpenAI's `file`
object and error shape, so the openai SDK's `files.create / list / retrieve / content / delete` work unchanged.

An upload is streamed to disk under `data_dir` (blink.web.uploads), capped by `max_upload_bytes` (413 past it), not
by the request-body caps, and counted against `data_quota_bytes` (400 past it) as it arrives. Batches write their
output and error files here too (`purpose: "batch_output"`). `jobs` is the server's blink.batch.jobs.Jobs, or None
when the Batch API is off (blink.api.batches.off_routes says why).
"""

from __future__ import annotations

import asyncio
import secrets

from starlette.requests import ClientDisconnect
from starlette.responses import FileResponse
from starlette.routing import Route

from blink.api.openai import protocol
from blink.context import Context
from blink.errors import InvalidRequest
from blink.web import uploads
from blink.web.endpoint import Call, Endpoint

PURPOSES = ("batch",)  # what may be uploaded here; "batch_output" is written by batches, never uploaded
MAX_LIST = 10000  # OpenAI's largest `limit` for files


def query(call: Call, allowed: tuple[str, ...]) -> dict:
    """The query's parameters, each once and each one the route reads (another is a 400 naming it)."""
    params = call.request.query_params
    for name in params:
        if name not in allowed:
            raise InvalidRequest(
                f"unknown query parameter {name!r}; this route reads {', '.join(allowed)}", loc=["query", name]
            )
        if len(params.getlist(name)) > 1:
            raise InvalidRequest(f"query parameter {name!r} is given more than once", loc=["query", name])
    return dict(params)


def limit_of(params: dict, default: int, most: int) -> int:
    raw = params.get("limit", str(default))
    if not raw.isdigit() or not 1 <= int(raw) <= most:
        raise InvalidRequest(f"`limit` must be a whole number from 1 to {most}, got {raw!r}", loc=["query", "limit"])
    return int(raw)


def page(items: list, more: bool) -> dict:
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": more,
    }


class Quota:
    """The bytes an upload takes, counted against the store's quota as they arrive (and given back at its end)."""

    def __init__(self, store):
        self.store, self.taken = store, 0

    def __call__(self, n: int) -> None:
        if self.store.used_bytes() + n > self.store.quota_bytes:
            raise InvalidRequest(
                f"this server's Batch API storage is full (data_quota_bytes: {self.store.quota_bytes} bytes): "
                "delete files you no longer need (DELETE /v1/files/{id}) or wait for them to expire",
                loc=["body", "file"],
                kind="storage_quota_exceeded",
            )
        self.store.reserved += n
        self.taken += n

    def release(self) -> None:
        self.store.reserved -= self.taken
        self.taken = 0


def routes(ctx: Context, jobs) -> list[Route]:
    store = jobs.store

    async def upload(call: Call) -> dict:
        file_id = "file-" + secrets.token_hex(12)
        tmp = store.path(file_id).with_name(file_id + ".upload")
        quota = Quota(store)
        try:
            got = await uploads.receive(call.request, tmp, ("purpose",), jobs.settings.max_upload_bytes, quota)
            purpose = got.fields.get("purpose")
            if purpose not in PURPOSES:
                raise InvalidRequest(
                    f'`purpose` must be "batch" here (this server keeps files for its Batch API), got {purpose!r}',
                    loc=["body", "purpose"],
                    kind="invalid_purpose",
                )
            if got.filename is None:
                raise InvalidRequest("the form has no `file` part", loc=["body", "file"], kind="missing")
            await asyncio.to_thread(tmp.replace, store.path(file_id))
            return await asyncio.to_thread(store.add_file, file_id, got.filename, purpose, got.bytes)
        except ClientDisconnect:
            raise InvalidRequest("the upload ended before the form did", loc=["body", "file"]) from None
        finally:
            quota.release()
            tmp.unlink(missing_ok=True)

    async def listing(call: Call) -> dict:
        params = query(call, ("purpose", "after", "limit", "order"))
        order = params.get("order", "desc")
        if order not in ("asc", "desc"):
            raise InvalidRequest(f"`order` must be asc or desc, got {order!r}", loc=["query", "order"])
        limit = limit_of(params, MAX_LIST, MAX_LIST)
        found = store.files, params.get("purpose"), params.get("after"), limit, order == "desc"
        return page(*await asyncio.to_thread(*found))

    async def retrieve(call: Call) -> dict:
        query(call, ())
        return await asyncio.to_thread(jobs.file, call.request.path_params["file_id"])

    async def content(call: Call) -> FileResponse:
        query(call, ())
        found = await asyncio.to_thread(jobs.file, call.request.path_params["file_id"])
        headers = {"Cache-Control": "no-store"}
        return FileResponse(store.path(found["id"]), media_type="application/jsonl", headers=headers)

    async def delete(call: Call) -> dict:
        query(call, ())
        return await asyncio.to_thread(jobs.delete_file, call.request.path_params["file_id"])

    def endpoint(handler) -> Endpoint:
        return Endpoint(ctx, protocol.WIRE, handler)

    return [
        Route("/v1/files", endpoint(upload), methods=["POST"]),
        Route("/v1/files", endpoint(listing), methods=["GET"]),
        Route("/v1/files/{file_id}", endpoint(retrieve), methods=["GET"]),
        Route("/v1/files/{file_id}", endpoint(delete), methods=["DELETE"]),
        Route("/v1/files/{file_id}/content", endpoint(content), methods=["GET"]),
    ]
