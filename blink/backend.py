"""The backend seam: where forward passes run. The routes, the decision service and the chat service talk to a
`Backend` and never know which one it is.

Three implementations, one contract (plain data in and out, the caller passed explicitly):
- `LocalBackend` (here): blink's executor and the chat engine in this process (`python -m blink serve`, tests);
- `ZeroGpuBackend` (space/zerogpu.py): the same two steps inside `@spaces.GPU` functions, as the caller who asked,
  so their ZeroGPU quota pays;
- `VllmBackend` (blink/vllm): token ids sent to vLLM replicas.

A backend whose passes all run on one thread of this process says which (`passes_thread`, a
blink.executor.compute_thread.ComputeThread; LocalBackend on the CPU): the decision batcher then runs its batches there
instead of on a thread of its own.

`score(plans, caller)` takes a batch of decisions (one list of `plan.Prompt` per request) and returns one
`plan.Scored` per request, never raising; `generate(ids, params, caller)` (`params`: a `plan.GenerationParams`) is a
plain generator of text deltas (`str`, or `Delta` with logprobs) and exactly one final `ChatEnd`;
`prompt_logprobs(prompts, top, caller, ranks)` scores every token of each prompt (token ids) and returns one
`plan.PromptLogprobs` per prompt (each token's rank too with `ranks`; prompts that share a start share its
computation); `health()` is the backend's part of /healthz.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from blink.plan import GenerationParams, Prompt, PromptLogprobs, Scored


class Backend(Protocol):
    def score(self, plans: list[list[Prompt]], caller: Any) -> list[Scored]: ...

    def generate(self, ids: list[int], params: GenerationParams, caller: Any) -> Iterator[Any]: ...

    def prompt_logprobs(
        self, prompts: list[list[int]], top: int, caller: Any, ranks: bool = False
    ) -> list[PromptLogprobs]: ...

    def health(self) -> dict: ...


class LocalBackend:
    """Both steps in this process: the caller chooses no quota here."""

    def __init__(self, engine, chat_engine):
        # blink.decide.planner.Engine, blink.generate.chat_engine.ChatEngine
        self.engine, self.chat_engine = engine, chat_engine

    @property
    def passes_thread(self):
        return self.engine.executor.passes_thread

    def score(self, plans: list[list[Prompt]], caller: Any = None) -> list[Scored]:
        # bulk and table rows (the Batch API's, the Sheet's) save a state only where it repeats: a table never pushes
        # interactive callers' states out
        return self.engine.score(plans, saves=getattr(caller, "saves_state", True))

    def generate(self, ids: list[int], params: GenerationParams, caller: Any = None) -> Iterator[Any]:
        return self.chat_engine.generate(ids, params)

    def prompt_logprobs(
        self, prompts: list[list[int]], top: int, caller: Any = None, ranks: bool = False
    ) -> list[PromptLogprobs]:
        return self.engine.prompt_logprobs(prompts, top, ranks)

    def health(self) -> dict:
        executor = self.engine.executor
        return {
            "prefix_cache": executor.prefix_cache.stats(),
            "passes": {
                "pass_cost_tokens": executor.pass_cost_tokens,
                "max_rows": executor.max_rows,
                "pass_cache_mib": executor.pass_cache_bytes / 2**20,
            },
        }
