"""Duration honesty for both benchmarks: recorded decision calls replayed through the GPU-duration estimator
configured as the Space configures it (`space_config.py`), so the numbers are what the Space would ask."""

from __future__ import annotations

import space_config as sc
from blink.durations import DurationEstimator, replay


def space_estimator() -> DurationEstimator:
    return DurationEstimator(prefill_s_per_token=sc.PREFILL_S_PER_TOKEN, decode_s_per_token=sc.DECODE_S_PER_TOKEN,
                             overhead_s=sc.DURATION_OVERHEAD_S, cold_s=sc.DURATION_COLD_S,
                             headroom=sc.DURATION_HEADROOM, min_s=sc.DURATION_MIN_S,
                             max_s=max(sc.DURATION_MAX_S, sc.CHAT_DURATION_MAX_S))


def duration_honesty(calls: list[tuple[int, float]]) -> dict:
    """What each call `(prefill tokens, compute seconds)` would have requested before it ran, against what it
    used, in order; the first call is cold (the Space adds DURATION_COLD_S to it)."""
    return {**replay(calls, space_estimator()), "estimator": "space_config.py's duration settings"}
