"""The Space's `decide` endpoint and UI chat in-process, on a real context (the demo model): the gr.Request's
identity headers become the caller the batch step runs as (on ZeroGPU: whose quota pays, for gradio_client and
MCP callers alike), errors carry the wire's message and status, and a UI chat holds one of the shared chat slots."""

from __future__ import annotations

import asyncio

import gradio as gr
import pytest

from helpers import assert_close, uncached
from space import zerogpu

pytestmark = pytest.mark.space


@pytest.fixture(scope="module")
def ctx_and_callers(demo_dir):
    from blink.backend import LocalBackend
    from blink.server import build_context, load_served
    from blink.settings import Settings

    settings = Settings.from_values(
        {"model": str(demo_dir), "max_concurrent_chats": 1, "chat_slot_wait_s": 0, "api_key": "sk-unit-key"}, env={}
    )
    callers = []

    class RecordingBackend(LocalBackend):  # the Space's backend, minus the GPU: it records whom it runs as
        def score(self, plans, caller=None):
            callers.append(caller)
            return super().score(plans, caller)

    served = load_served(settings)
    ctx = build_context(
        settings,
        served,
        RecordingBackend(served.planner, served.chat_engine),
        warmup=False,
        caller_of=lambda request: zerogpu.caller_from_headers(request.headers),
    )
    return ctx, callers


def request_with(**headers) -> gr.Request:
    return zerogpu.gradio_request(tuple((name.replace("_", "-"), value) for name, value in headers.items()))


QUESTIONS = {"late": {"type": "noul", "instructions": "Is the parcel late?"}}


def test_the_requests_identity_header_is_the_caller_of_the_batch(ctx_and_callers):
    from blink.api.systemone import decide_body
    from space import tool as space_tool

    ctx, callers = ctx_and_callers
    decide = space_tool.decide_endpoint(ctx)
    body = asyncio.run(decide("The parcel is five days late.", QUESTIONS, request_with(x_ip_token="tok-carol")))
    assert callers[-1] == (("x-ip-token", "tok-carol"),)  # what `spaces` charges (zerogpu.as_caller)
    direct = asyncio.run(decide_body(ctx, {"state": "The parcel is five days late.", "questions": QUESTIONS}))
    assert_close(uncached(body), uncached(direct))  # two decisions: within blink's 1e-6
    assert callers[-1] is None  # anonymous: nobody's token
    assert "Args:" in decide.__doc__ and "probability for every option" in decide.__doc__


def test_decide_errors_are_gradio_errors_with_the_wire_message_and_status(ctx_and_callers):
    from space import tool as space_tool

    ctx, _ = ctx_and_callers
    bad = {"pick": {"type": "choice", "instructions": "Pick one", "criteria": {}}}
    with pytest.raises(gr.Error) as info:
        asyncio.run(space_tool.decide_endpoint(ctx)("x", bad, request_with()))
    assert info.value.title == "Error 422" and "question 'pick'" in info.value.message
    keyed = space_tool.decide_endpoint(ctx, needs_key=True)
    with pytest.raises(gr.Error) as info:
        asyncio.run(keyed("x", QUESTIONS, request_with(authorization="Bearer wrong")))
    assert info.value.title == "Error 401" and "API key" in info.value.message
    assert asyncio.run(keyed("x", QUESTIONS, request_with(authorization="Bearer sk-unit-key")))["answers"]


def test_decide_takes_x_calibration_and_checks_it_as_the_wire_does(ctx_and_callers):
    """The optional last argument goes into the body as `x_calibration` (left out or None: not sent, the server's
    default); a value the wire does not take is its 422."""
    from blink.api.systemone import decide_body
    from space import tool as space_tool

    ctx, _ = ctx_and_callers
    decide = space_tool.decide_endpoint(ctx)
    state = "The parcel is five days late."

    def direct(**field):
        return asyncio.run(decide_body(ctx, {"state": state, "questions": QUESTIONS, **field}))

    for value in ("raw", None):
        body = asyncio.run(decide(state, QUESTIONS, request_with(), value))
        wire = direct(**({} if value is None else {"x_calibration": value}))
        assert_close(uncached(body), uncached(wire), f"x_calibration={value}")
    prior = asyncio.run(decide(state, QUESTIONS, request_with(), "prior"))["x_calibration"]
    assert prior["applied"] is True and prior["prior"]["tokens"] > 0  # its content-free prompts ran
    # the wire's own prior: the same one (its prompts kept, so none ran again)
    assert {**prior["prior"], "tokens": 0} == direct(x_calibration="prior")["x_calibration"]["prior"]
    for bad in ("cooked", "", 1, ["raw"]):
        with pytest.raises(gr.Error) as info:
            asyncio.run(decide(state, QUESTIONS, request_with(), bad))
        assert info.value.title == "Error 422" and "`x_calibration` must be" in info.value.message, bad


def test_a_direct_rest_call_may_leave_the_optional_arguments_out():
    """Gradio's REST paths hand `decide` the `data` list as sent: the optional last argument, left out, takes its
    default; other events' inputs, and a call short of the required arguments, are left as Gradio checks them."""
    from space import tool as space_tool

    with space_tool.Blocks() as demo:
        space_tool.register(None)
        gr.Button().click(lambda a, b, c: a, [gr.Textbox(), gr.Textbox(), gr.Textbox()], None, api_name="other")
    fns = {fn.api_name: fn for fn in demo.fns.values()}
    assert space_tool.with_defaults(fns["decide"], ["s", {}]) == ["s", {}, None]
    assert space_tool.with_defaults(fns["decide"], ["s", {}, "raw"]) == ["s", {}, "raw"]
    assert space_tool.with_defaults(fns["decide"], ["s"]) == ["s"]  # Gradio's own error: a required one is missing
    assert space_tool.with_defaults(fns["other"], ["a", "b"]) == ["a", "b"]


def test_a_ui_chat_takes_a_shared_chat_slot(ctx_and_callers):
    from space import ui_chat

    ctx, _ = ctx_and_callers
    with ctx.admission.enter_sync("chat"):  # the API's chat holds the only slot
        # refused, and said so as the turn's reply (the Chat tab then takes the next message as usual)
        (reply,) = list(ui_chat.chat_reply(ctx, 4, "Hello", [], None))
        assert reply.startswith(ui_chat.NOT_ANSWERED) and "busy" in reply, reply
    turn = ui_chat.chat_reply(ctx, 4, "Hello", [], None)
    next(turn)
    assert ctx.chat_slots()["running"] == 1  # generating: the UI chat holds the slot
    turn.close()  # the user left
    assert ctx.chat_slots()["running"] == 0
    assert list(ui_chat.chat_reply(ctx, 4, "Hello", [], None)) and ctx.chat_slots()["running"] == 0


@pytest.mark.parametrize(
    "state,questions",
    [
        (None, QUESTIONS),
        ("x", None),
        ("x", []),
        ("x", "not a map"),
        ("x", {}),
        ("x", {"q": "noul"}),
        (12, QUESTIONS),
        ("x", {"q": {"type": "vote", "instructions": "?"}}),
    ],
)
def test_hostile_input_is_a_4xx_gradio_error(ctx_and_callers, state, questions):
    from space import tool as space_tool

    ctx, _ = ctx_and_callers
    with pytest.raises(gr.Error) as info:
        asyncio.run(space_tool.decide_endpoint(ctx)(state, questions, request_with()))
    assert info.value.title.startswith("Error 4"), (info.value.title, info.value.message)
