"""blink: typed decisions (noul, choice, score) from one forward pass, and chat, over HTTP: the engine and the wires.

Imports neither gradio nor spaces (the Space's own modules are `space/`). Its packages: `web` (the request pipeline),
`api` (the wires), `decide` (decisions), `executor` (the forward passes), `generate` (chat), `images`, `model`
(loading, the demo model), `vllm` (the backend in front of vLLM replicas) and `batch` (bulk: run-batch and the Batch
API); the modules beside them hold the server, the context, the settings, the plans and the errors
(docs/architecture.md maps every module).
"""
