"""Reranking and scoring, as the ecosystem asks for them: `POST /v1/rerank`, `/rerank`, `/v2/rerank` (the request
shapes of Cohere v1 and v2, Jina and vLLM) and `POST /v1/score`, `/score` (vLLM's `text_1` / `text_2`).

A decision model is a reranker: each document is a decision's state, and one `noul` question carries the query
(`ctx.rerank_question`, `{query}` standing for it), so a document's relevance is the probability of "yes" after
calibration and the prior as on every decision (`x_calibration` in the answer says which). Each document is its
own decision, through the one pipeline: checked before admission, a place per document (`units`), queued as one
request and scored in one call; its score is the one it gets alone, whatever else is sent with it, in any order.

Bodies: `{id, model, results: [{index, relevance_score, document?}], usage, x_calibration}` sorted by relevance
(rerank); `{id, object: "list", created, model, data: [{index, object: "score", score}], usage, x_calibration}`
(score). Errors in OpenAI's shape with a `detail` string beside it: LlamaIndex's `JinaRerank` raises
`resp["detail"]` when `results` is missing; OpenAI-style clients (LiteLLM, Open WebUI) read `error.message`.
Nothing is cut unless the client asks: `max_tokens_per_doc` (Cohere) or `truncate_prompt_tokens` (vLLM) keep a
document's first tokens; otherwise a document past the context is a 400 that names the limit.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from starlette.routing import Route

from blink.api.openai import protocol
from blink.context import Context
from blink.errors import BlinkError, InvalidRequest
from blink.web.admission import KEYED
from blink.web.endpoint import Body, Call, Endpoint, Wire

QUESTION = "relevant"  # the one question's id in each decision
RERANK_FIELDS = (
    "model",
    "query",
    "documents",
    "top_n",
    "return_documents",
    "max_tokens_per_doc",
    "truncate_prompt_tokens",
    "rank_fields",
    "x_calibration",
)
SCORE_FIELDS = ("model", "text_1", "text_2", "truncate_prompt_tokens", "x_calibration")
RERANK_PATHS = ("/v1/rerank", "/rerank", "/v2/rerank")
SCORE_PATHS = ("/v1/score", "/score")
CUT_MARGIN = 8  # tokens kept free when `truncate_prompt_tokens: -1` fits a document to the context


def render(error: BlinkError) -> tuple[int, dict]:
    status, body = protocol.render(error)
    return status, {**body, "detail": error.message}


WIRE = Wire(render, id_headers=("x-request-id", "x-typesafe-request-id"))


def bad(message: str, *loc, kind: str = "invalid_value") -> InvalidRequest:
    return InvalidRequest(message, loc=["body", *loc], kind=kind)


@dataclass
class Ranking:
    """A checked rerank or score request: one checked decision per (query, document) pair."""

    texts: list[str]  # the documents as sent (for `return_documents`)
    checked: list  # blink.decide.planner.Checked, one per pair
    where: str  # the field the documents came in ("documents", "text_2"): where a refusal points
    top_n: int = 0  # 0: every document
    return_documents: bool = True


# reading the body -------------------------------------------------------------------------------------------
def fields_of(body, known: tuple[str, ...]) -> dict:
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object", kind="invalid_type")
    unknown = [key for key in body if key not in known]
    if unknown:
        raise bad(
            f"unknown field `{unknown[0]}`: this route takes {', '.join(known)}", unknown[0], kind="unknown_field"
        )
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad("`model` must be a string", "model", kind="invalid_type")
    return body


def whole(body: dict, name: str, low: int, default=None) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise bad(f"`{name}` must be a whole number of at least {low}, got {value!r}", name)
    return value


def document_texts(raw, limits, name: str = "documents") -> list[str]:
    if not isinstance(raw, list):
        raise bad(f'`{name}` must be a list of strings or of {{"text": ...}} objects', name, kind="invalid_type")
    if not raw:
        raise bad(f"`{name}` is empty: send at least one document", name, kind="missing")
    if len(raw) > limits.max_documents:
        raise bad(
            f"`{name}` holds {len(raw)} documents; this server ranks at most {limits.max_documents} in one request",
            name,
            kind="too_many_documents",
        )
    texts = []
    for i, doc in enumerate(raw):
        if isinstance(doc, dict) and set(doc) == {"text"}:
            doc = doc["text"]
        elif isinstance(doc, dict):
            other = sorted(set(doc) - {"text"}) or ["text"]
            raise bad(f'{name}[{i}]: blink ranks text; send a string or {{"text": ...}}, not `{other[0]}`', name, i)
        if not isinstance(doc, str):
            raise bad(f'{name}[{i}] must be a string or {{"text": ...}}, got {type(doc).__name__}', name, i)
        texts.append(doc)
    return texts


def cut_to(body: dict) -> int | None:
    """The tokens a document keeps when the client asked for truncation: k, -1 (fit the context) or None."""
    per_doc = whole(body, "max_tokens_per_doc", 1)
    prompt = body.get("truncate_prompt_tokens")
    if prompt is not None and prompt != -1:
        prompt = whole(body, "truncate_prompt_tokens", 1)
    if per_doc is not None and prompt is not None:
        raise bad("send `max_tokens_per_doc` or `truncate_prompt_tokens`, not both", "truncate_prompt_tokens")
    return per_doc if per_doc is not None else prompt


class Rephrase:
    """Each (query, document) pair as a decision body, documents cut to `cut` tokens when the client asked."""

    def __init__(self, ctx: Context, body: dict, cut: int | None):
        self.ctx, self.planner, self.cut = ctx, ctx.service.planner, cut
        self.extra = {"x_calibration": body["x_calibration"]} if "x_calibration" in body else {}
        self.fits: dict[str, int] = {}  # per query, the tokens a document may keep to fit the context (cut -1)

    def questions(self, query: str) -> dict:
        wording = self.ctx.rerank_question.replace("{query}", query)
        return {QUESTION: {"type": "noul", "instructions": wording}}

    def body(self, query: str, text: str) -> dict:
        if self.cut is not None:
            text = self.first_tokens(text, self.cut if self.cut > 0 else self.room(query))
        return {"state": text, "questions": self.questions(query), **self.extra}

    def room(self, query: str) -> int:
        """What a document may hold with this query: the context less the prompt of an empty document."""
        if query not in self.fits:
            empty = self.planner.check({"state": "", "questions": self.questions(query)})
            _, framing = self.planner.prompts.counted(empty.decision)
            self.fits[query] = max(1, self.ctx.limits.max_context_tokens - framing - CUT_MARGIN)
        return self.fits[query]

    def first_tokens(self, text: str, k: int) -> str:
        """`text`'s first `k` tokens, tokenizing no more of it than k tokens can span."""
        tokenizer = self.planner.tokenizer
        head = text[: k * self.planner.prompts.longest_token + 1]
        ids = tokenizer.encode(head, add_special_tokens=False)
        return text if len(ids) <= k and len(head) == len(text) else tokenizer.decode(ids[:k])


