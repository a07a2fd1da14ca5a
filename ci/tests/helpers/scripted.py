"""The scripted stand-in for the network in the chat tests (test_openai_tools, test_openai_reasoning, test_ai_sdk):
the next token comes from a script chosen by `script=<name>` in the last user message, so everything after the model
(the decode loop, the app, the wire) is the real code. The tools the scripts call, the scripts, `ask`, and
`scripted_context` (the real app's context with this model as its network)."""

from __future__ import annotations

import re
import time
from types import SimpleNamespace

import torch

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Web search",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    },
]

SCRIPTS = {
    "tagged": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "tagged2": (
        'I will look both up.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n'
        '</tool_call>\n<tool_call>\n{"name": "search", "arguments": {"q": "Oslo events"}}\n</tool_call>'
    ),
    "xml": ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"),
    "namexml": '<function_call><name>get_weather</name><arguments>{"city": "Paris"}</arguments></function_call>',
    "bare": '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    "fenced": '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
    "prose": 'A call looks like {"name": "get_weather", "arguments": {"city": "Paris"}} in JSON.',
    "plain": "The weather in Paris is mild today, with light wind from the west.",
    "stopper": "alpha beta STOP gamma delta",
    # an instance of ci/js/ai-sdk.mjs's schema, written as the grammar allows it (blink.generate.structured's
    # JSON_OPTIONS: ", " and ": ", no other whitespace; properties in the schema's order)
    "weather": '{"city": "Paris", "temperature_c": 21, "conditions": "sunny", "tags": ["mild", "breezy"]}',
    # with thinking on (ci/tests/test_openai_reasoning.py)
    "think": "<think>\nThe user asks about Paris.\nIt is mild there.\n</think>\n\nThe weather in Paris is mild.",
    "thinkcall": (
        '<think>\nI should look it up.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city": "Paris"}}\n</tool_call>'
    ),
}
FORMATS = ["tagged", "xml", "namexml", "bare", "fenced"]


class ScriptedModel(torch.nn.Module):
    """A stand-in for the network only: the next token comes from a script, not from weights.
    Script `forever` never ends (for disconnects); `slow` waits before its first token (keep-alives);
    `boom` fails after a few tokens (errors mid-stream)."""

    def __init__(self, config, tokenizer, step_delay: float = 0.0):
        super().__init__()
        self.config = config
        self.generation_config = SimpleNamespace(eos_token_id=tokenizer.eos_token_id, do_sample=False)
        self.tokenizer = tokenizer
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.vocab = len(tokenizer)
        self.step_delay = step_delay
        self.forwards = 0

    def forward(self, input_ids, cache=None, **kwargs):
        self.forwards += 1
        state = getattr(cache, "_script", None)
        if state is None:  # prefill: pick the script named in the prompt
            prompt = self.tokenizer.decode(input_ids[0].tolist())
            name = re.findall(r"script=(\w+)", prompt)[-1]
            state = cache._script = {"name": name, "queue": [], "steps": 0}
            if name == "slow":
                time.sleep(1.2)
                state["queue"] = self.tokenizer.encode("finally here")
            elif name in SCRIPTS:
                state["queue"] = self.tokenizer.encode(SCRIPTS[name])
        state["steps"] += 1
        if state["name"] == "forever":
            time.sleep(0.02)
            token = self.tokenizer.encode(" tick")[0]
        elif state["name"] == "boom" and state["steps"] > 3:
            raise RuntimeError("the accelerator caught fire")
        elif state["name"] == "boom":
            token = self.tokenizer.encode(" ok")[0]
        else:
            token = state["queue"].pop(0) if state["queue"] else self.tokenizer.eos_token_id
        time.sleep(self.step_delay)
        logits = torch.full((1, 1, self.vocab), -1e4)
        logits[0, 0, token] = 1e4
        return SimpleNamespace(logits=logits)


def scripted_context(demo_dir, served_model_name: str, enable_thinking: bool = False) -> SimpleNamespace:
    """The real app's context (blink.server.build_context) over the demo model's config and tokenizer, with a
    `ScriptedModel` as the chat network: `ctx` for `create_app`, and its `model` and `tokenizer`."""
    from blink.generate.chat_engine import ChatEngine
    from blink.model.loading import Loaded, load
    from blink.server import ServedModel, build_context, build_engine
    from blink.settings import Settings

    loaded = load(str(demo_dir))
    model = ScriptedModel(loaded.model.config, loaded.tokenizer)
    engine = ChatEngine(Loaded(model, loaded.tokenizer, loaded.root), enable_thinking=enable_thinking)
    settings = Settings(model=str(demo_dir), served_model_name=served_model_name, enable_thinking=enable_thinking)
    ctx = build_context(settings, ServedModel(loaded, build_engine(settings, loaded), engine))
    return SimpleNamespace(ctx=ctx, model=model, tokenizer=loaded.tokenizer)


def ask(name: str) -> list[dict]:
    return [{"role": "user", "content": f"What's the weather in Paris? script={name}"}]
