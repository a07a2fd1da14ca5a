"""`python -m blink run-batch`: an OpenAI batch file (`-i IN -o OUT`, vLLM's flags) or a table (`--table IN
--state-column C --questions Q.json -o OUT`) decided in this process, through the same routes `serve` answers.

What can be refused without the model is refused before it loads (a missing column, names the columns there are;
questions that are not valid, say why); then the model loads, the sidecar is checked (blink.run_batch.journal) and
the rows not yet written are decided. Exit status: 0 when every row has its line (answers or errors), 1 for a
refusal before any work, 3 when stopped by a signal (run it again with the same arguments to finish).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import time

import orjson

from blink.errors import StartupError

STOPPED = 3
MAX_CHUNK_ROWS = 65536
# serve's defaults are for interactive callers (no window: the first request goes at once); a batch keeps the
# engine fed instead: many decisions per model call (600 demo rows: ~130 rows/s with a 10 ms window, ~55 without).
# No prefix-state cache: a table's states are new row after row, and saving each costs more than it ever gives back
# (the same 600 rows: ~23 rows/s with the default cache); --prefix-cache-mib turns it on for tables that repeat states
BATCH_DEFAULTS = {"batch_window_ms": 10.0, "max_batch_requests": 64, "max_queued_requests": 64, "prefix_cache_mib": 0}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from blink.batch.tables import FORMATS
    from blink.settings import Settings
    from blink.settings_flags import add_arguments as add_settings

    io = parser.add_argument_group("input and output")
    io.add_argument("-i", "--input-file", help="an OpenAI batch file: JSON lines {custom_id, method, url, body}")
    io.add_argument("--table", help="a table to label instead (CSV, JSONL or Parquet): one decision per row")
    io.add_argument("-o", "--output-file", required=True, help="batch output lines, or the labelled table")
    io.add_argument(
        "--state-column",
        action="append",
        help="the table's column that is the state (repeat it: several columns make a JSON state)",
    )
    io.add_argument("--questions", help="a JSON file holding a System One `questions` object, asked of every row")
    io.add_argument(
        "--task",
        metavar="FILE",
        help="decide each row as this task (python -m blink task fit writes one; docs/tasks.md): its questions "
        "(no --questions), its fit, and a column per question saying whether its answer is certified",
    )
    io.add_argument("--table-format", choices=FORMATS, help="the table's format (default: its extension)")
    io.add_argument("--output-format", choices=FORMATS, help="the output table's format (default: its extension)")
    io.add_argument(
        "--answer-prefix",
        default="blink",
        help="the answer columns' prefix (default blink; another "
        "is chosen when an input column already starts with it)",
    )
    io.add_argument(
        "--label",
        action="append",
        metavar="QUESTION=COLUMN",
        help="a column holding QUESTION's true answers (repeat it): an evaluation report is written beside the "
        "output (OUT.report.json: docs/batch.md)",
    )
    io.add_argument(
        "--alpha",
        type=float,
        metavar="A",
        help="with --label: the report certifies the confidence at which at most A of the answers are wrong "
        "(default 0.05)",
    )
    io.add_argument(
        "--delta",
        type=float,
        metavar="D",
        help="with --label: the chance the certificate's promise fails (default 0.05; docs/batch.md)",
    )
    io.add_argument("--chunk-rows", type=int, default=256, help="rows per chunk: the unit written and resumed")
    io.add_argument("--overwrite", action="store_true", help="start again: remove the output and its progress")
    io.add_argument("--quiet", action="store_true", help="print nothing but errors")
    io.add_argument(
        "--progress-every",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between progress lines where stderr is not a terminal (default 5; a terminal gets a bar)",
    )
    cluster = parser.add_argument_group("on a Ray cluster (tables only; needs ray[data]: docs/batch.md)")
    cluster.add_argument("--ray", metavar="ADDRESS", help="a Ray cluster's address, or `local` to start one here")
    cluster.add_argument("--ray-actors", type=int, default=1, help="blink engines on the cluster (default 1)")
    cluster.add_argument("--ray-cpus", type=float, default=1.0, help="CPUs per engine, fractions allowed (default 1)")
    cluster.add_argument("--ray-gpus", type=float, default=0.0, help="GPUs per engine, fractions allowed (default 0)")
    add_settings(parser.add_argument_group("the model and the engine (serve's flags)"), Settings)
    parser.set_defaults(**{k: v for k, v in BATCH_DEFAULTS.items() if f"BLINK_{k.upper()}" not in os.environ})


def run(args) -> int:
    return planned(args).execute()


def planned(args) -> Plan:
    """The run's plan, with everything refusable before the model loads refused."""
    from blink.settings import Settings
    from blink.settings_flags import from_args

    settings = dataclasses.replace(from_args(args, Settings), api_key=None, metrics=False)
    plan = Plan(args, settings)  # refusals that need no model
    note = plan.table.dialect.note() if plan.table is not None else None
    if note and not args.quiet:  # what a person may not expect of their file, before the minutes of work
        print(f"run-batch: {plan.input}: {note}", file=sys.stderr, flush=True)
    from blink.model.loading import go_offline_if_local

    go_offline_if_local(settings.model)
    return plan


