"""The blink Spaces' Gradio theme and CSS: the one canonical copy (build.py copies it byte-for-byte).

Gradio 6 takes them at `launch(theme=THEME, css=CSS, head=HEAD)` (not `gr.Blocks(...)`). System fonts only: a Space
must render without fetching fonts from a third party.
"""

import gradio as gr

ACCENT = "#4f46e5"

THEME = gr.themes.Soft(
    primary_hue=gr.themes.colors.indigo,
    secondary_hue=gr.themes.colors.sky,
    neutral_hue=gr.themes.colors.slate,
    radius_size=gr.themes.sizes.radius_md,
    font=("ui-sans-serif", "system-ui", "-apple-system", "Segoe UI", "Roboto", "sans-serif"),
    font_mono=("ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"),
).set(
    button_primary_background_fill="*primary_600",
    button_primary_background_fill_hover="*primary_700",
    block_title_text_weight="600",
)

CSS = (
    """
.blink-header h1 { margin: 0 0 .25rem 0; font-size: 1.6rem; }
.blink-header p { margin: 0; opacity: .85; }
.blink-caveat { border-left: 4px solid #f59e0b; background: rgba(245, 158, 11, .10); padding: .5rem .75rem;
                border-radius: 6px; font-size: .92rem; }
.blink-results { display: flex; flex-direction: column; gap: .9rem; }
.blink-question h4 { margin: 0 0 .35rem 0; font-size: 1rem; }
.blink-question .blink-summary { font-size: .85rem; opacity: .8; margin-bottom: .35rem; }
.blink-bar { display: grid; grid-template-columns: minmax(0, 14rem) minmax(4rem, 1fr) 4.2rem; align-items: center;
             gap: .5rem; margin: .15rem 0; font-size: .9rem; }
.blink-bar .blink-option { min-width: 0; overflow-wrap: anywhere; }
.blink-bar .blink-track { background: rgba(100, 116, 139, .18); border-radius: 4px; height: .9rem;
                          overflow: hidden; }
.blink-bar .blink-fill { background: """
    + ACCENT
    + """; height: 100%; border-radius: 4px; min-width: 2px; }
.blink-bar.blink-top .blink-fill { background: #16a34a; }
.blink-bar .blink-p { text-align: right; font-variant-numeric: tabular-nums; }
.blink-error { color: #b91c1c; }
.blink-demo { border: 2px dashed #dc2626; background: rgba(220, 38, 38, .08); padding: .5rem .75rem;
              border-radius: 6px; font-weight: 600; }
.blink-note { border-left: 4px solid #0284c7; background: rgba(2, 132, 199, .10); padding: .4rem .7rem;
              border-radius: 6px; font-size: .9rem; margin-bottom: .5rem; }
.blink-snippet pre { font-size: .82rem; }
.blink-bar .blink-desc { display: block; font-size: .75rem; opacity: .7; }
.blink-legend { font-size: .78rem; opacity: .75; }
.blink-confidence { text-decoration: underline dotted; cursor: help; }
.blink-how summary { cursor: pointer; text-decoration: underline dotted; width: fit-content; }
.blink-rank .blink-bar { grid-template-columns: minmax(0, 1fr) minmax(6rem, 12rem) 4.2rem; }
.blink-bar .blink-track { position: relative; }
.blink-bar .blink-mark { position: absolute; top: 0; bottom: 0; width: 2px; margin-left: -1px;
                         background: var(--body-text-color, #111827); }
.blink-bar.blink-flagged .blink-fill { background: #dc2626; }
.blink-bar.blink-flagged .blink-option { font-weight: 600; color: #b91c1c; }
.dark .blink-bar.blink-flagged .blink-option, .dark .blink-error { color: #f87171; }
/* the Sheet's progress: as wide as its column, in the bars' colours */
.blink-sheet-status progress { display: block; width: 100%; height: .6rem; margin: .2rem 0 .35rem 0; border: 0;
                               border-radius: 4px; -webkit-appearance: none; appearance: none; accent-color: """
    + ACCENT
    + """;
                               background: rgba(100, 116, 139, .18); overflow: hidden; }
.blink-sheet-status progress::-webkit-progress-bar { background: rgba(100, 116, 139, .18); border-radius: 4px; }
.blink-sheet-status progress::-webkit-progress-value { background: """
    + ACCENT
    + """; border-radius: 4px; }
.blink-sheet-status progress::-moz-progress-bar { background: """
    + ACCENT
    + """; border-radius: 4px; }
/* the chat's example prompts, drawn as the buttons they are */
#blink-chatbot button.example { border: 1px solid var(--border-color-primary); border-radius: 8px;
                                background: var(--background-fill-secondary); cursor: pointer; }
#blink-chatbot button.example:hover { border-color: """
    + ACCENT
    + """; }
/* a phone: each bar's name on a line of its own, the track and the value under it; the header and the tabs compact
   (every tab on the screen), so that a view's first box is on the first screen */
@media (max-width: 640px) {
  .blink-bar, .blink-rank .blink-bar { grid-template-columns: minmax(4rem, 1fr) 3.6rem; row-gap: .15rem; }
  .blink-bar .blink-option { grid-column: 1 / -1; }
  .blink-demo { font-size: .8rem; padding: .35rem .55rem; }
  .blink-header h1 { font-size: 1.25rem; }
  .blink-header p { font-size: .82rem; }
  #blink-tabs [role="tab"] { padding-left: .55rem; padding-right: .55rem; }
  .blink-caveat, .blink-note { font-size: .82rem; padding: .35rem .55rem; }
  #blink-chat-speed { font-size: .82rem; }
  #blink-chatbot { height: 26vh !important; }
}
"""
)

# Gradio scopes CSS's media rules inside its page's content (`.gradio-container .contain ...`): the page's own
# margins, outside it, are set from the head
HEAD = (
    "<style>@media (max-width: 640px) "
    "{ .gradio-container .main.app { padding-left: .75rem; padding-right: .75rem; } }</style>"
)
