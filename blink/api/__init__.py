"""The wires: TypeSafe's System One, the catalog (/v1/models, /healthz), MCP, and OpenAI's (chat, Responses,
Completions, Decisions)."""
