"""`python -m blink task fit NAME --table T --state-column C --questions Q.json --label QUESTION=COLUMN -o OUT`:
a task fitted offline from a labelled table (blink.tasks.task_file).

It is `run-batch --label` (the same flags, the same resumable run, OUT and its report written as run-batch writes them)
and then the task file: per question the fit chosen on the rows not set aside and the certificate the set-aside rows
give it (the report's "fitted to these labels"), bound to these weights and this server's calibration and answer
settings.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson

from blink.errors import StartupError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from blink.run_batch.command import add_arguments as add_batch_arguments

    commands = parser.add_subparsers(dest="task_command", required=True)
    fit = commands.add_parser(
        "fit",
        help="label a table with its true answers (run-batch --label's flags), then write NAME.task.json: the fit "
        "kept per question and what it certifies (docs/tasks.md)",
    )
    fit.add_argument("name", help="the task's name: letters, digits, '.', '_' or '-' (at most 64)")
    fit.add_argument("--task-file", help="where to write the task (default: NAME.task.json beside -o)")
    add_batch_arguments(fit)


def task_path(args) -> Path:
    return Path(args.task_file) if args.task_file else Path(args.output_file).with_name(f"{args.name}.task.json")


def run(args) -> int:
    from blink.run_batch.command import planned
    from blink.tasks.task_file import make, name_problem

    why = name_problem(args.name)
    if why:
        raise StartupError(f"task fit: {why}")
    if args.task:
        raise StartupError("task fit fits a task from the table's labels: --task (deciding rows as one) is not for it")
    if not args.table or not args.label:
        raise StartupError("task fit learns from a labelled table: give --table and --label QUESTION=COLUMN")
    plan = planned(args)
    path = task_path(args)
    if path.resolve() in (Path(args.table).resolve(), Path(args.output_file).resolve()):
        raise StartupError(f"the task file {path} would be written over a table: name it with --task-file")
    code = plan.execute()
    if code:
        return code
    task = make(args.name, plan.questions, plan.report, plan.facts)
    path.write_bytes(orjson.dumps(task, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    if not args.quiet:
        print(f"task fit: wrote {path} (task {args.name!r}, version {task['version']})", flush=True)
        for qid, f in task["fitted"].items():
            t = f["certificate"]["threshold"]
            certified = f"answers at confidence >= {t:g} certified" if t is not None else "nothing certified"
            print(f"  {qid}: {f['kept']} kept; {certified}", flush=True)
    return 0