class Plan:
    def __init__(self, args, settings):
        from blink.batch import tables

        self.args, self.settings = args, settings
        if bool(args.input_file) == bool(args.table):
            raise StartupError("run-batch: give either -i/--input-file (a batch file) or --table (a table)")
        if args.ray and not args.table:
            raise StartupError("run-batch --ray labels tables (--table); a batch file (-i) runs on one machine")
        if args.ray and (args.ray_actors < 1 or args.ray_cpus < 0 or args.ray_gpus < 0):
            raise StartupError("--ray-actors must be 1 or more, --ray-cpus and --ray-gpus 0 or more")
        self.input = args.input_file or args.table
        if not os.path.isfile(self.input):
            raise StartupError(f"{self.input}: no such file")
        if os.path.getsize(self.input) == 0:
            raise StartupError(f"{self.input} is empty: there is nothing to decide")
        if not 1 <= args.chunk_rows <= MAX_CHUNK_ROWS:  # a chunk's rows are held until it is written
            raise StartupError(f"--chunk-rows must be between 1 and {MAX_CHUNK_ROWS}")
        if not 0.1 <= args.progress_every <= 3600:
            raise StartupError("--progress-every must be between 0.1 and 3600 seconds")
        if os.path.exists(args.output_file) and os.path.samefile(self.input, args.output_file):
            raise StartupError(f"{args.output_file} is the input: write the output to another file")
        self.table = self.questions = self.report = self.facts = None
        self.labels: dict[str, str] = {}
        if args.label and not args.table:
            raise StartupError("run-batch --label evaluates a table (--table): a batch file's lines carry no labels")
        self.certify = self._certify_arguments()
        self.task = self._task()
        if args.table:
            self.table = tables.Table(self.input, tables.format_of(self.input, args.table_format), self._max_bytes)
            if not self.table.has_rows():  # the Sheet refuses it too; an output of no rows would have no header
                raise StartupError(f"{self.input} has no rows after its header: there is nothing to decide")
            self.out_format = tables.format_of(args.output_file, args.output_format)
            self._check_table_arguments()

    def _task(self) -> dict | None:
        """--task: the task file, read and checked (bound to the weights once they load)."""
        from blink.tasks.task_file import read

        args = self.args
        if not args.task:
            return None
        if not args.table or args.ray:
            raise StartupError("run-batch --task decides a table (--table) on one machine (not --ray)")
        if args.questions:
            raise StartupError("--task asks the task's own questions: leave out --questions")
        task = read(args.task)
        self.settings = dataclasses.replace(self.settings, tasks=(args.task,))
        return task

    def _certify_arguments(self) -> dict:
        from blink.tasks.certify import ALPHA, DELTA, check

        args = self.args
        if (args.alpha is not None or args.delta is not None) and not args.label:
            raise StartupError("--alpha and --delta set the certificate of an evaluation: they need --label")
        chosen = {
            "alpha": ALPHA if args.alpha is None else args.alpha,
            "delta": DELTA if args.delta is None else args.delta,
        }
        why = check(**chosen)
        if why:
            raise StartupError(f"run-batch: {why}")
        return chosen

    @property
    def _max_bytes(self) -> int:
        from blink.batch.requests_file import ENVELOPE_BYTES

        return self.settings.max_body_bytes + ENVELOPE_BYTES

    def _check_table_arguments(self) -> None:
        args, columns = self.args, self.table.columns
        if not args.state_column:
            raise StartupError(f"--table needs --state-column (the columns of {self.input}: {', '.join(columns)})")
        missing = [c for c in args.state_column if c not in columns]
        if missing:
            raise StartupError(
                f"{self.input} has no column {', '.join(map(repr, missing))}; its columns: {', '.join(columns)}"
            )
        if self.task is not None:
            self.questions = self.task["questions"]
        elif not args.questions:
            raise StartupError("--table needs --questions (a JSON file holding a System One `questions` object)")
        else:
            self._read_questions()
        from blink.tasks.labelled import parse_labels, report_path

        self.labels = parse_labels(args.label, self.questions, columns, args.state_column)
        report = report_path(args.output_file)
        for path in (report, report.with_suffix(".html")) if self.labels else ():
            if path.exists() and os.path.samefile(self.input, path):
                raise StartupError(f"--label would write its report over the input ({path}): name the output otherwise")

    def _read_questions(self) -> None:
        args = self.args
        try:
            with open(args.questions, "rb") as fh:
                self.questions = orjson.loads(fh.read())
        except (OSError, orjson.JSONDecodeError) as error:
            raise StartupError(f"--questions {args.questions}: {error}") from None
        if isinstance(self.questions, dict) and isinstance(self.questions.get("questions"), dict):
            self.questions = self.questions["questions"]  # a whole request's file: its questions
        if not isinstance(self.questions, dict) or not self.questions:
            raise StartupError(
                f"--questions {args.questions}: a JSON object of questions by id, e.g. "
                '{"urgent": {"type": "noul", "instructions": "Is it urgent?"}}'
            )

    def execute(self) -> int:
        from blink.batch.inproc import InProcess
        from blink.run_batch.journal import Journal
        from blink.server import build_context, create_app, load_served

        served = load_served(self.settings)
        ctx = build_context(self.settings, served)
        self.answers = self._answers(ctx) if self.table is not None else None
        journal = Journal(self.args.output_file, self._facts(ctx, served), self.args.overwrite)
        if journal.complete:
            if not self.args.quiet:
                print(f"run-batch: {self.args.output_file} is complete already (nothing to do)", flush=True)
            code = 0
        elif self.args.ray:
            from blink.run_batch import ray_run

            code = ray_run.run(self, ctx, served, journal)
        else:
            client = InProcess(create_app(ctx, metrics=False), retry_s=self.settings.batch_retry_s)
            code = asyncio.run(self._run(ctx, client, journal))
        self.facts = journal.facts
        if code == 0 and self.labels:
            self.report = self._report(journal.facts)
        return code

    def _report(self, facts: dict) -> dict:
        """The evaluation of a labelled table, written beside it once every row is (blink.tasks.labelled)."""
        from blink.batch.tables import Table
        from blink.tasks.labelled import questions_of, report_of, report_path, summary
        from blink.tasks.report_page import page

        started = time.perf_counter()
        # an output line is its input line plus the answer columns: twice the input's bound holds it
        out = Table(self.args.output_file, self.out_format, 2 * self._max_bytes)
        rows = (row for chunk, _ in out.chunks(1024) for row in chunk)
        report = report_of(rows, questions_of(self.answers), self.labels, self.answers.error_column, **self.certify)
        served = ("model", "revision", "adapter", "weights", "calibration", "answers")
        report = {"table": self.input, "output": self.args.output_file, **{k: facts.get(k) for k in served}, **report}
        report["seconds"] = round(time.perf_counter() - started, 3)  # reading the table back and the figures
        path = report_path(self.args.output_file)
        path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
        path.with_suffix(".html").write_text(page(report), encoding="utf-8")
        if not self.args.quiet:
            print(
                f"run-batch: evaluated against the labels: {path} (and .html)", *summary(report), sep="\n", flush=True
            )
        return report

    def _answers(self, ctx):
        from blink.batch.tables import Answers
        from blink.errors import InvalidRequest

        try:
            checked = ctx.planner.check({"state": "-", "questions": self.questions})
        except InvalidRequest as error:
            raise StartupError(f"--questions {self.args.questions}: {error.message}") from None
        return Answers(checked.decision.questions, self.table.columns, self.args.answer_prefix, self.task is not None)

    def _facts(self, ctx, served) -> dict:
        from blink.decide.calibration import weights_fingerprint
        from blink.run_batch.journal import FIRST_CHUNK_ROWS, input_identity

        s = self.settings
        facts = {
            "mode": "table" if self.table is not None else "requests",
            "input": input_identity(self.input),
            "chunk_rows": self.args.chunk_rows,
            "first_chunk_rows": FIRST_CHUNK_ROWS,  # the chunks' bounds (journal.chunk_sizes)
            "model": s.model,
            "revision": s.revision,
            "adapter": [s.adapter, s.adapter_revision],
            "engine": s.engine,
            "weights": weights_fingerprint(served.loaded.root, s.adapter, s.adapter_revision),
            "calibration": ctx.health["calibration"],  # what build_context read for these weights
            "answers": {"x_order": s.x_order, "x_calibration": s.x_calibration, "prior_states": list(s.prior_states)},
            "limits": vars(s.limits),
            "moderation": ctx.health.get("moderation"),
            "rerank_question": s.rerank_question,
            "served_name": s.served_name,
        }
        if self.task is not None:  # a refit task is other answers: a rerun with it starts again
            facts["task"] = {"name": self.task["name"], "version": self.task["version"]}
        if self.args.ray:
            facts["parts"] = "ray"  # its parts are Parquet: a rerun on one machine would not find them
        if self.table is not None:
            facts.update(
                questions=self.questions,
                state_columns=self.args.state_column,
                output_format=self.out_format,
                answer_columns=[name for name, _ in self.answers.columns],
            )
        return facts

    async def _run(self, ctx, client, journal) -> int:
        from blink.run_batch.progress import Progress, count_lines
        from blink.run_batch.runner import Runner, join

        sink, chunks = self._source(ctx)
        progress = Progress(None, self.args.quiet, every_s=self.args.progress_every)
        progress.resuming(self.args.output_file, journal.written(sink.ext))
        counting = asyncio.get_running_loop().run_in_executor(None, self._total, count_lines)
        counting.add_done_callback(lambda f: f.exception() is None and f.result() and progress.set_total(f.result()))
        s = self.settings
        room = s.max_batch_requests + s.max_queued_requests
        if s.max_places_per_caller:
            room = min(room, s.max_places_per_caller)
        runner = Runner(client, journal, sink, progress, room, max(1, s.max_concurrent_chats))
        seen = []
        stopped = await runner.run(counted(chunks, seen))
        if stopped:
            progress.close(stopped=True)
            if not self.args.quiet:
                print("run-batch: stopped; run the same command again to finish", flush=True)
            return STOPPED
        await asyncio.to_thread(join, journal, sink, len(seen))
        summary = progress.summary()
        journal.finished(summary)
        progress.close(summary)
        return 0

    def _total(self, count_lines) -> int | None:
        if self.table is not None and self.table.format == "parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(self.input).metadata.num_rows
        lines = count_lines(self.input)
        return max(lines - 1, 0) if self.table is not None and self.table.format == "csv" else lines

    def _source(self, ctx):
        """(the part writer, the chunks: (k, rows, the chunk as Arrow or None))."""
        from blink.batch.parts import RequestsParts, TableParts
        from blink.batch.requests_file import RequestsFile
        from blink.batch.tables import decision_rows, regroup
        from blink.run_batch.journal import chunk_sizes

        sizes = chunk_sizes(self.args.chunk_rows)
        if self.table is None:
            rows = ([row] for row in RequestsFile(self.input, self.settings.max_body_bytes).rows())
            return RequestsParts(), ((k, chunk, None) for k, (chunk, _) in enumerate(regroup(rows, sizes)))
        sink = TableParts(self.answers, self.table.format, self.out_format, self.table.dialect.delimiter)
        columns, model = self.args.state_column, ctx.served_name
        extra = {"x_task": self.task["name"]} if self.task is not None else None

        def chunks():
            start = 0
            for k, (rows, arrow) in enumerate(self.table.chunks(sizes)):
                yield k, decision_rows(rows, start, columns, self.questions, model, self.answers, extra), arrow
                start += len(rows)

        return sink, chunks()


def counted(chunks, seen: list):
    for item in chunks:
        seen.append(item[0])
        yield item
