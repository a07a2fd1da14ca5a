"""blink's own server in front of real vLLM replicas (`serve --engine vllm`, its wires, templates and answers, with
vLLM answering): jevcompat, /healthz, an OpenAI chat stream, the Space (app.py with BLINK_ENGINE=vllm), rerank,
score and moderation equal to blink's own server on the same weights; then a hung replica delaying only its own
requests, and failover by killing a replica (the last tests: the session's replicas are one fewer after them, so
conftest.py runs test_router.py and test_vllm.py, which share them, just before this file).

The replicas, the qwen3 demo model and its in-process engine are conftest.py's (`vllm_replicas`, `qwen3_dir`,
`qwen3_engine`, shared with test_vllm.py, where their cost is told); run alone, this file's first test pays for
them. The timings land in ci/artifacts/vllm-timing.json.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import httpx
import pytest

from blink.errors import Overloaded
from blink.plan import GenerationParams
from helpers import ARTIFACTS, ROOT, assert_all_pass, run_jevcompat, running, stop_group
from helpers.vllm import DECISIONS, LONG_STATE, START_TIMEOUT_S, max_difference, wait_up
from helpers.vllm import VLLM_TIMING as TIMING

# the first test pays for the module's set-up: building .venv-vllm on a clean machine (~6 min) and the replicas
pytestmark = [pytest.mark.timeout(2400), pytest.mark.e2e, pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def blink_on_vllm(vllm_replicas, qwen3_dir):
    """blink's own server (its wires, templates, answers) with vLLM answering: `serve --engine vllm`."""
    urls = ",".join(url for url, _ in vllm_replicas)
    argv = [sys.executable, "-m", "blink", "serve", "--model", str(qwen3_dir), "--port", "{port}"]
    argv += ["--served-model-name", "blink-qwen3-demo", "--engine", "vllm", "--engine-url", urls]
    # the replicas' speed on a shared 2-core machine until one is measured (a first rerank timed out at the default)
    argv += ["--engine-assumed-s-per-token", "0.1"]
    with running(argv, qwen3_dir.parent, name="blink-vllm") as url:
        yield url


def test_jevcompat_through_blink_to_vllm(blink_on_vllm):
    started = time.perf_counter()
    report = run_jevcompat(blink_on_vllm)
    TIMING["jevcompat_s"] = round(time.perf_counter() - started, 1)
    assert_all_pass(report, {"auth.bearer", "auth.missing", "auth.invalid", "errors.shape"})


def test_healthz_lists_the_replicas(blink_on_vllm, vllm_replicas):
    body = httpx.get(blink_on_vllm + "/healthz", timeout=30).json()
    assert body["engine"] == "vllm" and "passes" not in body and "prefix_cache" not in body
    assert body["device"] == "none (no weights loaded)"
    rows = body["vllm"]["replicas"]
    assert [r["url"] for r in rows] == [url for url, _ in vllm_replicas]
    assert all(r["state"] == "up" for r in rows) and body["vllm"]["replicas_up"] == 2


def test_openai_chat_streams_through_vllm(blink_on_vllm):
    from openai import OpenAI

    client = OpenAI(base_url=blink_on_vllm + "/v1", api_key="unused")
    stream = client.chat.completions.create(
        model="blink-qwen3-demo",
        stream=True,
        max_tokens=12,
        temperature=0,
        messages=[{"role": "user", "content": "Say hello."}],
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-1].usage.completion_tokens == 12


def close_answers(a: dict, b: dict, bound: float = 1e-5) -> bool:
    """The same answers, each probability within `bound` (two requests may be batched differently by vLLM)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close_answers(a[k], b[k], bound) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return abs(a - b) <= bound
    return a == b


@pytest.mark.space
def test_the_space_in_front_of_vllm(vllm_replicas, qwen3_dir, blink_on_vllm):
    """app.py with BLINK_ENGINE=vllm (a CPU Space in front of a cluster): no weights here and no GPU call, the
    replicas answer its API and its UI's documented endpoint, as they answer `serve --engine vllm`."""
    from gradio_client import Client

    env = {
        "BLINK_MODEL": str(qwen3_dir),
        "BLINK_SERVED_MODEL_NAME": "blink-qwen3-demo",
        "BLINK_ENGINE": "vllm",
        "BLINK_ENGINE_URL": ",".join(url for url, _ in vllm_replicas),
    }
    with running([sys.executable, str(ROOT / "app.py")], qwen3_dir.parent, env=env, name="space-vllm") as url:
        health = httpx.get(url + "/healthz", timeout=30).json()
        assert health["engine"] == "vllm" and health["vllm"]["replicas_up"] == 2, health
        assert health["device"] == "none (no weights loaded)" and "decide" not in health["gpu_seconds"]
        body = DECISIONS[0]
        want = httpx.post(blink_on_vllm + "/v1/systemone", json=body, timeout=120).json()["answers"]
        got = httpx.post(url + "/v1/systemone", json=body, timeout=120)
        assert got.status_code == 200, got.text
        assert close_answers(got.json()["answers"], want), (got.json(), want)
        ui = Client(url, verbose=False).predict(state=body["state"], questions=body["questions"], api_name="/decide")
        assert close_answers(ui["answers"], want), (ui, want)
        assert "decide" not in httpx.get(url + "/healthz", timeout=30).json()["gpu_seconds"]  # no GPU call made


