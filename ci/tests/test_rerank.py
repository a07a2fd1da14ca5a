"""Reranking and scoring (`/v1/rerank`, `/rerank`, `/v2/rerank`, `/v1/score`, `/score`) against the real server:
every request shape, scores equal to blink's own decisions and independent of the other documents, every bad
input a 4xx in the wire's shape; and the real clients (Open WebUI's ExternalReranker, LlamaIndex's JinaRerank,
LiteLLM's rerank) run in their own venv (`ci/labels-venv.sh` builds `.venv-labels`) as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import zstandard

from blink.settings import RERANK_QUESTION
from helpers import assert_close

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
QUERY = "How do I reset my password?"
DOCS = [
    "Hold the power button for ten seconds to restart the router.",
    "Click 'Forgot password' on the sign-in page and follow the link we email you.",
    "Our office is closed on public holidays.",
    "Passwords must be at least twelve characters long.",
]


def post(url: str, path: str, body, **kw) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=120, **kw)


def ok(r: httpx.Response) -> dict:
    assert r.status_code == 200, r.text
    return r.json()


def alone(url: str, doc: str, query: str = QUERY, **extra) -> float:
    """blink's own answer: the document as a System One state, the query in the configured question."""
    question = {"relevant": {"type": "noul", "instructions": RERANK_QUESTION.replace("{query}", query)}}
    body = ok(post(url, "/v1/systemone", {"state": doc, "questions": question, **extra}))
    return body["answers"]["relevant"]["noul"]


@pytest.fixture(scope="module")
def own(server) -> list[float]:
    return [alone(server, doc) for doc in DOCS]


# shapes ---------------------------------------------------------------------------------------------------------
def test_rerank_answers_blinks_own_scores_sorted_by_relevance(server, own):
    body = ok(post(server, "/v1/rerank", {"model": "any", "query": QUERY, "documents": DOCS}))
    assert body["id"].startswith("rerank-") and body["model"] == "demo"
    ranked = [r["index"] for r in body["results"]]
    assert ranked == sorted(range(len(DOCS)), key=lambda i: -own[i])
    for result in body["results"]:
        assert abs(result["relevance_score"] - own[result["index"]]) <= 1e-6
        assert result["document"] == {"text": DOCS[result["index"]]}  # vLLM's and Jina's default: returned
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] > 0
    assert body["x_calibration"]["applied"] is False


@pytest.mark.parametrize("path", ["/rerank", "/v2/rerank"])
def test_cohere_and_jina_shapes_on_every_path(server, own, path):
    documents = [{"text": doc} for doc in DOCS]  # Cohere v1 and Jina send objects
    body = ok(
        post(
            server,
            path,
            {
                "model": "m",
                "query": QUERY,
                "documents": documents,
                "top_n": 2,
                "return_documents": False,
                "rank_fields": ["text"],
            },
        )
    )
    assert len(body["results"]) == 2 and all("document" not in r for r in body["results"])
    best = sorted(range(len(DOCS)), key=lambda i: -own[i])[:2]
    assert [r["index"] for r in body["results"]] == best
    # top_n past the documents sent answers them all (Cohere's, Jina's and vLLM's behaviour); 0 is vLLM's "all"
    for top_n in (10, 0):
        assert len(ok(post(server, path, {"query": QUERY, "documents": DOCS, "top_n": top_n}))["results"]) == 4


def test_a_score_depends_on_neither_the_other_documents_nor_their_order(server, own):
    reversed_docs = DOCS[::-1]
    body = ok(post(server, "/v1/rerank", {"query": QUERY, "documents": reversed_docs + ["Unrelated text."]}))
    scores = {reversed_docs[r["index"]]: r["relevance_score"] for r in body["results"] if r["index"] < len(DOCS)}
    for doc, score in zip(DOCS, own, strict=True):
        assert abs(scores[doc] - score) <= 1e-6
        single = ok(post(server, "/v2/rerank", {"query": QUERY, "documents": [doc]}))["results"][0]
        assert abs(single["relevance_score"] - score) <= 1e-6


