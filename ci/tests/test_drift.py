"""The drift monitor (blink.tasks.drift) replayed on streams of answers drawn from known models: traffic like the
labelled rows raises no alarm in 5,000 answers (for baselines of 2,000 and of 100 rows); a moved answer mix alarms
within a stated number of answers; out-of-scope traffic rising from 1.5 % to 18 % alarms on confidence first, long
before the mix notices; and what a monitor holds does not grow with the answers it has seen."""

from __future__ import annotations

import numpy as np
import pytest

from blink.tasks.drift import WINDOW, Monitor, baseline, wilson_upper

MIX = np.array([0.5, 0.3, 0.2])


def answers(n: int, mix, rng, out_of_scope: float = 0.0):
    """Each answer's option and confidence: in scope, the option drawn from `mix` and a confidence from a Beta(8, 2)
    spread over (1/3, 1); out of scope (a share `out_of_scope`), any option at a confidence near 1/3."""
    option = rng.choice(3, n, p=mix)
    confidence = rng.beta(8, 2, n) * (2 / 3) + 1 / 3
    stray = rng.random(n) < out_of_scope
    option[stray] = rng.integers(0, 3, stray.sum())
    confidence[stray] = rng.uniform(1 / 3, 0.4, stray.sum())
    return option, confidence


def base_of(rows: int, rng, out_of_scope: float = 0.0) -> dict:
    option, confidence = answers(rows, MIX, rng, out_of_scope)
    p = np.repeat(((1 - confidence) / 2)[:, None], 3, axis=1)
    p[np.arange(rows), option] = confidence
    return baseline(p)


def feed(monitor: Monitor, option, confidence, stop_on: str | None = None) -> int | None:
    """Each answer to the monitor; with `stop_on`, the number of answers after which that signal first alarmed."""
    for i, (o, c) in enumerate(zip(option.tolist(), confidence.tolist(), strict=True), start=1):
        monitor.add(o, c)
        if stop_on is not None and monitor.alarming[stop_on]:
            return i
    return None


@pytest.mark.parametrize("rows", [2000, 100])
def test_traffic_like_the_labels_raises_no_alarm_in_5000_answers(rows):
    for seed in range(12):
        rng = np.random.default_rng(seed)
        monitor = Monitor(base_of(rows, rng))
        feed(monitor, *answers(5000, MIX, rng))
        assert monitor.alarms == {"mix": 0, "confidence": 0}, (rows, seed, monitor.state())
        assert monitor.seen == 5000 and monitor.state()["mix"]["distance"] < monitor.line


def test_a_moved_answer_mix_alarms_within_600_answers():
    """The mix moves by 0.2 in total variation ([0.5, 0.3, 0.2] to [0.3, 0.3, 0.4]) after 1,000 answers like the
    labels: the mix signal alarms within 600 answers (the window is 500) in each of 10 streams."""
    for seed in range(10):
        rng = np.random.default_rng(100 + seed)
        monitor = Monitor(base_of(2000, rng))
        assert feed(monitor, *answers(1000, MIX, rng), stop_on="mix") is None
        after = feed(monitor, *answers(2000, [0.3, 0.3, 0.4], rng), stop_on="mix")
        assert after is not None and after <= 600, (seed, after)


def test_rising_out_of_scope_traffic_alarms_on_confidence_before_the_mix():
    """Out-of-scope traffic at 1.5 % in the labels rises to 18 %: the confidence signal alarms within 400 answers in
    each of 10 streams, while the mix (hardly moved: out-of-scope answers fall on every option) stays quiet."""
    for seed in range(10):
        rng = np.random.default_rng(200 + seed)
        monitor = Monitor(base_of(2000, rng, out_of_scope=0.015))
        assert feed(monitor, *answers(1000, MIX, rng, out_of_scope=0.015), stop_on="confidence") is None
        after = feed(monitor, *answers(3000, MIX, rng, out_of_scope=0.18), stop_on="confidence")
        assert after is not None and after <= 400, (seed, after)
        assert monitor.alarms["mix"] == 0, (seed, monitor.state())


def test_a_monitor_holds_counts_only_and_as_many_after_100000_answers():
    rng = np.random.default_rng(3)
    monitor = Monitor(base_of(500, rng))
    held = sum(a.nbytes for a in (monitor.recent, monitor.counts, monitor.answered))
    option, confidence = answers(100_000, MIX, rng)
    feed(monitor, option, confidence)
    assert sum(a.nbytes for a in (monitor.recent, monitor.counts, monitor.answered)) == held
    assert monitor.recent.size == WINDOW and monitor.answered.tolist() == np.bincount(option, minlength=3).tolist()
    assert monitor.counts.tolist() == np.bincount(option[-WINDOW:], minlength=3).tolist()  # the last window's


def test_the_wilson_bound_holds_the_share_of_the_labelled_rows():
    """p0, the share the confidence signal assumes, covers the true 5 % from the rows' quantile: over labelled sets of
    100 rows, the share below their own 5th percentile on fresh traffic is under the bound in >= 90 % of sets."""
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(400):
        low = np.quantile(rng.beta(8, 2, 100), 0.05)
        covered += np.mean(rng.beta(8, 2, 20_000) < low) <= wilson_upper(0.05, 100)
    assert covered >= 360, covered
