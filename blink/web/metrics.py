"""The serving process's Prometheus metrics: one registry, the series it holds, and the calls that record them.

Recorded where the work is seen in this process: the endpoint (refusals, admission waits, end-to-end latency), the
decision service (decisions, questions and options by type, prompt tokens, prefix-cache hits), the chat service
(time to first token, tokens), the replicas (state, latency, retries) and the Space's GPU-duration accounting. On
the Space that is the main process: a ZeroGPU worker's results come back to it, so no multiprocess directory.
Gauges of what is held now (requests running and waiting) are read when scraped (`StateCollector`).

Names follow vLLM's where the meaning is the same (`vllm:num_requests_running`, `vllm:e2e_request_latency_seconds`,
...: what routers and dashboards read), `blink_` for the rest. No label takes a value a client sent: `model_name` is
the served name, the other labels come from fixed sets (question types, admission kinds, replica URLs as
configured, error statuses and reasons bounded by `MAX_REASONS`), so the series count is bounded whatever the public
sends.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

disable_created_metrics()  # no `_created` series beside each counter: vLLM's scrape has none either
REGISTRY = CollectorRegistry(auto_describe=True)
# the classic text format every Prometheus reads (2.x included); our names are valid in it, colons too
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

QUESTION_TYPES = ("noul", "choice", "score")
MAX_REASONS = 64  # distinct (status, reason) pairs kept; past them a new reason is counted as "other"
_REASON = re.compile(r"[a-z][a-z0-9_]{0,47}")

# seconds: a decision takes milliseconds on a warm GPU, a chat or a cold ZeroGPU call seconds to minutes
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640)
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)

# vLLM's names --------------------------------------------------------------------------------------------------
TTFT = Histogram(
    "vllm:time_to_first_token_seconds",
    "Histogram of time to first token in seconds (chat: from the request's arrival to its first text).",
    ["model_name"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
E2E = Histogram(
    "vllm:e2e_request_latency_seconds",
    "Histogram of end to end request latency in seconds (decisions and chats, arrival to the last byte sent).",
    ["model_name"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
PROMPT_TOKENS = Counter(
    "vllm:prompt_tokens",
    "Number of prefill tokens processed (decisions, chats and scored prompts).",
    ["model_name"],
    registry=REGISTRY,
)
GENERATION_TOKENS = Counter(
    "vllm:generation_tokens", "Number of generation tokens processed (chats).", ["model_name"], registry=REGISTRY
)
PREFIX_QUERIES = Counter(
    "vllm:prefix_cache_queries",
    "Prefix cache queries, in terms of number of queried tokens (decisions' and scored prompts' tokens).",
    ["model_name"],
    registry=REGISTRY,
)
PREFIX_HITS = Counter(
    "vllm:prefix_cache_hits",
    "Prefix cache hits, in terms of number of cached tokens (blink's prefix-state cache).",
    ["model_name"],
    registry=REGISTRY,
)

# blink's own ---------------------------------------------------------------------------------------------------
DECISIONS = Counter("blink_decisions", "Decisions answered.", ["model_name"], registry=REGISTRY)
QUESTIONS = Counter("blink_questions", "Questions answered, by type.", ["type"], registry=REGISTRY)
OPTIONS = Counter("blink_options", "Options of the questions answered, by type.", ["type"], registry=REGISTRY)
CHATS = Counter("blink_chats", "Chat generations ended, by finish reason.", ["finish_reason"], registry=REGISTRY)
REFUSALS = Counter(
    "blink_refusals",
    "Requests answered with an error, by HTTP status and machine-readable reason (5xx included).",
    ["status", "reason"],
    registry=REGISTRY,
)
ADMISSION_WAIT = Histogram(
    "blink_admission_wait_seconds",
    "Seconds a request waited for its place (decide, chat), admitted or refused.",
    ["kind"],
    buckets=WAIT_BUCKETS,
    registry=REGISTRY,
)
# the Batch API (blink.batch.worker): rows answered by outcome (completed: a 2xx; failed: the error file's), and
# what is left to do, set by the worker as it goes
BATCH_ROWS = Counter("blink_batch_rows", "Batch API rows answered, by outcome.", ["outcome"], registry=REGISTRY)
for _outcome in ("completed", "failed"):  # both series from the start, at 0: a rate needs its first sample
    BATCH_ROWS.labels(_outcome)
BATCH_QUEUED = Gauge("blink_batch_rows_queued", "Batch API rows not yet answered.", registry=REGISTRY)
BATCH_ACTIVE = Gauge("blink_batch_active", "Batch API batches not yet ended.", registry=REGISTRY)
REPLICA_LATENCY = Histogram(
    "blink_replica_latency_seconds",
    "Seconds a vLLM replica took on a call that succeeded (a read; a stream until its first bytes).",
    ["replica"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
REPLICA_CALLS = Counter(
    "blink_replica_calls",
    "Calls to a vLLM replica, by outcome: ok, down (unreachable, timed out, 429/502/503/504), failed (another "
    "5xx), request (the request's own fault, 4xx).",
    ["replica", "outcome"],
    registry=REGISTRY,
)
REPLICA_RETRIES = Counter(
    "blink_replica_retries", "Calls moved on to the next replica after one failed.", registry=REGISTRY
)
REPLICA_TRANSITIONS = Counter(
    "blink_replica_transitions",
    "Circuit-breaker transitions of a vLLM replica, by the state entered (closed, open, half_open).",
    ["replica", "state"],
    registry=REGISTRY,
)
GPU_REQUESTED = Counter(
    "blink_zerogpu_requested_seconds",
    "GPU seconds requested of ZeroGPU (the estimate each call asks for), by kind of call.",
    ["kind"],
    registry=REGISTRY,
)
GPU_CHARGED = Counter(
    "blink_zerogpu_charged_seconds",
    "GPU seconds of quota those requests are charged (after the card's factor), by kind of call.",
    ["kind"],
    registry=REGISTRY,
)
GPU_USED = Counter(
    "blink_zerogpu_used_seconds", "GPU seconds the calls used, by kind of call.", ["kind"], registry=REGISTRY
)

_reasons: set[tuple[str, str]] = set()
_reasons_lock = threading.Lock()


def prepare(model_name: str, kinds) -> None:
    """Every series of a fixed set at zero from the start, so a dashboard's rate() sees the first request."""
    for family in (TTFT, E2E, PROMPT_TOKENS, GENERATION_TOKENS, PREFIX_QUERIES, PREFIX_HITS, DECISIONS):
        family.labels(model_name)
    for kind in QUESTION_TYPES:
        QUESTIONS.labels(kind)
        OPTIONS.labels(kind)
    for reason in ("stop", "length", "tool_calls"):
        CHATS.labels(reason)
    for kind in kinds:
        ADMISSION_WAIT.labels(kind)


