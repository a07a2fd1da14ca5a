"""Side-by-side: xgrammar and llguidance as the constrained-decoding engine, on the demo model's tokenizer.

    .venv/bin/python bench/labels/grammar.py [--walks 4] [--max-steps 200] [--json out.json]

Both engines run in this one process on the same schemas, the same tokenizer (Qwen3.5's byte-level BPE, 248k
tokens) and the same token streams. For every schema:

- compile: the seconds from the JSON schema to a matcher whose first mask is computed (llguidance builds its
  lexer lazily, so the first mask is counted in; xgrammar's compiler cache is off);
- coverage: a feature schema comes with valid and invalid instances. Each instance is tokenized and fed to the
  matcher token by token; `enforced` = every valid instance is accepted and every invalid one refused,
  `IGNORED` = an invalid instance got through (the engine compiled the schema but does not enforce the feature:
  the dangerous case), `refused` = the engine would not compile the schema, `WRONG` = a valid instance refused;
- random walks: a random "model" (noise logits, tilted toward JSON's punctuation so strings end) samples under the
  mask until EOS is allowed and drawn; every finished text is checked with `jsonschema` (format checker on);
- per token: mask computation, mask application to a float32 logits row of the full vocabulary (xgrammar's own
  CPU kernel; for llguidance the unpacking blink does), and accepting the drawn token, timed step by step over
  the walks (medians and p95, microseconds). torch runs on one thread.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

from grammar_engines import LLGuidance, XGrammar
from grammar_schemas import FEATURES, REAL

# the measurements ----------------------------------------------------------------------------------------------
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:[^\s]*$")


def format_checker():
    """jsonschema's format checker, plus RFC 3339 date-time and URI (it checks those only with extra packages)."""
    import jsonschema

    checker = jsonschema.FormatChecker()
    checker.checks("date-time")(lambda v: not isinstance(v, str) or bool(_DATE_TIME.match(v)))
    checker.checks("uri")(lambda v: not isinstance(v, str) or bool(_URI.match(v)))
    return checker


def feed(engine, compiled, tokenizer, eos: int, instance) -> bool:
    """Does the matcher accept this instance's tokens and then EOS?"""
    ids = tokenizer(json.dumps(instance), add_special_tokens=False)["input_ids"]
    matcher = engine.matcher(compiled)
    for token in ids:
        if not engine.accept(matcher, token):
            return False
    return engine.done(matcher) and engine.accept(matcher, eos)


def coverage(engine, tokenizer, eos: int) -> list[dict]:
    import jsonschema

    rows = []
    for name, schema, valid, invalid in FEATURES:
        for v in valid:
            jsonschema.validate(v, schema, format_checker=format_checker())
        for v in invalid:
            assert not jsonschema.Draft202012Validator(schema, format_checker=format_checker()).is_valid(v), (name, v)
        try:
            compiled = engine.compile(schema)
            engine.matcher(compiled)
        except Exception as exc:
            rows.append({"feature": name, "verdict": "refused", "detail": str(exc).splitlines()[0][:120]})
            continue
        wrong = [v for v in valid if not feed(engine, compiled, tokenizer, eos, v)]
        leaked = [v for v in invalid if feed(engine, compiled, tokenizer, eos, v)]
        verdict = "WRONG" if wrong else ("IGNORED" if leaked else "enforced")
        rows.append({"feature": name, "verdict": verdict, "detail": json.dumps((wrong or leaked)[:1])[:80]})
    return rows


def punctuation_tilt(tokenizer, vocab_size: int):
    """+6 on tokens made of JSON punctuation, digits or short words, +9 on those that close a string, an object
    or an array: a random model whose texts end."""
    import torch

    tilt = torch.zeros(vocab_size)
    for token_id in range(len(tokenizer)):
        text = tokenizer.decode([token_id])
        if text and (all(c in '{}[]",: 0123456789.-' for c in text) or (text.isalpha() and len(text) <= 3)):
            tilt[token_id] = 9.0 if any(c in text for c in '"}]') else 6.0
    return tilt


