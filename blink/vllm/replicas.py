"""vLLM replicas behind one blink: prefix-affinity routing, a load-aware fallback, retries and health.

The order in which replicas are tried for a request comes from `affinity` (where its prefix was last served,
else rendezvous hashing of its head). Load is bounded the way "consistent hashing with bounded loads" (Mirrokni et
al., 2018) bounds it: a replica takes a new request only while its requests in flight (ours) stay under
(1 + spill) times the average over the replicas that are up, and under `max_in_flight`. A busy preferred replica
thus spills to the next one in the request's order, the same for every request of that prefix, so a spilled
state warms one more cache, not all of them.

Each call's timeout follows what it should take, not a fixed bound: the prompt tokens it sends times the slowest
measured speed of the replicas (an average of seconds per prompt token over their recent answers; before any is
measured, `assumed_s_per_token`, a conservative speed), times `timeout_factor`, plus `min_timeout_s`, never more
than `timeout_s`. A hung replica thus holds only the requests sent to it, for about that long, from the first
request on; they time out and are retried on the next replica of their order, and it is marked down.

Each replica has a circuit breaker (`circuit`): a replica that can't be reached or times out is opened at once,
one whose real requests fail otherwise (any 5xx, 429) after `failure_threshold` in a row, and the request moves on
to the next one. A background check per replica (every `health_interval_s`) asks its `/health`: refused, it opens
the circuit at once, slow or not 200 it counts as a failure; an open one whose open time is over and whose `/health`
answers is sent one trial request (half-open), and only that trial's success, or a real request's, closes it.
`/healthz` and `/metrics` read the states, asking no replica. When none can take a request it is answered
`Overloaded` (529 with Retry-After). A 400 is the request's own fault: it is never retried.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import httpx

from blink.errors import BlinkError, EngineFailure, InvalidRequest, Overloaded
from blink.vllm.affinity import PrefixTable, Route, rendezvous
from blink.vllm.circuit import CLOSED, Circuit
from blink.web import metrics

T = TypeVar("T")
log = logging.getLogger("blink")
TRIAL = {"prompt": [0], "max_tokens": 1}  # the half-open trial: one token of one token, the cheapest real request

DOWN_STATUSES = {429, 502, 503, 504}  # the replica, not the request: another replica may answer


class ReplicaDown(Exception):
    """This replica can't serve now (unreachable, timed out, restarting, saturated by others)."""


class ReplicaRefused(Exception):
    """This replica failed on this request (a 5xx other than the ones above): worth one try elsewhere."""


@dataclass
class Replica:
    url: str
    circuit: Circuit
    in_flight: int = 0
    served: int = 0
    last_error: str | None = None
    model: str | None = None  # the served model name, from /v1/models
    max_model_len: int | None = None
    seconds_per_token: float | None = None  # running mean over its answers; None: not measured yet
    timeouts: int = 0

    def is_up(self) -> bool:
        return self.circuit.state == CLOSED


def check(response: httpx.Response) -> dict:
    """The JSON body of a vLLM answer, or the exception that says whose fault a failure is."""
    if response.status_code == 200:
        return response.json()
    message = response.text[:500]
    try:
        message = response.json().get("error", {}).get("message") or message
    except ValueError:
        pass
    if response.status_code in DOWN_STATUSES:
        raise ReplicaDown(f"HTTP {response.status_code}: {message}")
    if 400 <= response.status_code < 500:
        raise InvalidRequest(f"the model server refused this request: {message}", kind="engine_refused")
    raise ReplicaRefused(f"HTTP {response.status_code}: {message}")


def finish_reason(choice: dict) -> str | None:
    """How vLLM says a completion's choice ended: None while it streams, "stop" or "length" once it finished. A
    choice the replica aborted (it is shutting down or paused) raises `ReplicaDown`, any other end `ReplicaRefused`:
    its tokens are not the model's whole answer, so they must never pass for one."""
    reason = choice.get("finish_reason")
    if reason in (None, "stop", "length"):
        return reason
    if reason == "abort":
        raise ReplicaDown("the model server aborted the request (it is shutting down or paused)")
    raise ReplicaRefused(f"the model server ended the request with finish_reason {reason!r}")


