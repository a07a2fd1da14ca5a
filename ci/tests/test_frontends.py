"""Many front ends, one routing: two `python -m blink serve --engine vllm` processes in front of the same four scripted
replicas (ci/tests/scripted_vllm.py) send each state to the same replica, whichever front end it comes through, while
load is under the spill threshold. Each process counts only its own requests in flight, so above it each spills on
its own (to the next replica in the same order); bench/scale_out/frontends.py measures their summed throughput."""

from __future__ import annotations

import httpx

from helpers import blink_serve, running, start_scripted, stop_group


def served(replicas: list[str]) -> list[int]:
    return [httpx.get(url + "/script", timeout=10).json()["served"] for url in replicas]


def decision(i: int, question: str) -> dict:
    # longer than the rendezvous key (the prompt's first 256 tokens): the key is the state, not the question
    state = (
        f"Ticket {i}: the parcel {i * 7919 % 10007} left the depot {i % 5} days ago and was not scanned since. " * 12
    )
    return {"state": state, "questions": {"q": {"type": "noul", "instructions": question}}}


def test_two_front_ends_send_the_same_prefix_to_the_same_replica(demo_root):
    replicas = [start_scripted(f"front-{i}", "--delay-ms", "5") for i in range(4)]
    urls = [url for url, _ in replicas]
    try:
        flags = ("--engine", "vllm", "--engine-url", ",".join(urls))
        with (
            running(blink_serve(*flags), demo_root, name="serve-front-a") as a,
            running(blink_serve(*flags), demo_root, name="serve-front-b") as b,
        ):
            where: dict[int, list[int]] = {}
            for i in range(16):
                # half of the states come through A first, half through B: neither front end leads
                for front, question in ((a, "Is the parcel late?"), (b, "Should we call the customer?"))[
                    :: 1 - 2 * (i % 2)
                ]:
                    before = served(urls)
                    r = httpx.post(front + "/v1/systemone", json=decision(i, question), timeout=60)
                    assert r.status_code == 200, r.text
                    moved = [k for k, (x, y) in enumerate(zip(before, served(urls))) if y > x]
                    assert len(moved) == 1, moved  # one read, on one replica
                    where.setdefault(i, []).append(moved[0])
    finally:
        for _, proc in replicas:
            stop_group(proc)
    assert all(len(set(picks)) == 1 for picks in where.values()), where
    assert len({picks[0] for picks in where.values()}) >= 3, where  # and the states spread over the replicas
