"""Calibration bound to the weights, and option-order debiasing, on the demo model end to end.

The fit runs through the real `python -m blink calibrate` command (or, for the statistical check, its own fit
function on the real model's logits); the wire checks run real servers on loopback (`running(...)`).
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from blink.decide.calibrate_command import examples_of
from blink.decide.calibration import (
    CalibrationError,
    Example,
    fit_temperature,
    for_model,
    metrics,
    probabilities,
    weights_fingerprint,
)
from helpers import ROOT, assert_close, blink_serve, running, server_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WORDS = (
    "parcel refund invoice courier screen battery router login invoice warranty locker voucher outage "
    "charger signature deposit neighbour statement escalation apology"
).split()
TEAMS = {
    "billing": "Charges and refunds",
    "shipping": "Late or lost parcels",
    "technical": "Devices and logins",
    "other": None,
}


WIDE = {"type": "score", "instructions": "How far along is it?", "criteria": [f"step {i}" for i in range(30)]}


def body(i: int, **extra) -> dict:
    """A request with one question of each type about a seeded, different state."""
    rng = random.Random(i)
    state = " ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 30))).capitalize() + "."
    return {
        "state": state,
        "questions": {
            "team": {"type": "choice", "instructions": "Which team should handle this?", "criteria": dict(TEAMS)},
            "urgent": {"type": "noul", "instructions": "Does this need a reply today?"},
            "anger": {
                "type": "score",
                "instructions": "How upset is the customer?",
                "criteria": ["Calm", "Annoyed", "Angry", "Furious"],
            },
        },
        **extra,
    }


def argmax_labels(answers: dict) -> dict:
    """The model's own answer to every question: labels the model always gets right."""

    def best(probs: dict):
        return max(probs, key=probs.get)

    return {
        "team": answers["team"]["choice"],
        "urgent": answers["urgent"]["noul"] >= 0.5,
        "anger": int(best(answers["anger"]["probabilities"])),
    }


def calibrate(demo_dir: Path, demo_root: Path, data: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "blink", "calibrate", "--model", str(demo_dir), str(data), "--out", str(out), *flags]
    return subprocess.run(argv, capture_output=True, text=True, env=server_env(demo_root), cwd=ROOT, timeout=600)


@pytest.fixture(scope="module")
def argmax_fit(engine, demo_dir, demo_root, tmp_path_factory):
    """`python -m blink calibrate` on 24 lines labelled with the model's own argmax."""
    folder = tmp_path_factory.mktemp("calibration")
    data, out = folder / "argmax.jsonl", folder / "calibration.json"
    with open(data, "w") as fh:
        for i in range(24):
            fh.write(json.dumps({**body(i), "labels": argmax_labels(engine.decide(body(i)))}) + "\n")
    done = calibrate(demo_dir, demo_root, data, out)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout


def test_argmax_labels_fit_temperatures_below_one_and_lower_the_nll(argmax_fit):
    calibration, printed = argmax_fit
    assert set(calibration["temperatures"]) == {"noul", "choice", "score"}
    for kind, t in calibration["temperatures"].items():
        r = calibration["fit"]["report"][kind]
        assert t < 1, (kind, t)
        assert r["n"] == 24
        assert r["after"]["nll"] < r["before"]["nll"], (kind, r)
        assert r["after"]["brier"] < r["before"]["brier"], (kind, r)
        assert f"{kind:<7}{24:>7}" in printed  # the printed report: one row per type
    assert calibration["format"] == "blink-calibration" and calibration["version"] == 1
    # the most options each type had in the data: where the temperatures are known to hold
    assert calibration["levels"] == {"noul": 2, "choice": len(TEAMS), "score": 4}