def query_of(body: dict, name: str = "query") -> str:
    query = body.get(name)
    if not isinstance(query, str) or not query.strip():
        raise bad(f"`{name}` must be a non-empty string", name, kind="missing" if query is None else "invalid_type")
    return query


def check_rerank(ctx: Context, call: Call) -> Ranking:
    return check_rerank_body(ctx, call.body, call.arrival)


def check_rerank_body(ctx: Context, body, arrival=None) -> Ranking:
    """A rerank body (already read) checked: one checked decision per document; `arrival` (the request's count on
    its way to the batcher) goes with the first."""
    body = fields_of(body, RERANK_FIELDS)
    query = query_of(body)
    texts = document_texts(body.get("documents"), ctx.limits)
    top_n = whole(body, "top_n", 0, 0)
    returned = body.get("return_documents")
    if returned is not None and not isinstance(returned, bool):
        raise bad("`return_documents` must be true or false", "return_documents", kind="invalid_type")
    rank_fields = body.get("rank_fields")
    if rank_fields not in (None, ["text"]):
        raise bad('`rank_fields` may only be ["text"]: blink ranks a document\'s text', "rank_fields")
    pairs = Rephrase(ctx, body, cut_to(body))
    bodies = [pairs.body(query, text) for text in texts]
    checked = ctx.service.check_many(bodies, arrival, refused_at("documents", ctx.limits.max_context_tokens))
    return Ranking(texts, checked, "documents", top_n, returned is not False)


def score_pairs(body: dict) -> list[tuple[str, str]]:
    """vLLM's pairing: one text_1 against every text_2, or text_1[i] with text_2[i]."""
    one, two = body.get("text_1"), body.get("text_2")
    for name, value in (("text_1", one), ("text_2", two)):
        if value is None:
            raise bad(f"`{name}` is required: a string or a list of strings", name, kind="missing")
        if isinstance(value, list) and not value:
            raise bad(f"`{name}` is empty", name, kind="missing")
        texts = [value] if isinstance(value, str) else value
        if not isinstance(texts, list) or not all(isinstance(v, str) for v in texts):
            raise bad(f"`{name}` must be a string or a list of strings", name, kind="invalid_type")
    ones = [one] if isinstance(one, str) else one
    twos = [two] if isinstance(two, str) else two
    if len(ones) == 1:
        return [(ones[0], text) for text in twos]
    if len(ones) != len(twos):
        raise bad(
            f"`text_1` holds {len(ones)} texts and `text_2` {len(twos)}: send one text_1, or as many as text_2",
            "text_1",
        )
    return list(zip(ones, twos, strict=True))


