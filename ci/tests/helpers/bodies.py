"""Request bodies and answers: random System One requests, the numbered one-question request of the scripted-replica
tests, the numbers in an answer and the largest difference between two, two answers compared within blink's promise
(`assert_close`), an answer without the cache's note, plain text and PNGs of a given size."""

from __future__ import annotations

import random

MB = 2**20
WORDS = "order refund parcel late broken screen billing charge twice angry calm please today account".split()


def random_request(rng: random.Random, n_questions: int) -> dict:
    state = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 400)))
    if rng.random() < 0.5:
        state = {"ticket": state, "meta": {"priority": rng.randint(1, 5)}}
    questions = {}
    for i in range(n_questions):
        instructions = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))
        kind = rng.choice(["noul", "choice", "score"])
        if kind == "noul":
            questions[f"q{i}"] = {"type": "noul", "instructions": instructions}
        elif kind == "choice":
            n = rng.choice([2, 3, 7, 26, 40])
            questions[f"q{i}"] = {
                "type": "choice",
                "instructions": instructions,
                "criteria": {f"{rng.choice(WORDS)}-{j}": None for j in range(n)},
            }
        else:
            questions[f"q{i}"] = {
                "type": "score",
                "instructions": instructions,
                "criteria": [rng.choice(WORDS) for _ in range(rng.randint(2, 10))],
            }
    return {"state": state, "questions": questions}


def body(i: int) -> dict:
    return {"state": f"Ticket {i}: parcel {i} has not moved.", "questions": {"q": {"type": "noul"}}}


def probabilities(value) -> list[float]:
    """Every number in the answers (probabilities, confidences), in order."""
    if isinstance(value, dict):
        return [x for v in value.values() for x in probabilities(v)]
    if isinstance(value, list):
        return [x for v in value for x in probabilities(v)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def worst(a: dict, b: dict) -> float:
    """The largest difference between two answers' numbers (which must be as many, and some)."""
    pa, pb = probabilities(a), probabilities(b)
    assert len(pa) == len(pb) and pa
    return max(abs(x - y) for x, y in zip(pa, pb))


# blink's promise for one question's numbers asked twice: equal within 1e-6 whatever else shared the forward (a batch,
# the prefix-state cache's saved blocks, another process). Bit-identity is not promised: another batch shape, or a
# resume from a saved state, sums in another order (seen: 1e-11 apart on a busy machine).
TOLERANCE = 1e-6


def assert_close(a, b, where: str = "answers", tol: float = TOLERANCE) -> None:
    """`a` and `b` (answers, bodies: JSON values) the same but for their floats, each within `tol` of its
    counterpart: the same keys, items, labels, booleans and integers (token counts) exactly. Fails naming the first
    place they differ (`answers.team.probabilities.billing: 0.48 against 0.47`)."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a.keys() ^ b.keys())} in one only"
        for key in a:
            assert_close(a[key], b[key], f"{where}.{key}", tol)
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
        assert len(a) == len(b), f"{where}: {len(a)} items against {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{where}[{i}]", tol)
    elif isinstance(a, float | int) and isinstance(b, float | int) and bool not in (type(a), type(b)):
        if isinstance(a, int) and isinstance(b, int):
            assert a == b, f"{where}: {a} against {b}"
        else:
            assert abs(a - b) <= tol, f"{where}: {a!r} against {b!r} (more than {tol} apart)"
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} against {b!r}"


def uncached(body: dict) -> dict:
    """A System One body without the prefix-state cache's note (`usage.x_cached_tokens`): a state asked again is
    served from the cache and says so; its answers, and everything else, are the same."""
    usage = {k: v for k, v in body.get("usage", {}).items() if k != "x_cached_tokens"}
    return {**body, "usage": usage}


def text_of(n: int) -> str:
    """`n` characters of plain English."""
    unit = "The quick brown fox jumps over the lazy dog near the river bank. "
    return (unit * (n // len(unit) + 1))[:n]


def png(color=(200, 30, 30), size=(300, 200), noise=False) -> bytes:
    import io

    from PIL import Image

    image = Image.new("RGB", size, color)
    if noise:  # incompressible, so the body is large
        image = Image.frombytes("RGB", size, random.Random(0).randbytes(size[0] * size[1] * 3))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()
