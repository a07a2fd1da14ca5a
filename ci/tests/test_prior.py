"""Content-free prior normalization (`x_calibration: "prior"`, blink.decide.prior) on a demo model biased on purpose.

`biased_demo.biased_copy` adds a known bias (3 nats) to one label's LM-head row of a copy of the demo model, so
that label wins on any text; the prior normalization must take it out: the content-free answer comes out uniform,
the normalized probabilities are the hand computation from the raw ones, and `"raw"` stays exactly the model's.
"""

from __future__ import annotations

import math
import sys

import httpx
import pytest
from biased_demo import QUESTION, TEAMS, biased_copy

from blink.decide.answers import normalized
from blink.decide.planner import Engine
from blink.model.loading import load
from helpers import assert_close, running

BODY = {
    "state": "My parcel never arrived and the tracking page says it was delivered.",
    "questions": {
        "team": QUESTION,
        "urgent": {"type": "noul", "instructions": "Does this need a reply today?"},
        "anger": {"type": "score", "instructions": "How upset?", "criteria": ["Calm", "Annoyed", "Angry"]},
    },
}


@pytest.fixture(scope="module")
def biased_dir(demo_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("biased") / "biased-demo"
    info = biased_copy(demo_dir, out, option="billing", bias=3.0)
    assert info["option"] == "billing"
    return out


@pytest.fixture(scope="module")
def biased(biased_dir):
    """One content-free state, so the content-free answer itself is what the prior is."""
    return Engine(load(str(biased_dir)), prior_states=("N/A",))


def probs(answer: dict) -> list[float]:
    if answer["type"] == "noul":
        return [answer["noul"], 1 - answer["noul"]]
    return list(answer["probabilities"].values())


def test_the_bias_shows_raw_and_the_content_free_answer_is_uniform_after_normalization(biased):
    raw = biased.decide({**BODY, "state": "N/A", "x_calibration": "raw"})
    team = raw["team"]["probabilities"]
    assert max(team, key=team.get) == "billing" and team["billing"] > 0.5  # the bias: 3 nats on a ~uniform model
    for order in ("fixed", "rotate"):
        answers = biased.decide({**BODY, "state": "N/A", "x_calibration": "prior", "x_order": order})
        for qid, answer in answers.items():
            p = probs(answer)
            assert max(abs(x - 1 / len(p)) for x in p) <= 1e-6, (order, qid, p)


def test_normalized_probabilities_are_the_hand_computation_from_the_raw_ones(biased):
    raw = biased.decide({**BODY, "x_calibration": "raw"})
    content_free = biased.decide({**BODY, "state": "N/A", "x_calibration": "raw"})
    prepared = biased.prepare({**BODY, "x_calibration": "prior"})
    scored, *prior = biased.score([prepared.prompts, *prepared.prior_plans])
    answers = biased.answer(prepared, scored.result(), prior)
    fact = biased.calibration_fact(prepared)
    assert fact["applied"] is True and fact["temperatures"] == {} and fact["prior"]["states"] == ["N/A"]
    for qid in BODY["questions"]:
        # the prior the response reports is the content-free answer (scored in its own plan: fp32 batching noise)
        c = probs(fact["prior"]["answers"][qid])
        assert max(abs(a - b) for a, b in zip(c, probs(content_free[qid]))) <= 1e-6, qid
        p = probs(raw[qid])
        w = [a / b for a, b in zip(p, c)]
        hand = [x / math.fsum(w) for x in w]
        # `raw` is another forward (alone) than `answers`' (batched with the prior's plans): its probabilities within
        # 1e-6, divided by the prior's (~1 / n options) and renormalised: within a few times that
        assert max(abs(a - b) for a, b in zip(probs(answers[qid]), hand)) <= 1e-5, qid
    team = answers["team"]["probabilities"]
    assert team["billing"] < raw["team"]["probabilities"]["billing"]  # the favoured label loses its bias


def test_a_repeated_question_costs_no_content_free_pass(biased):
    first = biased.prepare({**BODY, "state": "Another state.", "x_calibration": "prior"})
    (scored, *prior) = biased.score([first.prompts, *first.prior_plans])
    biased.answer(first, scored.result(), prior)
    again = biased.prepare({**BODY, "state": "A third, different state.", "x_calibration": "prior"})
    assert again.prior_plans == [] and again.prior.tokens == 0
    assert biased.calibration_fact(again)["prior"]["tokens"] == 0


def test_fitted_plus_prior_normalizes_the_tempered_probabilities(biased_dir):
    from blink.decide.calibration import Calibration

    engine = Engine(load(str(biased_dir)), calibration=Calibration({"choice": 0.5}), prior_states=("N/A",))
    both = engine.decide({**BODY, "state": "N/A", "x_calibration": "fitted+prior"})
    assert max(abs(x - 0.25) for x in probs(both["team"])) <= 1e-6
    fitted = engine.decide({**BODY, "x_calibration": "fitted"})
    cf = engine.decide({**BODY, "state": "N/A", "x_calibration": "fitted"})
    tempered = engine.decide({**BODY, "x_calibration": "fitted+prior"})
    hand = normalized(probs(fitted["team"]), probs(cf["team"]))
    assert probs(tempered["team"]) == pytest.approx(hand, abs=1e-6)


def post(url: str, payload: dict, route: str = "/v1/systemone") -> dict:
    r = httpx.post(url + route, json=payload, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_the_wire_raw_equals_an_uncalibrated_server_and_prior_says_it_was_applied(biased_dir, demo_root):
    argv = [sys.executable, "-m", "blink", "serve", "--model", str(biased_dir), "--port", "{port}"]
    with running(argv, demo_root, name="serve-biased") as plain_url:
        plain = post(plain_url, BODY)
    env = {"BLINK_X_CALIBRATION": "prior", "BLINK_PRIOR_STATES": '["N/A", ""]'}
    with running(argv, demo_root, env=env, name="serve-prior") as url:
        default = post(url, BODY)
        raw = post(url, {**BODY, "x_calibration": "raw"})
        again = post(url, {**BODY, "state": "Something else entirely."})
        health = httpx.get(url + "/healthz").json()
        decision = post(
            url,
            {
                "model": "demo",
                "input": BODY["state"],
                "questions": [{"type": "predicate", "instructions": "Reply today?"}],
            },
            "/v1/decisions",
        )
    assert_close(raw["answers"], plain["answers"])  # "raw" is the model's probabilities (another process: 1e-6)
    assert raw["x_calibration"] == plain["x_calibration"] == {"applied": False, "temperatures": {}}
    assert default["answers"] != plain["answers"]
    prior = default["x_calibration"]["prior"]
    assert default["x_calibration"]["applied"] is True and prior["states"] == ["N/A", ""] and prior["tokens"] > 0
    assert set(prior["answers"]) == set(BODY["questions"])
    assert again["x_calibration"]["prior"]["tokens"] == 0  # the same questions: their prior is kept
    assert health["x_calibration"] == "prior" and health["prior_states"] == ["N/A", ""]
    assert decision["calibration"]["applied"] is True and decision["calibration"]["prior"]["states"] == ["N/A", ""]
    team = default["answers"]["team"]["probabilities"]
    assert set(team) == set(TEAMS)
