"""`/v1/completions`' prompts as a list and the prompt's own logprobs: `echo`, vLLM's `prompt_logprobs`.

How evaluation harnesses score a served model (lm-eval's `local-completions`: `prompt` a list of token-id lists,
`echo: true`, `logprobs: 1`, `max_tokens: 1`, temperature 0; it sums `token_logprobs[ctxlen:-1]`, the last entry
being the token generated): each prompt's tokens come back with `token_logprobs` (the first `null`: nothing
precedes it), `top_logprobs` and `text_offset`, then the generated tokens' entries, an end-of-sequence token's
included, so the last entry is always a generated one when `max_tokens` > 0 and no prompt token can go missing.

The prompt's logprobs come from one backend call for all of a request's prompts (blink.plan.PromptLogprobs), which
computes a start they share once. `max_tokens: 1` at temperature 0 takes its token from that same pass (the most
likely after the prompt), so a loglikelihood request costs one pass over its prompts.
"""

from __future__ import annotations

from typing import Any

from blink.api.openai.protocol import bad
from blink.generate.logprobs import token_entry
from blink.plan import PromptLogprobs

MAX_PROMPT_LOGPROBS = 20  # vLLM's default cap on `prompt_logprobs`


def prompts_of(prompt: Any, check_ids, max_prompts: int) -> tuple[list[str | list[int]], bool]:
    """The prompts as they will be continued (no chat template) and whether they came as a list: a non-empty
    string, a non-empty list of token ids (checked by `check_ids(ids, loc)`), or a non-empty list of either kind."""
    if isinstance(prompt, str) or _ids(prompt):
        return [_one(prompt, check_ids, ("prompt",))], False
    if not isinstance(prompt, list) or not prompt:
        raise bad(
            "`prompt` must be a string, a list of token ids, or a non-empty list of strings or of token-id lists",
            "prompt",
            kind="missing" if prompt is None else "invalid_value",
        )
    if len(prompt) > max_prompts:
        raise bad(
            f"`prompt` lists {len(prompt)} prompts; this server answers at most {max_prompts} per request: send the "
            "others in further requests",
            "prompt",
            kind="too_many_prompts",
        )
    kinds = {type(p) is str for p in prompt}
    if len(kinds) > 1:
        raise bad("`prompt` must list prompts of one kind: strings, or token-id lists", "prompt")
    return [_one(p, check_ids, ("prompt", i)) for i, p in enumerate(prompt)], True


def _ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(t) is int for t in value)


def _one(prompt: Any, check_ids, loc: tuple) -> str | list[int]:
    if isinstance(prompt, str):
        if not prompt:
            raise bad("a prompt must not be empty", *loc)
        return prompt
    if not _ids(prompt):
        raise bad("a prompt must be a non-empty string or a non-empty list of token ids", *loc)
    check_ids(prompt, loc)
    return list(prompt)


def prompt_logprobs_of(body: dict) -> int | None:
    """vLLM's `prompt_logprobs`: how many alternatives per prompt token (0-20; 0: the token itself only)."""
    value = body.get("prompt_logprobs")
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= MAX_PROMPT_LOGPROBS:
        raise bad(
            f"`prompt_logprobs` must be an integer from 0 to {MAX_PROMPT_LOGPROBS} (-1, the whole vocabulary, is "
            f"not served), got {value!r}",
            "prompt_logprobs",
        )
    return value


def greedy_step(scored: PromptLogprobs, tokenizer, hidden: frozenset[int], eos: set[int], top: int):
    """`max_tokens: 1` at temperature 0, read from the prompt's own pass: (text, the token's entry, finish)."""
    token, logprob = scored.top[-1][0]
    entry = token_entry(tokenizer, hidden, token, logprob)
    entry["top_logprobs"] = [token_entry(tokenizer, hidden, t, lp) for t, lp in scored.top[-1][:top]]
    text = "" if token in hidden else tokenizer.decode([token], skip_special_tokens=False)
    return text, entry, "stop" if token in eos else "length"


def echoed_entries(tokenizer, ids: list[int], scored: PromptLogprobs, top: int) -> list[dict]:
    """The prompt's tokens as logprob entries (special tokens shown as they were sent): the first with no logprob
    and no alternatives (`null` in the legacy shape), the others scored after the tokens before them."""
    nothing = frozenset()
    entries = [token_entry(tokenizer, nothing, ids[0], None) | {"top_logprobs": None}]
    for i, token in enumerate(ids[1:]):
        entry = token_entry(tokenizer, nothing, token, scored.token_logprobs[i])
        entry["top_logprobs"] = [token_entry(tokenizer, nothing, t, lp) for t, lp in scored.top[i][:top]]
        entries.append(entry)
    return entries


def vllm_prompt_logprobs(tokenizer, ids: list[int], scored: PromptLogprobs, n: int) -> list:
    """vLLM's `prompt_logprobs`: `null` for the first token, then per token `{id: {logprob, rank,
    decoded_token}}` for the token itself and the `n` most likely (ids as JSON keys)."""
    out: list = [None]
    for i, token in enumerate(ids[1:]):
        position = {token: (scored.token_logprobs[i], scored.ranks[i])}
        for rank, (t, lp) in enumerate(scored.top[i][:n], start=1):
            position.setdefault(t, (lp, rank))
        out.append(
            {
                str(t): {"logprob": lp, "rank": rank, "decoded_token": tokenizer.decode([t], skip_special_tokens=False)}
                for t, (lp, rank) in position.items()
            }
        )
    return out
