"""Serving settings: one table of every knob, its `BLINK_*` environment variable, its flag and its check.

`python -m blink serve` builds its flags from this table; the Space reads `space_config.py` and lets the
same environment variables override every value. Parsing lives here once so both agree.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass, field, fields

from .auth import check_key
from .images import ImageLimits
from .limits import Limits


def int_range(lo: int, hi: int):
    def parse(value) -> int:
        try:
            n = int(value)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"must be {lo}-{hi}, got {n}")
        return n

    parse.__name__ = f"integer {lo}-{hi}"
    return parse


def window_ms(value) -> float:
    try:
        ms = float(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not (math.isfinite(ms) and 0 <= ms <= 1000):
        raise argparse.ArgumentTypeError("must be 0 (off) to 1000 ms")
    return ms


def auto_number(lo: float, hi: float):
    """A number in [lo, hi], or `auto` / empty for the device's default (None)."""
    def parse(value) -> float | None:
        if value is None or str(value).strip().lower() in ("", "auto"):
            return None
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
        if not (math.isfinite(x) and lo <= x <= hi):
            raise argparse.ArgumentTypeError(f"must be {lo:g}-{hi:g} (or auto), got {value}")
        return x

    parse.__name__ = f"number {lo:g}-{hi:g} or auto"
    return parse


