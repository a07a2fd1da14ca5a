"""`python -m blink calibrate --model M DATA.jsonl --out calibration.json`: fit a temperature per question type
(the file and the fit themselves: blink.decide.calibration).

Each line of DATA.jsonl is a System One request plus `labels`, the true answer of every question:
`{question id: option name (choice) | true/false (noul) | level index (score)}`. Every line is checked first (a bad
line is refused with its line number and reason, and nothing is fitted); then the model reads every question
exactly as the server would (a line's `x_order`, else `--x-order`), and each type's temperature is fitted to the
labels by minimising the negative log-likelihood. The report gives per type n, NLL, ECE and Brier before
(raw: T = 1) and after (the fitted T), and the file records it with the weights' fingerprint. A second table gives
accuracy, NLL and ECE with and without content-free prior normalization (`x_calibration` "prior" and
"fitted+prior", blink.decide.prior, from `--prior-states`), so a deployer can choose from their own data.

Only the standard library is imported here at module level: `python -m blink` reads its arguments before any Hub
library is imported (serving a local folder switches them offline first).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MAX_SHOWN_ERRORS = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("data", help="JSON lines: a System One request plus `labels` per line")
    parser.add_argument("--model", required=True, help="Hub repo id, local folder or `demo`")
    parser.add_argument("--revision", default=None, help="Hub revision of --model")
    parser.add_argument("--adapter", default=None, help="LoRA adapter merged into the model (as `serve --adapter`)")
    parser.add_argument("--adapter-revision", default=None, help="Hub revision of --adapter")
    parser.add_argument("--out", required=True, help="where to write the calibration file (calibration.json)")
    parser.add_argument(
        "--x-order",
        choices=("fixed", "rotate"),
        default="fixed",
        help="how choices are read on lines without their own x_order: fit it the way you serve it",
    )
    parser.add_argument("--batch", type=int, default=8, help="requests per model call")
    parser.add_argument(
        "--prior-states",
        default=None,
        help='content-free states of the prior report, a JSON array (default ["N/A", "", "[MASK]"], as the server)',
    )


class BadLine(ValueError):
    pass


def label_index(question, label) -> int:
    """The index of the true option among `question.options`; BadLine says why a label doesn't fit."""
    if question.type == "noul":
        if not isinstance(label, bool):
            raise BadLine(
                f"the label of noul question {question.name!r} must be true or false, got {json.dumps(label)}"
            )
        return question.options.index("true" if label else "false")
    if question.type == "choice":
        if not isinstance(label, str) or label not in question.options:
            raise BadLine(
                f"the label of choice question {question.name!r} must be one of its options "
                f"({', '.join(map(repr, question.options))}), got {json.dumps(label)}"
            )
        return question.options.index(label)
    levels = len(question.options)
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < levels:
        raise BadLine(
            f"the label of score question {question.name!r} must be a level index 0-{levels - 1}, "
            f"got {json.dumps(label)}"
        )
    return label


