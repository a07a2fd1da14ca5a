"""Duration honesty for both benchmarks: recorded decision calls replayed through the GPU-duration estimator
configured as the Space configures it (`space_config.py`), so the numbers are what the Space would ask."""

from __future__ import annotations

import space_config
from blink.settings import resolve_space
from space.durations import configured, replay


def duration_honesty(calls: list[tuple[int, float]]) -> dict:
    """What each call `(prefill tokens, compute seconds)` would have requested before it ran, against what it
    used, in order; the first call is cold (the Space adds DURATION_COLD_S to it)."""
    estimator = configured(resolve_space(space_config, env={})[1])
    return {**replay(calls, estimator), "estimator": "space_config.py's duration settings"}
