"""The Space's web UI: the Gradio Blocks, assembled from one module per tab.

`build(ctx, ...)` makes the Blocks from the context the API routes serve (the same decision service, batcher and
GPU functions, and the same chat function) and the text users read; it reads nothing else. Each tab is a module of
its own (space/ui_decide.py, space/ui_rank.py, space/ui_moderate.py, space/ui_sheet.py, space/ui_chat.py,
space/ui_api.py), whose events pass their caller (`ctx.caller_of(request)`: on ZeroGPU the user's own quota)
explicitly, as the routes do. The API is one documented endpoint, `decide(state, questions, x_calibration=None)`
(space/tool.py), also the Space's MCP tool, and the Sheet's `sheet` (callable by gradio_client, not listed, so no
MCP tool); every other event is private (the page calls it, Gradio's clients and MCP don't see it).
"""

import html

import gradio as gr

from blink.context import Context
from space import tool as space_tool
from space.ui_api import api_tab
from space.ui_chat import chat_tab
from space.ui_decide import decide_tab
from space.ui_moderate import moderate_tab
from space.ui_rank import rank_tab
from space.ui_shared import PRIVATE
from space.ui_sheet import SheetSettings, sheet_tab  # noqa: F401 - SheetSettings: app.py builds it

# what a screen reader hears when an event completes: Gradio 6.31's status tracker reads the key `common.complete`,
# which its English strings lack (it says "common.complete"); launch(i18n=STATUS_WORDS) supplies it
STATUS_WORDS = gr.I18n(en={"common.complete": "Done"})

DEMO_BANNER = (
    "This Space serves blink's demo model: random weights, so its answers and replies are meaningless. "
    "Everything around them (the API, the batching, the UI) is real."
)


def build(
    ctx: Context,
    *,
    title: str,
    description: str = "",
    caveat: str = "",
    chat_max_tokens: int = 512,
    demo_model: bool = False,
    api_needs_key: bool = False,
    sheet: SheetSettings | None = None,
) -> gr.Blocks:
    """The UI's Blocks: `ctx` serves it (as it serves the API routes); `title`, `description` and `caveat` are
    what users read (the caveat sits next to answers); `chat_max_tokens` caps a Chat-tab turn; `demo_model`
    (the served model is blink's random-weight demo) puts a banner above everything; `api_needs_key`: the
    `decide` endpoint asks for the API key too (space/tool.py), and so does `sheet`; `sheet`: the Sheet's limits
    (space/ui_sheet.py; None: the knobs' defaults)."""
    with space_tool.Blocks(title=title) as demo:  # gr.Blocks, with decide's optional arguments for REST callers
        if demo_model:
            gr.HTML(f'<div class="blink-demo" id="blink-demo-banner">{html.escape(DEMO_BANNER)}</div>')
        gr.HTML(f'<div class="blink-header"><h1>{html.escape(title)}</h1><p>{html.escape(description)}</p></div>')
        # on a narrow screen the tabs wrap onto a second row rather than hide behind a "more" menu
        with gr.Tabs(elem_id="blink-tabs", overflow_behavior="wrap"):
            with gr.Tab("Decide", id="decide"):
                decide_tab(ctx, caveat)
            with gr.Tab("Rank", id="rank"):
                rank_tab(ctx, caveat)
            with gr.Tab("Moderate", id="moderate"):
                moderate_tab(ctx, caveat, demo_model)
            with gr.Tab("Sheet", id="sheet"):
                sheet_tab(ctx, caveat, sheet or SheetSettings.of(), api_needs_key)
            with gr.Tab("Chat", id="chat"):
                chat_tab(ctx, chat_max_tokens)
            with gr.Tab("API", id="api"):
                api_tab(ctx, demo)
        space_tool.register(ctx, needs_key=api_needs_key)
    for fn in demo.fns.values():  # ChatInterface's own events too (it makes them undocumented, still callable)
        if fn.api_name not in ("decide", "sheet"):
            fn.api_visibility = PRIVATE
    return demo