def test_score_one_to_one_one_to_many_and_pairwise(server, own):
    one = ok(post(server, "/v1/score", {"model": "m", "text_1": QUERY, "text_2": DOCS[1]}))
    assert one["object"] == "list" and one["id"].startswith("score-") and isinstance(one["created"], int)
    assert one["data"] == [{"index": 0, "object": "score", "score": pytest.approx(own[1], abs=1e-6)}]
    assert one["usage"]["completion_tokens"] == 0 and one["usage"]["prompt_tokens"] > 0
    many = ok(post(server, "/score", {"text_1": [QUERY], "text_2": DOCS}))
    assert [d["index"] for d in many["data"]] == [0, 1, 2, 3]  # in the order sent, not sorted
    assert all(abs(d["score"] - own[d["index"]]) <= 1e-6 for d in many["data"])
    other = "When is the office closed?"
    pairs = ok(post(server, "/v1/score", {"text_1": [QUERY, other], "text_2": [DOCS[0], DOCS[2]]}))
    assert abs(pairs["data"][0]["score"] - own[0]) <= 1e-6
    assert abs(pairs["data"][1]["score"] - alone(server, DOCS[2], other)) <= 1e-6


def test_calibration_by_the_prior_applies_and_is_reported(server):
    body = ok(post(server, "/v1/rerank", {"query": QUERY, "documents": DOCS[:2], "x_calibration": "prior"}))
    assert body["x_calibration"]["applied"] is True and "relevant" in body["x_calibration"]["prior"]["answers"]
    for result in body["results"]:
        own = alone(server, DOCS[result["index"]], x_calibration="prior")
        assert abs(result["relevance_score"] - own) <= 1e-6


def test_documents_are_cut_only_when_the_client_asks(server):
    long = "The password reset link expires after one hour. " * 4000  # ~40k tokens: past the 32k context
    refused = post(server, "/v1/rerank", {"query": QUERY, "documents": ["short", long]})
    error(refused, 400, "documents[1]", "32768")
    cohere = ok(post(server, "/v2/rerank", {"query": QUERY, "documents": ["short", long], "max_tokens_per_doc": 64}))
    vllm = ok(post(server, "/v1/rerank", {"query": QUERY, "documents": ["short", long], "truncate_prompt_tokens": 64}))
    scores = [[r["relevance_score"] for r in reply["results"]] for reply in (cohere, vllm)]
    assert_close(*scores, "relevance_score")  # two requests: within blink's 1e-6
    assert cohere["results"][0]["document"]["text"] in ("short", long)  # the document as sent, not as cut
    fitted = ok(post(server, "/v1/rerank", {"query": QUERY, "documents": [long], "truncate_prompt_tokens": -1}))
    assert 30000 < fitted["usage"]["prompt_tokens"] <= 32768


# bad input: a 4xx in the wire's shape, never a 5xx ------------------------------------------------------------
def error(r: httpx.Response, status: int, param: str | None = None, says: str = "") -> dict:
    """OpenAI's error object (LiteLLM, Open WebUI) with `detail` beside it (LlamaIndex's JinaRerank reads it)."""
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["type"] == "invalid_request_error" and body["detail"] == body["error"]["message"]
    assert r.headers["x-request-id"].startswith("req_")
    if param is not None:
        assert body["error"]["param"] == param, body
    assert says in body["error"]["message"], body
    return body


