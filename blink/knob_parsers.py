"""Knob parsers: each takes text (an env var, a flag) or a typed value (space_config.py, spaces.toml) and returns
the Python value or raises ValueError(why). Typed values are never coerced: 1.5 is not an int. Each also says,
as `str`, what it takes (the README's tables). Nothing heavy is imported here (build.py runs them without torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def check_key(value: str | None) -> str | None:
    """Validate a configured key: empty means open; a key must fit in a header (printable ASCII, no spaces),
    as TypeSafe's SDKs require of theirs."""
    key = (value or "").strip()
    if not key:
        return None
    if not (key.isascii() and key.isprintable()) or any(c.isspace() for c in key):
        raise ValueError("the API key must be printable ASCII without whitespace")
    return key


@dataclass(frozen=True)
class Integer:
    lo: int
    hi: int

    def __call__(self, value) -> int:
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ValueError(f"not an integer: {value!r}") from None
        elif isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be an integer, got {value!r}")
        if not self.lo <= value <= self.hi:
            raise ValueError(f"must be {self.lo}-{self.hi}, got {value}")
        return value

    def __str__(self) -> str:
        return f"{self.lo}–{self.hi}"


@dataclass(frozen=True)
class Number:
    lo: float
    hi: float
    above: bool = False  # lo itself is refused
    auto: bool = False  # `auto` (or empty) means None: the device's default

    def __call__(self, value) -> float | None:
        if self.auto and (value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto"))):
            return None
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise ValueError(f"not a number: {value!r}") from None
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"must be a number, got {value!r}")
        low_ok = value > self.lo if self.above else value >= self.lo
        if not (math.isfinite(value) and low_ok and value <= self.hi):
            raise ValueError(f"must be {self}, got {value}")
        return float(value)

    def __str__(self) -> str:
        lo, hi = (int(x) if float(x).is_integer() else x for x in (self.lo, self.hi))
        return (f"above {lo}, at most {hi}" if self.above else f"{lo}–{hi}") + (" or auto" if self.auto else "")


@dataclass(frozen=True)
class Choice:
    options: tuple[str, ...]

    def __call__(self, value) -> str:
        if value not in self.options:
            raise ValueError(f"must be one of {', '.join(self.options)}; got {value!r}")
        return value

    def __str__(self) -> str:
        return " / ".join(self.options)


def flag(value) -> bool:
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise ValueError(f"must be true or false, got {value!r}")
    if value.strip().lower() in ("1", "true", "on", "yes"):
        return True
    if value.strip().lower() in ("", "0", "false", "off", "no"):
        return False
    raise ValueError(f"not a boolean: {value!r} (use 1/0, true/false)")


def optional_text(value) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"must be a string, got {type(value).__name__}")
    return value or None


def plain_text(value) -> str:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"must be a string, got {type(value).__name__}")
    return value or ""


def names(value) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)):
        if not all(isinstance(n, str) for n in value):
            raise ValueError("must be a list of strings")
        return tuple(value)
    if not isinstance(value, str):
        raise ValueError(f"must be a comma-separated string or a list, got {type(value).__name__}")
    return tuple(n.strip() for n in value.split(",") if n.strip())


class QueryTemplate:
    """A question's wording with `{query}` where the query goes (once or more); no other braces."""

    def __call__(self, value) -> str:
        if not isinstance(value, str) or "{query}" not in value:
            raise ValueError(f"must be a string holding {{query}}, got {value!r}")
        rest = value.replace("{query}", "")
        if "{" in rest or "}" in rest:
            raise ValueError(f"only {{query}} may stand in braces, got {value!r}")
        if len(value) > 2000 or not rest.strip():
            raise ValueError("must be a question of at most 2000 characters around {query}")
        return value

    def __str__(self) -> str:
        return "text holding {query}"


class TextList:
    """A non-empty list of strings, an empty string among them allowed: a list, or its JSON text (`["N/A", ""]`)."""

    def __call__(self, value) -> tuple[str, ...]:
        if isinstance(value, str):
            import json

            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ValueError(f'must be a JSON array of strings, e.g. ["N/A", ""], got {value!r}') from None
        if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) for v in value):
            raise ValueError(f"must be a non-empty array of strings, got {value!r}")
        return tuple(value)

    def __str__(self) -> str:
        return "JSON array of strings"


def urls(value) -> tuple[str, ...]:
    """Comma-separated (or listed) http(s) base URLs, each named once."""
    from urllib.parse import urlsplit

    out = tuple(url.rstrip("/") for url in names(value))
    for url in out:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ValueError(f"not an http(s) base URL: {url!r}")
    if len(set(out)) < len(out):
        raise ValueError("a URL is listed twice")
    return out


def networks(value) -> tuple[str, ...]:
    """Comma-separated (or listed) IP addresses or CIDR networks (`10.0.0.0/8`, `::1`), each as written."""
    import ipaddress

    out = names(value)
    for net in out:
        try:
            ipaddress.ip_network(net, strict=False)
        except ValueError:
            raise ValueError(f"not an IP address or network: {net!r}") from None
    return out


def api_key(value) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"must be a string, got {type(value).__name__}")
    return check_key(value)
