"""The decision clients built on TypeSafe's and OpenAI's wires, unchanged, against `python -m blink serve` with a
key: typesafe-haystack 0.1.1 (its router and document classifier), typesafe-eval 1.4.0 (its System One and OpenAI
Decisions backends), typesafe-mcp 0.5.2 (an MCP stdio service, driven by the `mcp` client), typesafeai-cli 0.3.3
(`typesafe`), typesafe-decisions 0.1.0 (all in `.venv-clients`, ci/clients-venv.sh, run by
ci/tests/decision_clients.py), and LiteLLM 1.110.2's `systemone()` and decision-model guardrail (`.venv-labels`,
ci/labels-venv.sh). Each client's own parsed answer holds what blink answers the same request directly (the body
the client sends, asked with httpx), within 1e-6."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import httpx
import pytest

from helpers import ROOT

pytestmark = pytest.mark.e2e

CLIENTS = ROOT / ".venv-clients" / "bin"
LABELS = ROOT / ".venv-labels" / "bin" / "python"
DRIVER = ROOT / "ci" / "tests" / "decision_clients.py"
KEY = "sekret-key-123"  # the keyed_server's
TEXT = "I was charged twice for one order. Please fix this today."
LABELS_ = {"billing": "Charges and refunds", "technical": "Bugs and crashes"}
TEAM = {"type": "choice", "instructions": "Which team should handle this?", "criteria": LABELS_}
ANGER = {"type": "score", "instructions": "How frustrated is the customer?", "criteria": ["calm", "annoyed", "furious"]}
REFUND = {"type": "noul", "instructions": "Is the customer asking for money back?"}
QUESTIONS = {"team": TEAM, "anger": ANGER, "refund": REFUND}
# what typesafe-eval's OpenAI backend and LiteLLM's guardrail send for the same questions (OpenAI's shapes)
OPENAI_QUESTIONS = [
    {"name": "team", "type": "choice", "instructions": TEAM["instructions"]}
    | {"choices": [{"value": k, "description": v} for k, v in LABELS_.items()]},
    {"name": "anger", "type": "score", "instructions": ANGER["instructions"]}
    | {"levels": [{"label": str(i), "description": d} for i, d in enumerate(ANGER["criteria"])]},
    {"name": "refund", "type": "predicate", "instructions": REFUND["instructions"]},
]


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6


def same_probabilities(got: dict, want: dict) -> None:
    assert set(map(str, got)) == set(map(str, want)), (got, want)
    for k, p in want.items():
        assert close(got[str(k)] if str(k) in got else got[k], p), (k, got, want)


def systemone(url: str, state, questions: dict) -> dict:
    r = httpx.post(
        url + "/v1/systemone",
        json={"model": "demo", "state": state, "questions": questions},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return r.json()["answers"]


def decisions(url: str, text: str, questions: list) -> dict:
    r = httpx.post(
        url + "/v1/decisions",
        json={"model": "demo", "input": text, "questions": questions},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return {a["name"]: a for a in r.json()["answers"]}


def built(script: str) -> None:
    done = subprocess.run(["bash", script], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"{script} could not build its venv:\n{done.stdout}\n{done.stderr}"


def drive(python, url: str, calls: list) -> list:
    """One run of ci/tests/decision_clients.py in a client venv: each call's result (or the error it raised)."""
    job = json.dumps({"url": url, "key": KEY, "calls": calls})
    env = os.environ | {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # LiteLLM fetches its cost map at import otherwise
    proc = subprocess.run([str(python), str(DRIVER)], input=job, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for call, got in zip(calls, out, strict=True):
        assert "error" not in got, (call["client"], got)
    return [got["result"] for got in out]


@pytest.fixture(scope="module")
def direct(keyed_server) -> dict:
    """What blink answers directly: System One on the text and on typesafe-eval's state, OpenAI's wire on the text."""
    return {
        "text": systemone(keyed_server, TEXT, QUESTIONS),
        "route": systemone(keyed_server, TEXT, {"route": TEAM})["route"],
        "eval": systemone(keyed_server, {"document": TEXT, "filename": "<memory>"}, QUESTIONS),
        "openai": decisions(keyed_server, TEXT, OPENAI_QUESTIONS),
    }


@pytest.fixture(scope="module")
def clients(keyed_server, direct) -> dict:
    """typesafe-haystack, typesafe-eval and typesafe-decisions, all called in one run of the driver."""
    built("ci/clients-venv.sh")
    confidence = direct["route"]["confidence"]
    router = {"client": "haystack_router", "text": TEXT, "labels": LABELS_, "instructions": TEAM["instructions"]}
    calls = {
        "router": router,
        "router_sure": router | {"min_confidence": max(confidence - 1e-3, 0)},
        "router_unsure": router | {"min_confidence": min(confidence + 1e-3, 1)},
        "classifier": {"client": "haystack_classifier", "text": TEXT, "questions": QUESTIONS},
        "eval_typesafe": {"client": "typesafe_eval", "provider": "typesafe", "text": TEXT, "questions": QUESTIONS},
        "eval_openai": {"client": "typesafe_eval", "provider": "openai", "text": TEXT, "questions": QUESTIONS},
        "feels": {"client": "decisions_feels", "state": TEXT, "question": REFUND["instructions"]},
        "match": {"client": "decisions_match", "state": TEXT, "question": TEAM["instructions"], "criteria": LABELS_},
    }
    return dict(zip(calls, drive(CLIENTS / "python", keyed_server, list(calls.values())), strict=True))


def test_haystack_router_routes_by_blinks_choice_and_confidence(clients, direct):
    picked = direct["route"]["choice"]
    assert clients["router"] == {picked: TEXT}
    assert clients["router_sure"] == {picked: TEXT}  # min_confidence just under blink's confidence
    assert clients["router_unsure"] == {"low_confidence": TEXT}  # just over it


def test_haystack_classifier_stores_blinks_answers(clients, direct):
    assert clients["classifier"]["failed"] == []
    (meta,) = clients["classifier"]["meta"]
    got, want = meta["typesafe"], direct["text"]
    assert close(got["refund"]["noul"], want["refund"]["noul"])
    for qid in ("team", "anger"):
        same_probabilities(got[qid]["probabilities"], want[qid]["probabilities"])
        assert close(got[qid]["confidence"], want[qid]["confidence"])
    assert got["team"]["choice"] == want["team"]["choice"]
    assert close(got["anger"]["score"], want["anger"]["score"])


def test_typesafe_eval_system_one_backend(clients, direct):
    got, want = clients["eval_typesafe"], direct["eval"]
    assert got["model"] == "demo" and got["usage"]["input_tokens"] > 0
    assert close(got["nouls"]["refund"]["probability"], want["refund"]["noul"])
    assert got["choices"]["team"]["choice"] == want["team"]["choice"]
    same_probabilities(got["choices"]["team"]["probabilities"], want["team"]["probabilities"])
    same_probabilities(got["scores"]["anger"]["probabilities"], want["anger"]["probabilities"])
    assert close(got["scores"]["anger"]["score"], want["anger"]["score"])


def test_typesafe_eval_openai_decisions_backend(clients, direct):
    """The OpenAI backend posts OPENAI_BASE_URL/decisions: predicates, choices and levels, parsed from OpenAI's
    answer lists."""
    got, want = clients["eval_openai"], direct["openai"]
    assert got["model"] == "demo"
    assert close(got["nouls"]["refund"]["probability"], want["refund"]["probability"])
    assert got["choices"]["team"]["choice"] == want["team"]["choice"]
    assert close(got["choices"]["team"]["confidence"], want["team"]["confidence"])
    same_probabilities(
        got["choices"]["team"]["probabilities"], {p["value"]: p["probability"] for p in want["team"]["probabilities"]}
    )
    same_probabilities(
        got["scores"]["anger"]["probabilities"], {p["label"]: p["probability"] for p in want["anger"]["probabilities"]}
    )
    assert close(got["scores"]["anger"]["score"], want["anger"]["score"])


def test_typesafe_decisions_feels_and_match(clients, direct):
    assert close(clients["feels"], direct["text"]["refund"]["noul"])
    assert clients["match"] == direct["route"]["choice"]


def cli(url: str, *args: str, key: str = KEY) -> tuple[int, dict]:
    """typesafeai-cli's `typesafe`, pointed at blink as its docs say (TYPESAFE_BASE_URL, TYPESAFE_API_KEY)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TYPESAFE_")}
    env |= {"TYPESAFE_BASE_URL": url, "TYPESAFE_API_KEY": key, "TYPESAFE_DEFAULT_MODEL": "demo"}
    done = subprocess.run([str(CLIENTS / "typesafe"), *args], env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, json.loads(done.stdout or done.stderr)


def test_typesafeai_cli_asks_each_type_and_lists_models(clients, keyed_server, direct):
    want = direct["text"]
    rc, out = cli(keyed_server, "noul", REFUND["instructions"], "--state", TEXT, "--id", "refund")
    assert rc == 0 and out["status"] == "success", out
    assert close(out["data"]["answers"]["refund"]["noul"], want["refund"]["noul"])
    options = [f"--option={k}={v}" for k, v in LABELS_.items()]
    rc, out = cli(keyed_server, "choice", TEAM["instructions"], "--state", TEXT, "--id", "team", *options)
    assert rc == 0 and out["data"]["answers"]["team"]["choice"] == want["team"]["choice"], out
    same_probabilities(out["data"]["answers"]["team"]["probabilities"], want["team"]["probabilities"])
    levels = [f"--level={level}" for level in ANGER["criteria"]]
    rc, out = cli(keyed_server, "score", ANGER["instructions"], "--state", TEXT, "--id", "anger", *levels)
    assert rc == 0 and close(out["data"]["answers"]["anger"]["score"], want["anger"]["score"]), out
    same_probabilities(out["data"]["answers"]["anger"]["probabilities"], want["anger"]["probabilities"])
    rc, out = cli(keyed_server, "models")
    assert rc == 0 and [m["name"] for m in out["data"]["models"]] == ["demo"], out


def test_typesafeai_cli_rank_orders_by_blinks_scores(clients, keyed_server, tmp_path):
    """`typesafe rank`: one score question per candidate over one state, sorted by each answer's expected score."""
    query = "How do I get my money back?"
    texts = {"a": "Refunds take five days.", "b": "Our office is in Oslo.", "c": "Double charges are reversed."}
    candidates = tmp_path / "candidates.json"
    candidates.write_text(json.dumps([{"id": k, "text": v} for k, v in texts.items()]))
    rc, out = cli(keyed_server, "rank", "--query", query, "--candidates-file", str(candidates))
    assert rc == 0, out
    levels = ["Not relevant to the query", "Somewhat relevant", "Highly relevant to the query"]  # the CLI's own
    questions = {
        k: {
            "type": "score",
            "instructions": f"How relevant is candidate `{k}` to the query `{query}`? Judge `candidates.{k}` only.",
            "criteria": levels,
        }
        for k in texts
    }
    want = systemone(keyed_server, {"query": query, "candidates": texts}, questions)
    ranked = out["data"]["ranked"]
    assert [r["id"] for r in ranked] == sorted(texts, key=lambda k: -want[k]["score"])
    assert all(close(r["relevance"], want[r["id"]]["score"]) for r in ranked)


def test_typesafeai_cli_wrong_key_fails_closed(clients, keyed_server):
    rc, out = cli(keyed_server, "noul", "ok?", "--state", TEXT, key="wrong-key")
    assert rc != 0 and out["status"] == "error", out
    assert "wrong-key" not in json.dumps(out)


def mcp_tools(url: str, calls: list[tuple[str, dict]]) -> tuple[list[str], list]:
    """typesafe-mcp as an MCP host runs it (a stdio process; TYPESAFE_BASE_URL, TYPESAFE_API_KEY and TYPESAFE_MODEL in
    its environment), driven by the `mcp` client: its tools' names, and each call's result."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = {"PATH": os.environ["PATH"], "TYPESAFE_BASE_URL": url, "TYPESAFE_API_KEY": KEY, "TYPESAFE_MODEL": "demo"}
    params = StdioServerParameters(command=str(CLIENTS / "typesafe-mcp"), args=[], env=env)

    async def session():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            names = [t.name for t in (await mcp.list_tools()).tools]
            return names, [await mcp.call_tool(name, arguments) for name, arguments in calls]

    return asyncio.run(session())


def test_typesafe_mcp_tools_answer_as_blink(clients, keyed_server, direct):
    want = direct["text"]
    calls = [
        ("evaluate", {"state": TEXT, "questions": QUESTIONS}),
        ("classify", {"state": TEXT, "instructions": TEAM["instructions"], "labels": LABELS_}),
        ("score", {"state": TEXT, "instructions": ANGER["instructions"], "levels": ANGER["criteria"]}),
        ("check", {"state": TEXT, "instructions": REFUND["instructions"]}),
        ("health", {"live": True}),  # one request of its own to the configured server
    ]
    names, results = mcp_tools(keyed_server, calls)
    assert {"evaluate", "classify", "score", "check", "health"} <= set(names)
    assert not any(r.isError for r in results), [r.content for r in results]
    evaluated, classified, scored, checked, health = (r.structuredContent for r in results)
    assert evaluated["model"] == "demo" and close(evaluated["answers"]["refund"]["noul"], want["refund"]["noul"])
    for qid in ("team", "anger"):
        same_probabilities(evaluated["answers"][qid]["probabilities"], want[qid]["probabilities"])
    assert classified["answer"]["choice"] == want["team"]["choice"]
    same_probabilities(classified["answer"]["probabilities"], want["team"]["probabilities"])
    same_probabilities(scored["answer"]["probabilities"], want["anger"]["probabilities"])
    assert close(checked["answer"]["noul"], want["refund"]["noul"])
    assert health["live"] is True and health["base_url"] == keyed_server and health["model"] == "demo"


@pytest.fixture(scope="module")
def litellm(keyed_server, direct) -> dict:
    """LiteLLM's `systemone()`, and its decision-model guardrail with one check just under and one just over blink's
    probability for it, in one run of the driver."""
    built("ci/labels-venv.sh")
    p = direct["openai"]["refund"]["probability"]
    check = {"name": "refund", "instructions": REFUND["instructions"]}
    calls = {
        "systemone": {"client": "litellm_systemone", "state": TEXT, "questions": QUESTIONS},
        "under": {"client": "litellm_guardrail", "text": TEXT, "checks": [check | {"threshold": max(p - 1e-3, 0)}]},
        "over": {"client": "litellm_guardrail", "text": TEXT, "checks": [check | {"threshold": min(p + 1e-3, 1)}]},
    }
    return dict(zip(calls, drive(LABELS, keyed_server, list(calls.values())), strict=True))


def test_litellm_systemone(litellm, direct):
    got, want = litellm["systemone"], direct["text"]
    assert got["model"] == "demo" and got["usage"]["input_tokens"] > 0
    assert close(got["answers"]["refund"]["noul"], want["refund"]["noul"])
    for qid in ("team", "anger"):
        same_probabilities(got["answers"][qid]["probabilities"], want[qid]["probabilities"])
        assert close(got["answers"][qid]["confidence"], want[qid]["confidence"])
    assert got["answers"]["team"]["choice"] == want["team"]["choice"]


def test_litellm_decision_model_guardrail_blocks_past_its_threshold(litellm):
    """A check whose threshold is just under blink's probability blocks (400, naming it); just over, it passes."""
    assert litellm["under"]["blocked"] == 400
    assert litellm["under"]["detail"]["flagged_checks"] == ["refund"]
    assert litellm["over"] == {"blocked": None}