@pytest.fixture(scope="module")
def blink_local(qwen3_dir):
    """blink's own server with its in-process engine on the same weights: what the replicas are compared with."""
    argv = [sys.executable, "-m", "blink", "serve", "--model", str(qwen3_dir), "--port", "{port}"]
    with running([*argv, "--served-model-name", "blink-qwen3-demo"], qwen3_dir.parent, name="blink-local") as url:
        yield url


RERANK = {
    "model": "blink-qwen3-demo",
    "query": "Where is my parcel?",
    "documents": [
        "The parcel never arrived and the tracking page has not changed in nine days.",
        "Our office is closed on public holidays.",
        {"text": "Refunds are paid to the card used for the order within five days."},
        LONG_STATE,
    ],
}


def both(path: str, body: dict, *urls: str) -> list[dict]:
    out = []
    for url in urls:
        r = httpx.post(url + path, json=body, timeout=300)
        assert r.status_code == 200, (url, r.text)
        out.append(r.json())
    return out


@pytest.mark.parametrize("calibration", [None, "prior"])
def test_rerank_and_score_through_vllm_equal_the_local_engine(blink_on_vllm, blink_local, calibration):
    """/v1/rerank and /v1/score through `serve --engine vllm` give each document the relevance blink's own engine
    gives it on the same weights (the probability of "yes", within the engines' tolerance), so the same order
    wherever two scores are further apart than that; with the content-free prior too."""
    body = RERANK if calibration is None else {**RERANK, "x_calibration": calibration}
    served, local = both("/v1/rerank", body, blink_on_vllm, blink_local)
    scores = [{r["index"]: r["relevance_score"] for r in answer["results"]} for answer in (served, local)]
    assert sorted(scores[0]) == sorted(scores[1]) == [0, 1, 2, 3]
    assert max(abs(scores[0][i] - scores[1][i]) for i in scores[1]) < 1e-5, scores
    assert close_answers(served["x_calibration"], local["x_calibration"])
    # the same prompts; what blink's own prefix-state cache spared (`x_cached_tokens`) is its own
    tokens = [(a["usage"]["prompt_tokens"], a["usage"]["total_tokens"]) for a in (served, local)]
    assert tokens[0] == tokens[1], tokens
    # the replicas' order is the local engine's, but for documents tied within the tolerance (either may lead)
    order = [r["index"] for r in served["results"]]
    assert all(scores[1][a] >= scores[1][b] - 2e-5 for a, b in zip(order, order[1:])), (order, scores)
    assert [r["relevance_score"] for r in served["results"]] == sorted(scores[0].values(), reverse=True)
    texts = [d if isinstance(d, str) else d["text"] for d in RERANK["documents"]]
    assert [r["document"]["text"] for r in served["results"]] == [texts[i] for i in order]
    score_body = {"model": "blink-qwen3-demo", "text_1": RERANK["query"], "text_2": texts}
    served, local = both("/v1/score", score_body, blink_on_vllm, blink_local)
    assert [d["index"] for d in served["data"]] == [0, 1, 2, 3]
    assert max(abs(a["score"] - b["score"]) for a, b in zip(served["data"], local["data"])) < 1e-5