def api_key(value) -> str | None:
    try:
        return check_key(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def names(value) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return tuple(n.strip() for n in str(value or "").split(",") if n.strip())


def flag(value) -> bool:
    if isinstance(value, bool):
        return value
    text_value = str(value).strip().lower()
    if text_value in ("1", "true", "on", "yes"):
        return True
    if text_value in ("", "0", "false", "off", "no"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {value!r} (use 1/0, true/false)")


def layout(value) -> str:
    if value not in ("inline", "first"):
        raise argparse.ArgumentTypeError("must be inline or first")
    return value


def text(value) -> str | None:
    return str(value) if value not in (None, "") else None


def order(value) -> str:
    if value not in ("fixed", "rotate"):
        raise argparse.ArgumentTypeError("must be fixed or rotate")
    return value


# name, type, default, help. The env var is BLINK_<NAME>; the flag --<name with dashes>.
KNOBS = [
    ("model", str, "demo", "Hub repo id, local folder, `demo` or `demo-vision` (offline random demo models)"),
    ("revision", text, None, "Hub revision (tag, branch or commit) of --model"),
    ("adapter", text, None, "LoRA adapter (Hub repo or folder), merged into the model on CPU before it moves"),
    ("adapter_revision", text, None, "Hub revision of --adapter"),
    ("served_model_name", text, None, "the name answers and /v1/models carry (default: the model's folder name)"),
    ("model_aliases", names, (), "comma-separated extra names listed in /v1/models (any name is accepted)"),
    ("api_key", api_key, None, "require `Authorization: Bearer <key>` on /v1/* (default: open)"),
    ("batch_window_ms", window_ms, 0.0, "cross-request batching window: requests arriving within it are decided "
                                        "in one GPU call (0 = one request per call; at most 1000)"),
    ("max_batch_requests", int_range(1, 64), 16, "most requests decided in one call (1-64)"),
    ("max_queued_requests", int_range(1, 1024), 64, "most requests waiting; past this: HTTP 529 + Retry-After"),
    ("pass_cost_tokens", auto_number(0, 1e6), None, "the fixed cost of one more forward pass, in tokens, against the "
     "padding it saves when rows are grouped into passes (auto: 32 on CPU, 256 on CUDA; bench/gpu.sh sweeps it)"),
    ("pass_cache_mib", auto_number(16, 1 << 20), None, "attention cache one forward pass may hold, MiB: passes are "
     "cut to fit (auto: 2048 on CPU, 4096 on CUDA)"),
    ("max_questions", int_range(1, 1024), Limits.max_questions, "questions per request"),
    ("max_options", int_range(2, 255), Limits.max_options, "options per choice question (labels run to 255)"),
    ("max_levels", int_range(2, 255), Limits.max_levels, "levels per score question"),
    ("max_context_tokens", int_range(64, 262144), Limits.max_context_tokens, "tokens per prompt (state + question)"),
    ("max_request_tokens", int_range(64, 1048576), Limits.max_request_tokens,
     "tokens the model runs per request (shared state counted once)"),
    ("max_body_bytes", int_range(1024, 1 << 30), Limits.max_body_bytes, "request body size as sent; past it: 413"),
    ("system_prompt", text, None, "chat: system message prepended when a conversation has none"),
    ("max_output_tokens", int_range(1, 32768), 4096, "chat: most tokens per reply (a larger max_tokens is lowered)"),
    ("max_concurrent_chats", int_range(1, 64), 4, "chat: generations at once; past it HTTP 529 + Retry-After"),
    ("enable_thinking", flag, False, "chat: let the model think (Qwen3.5's <think> block) before it answers"),
    ("vision", flag, False, "accept images with the model's own vision tower (1/0)"),
    ("vision_tower", text, None, "accept images with a matching base model's vision tower, repo@revision"),
    ("image_layout", layout, "inline", "image tokens at their placeholders (inline) or before the state (first)"),
    ("max_images", int_range(1, 16), ImageLimits.max_images, "images per request"),
    ("max_image_bytes", int_range(1024, 32 * 1024 * 1024), ImageLimits.max_image_bytes, "bytes per image"),
    ("max_image_pixels", int_range(65_536, 16_777_216), ImageLimits.max_image_pixels,
     "pixels per image after resizing (larger images are scaled down)"),
    ("max_image_source_pixels", int_range(65_536, 64_000_000), ImageLimits.max_image_source_pixels,
     "declared pixels per image before decoding (larger is refused unread)"),
    ("calibration", text, None, "calibration file to apply (python -m blink calibrate writes one); default: "
     "calibration.json beside the weights when there is one; `off`: none"),
    ("x_order", order, "fixed", "default `x_order` of a decision: fixed (options read as given) or rotate (each "
     "choice read once per rotation of its options, probabilities averaged); a request's own `x_order` wins"),
]


@dataclass
class Settings:
    model: str = "demo"
    revision: str | None = None
    adapter: str | None = None
    adapter_revision: str | None = None
    served_model_name: str | None = None
    model_aliases: tuple[str, ...] = ()
    api_key: str | None = None
    batch_window_ms: float = 0.0
    max_batch_requests: int = 16
    max_queued_requests: int = 64
    pass_cost_tokens: float | None = None
    pass_cache_mib: float | None = None
    max_questions: int = Limits.max_questions
    max_options: int = Limits.max_options
    max_levels: int = Limits.max_levels
    max_context_tokens: int = Limits.max_context_tokens
    max_request_tokens: int = Limits.max_request_tokens
    max_body_bytes: int = Limits.max_body_bytes
    system_prompt: str | None = None
    max_output_tokens: int = 4096
    max_concurrent_chats: int = 4
    enable_thinking: bool = False
    vision: bool = False
    vision_tower: str | None = None
    image_layout: str = "inline"
    max_images: int = ImageLimits.max_images
    max_image_bytes: int = ImageLimits.max_image_bytes
    max_image_pixels: int = ImageLimits.max_image_pixels
    max_image_source_pixels: int = ImageLimits.max_image_source_pixels
    calibration: str | None = None
    x_order: str = "fixed"
    extra: dict = field(default_factory=dict)

    @property
    def image_limits(self) -> ImageLimits:
        return ImageLimits(self.max_images, self.max_image_bytes, self.max_image_pixels, self.max_image_source_pixels)

    @property
    def limits(self) -> Limits:
        return Limits(max_questions=self.max_questions, max_options=self.max_options, max_levels=self.max_levels,
                      max_context_tokens=self.max_context_tokens, max_request_tokens=self.max_request_tokens,
                      max_body_bytes=self.max_body_bytes)

    @property
    def served_name(self) -> str:
        return self.served_model_name or self.model.rstrip("/").split("/")[-1]

    @classmethod
    def from_values(cls, values: dict | None = None, env: dict | None = None) -> "Settings":
        """`values` (e.g. space_config.py) with every `BLINK_<NAME>` environment variable taking precedence."""
        env = os.environ if env is None else env
        values = dict(values or {})
        out = {}
        for name, kind, default, _ in KNOBS:
            raw = env.get(f"BLINK_{name.upper()}")
            value = raw if raw is not None else values.get(name, default)
            try:
                out[name] = kind(value) if value is not None else None
            except argparse.ArgumentTypeError as exc:
                raise SystemExit(f"BLINK_{name.upper()}={raw!r}: {exc}" if raw is not None else f"{name}: {exc}")
        return cls(**out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per knob; each defaults to its BLINK_* variable (checked by the same parser)."""
    for name, kind, default, help_text in KNOBS:
        env_name = f"BLINK_{name.upper()}"
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=kind,
                            default=os.environ.get(env_name, default), help=f"{help_text} [{env_name}]")


def from_args(args: argparse.Namespace) -> Settings:
    known = {f.name for f in fields(Settings)}
    # argparse runs string defaults (those taken from the environment) through `type` as well
    return Settings(**{k: v for k, v in vars(args).items() if k in known})
