"""Quiet logs: what a library logs that says nothing to the person reading ours, dropped at its logger.

A filter on the library's own logger, not a patch of its code: the record is dropped where it is made, before
any handler (ours, uvicorn's, Gradio's) sees it, and everything else that logger says still gets through.
"""

from __future__ import annotations

import logging


class DropMessages(logging.Filter):
    """Drops a record whose message contains one of `fragments`."""

    def __init__(self, *fragments: str):
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(fragment in message for fragment in self.fragments)


def drop(logger: str, *fragments: str) -> None:
    """Drop `logger`'s records that contain any of `fragments` (once: calling it again adds nothing)."""
    target = logging.getLogger(logger)
    if not any(isinstance(f, DropMessages) and f.fragments == fragments for f in target.filters):
        target.addFilter(DropMessages(*fragments))


def quiet_mcp() -> None:
    """MCP's streamable HTTP server, stateless as both of ours are: "Terminating session: None" after every call
    (there is no session), and "StreamableHTTP session manager started" once per server (the Space runs two)."""
    drop("mcp.server.streamable_http", "Terminating session: None")
    drop("mcp.server.streamable_http_manager", "StreamableHTTP session manager started")


def quiet_cpu_kernels() -> None:
    """On a machine without CUDA, transformers' advice to install flash-linear-attention and causal-conv1d (GPU
    kernels, of no use on CPU) on the first forward pass."""
    drop("transformers.integrations.hub_kernels", "is falling back to its reference PyTorch implementation")