def test_moderation_through_vllm_equals_the_local_engine(blink_on_vllm, blink_local):
    """/v1/moderations through `serve --engine vllm`: the 13 categories of the default policy for each input, each
    score within the engines' tolerance of blink's own engine, each flag its score against the threshold."""
    from blink.moderation_policy import load_policy

    policy = load_policy(None)
    thresholds = {c.name: c.threshold for c in policy.categories}
    body = {"model": "blink-qwen3-demo", "input": ["Have a lovely day.", "I will find you and hurt you."]}
    served, local = both("/v1/moderations", body, blink_on_vllm, blink_local)
    assert served["model"] == "blink-qwen3-demo" and len(served["results"]) == 2
    for got, want in zip(served["results"], local["results"]):
        assert len(got["category_scores"]) == 13 and list(got["category_scores"]) == list(thresholds)
        for name, score in got["category_scores"].items():
            assert abs(score - want["category_scores"][name]) < 1e-5, (name, score, want["category_scores"][name])
            assert got["categories"][name] == (score >= thresholds[name])
        assert got["flagged"] == any(got["categories"].values())
        assert got["category_applied_input_types"] == {name: ["text"] for name in thresholds}


def under_load(url: str, seconds: float, clients: int = 8, during=None) -> dict:
    """`clients` threads sending DECISIONS to blink for `seconds` (each bounded to 5,000 requests): every answer's
    time, every failure; `during(started)` runs in this thread meanwhile (a fault)."""
    import threading

    answered, failed, sent = [], [], [0]
    stop_at = time.perf_counter() + seconds

    def client(c: int) -> None:
        with httpx.Client(base_url=url, timeout=300) as http:
            for k in range(5000):
                if time.perf_counter() >= stop_at:
                    return
                body = {**DECISIONS[k % 2], "state": f"client {c} request {k}: " + str(DECISIONS[k % 2]["state"])}
                sent[0] += 1
                try:
                    r = http.post("/v1/systemone", json=body)
                    (answered.append(time.perf_counter()) if r.status_code == 200 else failed.append(r.text[:200]))
                except httpx.HTTPError as exc:
                    failed.append(type(exc).__name__)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    marks = during(started) if during else {}
    for t in threads:
        t.join(timeout=seconds + 600)
    return {"answered": answered, "failed": failed, "sent": sent[0], "marks": marks or {}}


def longest_silence(times: list[float], start: float, end: float) -> float:
    points = [start, *sorted(t for t in times if start <= t < end), end]
    return max(b - a for a, b in zip(points, points[1:]))


def test_a_hung_replica_delays_only_its_own_requests(vllm_replicas, qwen3_dir):
    """SIGSTOP one replica for 20 s under 8 clients: its requests time out (the timeout follows their tokens and the
    replicas' measured speed, capped by --engine-timeout-s) and are answered by the other; the other keeps answering
    the whole time. Before: nothing was answered for the engine timeout (every batch waited for its slowest)."""
    import signal

    urls = ",".join(url for url, _ in vllm_replicas)
    argv = [sys.executable, "-m", "blink", "serve", "--model", str(qwen3_dir), "--port", "{port}"]
    argv += ["--engine", "vllm", "--engine-url", urls, "--engine-timeout-s", "10"]
    victim = vllm_replicas[0][1]
    with running(argv, qwen3_dir.parent, name="blink-vllm-hung") as url:
        under_load(url, 10)  # warm: every replica served and measured

        def hang(started: float) -> dict:
            time.sleep(5)
            os.killpg(victim.pid, signal.SIGSTOP)
            hung = time.perf_counter()
            try:
                time.sleep(20)
            finally:
                os.killpg(victim.pid, signal.SIGCONT)
            return {"hung": hung, "resumed": time.perf_counter()}

        run = under_load(url, 35, during=hang)
        rows = httpx.get(url + "/healthz", timeout=30).json()["vllm"]["replicas"]
    silence = longest_silence(run["answered"], run["marks"]["hung"], run["marks"]["resumed"])
    retried = sum(r["timeouts"] for r in rows)
    TIMING["hung"] = {"sent": run["sent"], "lost": len(run["failed"]), "retried": retried, "silence_s": silence}
    assert not run["failed"], run["failed"][:5]
    assert retried >= 1
    assert silence < 10, TIMING["hung"]  # the live replica never waited out the hung one's timeout