def test_synthetic_labels_drawn_at_a_known_temperature_are_fitted_back(engine):
    """Labels drawn (seeded) from the model's own probabilities at T0 = 0.1, 40 draws per question, 40 requests.

    Tolerance: the fit is the maximum-likelihood estimate of beta = 1/T. Per example the NLL's second derivative in
    beta is the variance of the label logits under the softmax at beta, so the estimate's standard error is
    1 / sqrt(sum of those variances) (the observed Fisher information). The fitted beta must be within 4 standard
    errors of the truth (a 1-in-15,000 miss for a correct fit), and the test requires that standard error to be under
    10 % of beta, so it has teeth: a fit off by a factor of 1.5 fails it."""
    t0, draws, rng = 0.1, 40, random.Random(15)
    prepared = [engine.prepare(body(100 + i)) for i in range(40)]
    results = engine.score([p.prompts for p in prepared])
    by_type: dict = {}
    for p, scored in zip(prepared, results):
        assert scored.error is None
        for kind, example in examples_of(p, {q.name: 0 for q in p.decision.questions}, scored.scores):
            probs = probabilities(example.rows, t0)
            for _ in range(draws):
                label = rng.choices(range(len(probs)), weights=probs)[0]
                by_type.setdefault(kind, []).append(Example(example.rows, label))
    for kind, examples in by_type.items():
        fitted = fit_temperature(examples)
        beta0 = 1 / t0
        info = 0.0
        for e in examples:
            row = e.rows[0]
            p = probabilities(e.rows, 1 / beta0)
            mean = math.fsum(pi * x for pi, x in zip(p, row))
            info += math.fsum(pi * (x - mean) ** 2 for pi, x in zip(p, row))
        se = 1 / math.sqrt(info)
        assert se < 0.1 * beta0, (kind, se)
        assert abs(1 / fitted - beta0) <= 4 * se, (kind, fitted, se)
        assert metrics(examples, fitted)["nll"] <= metrics(examples, t0)["nll"] + 1e-12


def test_bad_data_lines_are_refused_with_line_numbers(demo_dir, demo_root, tmp_path):
    good = json.dumps({**body(1), "labels": {"team": "billing", "urgent": True, "anger": 2}})
    lines = [
        good,
        "",
        "{not json",
        json.dumps({**body(2), "labels": {"team": "sales", "urgent": True, "anger": 0}}),
        json.dumps(body(3)),
        json.dumps({**body(4), "labels": {"team": "other", "urgent": "yes", "anger": 1}}),
        json.dumps({**body(5), "labels": {"team": "other", "urgent": False, "anger": 4}}),
        json.dumps({**body(6), "labels": {"team": "other", "urgent": False}}),
        json.dumps({"state": None, "questions": {}, "labels": {"x": 1}}),
        good,
    ]
    data, out = tmp_path / "bad.jsonl", tmp_path / "never.json"
    data.write_text("\n".join(lines) + "\n")
    done = calibrate(demo_dir, demo_root, data, out)
    assert done.returncode == 2
    err = done.stderr
    assert "bad.jsonl line 3: not JSON" in err
    assert "line 4: the label of choice question 'team' must be one of its options" in err and '"sales"' in err
    assert "line 5: `labels` is required" in err
    assert "line 6: the label of noul question 'urgent' must be true or false" in err
    assert "line 7: the label of score question 'anger' must be a level index 0-3, got 4" in err
    assert "line 8: question 'anger' has no label" in err
    assert "line 9: `state` must be a string, object or array" in err
    assert "line 1:" not in err and "line 10:" not in err and "line 2:" not in err
    assert "7 bad line(s)" in err and not out.exists()


# the calibration file at start-up ------------------------------------------------------------------------------
def calibration_file(path: Path, temperatures: dict, weights: str | None) -> Path:
    content = {"format": "blink-calibration", "version": 1, "temperatures": temperatures}
    if weights is not None:
        content["weights"] = weights
    path.write_text(json.dumps(content))
    return path


@pytest.mark.parametrize(
    "content, says",
    [
        ("{oops", "not JSON"),
        ('{"format": "other", "version": 1, "temperatures": {"noul": 2}}', "`format` must be 'blink-calibration'"),
        ('{"format": "blink-calibration", "version": 7, "temperatures": {"noul": 2}}', "`version` 7"),
        ('{"format": "blink-calibration", "version": 1, "temperatures": {}}', "`temperatures` must map"),
        ('{"format": "blink-calibration", "version": 1, "temperatures": {"box": 2}}', "has 'box'"),
        ('{"format": "blink-calibration", "version": 1, "temperatures": {"noul": -1}}', "must be 0.01-100, got -1"),
        ('{"format": "blink-calibration", "version": 1, "temperatures": {"noul": "2"}}', 'must be a number, got "2"'),
        (
            '{"format": "blink-calibration", "version": 1, "temperatures": {"noul": 2}, "weights": "md5:1"}',
            "fingerprint",
        ),
        (
            '{"format": "blink-calibration", "version": 1, "temperatures": {"noul": 2}, "levels": {"score": 256}}',
            "`levels` of 'score' must be an integer from 2 to 255, got 256",
        ),
        ('{"format": "blink-calibration", "version": 1, "temperatures": {"noul": 2}, "levels": [3]}', "`levels` must"),
    ],
)
def test_bad_calibration_files_are_refused(demo_dir, tmp_path, content, says):
    path = tmp_path / "calibration.json"
    path.write_text(content)
    with pytest.raises(CalibrationError) as info:
        for_model(str(path), demo_dir, weights_fingerprint(demo_dir))
    assert str(path) in str(info.value) and says in str(info.value)


