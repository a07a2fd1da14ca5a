"""The benchmark's requests: System One bodies with a state of a given token length and Q typed questions.

Deterministic (seeded), so every system in a row answers exactly the same bodies. Shared by `run.py` (CPU,
over HTTP) and `gpu_bench.py` (in-process on a GPU box).
"""

from __future__ import annotations

import random

WORDS = """order parcel refund invoice customer account shipping address warehouse delivery courier tracking
number damaged screen replacement warranty battery charger cable package label return policy support agent
ticket escalation manager weekend delay apology discount voucher subscription renewal payment card bank
transfer receipt duplicate charge billing cycle upgrade downgrade plan feature request complaint review rating
store pickup locker neighbour signature photo evidence broken missing item quantity size colour exchange
credit balance statement overdue reminder notice contract cancellation fee deposit estimate schedule visit
technician installation router modem outage network speed latency password login security alert fraud""".split()

TOPICS = """refund delay damage billing fraud password warranty shipping cancellation discount outage login
courier invoice battery upgrade contract deposit technician router signature locker voucher statement reminder
exchange quantity colour review escalation apology weekend payment subscription renewal receipt charge
installation network speed security evidence photo pickup neighbour manager agent label policy charger cable
screen replacement estimate schedule visit balance credit notice fee transfer card bank plan feature
complaint""".split()

EMOTIONS = ["frustration", "urgency", "politeness", "confusion", "satisfaction", "anger", "worry", "trust"]


def text_of_tokens(tokenizer, n_tokens: int, seed: int) -> str:
    """Support-ticket-like prose that the tokenizer encodes to ~n_tokens tokens (cut at a token boundary)."""
    rng = random.Random(seed)
    sentences, ids = [], []
    while len(ids) < n_tokens + 8:
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 16))]
        sentences.append(" ".join(words).capitalize() + ".")
        if len(sentences) % 8 == 0 or len(" ".join(sentences)) > 4 * n_tokens:
            ids = tokenizer(" ".join(sentences), add_special_tokens=False)["input_ids"]
    return tokenizer.decode(ids[:n_tokens]).strip()


def questions(count: int, seed: int = 0) -> dict:
    """`count` questions cycling noul / choice (4 options) / score (3-5 levels), each worded differently."""
    rng = random.Random(seed)
    out = {}
    for i in range(count):
        topic = TOPICS[(i + seed) % len(TOPICS)]
        kind = ("noul", "choice", "score")[i % 3]
        if kind == "noul":
            q = {"type": "noul", "instructions": f"Does the customer mention the {topic}?"}
        elif kind == "choice":
            q = {
                "type": "choice",
                "instructions": f"Which team should handle the {topic} part of this ticket?",
                "criteria": {
                    "billing": "Charges, refunds and invoices",
                    "shipping": "Late, lost or damaged parcels",
                    "technical": "Devices, network and accounts",
                    "other": "Anything else",
                },
            }
        else:
            levels = ["None", "Low", "Medium", "High", "Extreme"][: rng.randint(3, 5)]
            q = {
                "type": "score",
                "instructions": f"How much {EMOTIONS[i % len(EMOTIONS)]} about the {topic} does the customer show?",
                "criteria": levels,
            }
        out[f"q{i:02d}"] = q
    return out


def body(tokenizer, model: str, state_tokens: int, n_questions: int, seed: int) -> dict:
    return {
        "model": model,
        "state": text_of_tokens(tokenizer, state_tokens, seed),
        "questions": questions(n_questions, seed),
    }


def probabilities(answer: dict) -> list[float]:
    """The numbers an answer carries, in a fixed order: P(true) for noul, the option probabilities otherwise."""
    if answer.get("type") == "noul":
        return [float(answer["noul"])]
    probs = answer.get("probabilities") or {}
    return [float(probs[k]) for k in sorted(probs)]


def max_abs_diff(a: dict, b: dict) -> float:
    """Largest |difference| between two answer sets (same question ids); inf if their shapes differ."""
    if set(a) != set(b):
        return float("inf")
    worst = 0.0
    for name in a:
        pa, pb = probabilities(a[name]), probabilities(b[name])
        if len(pa) != len(pb):
            return float("inf")
        worst = max([worst] + [abs(x - y) for x, y in zip(pa, pb)])
    return worst


def argmax(answer: dict) -> str:
    """The answer's most likely option (noul: whether P(true) >= 0.5)."""
    if answer["type"] == "noul":
        return str(answer["noul"] >= 0.5)
    return max(answer["probabilities"], key=answer["probabilities"].get)