def test_failover_when_a_replica_dies(vllm_replicas, qwen3_engine, blink_on_vllm):
    """Last: kills one of the module's replicas."""
    from blink.vllm import Replicas, VllmScorer

    urls = [url for url, _ in vllm_replicas]
    with Replicas(urls) as replicas:
        scorer = VllmScorer(replicas)
        plan = qwen3_engine.prepare(DECISIONS[1]).prompts
        home, other = replicas.order(scorer.route(plan))
        (scored,) = scorer.score([plan])
        before = scored.scores
        assert scored.error is None and home.served == 1
        stop_group(dict(vllm_replicas)[home.url])  # the replica this state lives on dies
        (scored,) = scorer.score([plan])
        after = scored.scores
        assert scored.error is None, scored.error
        assert other.served == 1 and max_difference(before, after) < 1e-4  # retried on the other one
        health = replicas.health()
        assert {r["url"]: r["state"] for r in health["replicas"]} == {home.url: "down", other.url: "up"}
        assert health["ok"] and health["replicas_up"] == 1
        # blink's server keeps answering, and its /healthz says which replica is gone
        r = httpx.post(blink_on_vllm + "/v1/systemone", json=DECISIONS[1], timeout=120)
        assert r.status_code == 200, r.text
        # /healthz reads what the background check found (every 2 s): the decision may have gone to the live replica
        # (the server's own prefix table, filled by the tests before, may send it there), so the dead one is seen by
        # that check, within 10 s
        deadline = time.monotonic() + 10
        while True:
            rows = httpx.get(blink_on_vllm + "/healthz", timeout=30).json()["vllm"]["replicas"]
            states = {row["url"]: row["state"] for row in rows}
            if states[home.url] == "down" or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert states == {home.url: "down", other.url: "up"}
    with Replicas([home.url]) as dead:  # nothing left to try: 529
        (scored,) = VllmScorer(dead).score([plan])
        assert isinstance(scored.error, Overloaded), scored.error


def test_a_restarted_replica_is_back_and_a_stream_on_a_dying_one_ends_cleanly(vllm_replicas, qwen3_dir, qwen3_engine):
    """After the failover test: the killed replica is started again on its port and blink routes to it again within
    60 s of it answering /health; then a chat stream on a replica killed mid-stream ends with an error (its
    tokens already sent: never retried elsewhere), and the other replica served nothing of it."""
    from blink.errors import EngineFailure
    from blink.generate.chat_engine import ChatEngine
    from blink.vllm import Replicas, VllmChat
    from blink.vllm.affinity import route_for

    urls = [url for url, _ in vllm_replicas]
    dead = [(url, proc) for url, proc in vllm_replicas if proc.poll() is not None]
    assert len(dead) == 1, "runs after test_failover_when_a_replica_dies"
    url, _ = dead[0]
    port = url.rsplit(":", 1)[1]
    log = ARTIFACTS / f"vllm-restarted-{port}.log"
    env = {**os.environ, "MAX_MODEL_LEN": "32768"}
    with open(log, "w") as fh:
        argv = ["bash", "ci/vllm-serve.sh", str(qwen3_dir), port, "--dtype", "float32", "-O0"]
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_up(url, proc, log, time.time() + START_TIMEOUT_S)
        up_at = time.perf_counter()
        with Replicas(urls) as replicas:
            by_url = {r.url: r for r in replicas.replicas}
            replicas.health(probe=True)  # checks each now: the restarted one answers, so it is up at once
            while time.perf_counter() - up_at < 60 and by_url[url].served == 0:
                prompt = [int(x) for x in str(time.perf_counter_ns())[-8:]]
                if replicas.order(route_for([prompt]))[0].url == url:
                    replicas.call(
                        route_for([prompt]),
                        lambda r, p=prompt: replicas.post(r, "/v1/completions", {"prompt": p, "max_tokens": 1}),
                    )
            TIMING["restart_back_s"] = round(time.perf_counter() - up_at, 1)
            assert by_url[url].served >= 1, "the restarted replica was not routed to within 60 s"

            chat = ChatEngine(qwen3_engine.loaded)
            rendered = chat.render([{"role": "user", "content": "Write a long note about parcels."}])
            home = replicas.order(route_for([rendered.ids]))[0]
            other = next(r for r in replicas.replicas if r is not home)
            served_other = other.served
            generator = VllmChat(replicas, chat).generate(
                rendered.ids, GenerationParams(max_tokens=2000, temperature=0)
            )
            assert isinstance(next(generator), str)  # a token was sent: from here on it is never retried
            home_proc = proc if home.url == url else dict(vllm_replicas)[home.url]
            # stopped (SIGTERM: vLLM aborts what it has in flight, or the connection drops) while the stream is read
            started = time.perf_counter()
            stopping = threading.Thread(target=stop_group, args=(home_proc,))
            stopping.start()
            with pytest.raises(EngineFailure) as ended:
                for _ in range(5000):
                    next(generator)
            TIMING["stream_end_s"] = round(time.perf_counter() - started, 2)
            TIMING["stream_end"] = str(ended.value)[:300]
            stopping.join()
            assert other.served == served_other and other.in_flight == 0  # nothing of it went elsewhere
    finally:
        stop_group(proc)
