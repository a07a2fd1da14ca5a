"""A check more than one test runs on engines over the same model with the prefix cache on and off: resumed
states share and keep their saved tensors and answer as the uncached engine does. It imports torch and blink
when called, so importing `helpers` stays light."""

from __future__ import annotations

import random

from helpers.bodies import random_request, worst


def check_resumes_share_and_keep_saved_states(on, off, rng: random.Random) -> None:
    """Engines over one model, the prefix cache on and off: a state resumed several times, its suffixes cut into
    several passes (so the prefix's tensors are shared by reordered copies of its structure), answers as the
    uncached engine does, and leaves every saved tensor bit for bit as it was; `reorder_cache` replaces every
    tensor of a cache (what sharing them rests on)."""
    import torch

    from blink.executor.prefix_cache import layer_tensors, shared_structure

    body = random_request(rng, 3)
    on.decide(body)  # the state is saved
    entries = on.executor.prefix_cache.entries
    before = {key: [t.clone() for _, _, t in layer_tensors(entry.cache)] for key, entry in entries.items()}
    rows = on.executor.max_rows
    on.executor.max_rows = 2  # several suffix passes: every one but the last reorders a shared copy
    try:
        for _ in range(3):
            again = {**body, "questions": random_request(rng, 5)["questions"]}
            prepared = on.prepare(again)
            (a,), (b,) = on.score([prepared.prompts]), off.score([prepared.prompts])
            assert a.cached_tokens > 0
            assert worst(on.answer(prepared, a.result()), off.answer(prepared, b.result())) <= 1e-6
    finally:
        on.executor.max_rows = rows
    for key, tensors in before.items():
        assert all(torch.equal(x, y) for x, y in zip(tensors, (t for _, _, t in layer_tensors(entries[key].cache))))
    saved = next(iter(entries.values())).cache
    copy = shared_structure(saved)
    copy.reorder_cache(torch.tensor([0, 0]))
    assert not {id(t) for _, _, t in layer_tensors(copy)} & {id(t) for _, _, t in layer_tensors(saved)}
