"""The tasks a server serves (blink.tasks.served): `GET /v1/tasks` lists them, `GET /v1/tasks/{name}` shows one whole —
its questions, what was fitted, the certificate, the report it came from, and its drift monitor now — in OpenAI's
list and error shapes.

A task and its report are read only behind the API key: on a server without one these paths answer a 404 that says
so (its report names the rows a team labelled, by number; its monitor, what its traffic has been).
"""

from __future__ import annotations

from starlette.routing import Route

from blink.api.openai import protocol
from blink.context import Context
from blink.errors import NoRoute
from blink.tasks.served import unknown_task
from blink.web.endpoint import Call, Endpoint


def summary(book, name: str) -> dict:
    task = book.tasks[name]
    monitors = book.monitors[name]
    return {
        "object": "task",
        "name": name,
        "version": task["version"],
        "questions": list(task["questions"]),
        "certified": {qid: f["certificate"].get("threshold") for qid, f in task["fitted"].items()},
        "drifting": {qid: m.drifting for qid, m in monitors.items()},
    }


def routes(ctx: Context) -> list[Route]:
    book = ctx.service.tasks

    def served():
        if not ctx.auth.required:
            raise NoRoute(
                "tasks are shown only behind an API key (their reports name labelled rows): start `python -m blink "
                "serve` with --api-key (or BLINK_API_KEY) (docs/tasks.md)",
                kind="tasks_need_a_key",
            )
        return book

    async def listing(call: Call) -> dict:
        tasks = served()
        names = sorted(tasks.tasks) if tasks is not None else []
        return {"object": "list", "data": [summary(tasks, name) for name in names]}

    async def one(call: Call) -> dict:
        tasks, name = served(), call.request.path_params["name"]
        if tasks is None or name not in tasks.tasks:
            raise unknown_task(name, tasks.tasks if tasks is not None else ())
        return {"object": "task", **tasks.state(name)}

    return [
        Route("/v1/tasks", Endpoint(ctx, protocol.WIRE, listing), methods=["GET"]),
        Route("/v1/tasks/{name}", Endpoint(ctx, protocol.WIRE, one), methods=["GET"]),
    ]