def test_a_file_fitted_on_other_weights_refuses_to_start(demo_root, tmp_path):
    path = calibration_file(tmp_path / "c.json", {"choice": 2.0}, "sha256:" + "0" * 64)
    argv = blink_serve()
    argv[argv.index("{port}")] = "0"
    env = server_env(demo_root, {"BLINK_CALIBRATION": str(path)})
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode != 0
    assert f"calibration file {path} was fitted on other weights (sha256:{'0' * 64})" in done.stderr
    assert "python -m blink calibrate" in done.stderr


# the wire --------------------------------------------------------------------------------------------------------
def post(url: str, payload: dict, route: str = "/v1/systemone") -> httpx.Response:
    return httpx.post(url + route, json=payload, timeout=120)


def test_calibrated_server_says_so_and_raw_equals_an_uncalibrated_server(server, demo_root, demo_dir, tmp_path):
    temperatures = {"noul": 0.5, "choice": 0.2, "score": 3.0}
    path = calibration_file(tmp_path / "c.json", temperatures, weights_fingerprint(demo_dir))
    request = body(7)
    plain = post(server, request).json()
    assert plain["x_calibration"] == {"applied": False, "temperatures": {}}
    with running(blink_serve("--calibration", str(path)), demo_root, name="serve-calibrated") as url:
        calibrated = post(url, request).json()
        raw = post(url, {**request, "x_calibration": "raw"}).json()
        health = httpx.get(url + "/healthz").json()
        decision = post(
            url,
            {
                "model": "demo",
                "input": request["state"],
                "questions": [{"type": "predicate", "instructions": "Does this need a reply today?"}],
            },
            "/v1/decisions",
        ).json()
        # a score question wider than the file's fit (a file without `levels`: score questions of at most 10)
        wide = {**request, "questions": {**request["questions"], "wide": WIDE}}
        calibrated_wide = post(url, wide).json()
        decision_raw = post(
            url,
            {
                "model": "demo",
                "input": request["state"],
                "x_calibration": "raw",
                "questions": [{"type": "predicate", "instructions": "Does this need a reply today?"}],
            },
            "/v1/decisions",
        ).json()
    assert calibrated["x_calibration"] == {"applied": True, "temperatures": temperatures}
    assert raw["x_calibration"] == {"applied": False, "temperatures": {}}
    # the raw opt-out is the uncalibrated server: equal within blink's 1e-6 (another process, and each request's
    # state may resume from the prefix-state cache's saved blocks: not bit for bit)
    assert_close(raw["answers"], plain["answers"])
    assert calibrated["answers"] != plain["answers"]
    team_plain, team = plain["answers"]["team"]["probabilities"], calibrated["answers"]["team"]["probabilities"]
    assert max(team, key=team.get) == max(team_plain, key=team_plain.get)  # temperature never moves the argmax
    assert max(team.values()) > max(team_plain.values())  # T = 0.2 sharpens
    # T applied to the label logits before the softmax: p_T ∝ p_raw ** (1 / T); p_raw is the other server's, within
    # 1e-6, which the power 1 / T = 5 can widen up to five times
    weights = {k: p ** (1 / 0.2) for k, p in team_plain.items()}
    assert all(abs(team[k] - w / sum(weights.values())) < 5e-6 for k, w in weights.items())
    assert health["calibration"] == {
        "loaded": True,
        "source": str(path),
        "temperatures": temperatures,
        "weights": weights_fingerprint(demo_dir),
        "levels": {"score": 10},
    }
    assert decision["calibration"] == {"applied": True, "temperatures": {"predicate": 0.5, "choice": 0.2, "score": 3.0}}
    # past the levels it was fitted on, a question is served raw and the answer says why; the others as before
    plain_wide = post(server, wide).json()
    assert calibrated_wide["x_calibration"]["not_applied"] == {
        "wide": "30 options; the calibration was fitted on score questions of at most 10"
    }
    assert calibrated_wide["x_calibration"]["applied"] is True
    # answers of other requests (another batch shape, another process): within blink's 1e-6, not bit for bit
    assert_close(calibrated_wide["answers"]["wide"], plain_wide["answers"]["wide"])
    assert_close(calibrated_wide["answers"]["team"], calibrated["answers"]["team"])
    assert decision_raw["calibration"] == {"applied": False, "temperatures": {}}
    assert decision_raw["answers"][0]["probability"] != decision["answers"][0]["probability"]


