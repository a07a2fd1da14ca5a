"""The wires: TypeSafe's System One, the catalog (/v1/models, /healthz, /metrics), MCP, OpenAI's (`openai`: chat,
Responses, Completions, Decisions, tokenize), Gemini's decisions, the label wires (rerank and score, moderations),
and the Batch API's /v1/files and /v1/batches."""