RERANK_BAD = {
    "no documents": ({"query": "q", "documents": []}, "documents", "at least one"),
    "documents missing": ({"query": "q"}, "documents", "list"),
    "too many documents": ({"query": "q", "documents": ["d"] * 65}, "documents", "at most 64"),
    "documents a string": ({"query": "q", "documents": "d"}, "documents", "list"),
    "a document a number": ({"query": "q", "documents": ["d", 3]}, "documents[1]", "string"),
    "a document an image": ({"query": "q", "documents": [{"image": "http://x/y.png"}]}, "documents[0]", "image"),
    "a document null": ({"query": "q", "documents": [None]}, "documents[0]", "string"),
    "query missing": ({"documents": ["d"]}, "query", "query"),
    "query empty": ({"query": " ", "documents": ["d"]}, "query", "non-empty"),
    "query a list": ({"query": ["q"], "documents": ["d"]}, "query", "string"),
    "top_n negative": ({"query": "q", "documents": ["d"], "top_n": -1}, "top_n", "at least 0"),
    "top_n a string": ({"query": "q", "documents": ["d"], "top_n": "2"}, "top_n", "whole number"),
    "top_n a float": ({"query": "q", "documents": ["d"], "top_n": 1.5}, "top_n", "whole number"),
    "top_n true": ({"query": "q", "documents": ["d"], "top_n": True}, "top_n", "whole number"),
    "return_documents a string": (
        {"query": "q", "documents": ["d"], "return_documents": "yes"},
        "return_documents",
        "",
    ),
    "max_tokens_per_doc 0": ({"query": "q", "documents": ["d"], "max_tokens_per_doc": 0}, "max_tokens_per_doc", ""),
    "truncate_prompt_tokens -2": (
        {"query": "q", "documents": ["d"], "truncate_prompt_tokens": -2},
        "truncate_prompt_tokens",
        "",
    ),
    "both truncations": (
        {"query": "q", "documents": ["d"], "truncate_prompt_tokens": 5, "max_tokens_per_doc": 5},
        "truncate_prompt_tokens",
        "not both",
    ),
    "rank_fields": ({"query": "q", "documents": [{"text": "d"}], "rank_fields": ["title"]}, "rank_fields", "text"),
    "unknown field": ({"query": "q", "documents": ["d"], "max_chunks_per_doc": 3}, "max_chunks_per_doc", "unknown"),
    "model a number": ({"model": 3, "query": "q", "documents": ["d"]}, "model", "string"),
    "x_calibration bogus": ({"query": "q", "documents": ["d"], "x_calibration": "x"}, "x_calibration", ""),
    "body an array": ([{"query": "q"}], None, "JSON object"),
}
SCORE_BAD = {
    "text_2 missing": ({"text_1": "q"}, "text_2", "required"),
    "text_1 empty list": ({"text_1": [], "text_2": ["d"]}, "text_1", "empty"),
    "text_2 numbers": ({"text_1": "q", "text_2": [1]}, "text_2", "strings"),
    "lengths differ": ({"text_1": ["a", "b"], "text_2": ["c", "d", "e"]}, "text_1", "as many"),
    "too many pairs": ({"text_1": "q", "text_2": ["d"] * 65}, "text_2", "at most 64"),
    "an empty query": ({"text_1": ["q", ""], "text_2": ["c", "d"]}, "text_1[1]", "empty"),
    "unknown field": ({"text_1": "q", "text_2": "d", "queries": ["q"]}, "queries", "unknown"),
}


@pytest.mark.parametrize("case", RERANK_BAD)
def test_bad_rerank_requests_are_400_in_the_wires_shape(server, case):
    body, param, says = RERANK_BAD[case]
    for path in ("/v1/rerank", "/rerank", "/v2/rerank"):
        error(post(server, path, body), 400, param, says)


