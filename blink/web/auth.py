"""The optional API key for /v1/*: `Authorization: Bearer <key>`, compared in constant time.

Without a key configured any Authorization header is accepted and ignored (TypeSafe's SDKs always send
one, even to a local server). The key never appears in logs, health or error bodies. The Space's UI login
(`gradio_ui_needs_key`) takes the same key as its password, checked by `matches`.
"""

from __future__ import annotations

import hmac

from blink.knob_parsers import check_key


def bearer_token(header: str | None) -> str | None:
    scheme, _, token = (header or "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class ApiKey:
    def __init__(self, key: str | None = None):
        self._key = check_key(key)

    @property
    def required(self) -> bool:
        return self._key is not None

    def allows(self, authorization: str | None) -> bool:
        """An `Authorization` header's verdict: any header when no key is set, else `Bearer <the key>`."""
        return self._key is None or self.matches(bearer_token(authorization))

    def matches(self, secret: str | None) -> bool:
        """Whether `secret` is the key itself (the UI's login password, a bearer token), in constant time; never
        true without a key."""
        if self._key is None or secret is None:
            return False
        return hmac.compare_digest(secret.encode("utf-8", "surrogatepass"), self._key.encode("utf-8"))

    def __repr__(self) -> str:  # never the key itself
        return f"ApiKey(required={self.required})"