def refused(status: int, kind: str | None) -> None:
    """An error answer: its status and our reason (`BlinkError.kind`), the reason kept only if it is one of ours in
    shape and the set of reasons is not full."""
    key = (str(int(status)), kind if kind and _REASON.fullmatch(kind) else "other")
    with _reasons_lock:
        if key not in _reasons:
            if len(_reasons) >= MAX_REASONS:
                key = (key[0], "other")
            _reasons.add(key)
    REFUSALS.labels(*key).inc()


def decided(model_name: str, questions, input_tokens: int, cached_tokens: int) -> None:
    """A decision answered: its questions (`.type`, `.options`) and prompt tokens, those the cache spared."""
    DECISIONS.labels(model_name).inc()
    for q in questions:
        kind = q.type if q.type in QUESTION_TYPES else "other"
        QUESTIONS.labels(kind).inc()
        OPTIONS.labels(kind).inc(len(q.options))
    PROMPT_TOKENS.labels(model_name).inc(input_tokens)
    PREFIX_QUERIES.labels(model_name).inc(input_tokens)
    PREFIX_HITS.labels(model_name).inc(cached_tokens)


def scored(model_name: str, prompt_tokens: int, cached_tokens: int) -> None:
    """Prompts scored (echo, prompt_logprobs): their tokens, those a saved scoring prefix spared."""
    PROMPT_TOKENS.labels(model_name).inc(prompt_tokens)
    PREFIX_QUERIES.labels(model_name).inc(prompt_tokens)
    PREFIX_HITS.labels(model_name).inc(cached_tokens)


def chat_ended(model_name: str, finish_reason: str, prompt_tokens: int, completion_tokens: int) -> None:
    CHATS.labels(finish_reason if finish_reason in ("stop", "length", "tool_calls") else "other").inc()
    PROMPT_TOKENS.labels(model_name).inc(prompt_tokens)
    GENERATION_TOKENS.labels(model_name).inc(completion_tokens)


class StateCollector:
    """What is held now, read when scraped: requests running and waiting per admission gate (`admission()` returns
    blink.web.admission.Admission.state())."""

    def __init__(self, model_name: str, admission: Callable[[], dict]):
        self.model_name, self.admission = model_name, admission

    def collect(self):
        gates = self.admission()
        running = GaugeMetricFamily(
            "vllm:num_requests_running", "Number of requests holding a place (decide, chat).", labels=["model_name"]
        )
        waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting", "Number of requests waiting for a place.", labels=["model_name"]
        )
        running.add_metric([self.model_name], sum(sum(g["held"].values()) for g in gates.values()))
        waiting.add_metric([self.model_name], sum(sum(g["waiting"].values()) for g in gates.values()))
        held = GaugeMetricFamily("blink_admission_held", "Places held, by kind of work.", labels=["kind"])
        queued = GaugeMetricFamily("blink_admission_waiting", "Requests waiting for a place, by kind.", labels=["kind"])
        capacity = GaugeMetricFamily("blink_admission_capacity", "Places, by kind of work.", labels=["kind"])
        for kind, g in gates.items():
            held.add_metric([kind], sum(g["held"].values()))
            queued.add_metric([kind], sum(g["waiting"].values()))
            capacity.add_metric([kind], g["capacity"])
        yield from (running, waiting, held, queued, capacity)


class ReplicaCollector:
    """Each vLLM replica's state now (`rows()` returns blink.vllm.replicas.Replicas.states())."""

    def __init__(self, rows: Callable[[], list[dict]]):
        self.rows = rows

    def collect(self):
        state = GaugeMetricFamily(
            "blink_replica_state",
            "1 for the replica's circuit state now (closed, open, half_open).",
            labels=["replica", "state"],
        )
        in_flight = GaugeMetricFamily("blink_replica_in_flight", "Calls in flight to the replica.", labels=["replica"])
        for row in self.rows():
            for name in ("closed", "open", "half_open"):
                state.add_metric([row["url"], name], float(row["circuit"] == name))
            in_flight.add_metric([row["url"]], row["in_flight"])
        yield from (state, in_flight)


class _Union:
    def __init__(self, *registries):
        self.registries = registries

    def collect(self):
        for registry in self.registries:
            yield from registry.collect()


def exposition(*collectors) -> bytes:
    """The text a scrape gets: the process's series and what `collectors` read now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Union(REGISTRY))
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry)