def check_score(ctx: Context, call: Call) -> Ranking:
    body = fields_of(call.body, SCORE_FIELDS)
    pairs = score_pairs(body)
    texts = document_texts([text for _, text in pairs], ctx.limits, "text_2")
    for i, (query, _) in enumerate(pairs):
        if not query.strip():
            raise bad(f"text_1[{i}] is empty: a query is needed", "text_1", i, kind="missing")
    rephrase = Rephrase(ctx, body, cut_to(body))
    bodies = [rephrase.body(query, text) for query, text in pairs]
    checked = ctx.service.check_many(bodies, call.arrival, refused_at("text_2", ctx.limits.max_context_tokens))
    return Ranking(texts, checked, "text_2")


# answering --------------------------------------------------------------------------------------------------
def refused_at(where: str, limit: int):
    """A refusal of one document's decision, pointed at that document (`where[i]`): one past the context, or one
    of its state (a data URL is an image, refused by a model that reads text only)."""

    def at(i: int, error: BlinkError) -> BlinkError:
        if error.kind == "context_length_exceeded":
            return InvalidRequest(
                f"{where}[{i}] with the query makes a prompt past this server's context limit of {limit} tokens "
                "(document + query + framing). Nothing was truncated: shorten it, or ask for documents to be cut "
                "with `max_tokens_per_doc` (Cohere) or `truncate_prompt_tokens` (vLLM; -1 fits the context).",
                loc=["body", where, i],
                kind="context_length_exceeded",
            )
        if isinstance(error, InvalidRequest) and error.loc[:2] in (["body", "state"], ["body", "assets"]):
            return InvalidRequest(f"{where}[{i}]: {error.message}", loc=["body", where, i], kind=error.kind)
        return error

    return at


async def decide(ctx: Context, ranking: Ranking, ticket, caller=None, timing=None) -> tuple[list[float], list, dict]:
    at = refused_at(ranking.where, ctx.limits.max_context_tokens)
    decided = await ctx.service.run_many(ranking.checked, ticket, caller, timing, at)
    scores = [one.answers[QUESTION]["noul"] for one in decided]
    tokens = sum(one.input_tokens for one in decided)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    cached = sum(one.cached_tokens for one in decided)
    if cached:
        usage["x_cached_tokens"] = cached
    return scores, decided, usage


async def reranked(ctx: Context, ranking: Ranking, ticket, caller=None, timing=None) -> dict:
    """An admitted rerank's answer: the documents sorted by relevance (the first `top_n`)."""
    scores, decided, usage = await decide(ctx, ranking, ticket, caller, timing)
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    results = []
    for i in order[: ranking.top_n or None]:
        result = {"index": i, "relevance_score": scores[i]}
        if ranking.return_documents:
            result["document"] = {"text": ranking.texts[i]}
        results.append(result)
    return {
        "id": "rerank-" + uuid.uuid4().hex,
        "model": ctx.served_name,
        "results": results,
        "usage": usage,
        "x_calibration": decided[0].calibration,
    }


def documents_of(ranking: Ranking) -> int:
    return len(ranking.checked)  # a place per document: each is a decision


async def rerank_body(ctx: Context, body, *, caller=None, caller_class: str = KEYED) -> dict:
    """A rerank body (already read) answered exactly as `/v1/rerank` answers it, through the same steps: check,
    admit (a place per document), plan, batch, answer (the Space's Rank view). No entry point bypasses them."""
    check = lambda body, on_its_way: check_rerank_body(ctx, body, on_its_way)  # noqa: E731
    async with ctx.admitted_decisions(check, body, caller_class, units=documents_of) as (ranking, ticket):
        return await reranked(ctx, ranking, ticket, caller)


def routes(ctx: Context) -> list[Route]:
    async def rerank(call: Call) -> dict:
        return await reranked(ctx, call.checked, call.ticket, call.caller, call.timing)

    async def score(call: Call) -> dict:
        scores, decided, usage = await decide(ctx, call.checked, call.ticket, call.caller, call.timing)
        return {
            "id": "score-" + uuid.uuid4().hex,
            "object": "list",
            "created": int(time.time()),
            "model": ctx.served_name,
            "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
            "usage": {**usage, "completion_tokens": 0},
            "x_calibration": decided[0].calibration,
        }

    def endpoint(handler, check) -> Endpoint:
        return Endpoint(
            ctx,
            WIRE,
            handler,
            body=Body(what="rerank and score requests"),
            check=lambda call: check(ctx, call),
            admit="decide",
            arriving=ctx.service.on_its_way,
            units=documents_of,
        )

    ranked, scored = endpoint(rerank, check_rerank), endpoint(score, check_score)
    return [Route(path, ranked, methods=["POST"]) for path in RERANK_PATHS] + [
        Route(path, scored, methods=["POST"]) for path in SCORE_PATHS
    ]


def not_routed_here(ctx: Context, routes: list) -> list[Route]:
    """Another method on these paths (405 with `Allow`), or a path below them (404), in this wire's shape."""
    from blink.web.endpoint import not_routed

    return [not_routed(ctx, path, WIRE, routes) for path in (*RERANK_PATHS, *SCORE_PATHS)]
