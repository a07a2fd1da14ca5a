"""`python -m blink serve ...` and `python -m blink make-demo-model DIR`.

Nothing from the Hugging Face libraries is imported before the arguments are read: serving a local folder
must switch them offline first (they read their settings once, at import).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys


def main(argv: list[str] | None = None) -> None:
    from .settings import add_arguments, from_args

    parser = argparse.ArgumentParser(prog="python -m blink", description="blink: typed decisions over HTTP")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve /v1/systemone, /v1/chat/completions, /v1/decisions, "
                                              "/v1/models and /healthz")
    serve.add_argument("--host", default=os.environ.get("BLINK_HOST", "127.0.0.1"), help="[BLINK_HOST]")
    serve.add_argument("--port", type=int, default=int(os.environ.get("BLINK_PORT", "8000")), help="[BLINK_PORT]")
    serve.add_argument("--log-level", default=os.environ.get("BLINK_LOG_LEVEL", "info"),
                       choices=("debug", "info", "warning", "error"), help="[BLINK_LOG_LEVEL]")
    add_arguments(serve)

    demo = commands.add_parser("make-demo-model", help="write a small random-weight Qwen3.5 model (offline)")
    demo.add_argument("dir")
    demo.add_argument("--shape", choices=("demo", "large"), default="demo",
                      help="demo: 16M params (tests); large: ~150M params (CPU benchmarks)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--arch", choices=("qwen3_5", "qwen3"), default="qwen3_5",
                      help="qwen3_5: the hybrid architecture blink serves; qwen3: plain attention (vLLM's CPU build)")

    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(args, "log_level", "info").upper(), format="%(asctime)s %(name)s %(message)s")

    if args.command == "make-demo-model":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from .demo import make_demo_model

        print(make_demo_model(args.dir, args.shape, args.seed, arch=args.arch))
        return

    settings = from_args(args)
    from .loading import go_offline_if_local

    go_offline_if_local(settings.model)  # before any Hub library is imported
    from .server import serve as run

    try:
        run(settings, args.host, args.port, args.log_level)
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