def test_bad_extension_values_are_refused_naming_the_field(server):
    for field, value in (("x_calibration", "cooked"), ("x_order", "shuffle"), ("x_order", 1)):
        r = post(server, {**body(1), field: value})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", field] and field in r.json()["error"]
        r = post(
            server,
            {"model": "demo", "input": "hi", field: value, "questions": [{"type": "predicate", "instructions": "ok?"}]},
            "/v1/decisions",
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


def rotations(request: dict) -> list[dict]:
    options = list(request["questions"]["team"]["criteria"].items())
    out = []
    for shift in range(len(options)):
        r = json.loads(json.dumps(request))
        r["questions"]["team"]["criteria"] = dict(options[shift:] + options[:shift])
        out.append(r)
    return out


def test_rotate_answers_the_same_for_every_rotation_of_the_options(server):
    fixed = [post(server, r).json() for r in rotations(body(11))]
    rotated = [post(server, {**r, "x_order": "rotate"}).json() for r in rotations(body(11))]
    # read as given, the demo model's position bias shows: the same options get different probabilities
    spread = max(
        abs(a["answers"]["team"]["probabilities"][k] - b["answers"]["team"]["probabilities"][k])
        for a in fixed
        for b in fixed
        for k in TEAMS
    )
    assert spread > 1e-3
    first = rotated[0]["answers"]
    for other in rotated[1:]:
        answers = other["answers"]
        for k in TEAMS:
            assert abs(answers["team"]["probabilities"][k] - first["team"]["probabilities"][k]) <= 1e-6
        assert answers["team"]["choice"] == first["team"]["choice"]
        assert abs(answers["team"]["confidence"] - first["team"]["confidence"]) <= 1e-6
        # noul and score are read once, as given
        assert abs(answers["urgent"]["noul"] - first["urgent"]["noul"]) <= 1e-6
        for k, p in first["anger"]["probabilities"].items():
            assert abs(answers["anger"]["probabilities"][k] - p) <= 1e-6
    # every rotation is read: the mean of the fixed readings of all rotations, by option name
    for k in TEAMS:
        mean = sum(f["answers"]["team"]["probabilities"][k] for f in fixed) / len(fixed)
        assert abs(first["team"]["probabilities"][k] - mean) <= 1e-6
    # rotations are extra question prompts on the same state: the state is counted (and prefilled) once
    n_fixed, n_rotated = fixed[0]["usage"]["input_tokens"], rotated[0]["usage"]["input_tokens"]
    assert n_fixed < n_rotated < len(TEAMS) * n_fixed


def test_calibration_beside_the_weights_and_the_server_default_order(demo_root, demo_dir, tmp_path):
    """A model folder that ships calibration.json (as a Hub repo does): served with it, no flag needed;
    `--x-order rotate` makes rotation the default, and a request's own `x_order` wins."""
    model = tmp_path / "model"
    model.mkdir()
    for item in demo_dir.iterdir():
        (model / item.name).symlink_to(item)
    calibration_file(model / "calibration.json", {"choice": 0.5}, weights_fingerprint(demo_dir))
    request = body(12)
    with running(
        [sys.executable, "-m", "blink", "serve", "--model", str(model), "--port", "{port}", "--x-order", "rotate"],
        demo_root,
        name="serve-beside",
    ) as url:
        health = httpx.get(url + "/healthz").json()
        default = post(url, request).json()
        rotated = post(url, {**request, "x_order": "rotate"}).json()
        fixed = post(url, {**request, "x_order": "fixed"}).json()
    assert health["calibration"]["source"] == str(model / "calibration.json") and health["x_order"] == "rotate"
    assert default["x_calibration"] == {"applied": True, "temperatures": {"choice": 0.5}}
    assert_close(default["answers"], rotated["answers"])  # two requests: within blink's 1e-6
    assert default["answers"] != fixed["answers"]
    assert default["usage"]["input_tokens"] > fixed["usage"]["input_tokens"]
