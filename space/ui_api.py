"""The API tab: copy-paste snippets with this Space's own URL, served name and key note (filled in when the page
loads), and the live /healthz figures."""

import os

import gradio as gr

from blink.context import Context
from blink.web.auth import ApiKey
from space.ui_shared import PRIVATE


def base_url(request: gr.Request | None) -> str:
    host = os.environ.get("SPACE_HOST")
    if host:
        return f"https://{host}"
    headers = getattr(request, "headers", None) or {}
    local = headers.get("host") if hasattr(headers, "get") else None
    return f"http://{local}" if local else f"http://127.0.0.1:{os.environ.get('GRADIO_SERVER_PORT', '7860')}"


def key_note_md(key: ApiKey) -> str:
    """Whether callers need a key (never the key)."""
    if key.required:
        return "This Space requires an API key for /v1/*: send `Authorization: Bearer <key>`."
    return "This Space's API is open: no key needed (any `Authorization` header is ignored)."


def charge_md(health: dict) -> str:
    """What a GPU call is charged here (/healthz `gpu_charge`), or nothing off the Space's backend."""
    charge = health.get("gpu_charge")
    if not charge:
        return ""
    return f"**GPU:** {charge} (`/healthz` → `gpu_seconds`: requested, charged and used seconds per kind)."


def quota_md(health: dict) -> str:
    """On ZeroGPU only (/healthz `zero_gpu`): how a connection spends its own GPU quota."""
    if not health.get("zero_gpu"):
        return ""
    return (
        " To spend your own\n   ZeroGPU quota rather than the shared pool, add the header "
        "`X-HF-Authorization: Bearer hf_…` under the\n   connection's Headers."
    )


def snippets_md(url: str, name: str, key: ApiKey, health: dict | None = None) -> str:
    """The API tab: copy-paste snippets with this Space's own URL, served name and key note, and what a GPU call
    is charged (`health`: the /healthz figures)."""
    key_note = key_note_md(key)
    required = key.required
    key = "$BLINK_API_KEY" if required else "none"
    return f"""
**Base URL:** `{url}` · OpenAI base URL: `{url}/v1` · {key_note}

{charge_md(health or {})}

**TypeSafe SDK** (`pip install typesafe-sdk`)
```python
from typesafe_sdk import Choice, Noul, TypeSafeClient

with TypeSafeClient(base_url="{url}", api_key="{key}", model="{name}") as client:
    r = client.system_one(
        state="I was charged twice for order #8812. Please fix this today.",
        questions={{
            "team": Choice(instructions="Which team should handle this?",
                           criteria={{"billing": None, "shipping": None, "technical": None}}),
            "urgent": Noul(instructions="Does this need a reply today?"),
        }},
    )
print(r.answers["team"].probabilities)
```

**OpenAI SDK** (`pip install openai`)
```python
from openai import OpenAI

client = OpenAI(base_url="{url}/v1", api_key="{key}")
chat = client.chat.completions.create(model="{name}", messages=[{{"role": "user", "content": "Hello!"}}],
                                      max_tokens=256)
print(chat.choices[0].message.content)
decision = client.decisions.create(
    model="{name}", input="I was charged twice for order #8812.",
    questions=[{{"type": "choice", "name": "team", "instructions": "Which team?",
                 "choices": [{{"value": "billing"}}, {{"value": "shipping"}}]}}],
)
print(decision)
```

**curl**
```bash
curl -s {url}/v1/systemone -H 'Content-Type: application/json' \\
  -H "Authorization: Bearer {key}" \\
  -d '{{"model": "{name}", "state": "I was charged twice.",
       "questions": {{"urgent": {{"type": "noul", "instructions": "Does this need a reply today?"}}}}}}'
curl -s {url}/v1/models
curl -s {url}/healthz
```

**Rerank** (Cohere's, Jina's and vLLM's shape; LlamaIndex, LiteLLM, Open WebUI's RAG): the documents by relevance
```bash
curl -s {url}/v1/rerank -H 'Content-Type: application/json' \\
  -H "Authorization: Bearer {key}" \\
  -d '{{"model": "{name}", "query": "My parcel is late, what can I do?",
       "documents": ["Late parcels are reshipped or refunded.", "The shop opens at 9:00."]}}'
```

**Moderation** (OpenAI's shape; LibreChat, LiteLLM's guardrail, the openai SDK's `client.moderations.create`)
```bash
curl -s {url}/v1/moderations -H 'Content-Type: application/json' \\
  -H "Authorization: Bearer {key}" \\
  -d '{{"model": "{name}", "input": "If you post my address again I will hurt you."}}'
```

**Open WebUI**: Admin Panel → Settings → Connections → OpenAI API → **+** (add connection):
1. URL: `{url}/v1`
2. Key: {"your BLINK_API_KEY" if required else "anything (this Space's API is open)"}
3. Save; the model `{name}` appears in the model list (click *Verify connection* to check).{quota_md(health or {})}
"""


def api_tab(ctx: Context, demo: gr.Blocks) -> None:
    """Snippets with this Space's own URL (filled in when the page loads) and the live /healthz figures."""

    def health_json() -> dict:
        return ctx.current_health()

    def ui_load(request: gr.Request):
        health = health_json()
        return snippets_md(base_url(request), ctx.served_name, ctx.auth, health), health

    snippets = gr.Markdown(elem_classes=["blink-snippet"])
    with gr.Row():
        gr.Markdown("**Live health** (`GET /healthz`): requested, charged and used GPU seconds under `gpu_seconds`.")
        refresh = gr.Button("Refresh", size="sm")
    health = gr.JSON(label="/healthz")
    refresh.click(health_json, None, health, api_name="health", api_visibility=PRIVATE)
    demo.load(ui_load, None, [snippets, health], api_visibility=PRIVATE)
