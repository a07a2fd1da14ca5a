"""blink's standalone server with its decisions and chat answered by vLLM replicas (test code only).

    python ci/tests/vllm_entry.py MODEL_DIR PORT URL[,URL...]

The wiring `serve --engine vllm --engine-url URL[,URL...]` will do: blink loads the model folder for its
tokenizer and templates, its decision service calls `VllmScorer.score_many` instead of the local executor,
chat calls `VllmChat.generate`, and /healthz lists the replicas. Everything else is blink's own server.
"""

import sys

from blink.chat import ChatEngine
from blink.loading import load
from blink.server import build_context, create_app
from blink.settings import Settings
from blink.vllm import Replicas, VllmChat, VllmScorer


def main() -> None:
    model_dir, port, urls = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    import uvicorn

    settings = Settings(model=model_dir, served_model_name="blink-qwen3-demo")
    loaded = load(model_dir)
    replicas = Replicas(urls)
    chat_engine = ChatEngine(loaded, settings.limits, max_output_tokens=settings.max_output_tokens)
    # warmup=False: the local executor is not what answers here (and can't run this architecture yet)
    remote_chat = VllmChat(replicas, chat_engine)
    ctx = build_context(
        settings,
        decide=VllmScorer(replicas).score_many,
        chat=lambda ids, params, caller=None: remote_chat.generate(ids, params),
        loaded=loaded,
        warmup=False,
        chat_engine=chat_engine,
        live_health=[lambda: {"vllm": replicas.health()}],
    )
    uvicorn.run(create_app(ctx), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
