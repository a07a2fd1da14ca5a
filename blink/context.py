"""What every route needs: the decision and chat services (over one backend, blink.backend), the key, the limits,
the served names, the bodies' budget, the admission gates and the health figures. Built once by the standalone
server or the Space, handed to the routers."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from blink.decide.service import DecisionService
from blink.generate.service import ChatService
from blink.limits import Limits
from blink.moderation_policy import Policy, load_policy
from blink.settings import RERANK_QUESTION
from blink.web.admission import Admission
from blink.web.auth import ApiKey
from blink.web.bodies import BodyBudget
from blink.web.callers import Caller, Peers


@dataclass
class Context:
    service: DecisionService
    chats: ChatService
    served_name: str
    auth: ApiKey = field(default_factory=ApiKey)
    limits: Limits = field(default_factory=Limits)
    aliases: tuple[str, ...] = ()
    description: str = "blink: typed decisions (noul, choice, score) with option probabilities from one forward pass."
    release_date: str = "2026-10-01"
    health: dict = field(default_factory=dict)
    # who a request is from (blink.web.callers.Caller), for every entry point (routes, MCP, Gradio's `decide`, the UI):
    # its key is the caller's fair share of admission and batches; its quota is passed explicitly to the decision
    # service and chat (the Space: the ZeroGPU identity). `serve`: the peer address, behind trusted proxies theirs
    caller_of: Callable[[Any], Caller] = field(default_factory=lambda: Peers().caller_of)
    # one gate per kind of model work (decide, chat), entered by every surface before any work: the API's
    # routes, the Space's UI, MCP; chat's gate holds the generation slots
    admission: Admission = field(default_factory=Admission.standard)
    # the bytes of request bodies being received or parsed at once, before any admission
    body_budget: BodyBudget = field(default_factory=BodyBudget)
    # extra health figures computed on request (e.g. the Space's GPU-duration accounting)
    live_health: list[Callable[[], dict]] = field(default_factory=list)
    created: int = field(default_factory=lambda: int(time.time()))
    # /v1/moderations' categories (blink.moderation_policy), checked at start-up
    moderation: Policy = field(default_factory=lambda: load_policy(None))
    # the yes/no question rerank and score ask of each document, `{query}` standing for the query (blink.settings)
    rerank_question: str = RERANK_QUESTION

    @contextlib.asynccontextmanager
    async def admitted_decisions(self, check: Callable, body, caller_class: str, units: Any = 1, caller=None):
        """The decide steps of an entry point without an Endpoint (MCP, Gradio's `decide`, the UI's views), as the
        routes take them: counted on its way to the batcher from here (its check's thread hop included),
        `check(body, on_its_way)` in a worker thread, then `units` places of the decide gate in `caller`'s share.
        Yields (checked, ticket); the count is let go if the request never reaches the queue (refused, failed, its
        client gone)."""
        on_its_way = self.service.on_its_way()
        admit = self.admission.admit
        try:
            async with admit("decide", caller_class, check, body, on_its_way, units=units, caller=caller) as admitted:
                yield admitted
        finally:
            on_its_way.release()

    @property
    def planner(self):
        return self.service.planner

    def model_names(self) -> list[str]:
        """The names this server answers to: the served name, then its aliases (`/v1/models` lists them)."""
        return [self.served_name, *[a for a in self.aliases if a != self.served_name]]

    def current_health(self) -> dict:
        stats = self.service.batcher.stats()
        out = {
            **self.health,
            "ok": bool(self.health.get("ok", True)) and stats["worker_alive"],
            "batching": stats,
            "chat_slots": self.chat_slots(),
            "admission": self.admission.state(),
            "bodies_in_flight": self.body_budget.state(),
            "api_key_required": self.auth.required,
        }
        for extra in self.live_health:
            part = extra()
            out.update(part)
            # a part that says it is not ok (every vLLM replica down) makes the whole server not ok
            out["ok"] = out["ok"] and all(v.get("ok", True) for v in part.values() if isinstance(v, dict))
        return out

    def chat_slots(self) -> dict:
        chat = self.admission.gate("chat")
        with chat.lock:
            return {"max_concurrent": chat.policy.capacity, "running": sum(chat.held.values())}
