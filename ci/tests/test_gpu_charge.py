"""What the platform charges for a GPU call (space/durations.py `Charge`, space/zerogpu.py `platform_charge`), as
`spaces` 0.51.3 computes it: a `large` call is scheduled and charged `round(requested x duration_factor)` seconds
(1.5 on the RTX PRO 6000 Blackwell), an `xlarge` call its requested seconds, charged twice. The estimate asks for
what makes the scheduled seconds cover its need, and the caps bound what is charged, after the factor."""

from __future__ import annotations

import json
from datetime import timedelta
from importlib.resources import files

import pytest

from space.durations import Charge, DurationEstimator

CARDS = {c["model"]: c for c in json.loads(files("spaces.zero").joinpath("configs.json").read_text())}
BLACKWELL = CARDS["NVIDIA RTX PRO 6000 Blackwell Server Edition"]


def spaces_scheduled(requested: int, size: str, factor: float) -> int:
    """spaces/zero/client.py: get_duration_seconds, then `round()` in schedule (the seconds sent)."""
    seconds = timedelta(seconds=requested).seconds
    if size != "xlarge":
        seconds *= factor
    return round(seconds)


def test_the_pinned_spaces_says_what_the_issue_says():
    assert BLACKWELL["duration_factor"] == 1.5 and BLACKWELL["xlarge_threshold"] == 45_097_156_608
    assert CARDS["NVIDIA H200"]["duration_factor"] == 1.0


@pytest.mark.parametrize("size", ["large", "xlarge"])
@pytest.mark.parametrize("factor", [1.0, 1.5])
def test_scheduled_and_charged_as_spaces_computes_them(size, factor):
    charge = Charge(size=size, factor=factor)
    for requested in range(1, 400):
        assert charge.scheduled_s(requested) == spaces_scheduled(requested, size, factor)
        assert charge.charged_s(requested) == charge.scheduled_s(requested) * (2 if size == "xlarge" else 1)


@pytest.mark.parametrize("size", ["large", "xlarge"])
@pytest.mark.parametrize("factor", [1.0, 1.5, 1.25])
def test_the_request_covers_the_need_and_no_more(size, factor):
    charge = Charge(size=size, factor=factor)
    for need in range(1, 400):
        asked = charge.request_for(need)
        assert spaces_scheduled(asked, size, factor) >= need  # the call may run as long as it needs
        assert asked == 1 or spaces_scheduled(asked - 1, size, factor) < need  # the fewest that do
    for cap in range(1, 400):
        most = charge.most_for(cap)
        assert most == 1 or charge.charged_s(most) <= cap
        assert charge.charged_s(most + 1) > cap


def test_a_large_call_on_blackwell_is_not_inflated_by_half_again():
    """The issue's example: an estimate of 40 s used to be sent, and charged, as 60 s."""
    est = DurationEstimator(prefill_s_per_token=0.01, overhead_s=0.0, headroom=1.0, min_s=1, max_s=120)
    large = Charge(size="large", factor=1.5)
    assert est.seconds(4000) == 40
    asked = est.seconds(4000, charge=large)
    assert asked == 27 and spaces_scheduled(asked, "large", 1.5) == 40  # scheduled: the need, not 60
    xlarge = Charge(size="xlarge", factor=1.5)
    assert est.seconds(4000, charge=xlarge) == 40  # no factor on xlarge; charged 80


@pytest.mark.parametrize(
    "size,factor,cap,most_charged", [("large", 1.5, 60, 60), ("large", 1.0, 60, 60), ("xlarge", 1.5, 60, 60)]
)
def test_never_charged_past_the_cap(size, factor, cap, most_charged):
    est = DurationEstimator(min_s=1, max_s=600)
    charge = Charge(size=size, factor=factor)
    asked = est.seconds(10**7, 10**6, max_s=cap, charge=charge)
    assert charge.charged_s(asked) <= most_charged
    assert charge.charged_s(asked + 1) > cap  # the most the cap allows


def test_the_ledger_records_requested_scheduled_and_charged():
    est = DurationEstimator(prefill_s_per_token=0.01, overhead_s=0.0, headroom=1.0, min_s=1, max_s=120)
    for size, charged in (("large", 40), ("xlarge", 80)):
        est.ledgers.clear()
        charge = Charge(size=size, factor=1.5)
        asked = est.seconds(4000, charge=charge)
        est.requested("decide", asked, charge)
        est.used("decide", 35.0)
        ledger = est.health()["decide"]
        assert ledger["last_requested_s"] == asked and ledger["last_charged_s"] == charged
        assert ledger["last_scheduled_s"] == 40 and ledger["charged_s"] == charged
        assert ledger["over_requested"] == 0  # 35 s used of the 40 s scheduled


def test_health_says_what_the_platform_charges():
    est = DurationEstimator(charge=lambda: Charge(size="xlarge", factor=1.5, setting="auto", source="platform"))
    charge = est.health()["charge"]
    assert charge["size"] == "xlarge" and charge["setting"] == "auto" and charge["charged_per_requested_s"] == 2.0
    assert "charged 2 x N s" in Charge(size="xlarge").describe()
    assert "charged 1.5 x N s" in Charge(size="large", factor=1.5, card="NVIDIA RTX PRO 6000").describe()


def test_platform_charge_reads_spaces_configuration():
    """Off ZeroGPU nothing is charged (factor 1); on ZeroGPU the factor is the one `spaces` picked for the card,
    and `auto` is the platform's default size (large until the packed weights pass the threshold)."""
    from spaces.zero import config

    from space.zerogpu import decorator_size, platform_charge

    off = platform_charge("auto", zero_gpu=False)
    assert (off.size, off.factor, off.source) == ("large", 1.0, "assumed")
    on = platform_charge("large", zero_gpu=True)
    card = config.get_config()
    assert (on.factor, on.card, on.source) == (card["duration_factor"], card["model"], "platform")
    assert platform_charge("auto", zero_gpu=True).size == "large"  # nothing packed past the threshold here
    assert platform_charge("xlarge", zero_gpu=True).size == "xlarge"
    assert decorator_size("auto") is None and decorator_size("xlarge") == "xlarge"


def test_auto_is_a_setting():
    from blink.errors import StartupError
    from blink.settings import SpaceSettings, resolve

    assert resolve(SpaceSettings, {}, {"BLINK_GPU_SIZE": "auto"}).gpu_size == "auto"
    with pytest.raises(StartupError):
        resolve(SpaceSettings, {}, {"BLINK_GPU_SIZE": "huge"})