def walk(engine, compiled, schema, tokenizer, eos: int, tilt, generator, max_steps: int, timings: dict):
    import jsonschema
    import torch

    matcher = engine.matcher(compiled)
    bitmask = engine.bitmask()
    produced = []
    for _ in range(max_steps):
        logits = torch.randn(tilt.shape[0], generator=generator) * 2 + tilt
        t0 = time.perf_counter()
        engine.fill(matcher, bitmask)
        t1 = time.perf_counter()
        engine.apply(logits, bitmask)
        t2 = time.perf_counter()
        token = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))
        t3 = time.perf_counter()
        ok = engine.accept(matcher, token)
        t4 = time.perf_counter()
        timings["mask"].append(t1 - t0)
        timings["apply"].append(t2 - t1)
        timings["accept"].append(t4 - t3)
        if not ok:
            return "refused its own token"
        if token == eos:
            text = tokenizer.decode(produced)
            try:
                jsonschema.validate(json.loads(text), schema, format_checker=format_checker())
            except Exception as exc:
                return f"INVALID: {type(exc).__name__}: {str(exc)[:80]} in {text[:80]!r}"
            return "valid"
        produced.append(token)
    return "unfinished"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model folder (default: the demo model)")
    parser.add_argument("--walks", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch
    from transformers import AutoConfig, AutoTokenizer

    from blink.model.demo import demo_model_dir

    torch.set_num_threads(1)
    folder = args.model or str(demo_model_dir())
    tokenizer = AutoTokenizer.from_pretrained(folder)
    vocab_size = AutoConfig.from_pretrained(folder).vocab_size
    eos = tokenizer.eos_token_id
    tilt = punctuation_tilt(tokenizer, vocab_size)
    report: dict = {"vocab_size": vocab_size, "engines": {}}
    import importlib.metadata as md

    for cls in (XGrammar, LLGuidance):
        t0 = time.perf_counter()
        engine = cls(tokenizer, vocab_size)
        setup = time.perf_counter() - t0
        version = md.version(engine.name)
        print(f"\n== {engine.name} {version}: tokenizer setup {setup:.2f} s")
        rows = coverage(engine, tokenizer, eos)
        for r in rows:
            print(f"  {r['feature']:32s} {r['verdict']:9s} {r['detail']}")
        timings = {"mask": [], "apply": [], "accept": []}
        real = []
        generator = torch.Generator().manual_seed(0)
        for name, schema, valid in REAL:
            try:
                t0 = time.perf_counter()
                compiled = engine.compile(schema)
                m = engine.matcher(compiled)
                engine.fill(m, engine.bitmask())
                compile_s = time.perf_counter() - t0
            except Exception as exc:
                real.append({"schema": name, "compile_s": None, "error": str(exc)[:120]})
                print(f"  {name:32s} refused: {str(exc)[:100]}")
                continue
            accepts = all(feed(engine, compiled, tokenizer, eos, v) for v in valid)
            outcomes = [
                walk(engine, compiled, schema, tokenizer, eos, tilt, generator, args.max_steps, timings)
                for _ in range(args.walks)
            ]
            real.append({"schema": name, "compile_s": compile_s, "accepts_valid": accepts, "walks": outcomes})
            summary = {o: outcomes.count(o) for o in dict.fromkeys(outcomes)}
            print(
                f"  {name:32s} compile {compile_s * 1000:7.1f} ms  valid example accepted: {accepts}  walks: {summary}"
            )
        us = {k: (statistics.median(v) * 1e6, sorted(v)[int(0.95 * (len(v) - 1))] * 1e6) for k, v in timings.items()}
        total = [a + b + c for a, b, c in zip(timings["mask"], timings["apply"], timings["accept"])]
        print(
            f"  per token over {len(total)} steps (median / p95 us): mask {us['mask'][0]:.0f} / {us['mask'][1]:.0f}"
            f"  apply {us['apply'][0]:.0f} / {us['apply'][1]:.0f}  accept {us['accept'][0]:.0f} / "
            f"{us['accept'][1]:.0f}  total {statistics.median(total) * 1e6:.0f} / "
            f"{sorted(total)[int(0.95 * (len(total) - 1))] * 1e6:.0f}"
        )
        report["engines"][engine.name] = {
            "version": version,
            "setup_s": setup,
            "coverage": rows,
            "real": real,
            "per_token_us": us,
        }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
