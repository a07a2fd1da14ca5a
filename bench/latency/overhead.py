"""Issue 14's server rows, through real standalone servers on the demo model (started with the test suite's
`running`, so a stopped bench leaves no process behind).

    .venv/bin/python bench/latency/overhead.py outside [--reps 60] [--trees OTHER_CHECKOUT ...] [--block 10]
    .venv/bin/python bench/latency/overhead.py throughput --before /work/wt/before14 [--reps 2] [--mix warm|cold]

- `outside`: per request, the server's own `server-timing` total minus its `model` part (everything the server
  does that is not the forward pass: reading the body, parsing, rendering, queueing, answers, the JSON), median over
  sequential requests of a 64-token state x 1/6/16 questions. The common case: the same questions about new states
  (`new`: a state no request sent before); then the same state asked about again (`seen`: each state sent once
  with other questions first, untimed). The parts (the body's bytes arriving, prepare, queue, answer) are medians
  too, so they need not add up to the total. `--trees`: other checkouts (main before this work) served beside
  this one, every request sent to each side in alternating order; `--block N`: N requests to one side back to back,
  then N to the other (a pause between turns), where a side's threads still busy after its pass would slow the
  other side's requests (OpenMP workers spinning: bench/RESULTS.md, issue 23, eleventh session).
- `throughput`: requests/s of this tree's server and of another checkout's (`--before`, e.g. main before issue 14)
  at 1/16/64 closed-loop clients, the same bodies to both, the sides alternating rep by rep; `after / before` > 1
  means this tree serves more. Both servers run with the same flags (batching on: `--batch-window-ms 2`).
  `--mix cold`: every request a state neither server has seen (the same bodies to both).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import re
import socket
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
from offline import ROOT  # first: the repository importable, the Hub off

# isort: split

import httpx
import orjson
import workload
from servers import closed_loop

from helpers import running

CLIENTS = {1: 24, 16: 6, 64: 3}  # concurrent clients -> requests each
STATE_TOKENS = 64
BLOCK_PAUSE_S = 0.05  # between two sides' turns (--block): longer than OpenMP's default spin-wait (~9 ms)


def serve_argv(python: str, *flags: str) -> list[str]:
    return [python, "-m", "blink", "serve", "--model", "demo", "--host", "127.0.0.1", "--port", "{port}", *flags]


def timing_parts(header: str) -> dict:
    """`server-timing: prepare;dur=1.2, model;dur=3.4, total;dur=5.0` as {name: ms}."""
    return {m[1]: float(m[2]) for m in re.finditer(r"([\w-]+);dur=([\d.]+)", header)}


def demo_root() -> Path:
    from blink.model.demo import demo_model_dir

    return demo_model_dir("demo").parent


def outside(args) -> None:
    from transformers import AutoTokenizer

    root = demo_root()
    tokenizer = AutoTokenizer.from_pretrained(root / "demo-model")
    trees = [ROOT] + [Path(t).resolve() for t in args.trees]
    with ExitStack() as stack:
        urls = [stack.enter_context(serve_tree(tree, root, f"bench-outside-{i}")) for i, tree in enumerate(trees)]
        client = OneWriteClient if args.client == "one-write" else httpx.Client
        clients = [stack.enter_context(client(base_url=url, timeout=120)) for url in urls]
        for i, tree in enumerate(trees):
            print(f"side {i}: {tree} (git {git_head(tree)})")
        print(
            "\n| outside model, 64 tok (total - model) | side | median (ms) | of it, the body arriving | prepare "
            "| queue | answer | model | total |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for n_questions, state in [(n, state) for state in ("new", "seen") for n in (1, 6, 16)]:
            rows = [[] for _ in trees]
            bodies = outside_bodies(tokenizer, n_questions, state, args.warmup + args.reps)
            send_by_turns(clients, bodies, state, n_questions, rows, args.warmup, args.block)
            for side, got in enumerate(rows):
                print_outside_row(n_questions, state, side, got)


def outside_bodies(tokenizer, n_questions: int, state: str, count: int) -> list[dict]:
    """`count` bodies asking the same questions, each about a state no request sent before (each cell its own
    seeds)."""
    questions = workload.questions(n_questions, seed=3)
    first = 9000 + 1000 * n_questions + (500 if state == "seen" else 0)  # states never sent before
    return [
        {"state": workload.text_of_tokens(tokenizer, STATE_TOKENS, seed=first + rep), "questions": questions}
        for rep in range(count)
    ]


def send_by_turns(
    clients: list, bodies: list[dict], state: str, n_questions: int, rows: list, warmup: int, block: int
) -> None:
    """Every body to every side, `block` bodies a turn, the sides' order reversed every other turn (so neither
    always goes first); each side's timings after the first `warmup` bodies appended to `rows[side]`."""
    for at in range(0, len(bodies), block):
        order = list(range(len(clients)))
        for side in order if (at // block) % 2 == 0 else order[::-1]:
            if block > 1:
                time.sleep(BLOCK_PAUSE_S)  # the other side's threads settle
            for rep, body in enumerate(bodies[at : at + block], start=at):
                send(clients[side], body, state, n_questions, rows[side] if rep >= warmup else None)


def print_outside_row(n_questions: int, state: str, side: int, got: list[dict]) -> None:
    """One side's row of a cell: the median of total - model, then the medians of the parts."""
    med = {
        k: statistics.median(row.get(k, 0.0) for row in got)
        for k in ("body", "prepare", "queue", "answer", "model", "total")
    }
    rest = statistics.median(row["total"] - row["model"] for row in got)
    print(
        f"| {n_questions} q, {state} state | {side} | {rest:.2f} | {med['body']:.2f} "
        f"| {med['prepare']:.2f} "
        f"| {med['queue']:.2f} | {med['answer']:.2f} | {med['model']:.2f} | {med['total']:.2f} |"
    )


class OneWriteClient:
    """A keep-alive client that writes each request, head and body, in one `sendall`: the server's figures without
    the wait for a second segment that httpx (and `http.client`) add by writing the two apart. On this machine the
    client shares the server's two vCPUs, so that gap lands in the server's `body` phase."""

    def __init__(self, base_url: str, timeout: float):
        self.url = httpx.URL(base_url)
        self.sock = socket.create_connection((self.url.host, self.url.port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def post(self, path: str, json: dict) -> httpx.Response:
        body = orjson.dumps(json)
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {self.url.host}:{self.url.port}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + body)
        answer = http.client.HTTPResponse(self.sock)
        answer.begin()
        content = answer.read()
        request = httpx.Request("POST", self.url.join(path))
        return httpx.Response(answer.status, headers=answer.getheaders(), content=content, request=request)

    def __enter__(self) -> OneWriteClient:
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()


def send(client: httpx.Client | OneWriteClient, body: dict, state: str, n_questions: int, into: list | None) -> None:
    """One timed request (its `server-timing` parts appended to `into`, unless None: a warm-up); for a `seen` state,
    after an untimed one asking other questions about it."""
    if state == "seen":
        first = {**body, "questions": workload.questions(n_questions, seed=4)}
        client.post("/v1/systemone", json=first).raise_for_status()
    r = client.post("/v1/systemone", json=body)
    r.raise_for_status()
    if into is not None:
        into.append(timing_parts(r.headers["server-timing"]))


def serve_tree(tree: Path, root: Path, name: str, *flags: str):
    """A server of the checkout `tree` (its own python -m blink, run from it)."""
    argv = serve_argv(str(tree / ".venv" / "bin" / "python"), "--log-level", "warning", *flags)
    return running(argv, root, env={"PYTHONPATH": str(tree)}, cwd=tree, name=name)


def throughput(args) -> None:
    from transformers import AutoTokenizer

    root = demo_root()
    tokenizer = AutoTokenizer.from_pretrained(root / "demo-model")
    before = Path(args.before).resolve()
    flags = ["--batch-window-ms", "2", "--max-batch-requests", "64", "--max-queued-requests", "512"]
    states = [workload.text_of_tokens(tokenizer, STATE_TOKENS, seed=7000 + i) for i in range(16)]
    questions = [workload.questions(6, seed=s) for s in range(4)]
    with (
        serve_tree(ROOT, root, "bench-after", *flags) as after_url,
        serve_tree(before, root, "bench-before", *flags) as before_url,
    ):
        urls = {"before": before_url, "after": after_url}
        print(f"\nbefore: {before} (git {git_head(before)}); after: {ROOT} (git {git_head(ROOT)})")
        cycled = "16 states and 4 question sets, cycled" if args.mix == "warm" else "a new state every request"
        print(f"workload: {STATE_TOKENS}-token states x 6 questions; {cycled}")
        print("\n| clients | requests | before (req/s) | after (req/s) | after / before | errors b/a |")
        print("|---|---|---|---|---|---|")
        for url in urls.values():  # warm-up: every state and question set seen once by both servers
            asyncio.run(
                closed_loop(url, [[{"state": s, "questions": q}] for s in states for q in questions], timeout=600)
            )
        for clients, each in CLIENTS.items():
            # a fixed workload: client c's k-th request asks question set (c + k) about state (c * 5 + k)
            bodies = [
                [
                    {"state": states[(c * 5 + k) % len(states)], "questions": questions[(c + k) % len(questions)]}
                    for k in range(each)
                ]
                for c in range(clients)
            ]
            got = {"before": [], "after": []}
            for rep in range(args.reps):
                if args.mix == "cold":  # states neither server has seen (the same bodies to both)
                    bodies = [
                        [{**body, "state": new_state(tokenizer, rep, c, k)} for k, body in enumerate(row)]
                        for c, row in enumerate(bodies)
                    ]
                for name in ("before", "after") if rep % 2 == 0 else ("after", "before"):
                    got[name].append(asyncio.run(closed_loop(urls[name], bodies, timeout=600)))
            rps = {name: statistics.median(g["rps"] for g in runs) for name, runs in got.items()}
            errors = "/".join(str(sum(len(g["errors"]) for g in got[name])) for name in ("before", "after"))
            print(
                f"| {clients} | {clients * each} x {args.reps} | {rps['before']:.1f} | {rps['after']:.1f} | "
                f"{rps['after'] / rps['before']:.2f}x | {errors} |"
            )


def new_state(tokenizer, rep: int, client: int, k: int) -> str:
    return workload.text_of_tokens(tokenizer, STATE_TOKENS, seed=100_000 + rep * 10_000 + client * 100 + k)


def git_head(path: Path) -> str:
    import subprocess

    return subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="row", required=True)
    one = sub.add_parser("outside")
    one.add_argument("--reps", type=int, default=60)
    one.add_argument("--warmup", type=int, default=10)
    one.add_argument("--trees", nargs="*", default=[], help="other checkouts served beside this one, alternating")
    one.add_argument(
        "--client",
        choices=("httpx", "one-write"),
        default="httpx",
        help="httpx (what the SDKs use: head and body written apart) or one write per request (a plain socket)",
    )
    one.add_argument(
        "--block",
        type=int,
        default=1,
        help="requests sent to one side back to back before the next side's turn, with a pause between turns: for "
        "changes that act between requests (one side's threads still busy after its pass slow the other side)",
    )
    two = sub.add_parser("throughput")
    two.add_argument("--before", required=True, help="a checkout of the tree to compare against")
    two.add_argument("--reps", type=int, default=2)
    two.add_argument("--mix", choices=("warm", "cold"), default="warm", help="states seen before, or new ones")
    args = parser.parse_args()
    print(f"uptime: {os.popen('uptime').read().strip()}")
    outside(args) if args.row == "outside" else throughput(args)
    print(f"uptime: {os.popen('uptime').read().strip()}")


if __name__ == "__main__":
    main()
