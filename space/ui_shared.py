"""What the Space UI's tabs share: events kept private to the page, the caller class of a UI event, and the small
HTML pieces every tab shows (an error, a caveat)."""

import html

import gradio as gr

import auth
from blink.context import Context
from blink.web.admission import ANONYMOUS, KEYED

PRIVATE = "private"  # the page's own events: hidden from the API docs, gradio_client, @gradio/client and MCP


def error_html(message: str) -> str:
    """An error as the page shows it: plain text (the wire's markdown backticks left out)."""
    return f'<div class="blink-error">{html.escape(message.replace("`", ""))}</div>'


def caveat_html(caveat: str) -> str:
    return f'<div class="blink-caveat">{html.escape(caveat)}</div>' if caveat else ""


def reveal_js(results_id: str) -> str:
    """The page's step after an action: when the first thing its answer shows (a note, an error, a bar) is outside
    the window, the answer's box is scrolled to the top of it (on a laptop the answers sit beside the form, above
    its button; on a phone under it). Scrolling moves no keyboard focus: the button keeps it."""
    return (
        "() => { setTimeout(() => {"
        f" const box = document.getElementById({results_id!r});"
        " const first = box && box.querySelector('.blink-note, .blink-error, .blink-summary, .blink-bar');"
        " if (!first) return;"
        " const at = first.getBoundingClientRect();"
        " if (at.top < 0 || at.bottom > window.innerHeight) box.scrollIntoView({block: 'start'});"
        " }, 50); }"
    )


def reveal_refused_js() -> str:
    """The page's step when an action's button is pressed, beside the action: if the form's check refuses a box
    (its message on the box, within a few seconds) and that box is outside the window, it is scrolled to the
    middle of it; the button keeps the keyboard focus. (A refused form runs none of the action's later steps.)"""
    return (
        "() => { const until = Date.now() + 5000; const look = () => {"
        " const refused = [...document.querySelectorAll('div.validation-error')].find(e => e.offsetParent);"
        " if (refused) { const at = refused.getBoundingClientRect();"
        " if (at.top < 0 || at.bottom > window.innerHeight)"
        " refused.closest('.block').scrollIntoView({block: 'center'}); return; }"
        " if (Date.now() < until) setTimeout(look, 100); }; setTimeout(look, 100); }"
    )


def ui_class(ctx: Context, request: gr.Request | None) -> str:
    """With a key set, a UI caller is keyed only after logging in with it (`gradio_ui_needs_key`); otherwise
    anonymous, and never takes the places kept for keyed API traffic (blink.web.admission)."""
    return KEYED if auth.presented_key(ctx.auth, request) else ANONYMOUS
