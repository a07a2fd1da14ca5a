"""What a decision's own steps outside the model cost, and what this machine adds when the thread has been idle.

    .venv/bin/python bench/latency/wake.py [--model demo] [--reps 200] [--questions 6] [--tokens 64]

The main-process steps of one decision, in this process, on the planner the server uses: the body's JSON parsed
(`safejson.loads`), `check`, `plan` (render and tokenize), `answer` from scores, and the response's JSON. Only
those steps are timed, four ways, alternating request by request so that all four share the machine's noise:
- **back to back**: the steps of the next request right after the previous one's (a thread that never idles);
- **after a 25 ms sleep**: the thread slept as long as the demo model's pass takes (a server's event loop waits
  like this for every answer while its client waits);
- **after a 25 ms spin**: the thread stayed on the CPU for as long, doing nothing;
- **after a pass**: the request's real forward pass ran first (on the compute thread, as served).

If the steps cost much more after a sleep than after a spin, the difference is the CPU coming back from idle
(caches, predictors and clock a virtual CPU loses while it waits), not the code and not the model's pass.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import workload

WAYS = ("back to back", "after a 25 ms sleep", "after a 25 ms spin", "after a pass")
IDLE_S = 0.025


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="demo")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--questions", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()

    from blink.server import load_served
    from blink.settings import Settings
    from blink.web.safejson import loads

    engine = load_served(Settings(model=args.model)).planner
    questions = workload.questions(args.questions, seed=3)
    bodies = [
        json.dumps(
            {"state": workload.text_of_tokens(engine.tokenizer, args.tokens, seed=9000 + i), "questions": questions}
        ).encode()
        for i in range((args.reps + 10) * (len(WAYS) + 1))
    ]
    engine.warmup()
    print(f"uptime: {os.popen('uptime').read().strip()}")
    print(f"{args.model}: a {args.tokens}-token state x {args.questions} questions, {args.reps} reps per way\n")

    def steps(raw: bytes) -> float:
        t = time.perf_counter()
        answers = engine.answer(engine.plan(engine.check(loads(raw))), scores)
        json.dumps({"answers": answers}, ensure_ascii=False, separators=(",", ":"))
        return time.perf_counter() - t

    # one request's scores, to answer from (answering reads them; which request they came from doesn't matter)
    first = engine.prepare(json.loads(bodies[0]))
    scores = engine.score([first.prompts])[0].result()
    got = {way: [] for way in WAYS}
    bodies_left = iter(bodies)
    for rep in range(args.reps + 10):
        for way in WAYS if rep % 2 == 0 else WAYS[::-1]:
            raw = next(bodies_left)
            if way == "after a 25 ms sleep":
                time.sleep(IDLE_S)
            elif way == "after a 25 ms spin":
                until = time.perf_counter() + IDLE_S
                while time.perf_counter() < until:
                    pass
            elif way == "after a pass":
                engine.score([first.prompts])
            else:
                steps(next(bodies_left, raw))  # the previous request's steps, untimed
            seconds = steps(raw)
            if rep >= 10:
                got[way].append(seconds * 1000)
    base = statistics.median(got["back to back"])
    print("| the steps outside the model | median ms | / back to back |")
    print("|---|---|---|")
    for way in WAYS:
        median = statistics.median(got[way])
        print(f"| {way} | {median:.3f} | {median / base:.2f}x |")
    print(f"\nuptime: {os.popen('uptime').read().strip()}")


if __name__ == "__main__":
    main()