def read_line(engine, text: str):
    """One line as (prepared request, {question id: label index}); BadLine when it can't be used."""
    from blink.errors import BlinkError

    try:
        line = json.loads(text)
    except json.JSONDecodeError as error:
        raise BadLine(f"not JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(line, dict):
        raise BadLine("a line is a JSON object: a System One request plus `labels`")
    labels = line.pop("labels", None)
    if not isinstance(labels, dict) or not labels:
        raise BadLine("`labels` is required: an object mapping every question id to its true answer")
    try:
        prepared = engine.prepare(line)
    except BlinkError as error:
        where = ".".join(map(str, error.loc))
        raise BadLine(f"{error.message} (at {where})") from None
    questions = {q.name: q for q in prepared.decision.questions}
    unknown = [qid for qid in labels if qid not in questions]
    if unknown:
        raise BadLine(f"`labels` names {', '.join(map(repr, unknown))}, which the request doesn't ask")
    missing = [qid for qid in questions if qid not in labels]
    if missing:
        raise BadLine(f"question {missing[0]!r} has no label in `labels` (every question needs one)")
    return prepared, {qid: label_index(questions[qid], labels[qid]) for qid in questions}


def read_data(engine, path: Path, progress) -> tuple[list, list[str]]:
    """Every usable line as (line number, prepared, labels), and the refusals (`line N: reason`)."""
    lines, errors = [], []
    with open(path, encoding="utf-8") as fh:
        for number, text in enumerate(progress(fh, desc="reading", unit=" lines"), start=1):
            if not text.strip():
                continue
            try:
                lines.append((number, *read_line(engine, text)))
            except BadLine as error:
                errors.append(f"{path.name} line {number}: {error}")
    return lines, errors


def examples_of(prepared, labels: dict, scores, prior_logits: list | None = None) -> list:
    """(type, Example) per question of one scored line; `prior_logits`: per content-free state, the label logits
    of its reads (blink.decide.prior.PriorPlan.logits), kept in each Example for the prior report."""
    from blink.decide.answers import rows_by_question
    from blink.decide.calibration import Example

    questions = prepared.decision.questions
    logits = [row for prompt_scores in scores for row in prompt_scores]
    rows = rows_by_question(questions, prepared.readings, logits)
    per_state = [rows_by_question(questions, prepared.readings, state) for state in prior_logits or []]
    return [
        (q.type, Example(rows[q.name], labels[q.name], [s[q.name] for s in per_state] if per_state else None))
        for q in questions
    ]


def fit(by_type: dict) -> tuple[dict, dict]:
    """The fitted temperature and the before/after report of every type with examples."""
    from blink.decide.calibration import BOUNDS, TYPES, fit_temperature, metrics

    temperatures, report = {}, {}
    for kind in TYPES:
        examples = by_type.get(kind)
        if not examples:
            continue
        temperature = fit_temperature(examples)
        temperatures[kind] = round(temperature, 6)
        report[kind] = {
            "n": len(examples),
            "temperature": temperatures[kind],
            "at_bound": temperature in BOUNDS,
            "before": metrics(examples, 1.0),
            "after": metrics(examples, temperatures[kind]),
        }
        if all(e.prior_rows for e in examples):
            report[kind]["prior"] = metrics(examples, 1.0, prior=True)
            report[kind]["fitted+prior"] = metrics(examples, temperatures[kind], prior=True)
    return temperatures, report


def report_table(report: dict) -> str:
    rows = [
        f"{'type':<7}{'n':>7}{'T':>10}   {'NLL before -> after':<22}{'ECE before -> after':<22}"
        f"{'Brier before -> after':<22}"
    ]
    for kind, r in report.items():
        b, a = r["before"], r["after"]
        rows.append(
            f"{kind:<7}{r['n']:>7}{r['temperature']:>10.4f}   "
            f"{b['nll']:.4f} -> {a['nll']:.4f}      {b['ece']:.4f} -> {a['ece']:.4f}      "
            f"{b['brier']:.4f} -> {a['brier']:.4f}" + ("   (T at the search bound)" if r["at_bound"] else "")
        )
    return "\n".join(rows)


def prior_table(report: dict) -> str:
    """Accuracy, NLL and ECE of the four ways to serve (x_calibration raw, prior, fitted, fitted+prior)."""
    ways = (("raw", "before"), ("prior", "prior"), ("fitted", "after"), ("fitted+prior", "fitted+prior"))
    rows = [f"{'type':<7}{'x_calibration':<15}{'accuracy':>10}{'NLL':>10}{'ECE':>10}"]
    for kind, r in report.items():
        for name, key in ways:
            if key in r:
                m = r[key]
                rows.append(f"{kind:<7}{name:<15}{m['accuracy']:>10.4f}{m['nll']:>10.4f}{m['ece']:>10.4f}")
    return "\n".join(rows)


def run(args: argparse.Namespace) -> int:
    from blink.model.loading import go_offline_if_local

    go_offline_if_local(args.model)  # before any Hub library is imported
    from tqdm import tqdm

    from blink.decide.calibration import BOUNDS, to_file, weights_fingerprint
    from blink.decide.planner import Engine
    from blink.model.loading import load

    path, out = Path(args.data), Path(args.out)
    if not path.is_file():
        print(f"error: {path}: no such file", file=sys.stderr)
        return 2
    if args.batch < 1:
        print("error: --batch must be at least 1", file=sys.stderr)
        return 2
    from blink.decide.prior import DEFAULT_STATES
    from blink.knob_parsers import TextList

    try:
        states = DEFAULT_STATES if args.prior_states is None else TextList()(args.prior_states)
    except ValueError as error:
        print(f"error: --prior-states {error}", file=sys.stderr)
        return 2
    loaded = load(args.model, args.revision, args.adapter, args.adapter_revision)
    engine = Engine(loaded, order=args.x_order, prior_states=states)

    def progress(items=None, **kwargs):
        return tqdm(items, file=sys.stderr, mininterval=1.0, **kwargs)

    lines, errors = read_data(engine, path, progress)
    if errors:
        for error in errors[:MAX_SHOWN_ERRORS]:
            print(error, file=sys.stderr)
        more = f" ({len(errors) - MAX_SHOWN_ERRORS} more not shown)" if len(errors) > MAX_SHOWN_ERRORS else ""
        print(f"error: {len(errors)} bad line(s){more}; fix them and run again. Nothing was written.", file=sys.stderr)
        return 2
    if not lines:
        print(f"error: {path} has no labelled lines", file=sys.stderr)
        return 2

    by_type: dict = {}
    with progress(total=len(lines), desc="scoring", unit=" requests") as bar:
        for start in range(0, len(lines), args.batch):
            chunk = lines[start : start + args.batch]
            for _, prepared, _ in chunk:  # every line's content-free prompts too (kept: a question repeated is free)
                rotate = (prepared.decision.order or engine.order) == "rotate"
                prepared.prior = engine.plan_prior(prepared.decision, rotate)
            plans = [plan for _, prepared, _ in chunk for plan in (prepared.prompts, *prepared.prior_plans)]
            results = iter(engine.score(plans))
            for number, prepared, labels in chunk:
                scored = next(results)
                prior_scored = [next(results) for _ in prepared.prior_plans]
                try:
                    scores = scored.result()
                    prepared.prior.fill(prior_scored, engine.priors)
                except Exception as error:  # noqa: BLE001 - the line's failure, said with its number
                    print(f"error: {path.name} line {number}: the model failed: {error}", file=sys.stderr)
                    return 1
                for kind, example in examples_of(prepared, labels, scores, prepared.prior.logits()):
                    by_type.setdefault(kind, []).append(example)
            bar.update(len(chunk))

    temperatures, report = fit(by_type)
    fingerprint = weights_fingerprint(loaded.root, args.adapter, args.adapter_revision)
    fit_info = {
        "data": path.name,
        "lines": len(lines),
        "model": args.model,
        "revision": args.revision,
        "adapter": args.adapter,
        "x_order": args.x_order,
        "prior_states": list(states),
        "bounds": list(BOUNDS),
        "report": report,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    # the most options each type had in the data: a question past it is served raw (blink.decide.calibration)
    levels = {kind: max(len(e.rows[0]) for e in by_type[kind]) for kind in temperatures}
    document = to_file(temperatures, fingerprint, fit_info, levels)
    out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(report_table(report))
    print("\nwith and without content-free prior normalization (states " + json.dumps(list(states)) + "):")
    print(prior_table(report))
    print(f"wrote {out} (temperatures {json.dumps(temperatures)}; weights {fingerprint})")
    return 0
