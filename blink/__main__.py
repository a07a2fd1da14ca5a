"""`python -m blink serve ...`, `python -m blink run-batch ...`, `python -m blink calibrate ...`,
`python -m blink task fit ...` and `python -m blink make-demo-model [DIR]`.

Nothing from the Hugging Face libraries is imported before the arguments are read: serving a local folder
must switch them offline first (they read their settings once, at import).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys


def main(argv: list[str] | None = None) -> None:
    from blink.errors import StartupError

    try:
        run_command(argv)
    except StartupError as error:  # a setting or a model the server cannot start with: one line, exit status 1
        raise SystemExit(str(error)) from None


def run_command(argv: list[str] | None) -> None:
    from blink.settings import Listen, Settings
    from blink.settings_flags import add_arguments, from_args

    parser = argparse.ArgumentParser(prog="python -m blink", description="blink: typed decisions over HTTP")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser(
        "serve",
        help="serve /v1/systemone, the OpenAI routes (/v1/chat/completions, /v1/responses, /v1/completions, "
        "/v1/decisions), /v1/models and /healthz",
    )
    add_arguments(serve.add_argument_group("listening"), Listen)
    add_arguments(serve.add_argument_group("serving (blink/settings.py)"), Settings)

    demo = commands.add_parser("make-demo-model", help="write a small random-weight Qwen3.5 model (offline)")
    demo.add_argument(
        "dir",
        nargs="?",
        help="where to write it (default: a folder named after the options in $BLINK_DEMO_DIR or ~/.cache/blink, "
        "outside the checkout; its path is printed)",
    )
    demo.add_argument(
        "--shape",
        choices=("demo", "large"),
        default="demo",
        help="demo: 16M params (tests); large: ~150M params (CPU benchmarks)",
    )
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument(
        "--arch",
        choices=("qwen3_5", "qwen3"),
        default="qwen3_5",
        help="qwen3_5: the hybrid architecture blink serves; qwen3: plain attention (vLLM's CPU build)",
    )

    from blink.decide.calibrate_command import add_arguments as add_calibrate_arguments

    calibrate = commands.add_parser(
        "calibrate", help="fit a temperature per question type to labelled requests and write calibration.json"
    )
    add_calibrate_arguments(calibrate)

    from blink.run_batch.command import add_arguments as add_batch_arguments

    batch = commands.add_parser(
        "run-batch",
        help="decide an OpenAI batch file (-i IN -o OUT) or a table (--table IN --state-column C --questions Q.json "
        "-o OUT) in this process; resumable: run it again to finish (docs/batch.md)",
    )
    add_batch_arguments(batch)

    from blink.run_batch.task_command import add_arguments as add_task_arguments

    task = commands.add_parser("task", help="tasks: a named decision fitted to its labels (docs/tasks.md)")
    add_task_arguments(task)

    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(args, "log_level", "info").upper(), format="%(asctime)s %(name)s %(message)s")

    if args.command == "make-demo-model":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from blink.model.demo import made_dir, make_demo_model

        out = args.dir or made_dir(args.shape, args.seed, args.arch)
        print(make_demo_model(out, args.shape, args.seed, arch=args.arch))
        return

    if args.command == "calibrate":
        from blink.decide.calibrate_command import run as calibrate

        sys.exit(calibrate(args))

    if args.command == "run-batch":
        from blink.run_batch.command import STOPPED
        from blink.run_batch.command import run as run_batch

        try:
            sys.exit(run_batch(args))
        except KeyboardInterrupt:  # before any row was sent (loading the model): nothing to finish
            sys.exit(STOPPED)

    if args.command == "task":
        from blink.run_batch.task_command import run as run_task

        sys.exit(run_task(args))

    settings, listen = from_args(args, Settings), from_args(args, Listen)
    for secret in ("--api-key", "--engine-api-key"):
        if any(a == secret or a.startswith(secret + "=") for a in (sys.argv[1:] if argv is None else argv)):
            # the command line is readable by every user of the machine (ps, /proc/<pid>/cmdline)
            logging.getLogger("blink").warning(
                "%s puts the key in the process list, where any user of this machine can read it; set %s instead",
                secret,
                "BLINK_" + secret.removeprefix("--").replace("-", "_").upper(),
            )
    from blink.model.loading import go_offline_if_local

    go_offline_if_local(settings.model)  # before any Hub library is imported
    from blink.server import serve

    try:
        serve(settings, listen.host, listen.port, listen.log_level, cors_origins=listen.cors_origins)
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
