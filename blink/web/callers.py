"""Who a request is from: one identity per caller, whatever entry point it came through, for fair shares of the
places (blink.web.admission) and of the batches (blink.decide.batching), and, on a Space, whose GPU quota a call
spends.

A `Caller` carries both: `key`, the identity fair shares are counted by, and `quota`, the opaque value a backend
charges (the Space's ZeroGPU identity headers; None on `serve`, where nobody's quota is chosen). Every entry point
gets its caller from the one `Context.caller_of(request)` (a Starlette request or a `gr.Request`: both carry the
headers and the peer), so the routes, MCP, Gradio's `decide` and the UI's events map the same person to the same
key.

On `serve` the key is the peer's address. The one shared API key tells no callers apart. `X-Forwarded-For` is read
only when the peer is a proxy the operator declared (`trusted_proxies`): then the address is the right-most one in
the header that is not itself a trusted proxy (what the nearest untrusted hop connected from; what a client writes
on its own to the left of it is never read). A header from anyone else is ignored: a client could claim a new
address per request and take a share each time. The Space's rules (ZeroGPU's `X-IP-Token`, the signed-in user,
the address its proxy reports) are space/zerogpu.py's `space_caller`, built on the same pieces.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Hashable
from dataclasses import dataclass, replace
from typing import Any

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Caller:
    key: str  # whose fair share: "ip:127.0.0.2", "user:alice", "zerogpu:<digest>"
    quota: Any = None  # what a GPU call is charged to (opaque; the Space's identity headers), None on `serve`
    bulk: bool = False  # the Batch API's rows: their own model calls, after interactive work (blink.decide.batching)
    # rows of a table (the Sheet's): decided as any request, but, as bulk rows, saving a state in the prefix-state
    # cache only where it repeats, so that a table never pushes interactive callers' states out
    table_rows: bool = False

    @property
    def saves_state(self) -> bool:
        """Whether its requests' states are saved in the prefix-state cache (False: only where they repeat,
        blink.executor.prefix_cache; backends read it with getattr: a caller that is not a Caller, None
        in-process, saves)."""
        return not (self.bulk or self.table_rows)


NOBODY = Caller("unknown")  # a request that carries no peer (an in-process call): one share for all of them


BULK = "blink.bulk"  # an ASGI scope key only an in-process caller can set (blink.batch.inproc): its rows are bulk


def with_lane(caller: Caller, request) -> Caller:
    """`caller`, marked bulk when `request` was made in this process as bulk work (never over HTTP)."""
    scope = getattr(request, "scope", None) or {}
    return replace(caller, bulk=True) if scope.get(BULK) and isinstance(caller, Caller) else caller


def key_of(caller) -> Hashable:
    """The fair-share key of what a job or an entry point carries: a Caller's key; None is nobody's; any other
    value (a quota passed as it is) is its own key."""
    if isinstance(caller, Caller):
        return caller.key
    return NOBODY.key if caller is None else caller


def quota_of(caller):
    """What a backend charges: a Caller's quota; anything else is passed on as it is (None, identity pairs)."""
    return caller.quota if isinstance(caller, Caller) else caller


def networks(values) -> tuple[Network, ...]:
    """Trusted proxies as networks: addresses or CIDR ranges (`10.0.0.0/8`, `::1`); a bad one raises ValueError."""
    out = []
    for value in values:
        try:
            out.append(ipaddress.ip_network(str(value).strip(), strict=False))
        except ValueError:
            raise ValueError(f"not an address or network: {value!r}") from None
    return tuple(out)


def _address(text: str | None):
    try:
        return ipaddress.ip_address((text or "").strip().strip("[]"))
    except ValueError:
        return None


class Peers:
    """The address a request comes from, `X-Forwarded-For` read only behind the trusted proxies."""

    def __init__(self, trusted=()):
        self.trusted = networks(trusted)

    def trusts(self, address) -> bool:
        return address is not None and any(address in net for net in self.trusted)

    def address(self, peer: str | None, forwarded: str | None, behind_proxy: bool = False) -> str:
        """The caller's address: the peer, or, while the hop in hand is a trusted proxy (`behind_proxy`: the peer
        is one whatever its address, the Space's own), the hop before it in `X-Forwarded-For`, right to left."""
        current = _address(peer)
        hops = [h for h in (forwarded or "").split(",") if h.strip()]
        trusted = behind_proxy or self.trusts(current)
        while trusted and hops:
            hop = _address(hops.pop())
            if hop is None:
                break  # a malformed entry: nothing to its left can be believed
            current = hop
            trusted = self.trusts(current)
        return str(current) if current is not None else (peer or "unknown")

    def of(self, request, behind_proxy: bool = False) -> str:
        """The address of a Starlette request or a `gr.Request`."""
        client = getattr(request, "client", None)
        peer = getattr(client, "host", None) if client is not None else None
        headers = getattr(request, "headers", None) or {}
        return self.address(peer, headers.get("x-forwarded-for"), behind_proxy)

    def caller_of(self, request) -> Caller:
        """`serve`'s caller: the peer address (behind trusted proxies, the address they report)."""
        if request is None:
            return NOBODY
        return Caller("ip:" + self.of(request))