class Replicas:
    """The replicas one blink routes to. Thread-safe: the scorer and chat call it from many threads."""

    def __init__(
        self,
        urls: list[str],
        *,
        max_in_flight: int = 64,
        spill: float = 0.25,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        timeout_s: float = 300.0,
        min_timeout_s: float = 5.0,
        timeout_factor: float = 4.0,
        assumed_s_per_token: float = 0.01,
        failure_threshold: int = 3,
        health_interval_s: float = 2.0,
        api_key: str | None = None,
        table: PrefixTable | None = None,
    ):
        """`health_interval_s`: seconds between the background checks of each replica (0: none)."""
        if not urls:
            raise ValueError("the vllm engine needs at least one replica URL")
        self.replicas = [Replica(url.rstrip("/"), Circuit(failure_threshold, backoff_s, max_backoff_s)) for url in urls]
        self.max_in_flight = max_in_flight
        self.spill = spill
        self.table = table or PrefixTable()
        self.max_timeout_s, self.min_timeout_s, self.timeout_factor = (
            timeout_s,
            min(min_timeout_s, timeout_s),
            timeout_factor,
        )
        self.assumed_s_per_token = assumed_s_per_token  # until a replica is measured
        self.lock = threading.Lock()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=5.0),
            headers=headers,
            limits=httpx.Limits(max_connections=max_in_flight * len(urls)),
        )
        self.stopped = threading.Event()
        if health_interval_s > 0:
            for replica in self.replicas:
                threading.Thread(
                    target=self._watch, args=(replica, health_interval_s), name="replica-health", daemon=True
                ).start()

    # routing ------------------------------------------------------------------------------------------------
    def _capacity(self, up: list[Replica]) -> int:
        average = (sum(r.in_flight for r in up) + 1) / max(1, len(up))
        return min(self.max_in_flight, max(1, math.ceil((1 + self.spill) * average)))

    def order(self, route: Route) -> list[Replica]:
        """The replicas in the order a request on `route` tries them (before load and health)."""
        by_url = {r.url: r for r in self.replicas}
        urls = rendezvous(route.key, list(by_url))
        if (preferred := self.table.lookup(route)) in by_url:
            urls.remove(preferred)
            urls.insert(0, preferred)
        return [by_url[url] for url in urls]

    def _take(self, route: Route, tried: set[str]) -> Replica | None:
        """The replica the next try goes to (its in-flight count taken), or None when none can take it."""
        order = [r for r in self.order(route) if r.url not in tried]
        with self.lock:
            up = [r for r in self.replicas if r.is_up()]
            capacity = self._capacity(up)
            chosen = next((r for r in order if r.is_up() and r.in_flight < capacity), None)
            if chosen is None and not up:
                # every circuit is open: try them anyway (a restarted cluster must not wait it out)
                chosen = next((r for r in order if r.in_flight < self.max_in_flight), None)
            if chosen is not None:
                chosen.in_flight += 1
            return chosen

    def _record(self, replica: Replica, error: Exception | None, failed: bool) -> None:
        """Note an outcome (the caller holds the lock): a success closes the circuit, a `failed` call counts against
        it (unreachable or timed out: opens it at once)."""
        if error is None:
            self._entered(replica, replica.circuit.succeeded())
            return
        replica.last_error = f"{type(error).__name__}: {error}"[:300]
        if failed:
            self._entered(replica, replica.circuit.failed(at_once=isinstance(error, httpx.TransportError)))

    def _entered(self, replica: Replica, state: str | None) -> None:
        if state is not None:
            metrics.REPLICA_TRANSITIONS.labels(replica.url, state).inc()
            log.warning("vllm replica %s: circuit %s (%s)", replica.url, state, replica.last_error or "ok")

    def timeout_for(self, tokens: int) -> float:
        """Seconds a call sending `tokens` prompt tokens may take before it is given up on this replica."""
        with self.lock:
            measured = [r.seconds_per_token for r in self.replicas if r.seconds_per_token is not None]
        # the slowest measured replica, or before any is measured the assumed (conservative) speed
        expected = max(1, tokens) * (max(measured) if measured else self.assumed_s_per_token)
        return min(self.max_timeout_s, self.min_timeout_s + self.timeout_factor * expected)

    def _measure(self, replica: Replica, tokens: int, seconds: float) -> None:
        rate = seconds / max(1, tokens)
        with self.lock:
            old = replica.seconds_per_token
            replica.seconds_per_token = rate if old is None else old + (rate - old) * 0.2

    def _release(self, replica: Replica, error: Exception | None, failed: bool = False) -> None:
        with self.lock:
            replica.in_flight -= 1
            replica.timeouts += isinstance(error, httpx.TimeoutException)
            replica.served += error is None
            self._record(replica, error, failed)

    def call(self, route: Route, work: Callable[[Replica], T], *, hold: bool = False) -> T:
        """`work(replica)` on the route's first replica, retried on the next ones while replicas fail. With `hold`, the
        replica stays counted in flight after `work` returns and the result is (replica, result): the caller
        ends it with `finish` (a stream that is still being read)."""
        tried: set[str] = set()
        refused: str | None = None
        while (replica := self._take(route, tried)) is not None:
            if tried:
                metrics.REPLICA_RETRIES.inc()
            tried.add(replica.url)
            try:
                result = work(replica)
            except (httpx.TransportError, ReplicaDown) as error:
                metrics.REPLICA_CALLS.labels(replica.url, "down").inc()
                self._release(replica, error, failed=True)
            except ReplicaRefused as error:
                metrics.REPLICA_CALLS.labels(replica.url, "failed").inc()
                self._release(replica, error, failed=True)
                refused = str(error)
            except BlinkError:
                metrics.REPLICA_CALLS.labels(replica.url, "request").inc()
                self._release(replica, None)  # the request's fault: the replica answered fine
                raise
            except BaseException as error:
                self._release(replica, error if isinstance(error, Exception) else None)
                raise
            else:
                metrics.REPLICA_CALLS.labels(replica.url, "ok").inc()
                self.table.remember(route, replica.url)
                if hold:
                    return replica, result
                self._release(replica, None)
                return result
        # a failure only when every replica failed it; one that was busy or down may take it later (a replica dying
        # under a batch answers 500 for what it held: the rows are sent again, never written as failures)
        if refused is not None and len(tried) == len(self.replicas):
            raise EngineFailure(f"every model server failed on this request: {refused}")
        raise Overloaded("every model server is busy or unreachable. Retry after a short delay.")

    def start_stream(self, route: Route, body: dict, path: str = "/v1/completions"):
        """An open streaming response from the route's replica, retried elsewhere until one starts streaming.
        Returns (replica, response); the caller reads it, then calls `finish(replica, response, error)`."""

        def start(replica: Replica) -> httpx.Response:
            # the first token after the prompt's prefill, then each next one, within the call's expected time
            timeout = httpx.Timeout(self.timeout_for(_tokens(body)), connect=5.0)
            request = self.client.build_request(
                "POST", replica.url + path, json=self.with_model(replica, body), timeout=timeout
            )
            started = time.monotonic()
            response = self.client.send(request, stream=True)
            metrics.REPLICA_LATENCY.labels(replica.url).observe(time.monotonic() - started)
            if response.status_code != 200:
                response.read()
                response.close()
                check(response)
            return response

        return self.call(route, start, hold=True)

    def finish(self, replica: Replica, response: httpx.Response, error: Exception | None = None) -> None:
        response.close()
        self._release(replica, error, failed=isinstance(error, (httpx.TransportError, ReplicaDown, ReplicaRefused)))

    # what each replica serves -----------------------------------------------------------------------------
    def describe(self, replica: Replica) -> None:
        """Fill in the replica's served model name and context length from its /v1/models."""
        data = check(self.client.get(replica.url + "/v1/models", timeout=10.0))["data"][0]
        replica.model, replica.max_model_len = data["id"], data.get("max_model_len")

    def with_model(self, replica: Replica, body: dict) -> dict:
        if replica.model is None:
            self.describe(replica)
        return {"model": replica.model, **body}

    def post(self, replica: Replica, path: str, body: dict) -> dict:
        tokens = _tokens(body)
        timeout = httpx.Timeout(self.timeout_for(tokens), connect=5.0)
        started = time.monotonic()
        answer = check(self.client.post(replica.url + path, json=self.with_model(replica, body), timeout=timeout))
        self._measure(replica, tokens, time.monotonic() - started)
        metrics.REPLICA_LATENCY.labels(replica.url).observe(time.monotonic() - started)
        return answer

    # health -----------------------------------------------------------------------------------------------
    def _watch(self, replica: Replica, interval_s: float) -> None:
        """The background check of one replica, from now until `close`."""
        while not self.stopped.is_set():
            try:
                self.check(replica)
            except Exception:  # noqa: BLE001 - a check must never end the watch
                log.exception("checking vllm replica %s failed", replica.url)
            self.stopped.wait(interval_s)

    def check(self, replica: Replica) -> None:
        """One check: `/health` (2 s at most), a failure opens the circuit; an open one due for a trial that answers
        `/health` is half-opened and sent the trial request, whose outcome closes or opens it again."""
        try:
            answered = self.client.get(replica.url + "/health", timeout=2.0).status_code
            error = None if answered == 200 else ReplicaDown(f"/health answered {answered}")
        except httpx.HTTPError as exc:
            error = exc
        with self.lock:
            if error is not None:  # refused: gone, at once; slow or not 200: one failure more
                replica.last_error = f"/health: {type(error).__name__}: {error}"[:300]
                self._entered(replica, replica.circuit.failed(at_once=isinstance(error, httpx.ConnectError)))
                return
            if not replica.circuit.trial_due(time.monotonic()):
                return
            self._entered(replica, replica.circuit.half_open())
        try:
            timeout = httpx.Timeout(self.timeout_for(len(TRIAL["prompt"])), connect=5.0)
            check(
                self.client.post(replica.url + "/v1/completions", json=self.with_model(replica, TRIAL), timeout=timeout)
            )
            error = None
        except Exception as exc:  # noqa: BLE001 - whatever failed, the trial did: it stays open
            error = exc
        with self.lock:
            if error is None:
                self._entered(replica, replica.circuit.succeeded())
            else:
                replica.last_error = f"trial: {type(error).__name__}: {error}"[:300]
                self._entered(replica, replica.circuit.open())

    def health(self, probe: bool = False) -> dict:
        """Each replica's state for /healthz, as the background checks and the requests left it. With `probe`, each
        is checked first, side by side (`check`)."""
        if probe:
            with ThreadPoolExecutor(len(self.replicas)) as pool:
                list(pool.map(self.check, self.replicas))
        with self.lock:
            now = time.monotonic()
            rows = []
            for r in self.replicas:
                state = "down" if not r.is_up() else "saturated" if r.in_flight >= self.max_in_flight else "up"
                rows.append(
                    {
                        "url": r.url,
                        "state": state,
                        "circuit": r.circuit.state,
                        "retry_in_s": round(r.circuit.retry_in_s(now), 2),
                        "transitions": dict(r.circuit.transitions),
                        "in_flight": r.in_flight,
                        "served": r.served,
                        "consecutive_failures": r.circuit.failures,
                        "timeouts": r.timeouts,
                        "ms_per_1k_tokens": None
                        if r.seconds_per_token is None
                        else round(r.seconds_per_token * 1e6, 1),
                        "last_error": r.last_error,
                        "model": r.model,
                        "max_model_len": r.max_model_len,
                    }
                )
        up = sum(row["state"] != "down" for row in rows)
        return {"engine": "vllm", "ok": up > 0, "replicas_up": up, "replicas": rows}

    def states(self) -> list[dict]:
        """Each replica's state as /metrics reads it, without asking the replicas anything."""
        with self.lock:
            return [{"url": r.url, "circuit": r.circuit.state, "in_flight": r.in_flight} for r in self.replicas]

    def close(self) -> None:
        self.stopped.set()
        self.client.close()

    def __enter__(self) -> Replicas:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _tokens(body: dict) -> int:
    """The prompt tokens of a completion body: one prompt of ids, or a list of them."""
    prompt = body.get("prompt") or []
    if prompt and isinstance(prompt[0], list):
        return sum(len(p) for p in prompt)
    return len(prompt)
