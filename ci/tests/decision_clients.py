"""The decision clients of ci/tests/test_decision_clients.py, each called as its own docs show, pointed at blink.

Run in `.venv-clients` (ci/clients-venv.sh: typesafe-haystack, typesafe-eval, typesafe-decisions) or in
`.venv-labels` (ci/labels-venv.sh: LiteLLM); each client is imported only when a call names it. Reads one job (JSON
on stdin): `url`, `key`, and `calls`, a list of `{"client": NAME, ...its arguments}`. Prints one JSON line: per
call what the client returned (in its own parsed shape, dumped to JSON), or `error`: the exception's class and text.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys


def haystack_router(job: dict, call: dict) -> dict:
    from haystack.utils import Secret
    from haystack_integrations.components.routers.typesafe import TypeSafeTextRouter

    router = TypeSafeTextRouter(
        labels=call["labels"],
        instructions=call["instructions"],
        model="demo",
        api_key=Secret.from_token(job["key"]),
        api_base_url=job["url"],
        min_confidence=call.get("min_confidence"),
    )
    return router.run(text=call["text"])


def haystack_classifier(job: dict, call: dict) -> dict:
    from haystack import Document
    from haystack.utils import Secret
    from haystack_integrations.components.classifiers.typesafe import TypeSafeDocumentClassifier

    classifier = TypeSafeDocumentClassifier(
        questions=call["questions"], model="demo", api_key=Secret.from_token(job["key"]), api_base_url=job["url"]
    )
    out = classifier.run(documents=[Document(content=call["text"])])
    return {"meta": [d.meta for d in out["documents"]], "failed": [d.meta for d in out["failed_documents"]]}


def typesafe_eval(job: dict, call: dict) -> dict:
    """typesafe-eval's `evaluate()` on one backend: `openai` (the OpenAI Decisions API at OPENAI_BASE_URL) or
    `typesafe` (System One through typesafe-sdk, at TYPESAFE_BASE_URL)."""
    from typesafe_eval import PresetConfig, TypeSafeEvaluator, evaluate

    # only the chosen backend's base URL is set: the other one's default is unreachable from here
    os.environ.pop("OPENAI_BASE_URL", None)
    os.environ.pop("TYPESAFE_BASE_URL", None)
    if call["provider"] == "openai":
        os.environ["OPENAI_BASE_URL"] = job["url"] + "/v1"
    else:
        os.environ["TYPESAFE_BASE_URL"] = job["url"]
    preset = PresetConfig(name="blink", questions=call["questions"])
    evaluator = TypeSafeEvaluator(api_key=job["key"], provider=call["provider"], model="demo")
    result = evaluate(call["text"], preset, api_key=job["key"], evaluator=evaluator, cache=False)
    return result.model_dump(include={"scores", "nouls", "choices", "model", "usage", "filename"})


def decisions_feels(job: dict, call: dict) -> float:
    from typesafe_decisions import DecisionClient

    os.environ["TYPESAFE_API_KEY"] = job["key"]
    with DecisionClient(base_url=job["url"], model="demo") as client:
        return client.feels(call["state"], call["question"])


def decisions_match(job: dict, call: dict) -> str:
    from typesafe_decisions import DecisionClient

    os.environ["TYPESAFE_API_KEY"] = job["key"]
    with DecisionClient(base_url=job["url"], model="demo") as client:
        return client.match(call["state"], call["question"], call["criteria"])


def litellm_systemone(job: dict, call: dict) -> dict:
    import litellm

    response = litellm.systemone(
        model="typesafe/demo", api_base=job["url"], api_key=job["key"], state=call["state"], questions=call["questions"]
    )
    return response.model_dump(mode="json", include={"model", "answers", "usage"})


def litellm_guardrail(job: dict, call: dict) -> dict:
    """LiteLLM's decision-model guardrail (as its proxy builds it from a `guardrails:` entry) on one request's text:
    its predicate checks go to the OpenAI Decisions API at OPENAI_BASE_URL; a check past its threshold blocks."""
    from fastapi import HTTPException
    from litellm.proxy.guardrails.guardrail_hooks.decision_model import DecisionModelGuardrail
    from litellm.types.proxy.guardrails.guardrail_hooks.decision_model import DecisionModelCheck

    os.environ["OPENAI_BASE_URL"] = job["url"]
    os.environ["OPENAI_API_KEY"] = job["key"]
    guardrail = DecisionModelGuardrail(
        guardrail_name="blink-checks",
        decision_model="openai/demo",
        checks=[DecisionModelCheck(**check) for check in call["checks"]],
        router_provider=lambda: None,
    )
    inputs = {"texts": [call["text"]]}
    try:
        asyncio.run(guardrail.apply_guardrail(inputs=inputs, request_data={}, input_type="request"))
    except HTTPException as blocked:
        return {"blocked": blocked.status_code, "detail": blocked.detail}
    return {"blocked": None}


CLIENTS = {f.__name__: f for f in (haystack_router, haystack_classifier, typesafe_eval, decisions_feels)}
CLIENTS |= {f.__name__: f for f in (decisions_match, litellm_systemone, litellm_guardrail)}


def run(job: dict, call: dict):
    try:
        return {"result": CLIENTS[call["client"]](job, call)}
    except Exception as error:  # noqa: BLE001 - what the client raised is the result
        return {"error": type(error).__name__, "text": str(error)[:2000]}


def main() -> None:
    job = json.load(sys.stdin)
    print(json.dumps([run(job, call) for call in job["calls"]], default=str))


if __name__ == "__main__":
    main()
