"""Gradio's page protocol, spoken as the browser speaks it: the UI's events are private (hidden from gradio_client,
@gradio/client and MCP), and the page calls them by their dependency id over the queue. Tests that drive the UI's
handlers directly use this; the browser test drives the page itself."""

from __future__ import annotations

import json
import uuid

import httpx


class PageValidationError(Exception):
    """Gradio's validator refused the event (422): the messages shown next to their boxes."""


def dependency(url: str, api_name: str, cookies=None) -> dict:
    config = httpx.get(url + "/config", timeout=30, cookies=cookies).json()
    return next(d for d in config["dependencies"] if d.get("api_name") == api_name)


def page_call(url: str, api_name: str, *data, timeout: float = 120, cookies=None):
    """The final output values of the UI event named `api_name`, called with `data` as the page calls it
    (`cookies`: a logged-in page's, from Gradio's POST /login)."""
    dep = dependency(url, api_name, cookies)
    session = uuid.uuid4().hex
    target = dep["targets"][0][0] if dep["targets"] else None
    joined = httpx.post(
        url + "/gradio_api/queue/join",
        timeout=30,
        cookies=cookies,
        json={
            "data": list(data),
            "event_data": None,
            "fn_index": dep["id"],
            "trigger_id": target,
            "session_hash": session,
        },
    )
    if joined.status_code == 422:
        detail = joined.json().get("detail", [])
        raise PageValidationError(" | ".join(d.get("message", "") for d in detail if d.get("is_valid") is False))
    joined.raise_for_status()
    with httpx.stream(
        "GET", url + "/gradio_api/queue/data", params={"session_hash": session}, timeout=timeout, cookies=cookies
    ) as events:
        for line in events.iter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            if event.get("msg") == "process_completed":
                if not event.get("success"):
                    raise RuntimeError(f"{api_name} failed: {event.get('output')}")
                return event["output"]["data"]
    raise RuntimeError(f"{api_name}: the queue closed without an answer")


def values_only(outputs: list) -> list:
    """An event's outputs without its layout updates (a group shown or hidden): the values a form holds."""
    return [v for v in outputs if not (isinstance(v, dict) and v.get("__type__") == "update")]