@pytest.mark.parametrize("case", SCORE_BAD)
def test_bad_score_requests_are_400_in_the_wires_shape(server, case):
    body, param, says = SCORE_BAD[case]
    for path in ("/v1/score", "/score"):
        error(post(server, path, body), 400, param, says)


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v2/rerank", "/v1/score", "/score"])
def test_wrong_methods_paths_and_bodies(server, path):
    for method in ("GET", "PUT", "DELETE"):
        r = httpx.request(method, server + path, timeout=30)
        body = error(r, 405, None, "POST")
        assert r.headers["allow"] == "POST" and path in body["detail"]
    error(httpx.post(server + path + "/more", json={}, timeout=30), 404, None, path)
    r = httpx.post(server + path, content=b"{nope", headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 400 and r.json()["detail"]


def test_a_small_body_that_decodes_to_megabytes_is_refused_at_once(server):
    """2 KB of zstd that decode to 8 MB of one document: refused as past the context, in bounded time."""
    raw = json.dumps({"query": QUERY, "documents": ["a " * 4_000_000]}).encode()
    packed = zstandard.ZstdCompressor(level=19).compress(raw)
    assert len(packed) < 4096
    started = time.perf_counter()
    r = httpx.post(
        server + "/v1/rerank",
        content=packed,
        timeout=60,
        headers={"content-type": "application/json", "content-encoding": "zstd"},
    )
    error(r, 400, "documents[0]", "context limit")
    assert time.perf_counter() - started < 10
    assert ok(post(server, "/v1/rerank", {"query": QUERY, "documents": DOCS[:1]}))["results"]  # still serving


def test_a_request_of_more_documents_than_the_server_has_places_is_refused_naming_the_limit(engine, demo_dir):
    """Each document holds one of the decide gate's places: 7 documents on a server of 6 places (max-queued 4 +
    max-batch 2) would wait forever for places that cannot all free; refused at once, the places untouched."""
    from starlette.testclient import TestClient

    from blink.server import ServedModel, build_chat_engine, build_context, create_app
    from blink.settings import Settings

    settings = Settings(model=str(demo_dir), max_queued_requests=4, max_batch_requests=2)
    served = ServedModel(engine.loaded, engine, build_chat_engine(settings, engine.loaded))
    ctx = build_context(settings, served, warmup=False)
    with TestClient(create_app(ctx), raise_server_exceptions=False) as client:
        r = client.post("/v1/rerank", json={"query": "q", "documents": ["d"] * 7})
        assert r.status_code == 400 and "at most 6" in r.json()["detail"], r.text
        assert ok(client.post("/v1/rerank", json={"query": "q", "documents": ["d"] * 6}))
        state = ctx.admission.state()["decide"]
        assert state["held"]["keyed"] == 0 and state["admitted"] == 1
        assert ctx.service.batcher.requests == 1 and ctx.service.batcher.incoming == 0  # 6 documents, one request


# the real clients, in .venv-labels -------------------------------------------------------------------------------
LABELS = ROOT / ".venv-labels"


@pytest.fixture(scope="module")
def labels_venv(tmp_path_factory) -> dict:
    """The clients' venv (built on first use: ~3 min, ~1 GB) and the environment they run in."""
    proc = subprocess.run(["bash", "ci/labels-venv.sh"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"ci/labels-venv.sh could not build .venv-labels:\n{proc.stdout}\n{proc.stderr}"
    data = tmp_path_factory.mktemp("open-webui")
    (data / "build" / "static").mkdir(parents=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(data),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no cost map fetched at import
        # what importing Open WebUI's modules needs: a data folder, a secret, static folders, no chroma
        "DATA_DIR": str(data),
        "WEBUI_SECRET_KEY": "a-test-secret-for-the-reranker-only",
        "FRONTEND_BUILD_DIR": str(data / "build"),
        "STATIC_DIR": str(data / "static"),
        "VECTOR_DB": "qdrant",
    }


def run_client(env: dict, script: str, url: str):
    """`script` in .venv-labels with URL, QUERY and DOCS defined; its last line of output, as JSON."""
    preamble = f"import json\nURL = {url!r}\nQUERY = {QUERY!r}\nDOCS = {DOCS!r}\n"
    proc = subprocess.run(
        [str(LABELS / "bin" / "python"), "-c", preamble + script],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=env["HOME"],
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


OPEN_WEBUI = """
from open_webui.retrieval.models.external import ExternalReranker

reranker = ExternalReranker(api_key="unused", url=URL + "/v1/rerank", model="blink")
print(json.dumps(reranker.predict([(QUERY, doc) for doc in DOCS])))
"""


def test_open_webuis_external_reranker_gets_blinks_scores(server, own, labels_venv):
    scores = run_client(labels_venv, OPEN_WEBUI, server)
    assert scores is not None and len(scores) == len(DOCS)
    assert all(abs(a - b) <= 1e-6 for a, b in zip(scores, own, strict=True))


LLAMA_INDEX = """
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.postprocessor.jinaai_rerank import JinaRerank

reranker = JinaRerank(top_n=3, base_url=URL + "/v1", api_key="unused", model="blink")
nodes = [NodeWithScore(node=TextNode(text=doc), score=0.0) for doc in DOCS]
ranked = reranker.postprocess_nodes(nodes, query_bundle=QueryBundle(QUERY))
refused = None
try:  # more documents than the server ranks at once: JinaRerank raises the error's `detail`
    reranker.postprocess_nodes(nodes * 17, query_bundle=QueryBundle(QUERY))
except RuntimeError as error:
    refused = str(error)
print(json.dumps({"ranked": [[n.node.get_content(), n.score] for n in ranked], "refused": refused}))
"""


def test_llama_index_jina_rerank_reorders_by_blinks_scores(server, own, labels_venv):
    out = run_client(labels_venv, LLAMA_INDEX, server)
    best = sorted(range(len(DOCS)), key=lambda i: -own[i])[:3]
    assert [text for text, _ in out["ranked"]] == [DOCS[i] for i in best]
    assert all(abs(score - own[i]) <= 1e-6 for (_, score), i in zip(out["ranked"], best, strict=True))
    assert "at most 64" in out["refused"]


LITELLM = """
import litellm

out = {}
for base in (URL, URL + "/v1/rerank"):  # the root: Cohere's v2 client (/v2/rerank); a /v1/rerank URL: its v1 client
    response = litellm.rerank(model="cohere/blink", query=QUERY, documents=DOCS, top_n=3, api_base=base, api_key="k")
    out[base] = [[r["index"], r["relevance_score"]] for r in response.results]
print(json.dumps(out))
"""


def test_litellm_rerank_reorders_by_blinks_scores(server, own, labels_venv):
    out = run_client(labels_venv, LITELLM, server)
    best = sorted(range(len(DOCS)), key=lambda i: -own[i])[:3]
    for model, results in out.items():
        assert [index for index, _ in results] == best, model
        assert all(abs(score - own[index]) <= 1e-6 for index, score in results), model
