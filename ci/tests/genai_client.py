"""google-genai's own client, run by ci/tests/test_gemini.py in `.venv-genai` (ci/genai-venv.sh builds it).

Reads one job (JSON on stdin): `url`, and optionally `api_version`, `key`, `attempts` (google-genai's retry
attempts, the first call included), `threads` (each call made that many times at once) and `calls`, a list of
`{"decide": {model, input, questions}}` or `{"models": true}`. Prints one JSON line: per call what google-genai
got (`raw`: the body, `request_id`, `answers`: each answer's class once validated by google-genai's own response
models; or `error`: the exception's class, status and body), and `statuses`: every HTTP status its client saw,
retries included.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor

from google import genai
from google.genai import decisions, types

ANSWERS = {"noul": decisions.NoulAnswer, "choice": decisions.ChoiceAnswer, "score": decisions.ScoreAnswer}
STATUSES: list[int] = []


def client(job: dict) -> genai.Client:
    options = {"base_url": job["url"], "client_args": {"event_hooks": {"response": [seen]}}}
    if job.get("api_version"):
        options["api_version"] = job["api_version"]
    if job.get("attempts"):
        options["retry_options"] = types.HttpRetryOptions(attempts=job["attempts"])
    return genai.Client(api_key=job.get("key") or "unused", http_options=types.HttpOptions(**options))


def seen(response) -> None:
    STATUSES.append(response.status_code)


def validated(raw: dict) -> dict:
    """Each answer's class, once google-genai's own models validate it: the whole response, and each answer alone
    against its type's model (the response's union would take an answer no variant validates as an unknown one)."""
    parsed = decisions.CreateDecisionResponse.model_validate(raw)
    out = {}
    for qid, answer in raw["answers"].items():
        model = ANSWERS[answer["type"]]
        model.model_validate(answer, strict=True)
        assert isinstance(parsed.answers[qid], model), (qid, type(parsed.answers[qid]))
        out[qid] = model.__name__
    return out


def decide(genai_client: genai.Client, request: dict) -> dict:
    try:
        response = genai_client.decisions.with_raw_response.create(**request)
        raw = response.json()
        return {
            "raw": raw,
            "request_id": response.request_id,
            "answers": validated(raw),
            "parsed": bool(response.parse()),
        }
    except Exception as error:  # noqa: BLE001 - what the client raised is the result
        return {"error": type(error).__name__, "status": getattr(error, "status_code", None), "body": body_of(error)}


def body_of(error: Exception):
    body = getattr(error, "body", None)
    if isinstance(body, str):
        try:
            return json.loads(body)
        except ValueError:
            return body
    return body if isinstance(body, (dict, list)) else None


def models(genai_client: genai.Client) -> dict:
    listed = list(genai_client.models.list())
    one = genai_client.models.get(model=listed[0].name)
    return {
        "names": [m.name for m in listed],
        "get": {"name": one.name, "actions": one.supported_actions, "input_token_limit": one.input_token_limit},
    }


def run(genai_client: genai.Client, call: dict):
    return models(genai_client) if "models" in call else decide(genai_client, call["decide"])


def main() -> None:
    job = json.load(sys.stdin)
    genai_client = client(job)
    results = []
    for call in job["calls"]:
        threads = job.get("threads", 1)
        if threads == 1:
            results.append(run(genai_client, call))
        else:
            with ThreadPoolExecutor(threads) as pool:
                results.append(list(pool.map(run, [genai_client] * threads, [call] * threads)))
    print(json.dumps({"results": results, "statuses": STATUSES}))


if __name__ == "__main__":
    main()
