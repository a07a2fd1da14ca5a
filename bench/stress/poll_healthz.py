"""`/healthz` latency seen from a process of its own (so the client load of a bench never stalls the poller):

    python bench/stress/poll_healthz.py URL [--every-ms 50]

prints `ready` after its first 3 polls (they pay for this process's start and are left out), polls until its
stdin closes (at most an hour), then prints one JSON line: the worst, p50 and p99 latency in seconds, how many
polls, how many failed. Loopback only (the URL the bench gives it)."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

import httpx

WARM = 3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--every-ms", type=float, default=50.0)
    args = parser.parse_args()
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    seen, failed = [], 0
    deadline = time.time() + 3600
    with httpx.Client(timeout=60) as client:
        while not stop.is_set() and time.time() < deadline:
            t = time.perf_counter()
            try:
                client.get(args.url + "/healthz").raise_for_status()
            except httpx.HTTPError:
                failed += 1
            seen.append(time.perf_counter() - t)
            if len(seen) == WARM:
                print("ready", flush=True)
            stop.wait(args.every_ms / 1000)
    seen = sorted(seen[WARM:])  # the first polls pay for this process's own start (imports, first connection)

    def q(f: float) -> float:
        return seen[min(len(seen) - 1, int(len(seen) * f))] if seen else 0.0

    print(
        json.dumps(
            {"max_s": max(seen, default=0.0), "p50_s": q(0.5), "p99_s": q(0.99), "polls": len(seen), "failed": failed}
        )
    )


if __name__ == "__main__":
    main()
