"""The Decide form of the Space's UI, without Gradio: reading its boxes into a System One body, and checking
them first, so each problem is told next to the box the user typed in (not as the API field it becomes)."""

from __future__ import annotations

import json
import re
from typing import Any

from blink.errors import BlinkError
from blink.limits import Limits

SLOTS = 4  # question slots on the Decide tab
BOXES = ("id", "type", "instructions", "options")  # a question slot's boxes, in the event's inputs order


def state_value(text: str) -> tuple[Any, str | None]:
    """The state as sent: the JSON value when the box holds JSON, else its text; with a note for the user when
    it looks like JSON but does not parse (it is then sent as text, and they should know)."""
    text = (text or "").strip()
    if text[:1] in ("{", "["):
        try:
            return json.loads(text), None
        except json.JSONDecodeError as error:
            return text, (
                f"The state looks like JSON but does not parse ({error.msg}, line {error.lineno} column "
                f"{error.colno}): it was sent as plain text."
            )
    return text, None


def option_lines(options: str) -> list[str]:
    return [line.strip() for line in (options or "").splitlines() if line.strip()]


def question_id(name: str, i: int) -> str:
    return (name or "").strip() or f"q{i + 1}"


def active_slots(count) -> int:
    return max(1, min(SLOTS, int(count or 1)))


def build_question(kind: str, instructions: str, options: str) -> dict:
    question: dict[str, Any] = {"type": kind, "instructions": (instructions or "").strip() or None}
    lines = option_lines(options)
    if kind == "choice":
        criteria = {}
        for line in lines:
            name, sep, desc = line.partition(":")
            criteria[name.strip()] = desc.strip() or None if sep else None
        question["criteria"] = criteria
    elif kind == "score":
        question["criteria"] = lines
    return question


def options_problem(kind: str, options: str, limits: Limits) -> str | None:
    """What is wrong with a question's Options box, in the words of the box (None: nothing)."""
    lines = option_lines(options)
    if kind == "noul":
        return "A noul question takes no options: empty this box, or pick choice or score." if lines else None
    word, most = ("options", limits.max_options) if kind == "choice" else ("levels", limits.max_levels)
    names = [line.partition(":")[0].strip() for line in lines] if kind == "choice" else lines
    if "" in names:
        return f"Line {names.index('') + 1} has no option name before its ':'."
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        return f"{', '.join(repr(name) for name in twice)} is listed more than once: list each of the {word} once."
    if len(names) < 2:
        return f"A {kind} question needs at least two {word}, one per line."
    if len(names) > most:
        return f"{len(names)} {word}: this Space answers at most {most}."
    return None


def form_problems(state: str, count, slots, limits: Limits) -> dict[int, str]:
    """What is wrong with the Decide form, keyed by the position of the box at fault among the Decide event's
    inputs (0: the state; 2 + 4 * i + k: question i's id, type, instructions, options)."""
    # empty instructions are refused here though the wire accepts them (a question's criteria can say what is
    # asked): in the form they are a question not yet written. An empty state is not refused (see state_note)
    problems: dict[int, str] = {}
    first_with: dict[str, int] = {}
    for i in range(active_slots(count)):
        name, kind, instructions, options = slots[4 * i : 4 * i + 4]
        box = 2 + 4 * i
        qid = question_id(name, i)
        if qid in first_with:
            problems[box] = f"Question {first_with[qid] + 1} already has the id {qid!r}: give each question its own."
        first_with.setdefault(qid, i)
        if not (instructions or "").strip():
            problems[box + 2] = "Write the question: with no instructions the model is asked nothing."
        if problem := options_problem(kind or "noul", options, limits):
            problems[box + 3] = problem
    return problems


EMPTY_STATE_NOTE = (
    "The state is empty: the questions will be about nothing. The API accepts this, but here it is almost always "
    "a slip: write the text (or JSON) the questions are about, or load an example."
)


def state_note(state: str) -> str | None:
    """What the form says beside the State box (None: nothing): an empty state is told, not refused."""
    return EMPTY_STATE_NOTE if not (state or "").strip() else None


def box_name(position: int) -> str:
    if position == 0:
        return "State"
    i, k = divmod(position - 2, 4)
    return f"Question {i + 1} {BOXES[k]}"


def wire_error_message(error: BlinkError, qids: list[str]) -> str:
    """A refusal from the decision service, naming the box the user typed in rather than the API field."""
    loc = list(getattr(error, "loc", None) or [])
    message = error.message
    if loc[:2] == ["body", "state"]:
        return f"State: {message}"
    if getattr(error, "kind", None) == "context_length_exceeded" and message.startswith("the state alone"):
        limit = re.search(r"(\d[\d,]*) tokens", message)
        most = f" ({limit.group(1)} tokens with a question)" if limit else ""
        return f"State: too long for this model{most}. Nothing was cut: shorten the text."
    if loc[:2] == ["body", "questions"] and len(loc) > 2 and loc[2] in qids:
        qid = loc[2]
        message = re.sub(
            r"(?:an? \w+ question's )?`criteria`", "the Options box", message.removeprefix(f"question {qid!r}: ")
        )
        return f"Question {qids.index(qid) + 1} ({qid}): {message}"
    return f"Error {error.status}: {message}"


def chat_error_message(error: BlinkError) -> str:
    """A refusal of a chat turn in the Chat tab's words (the API's names a message by its index)."""
    if getattr(error, "kind", None) == "context_length_exceeded":
        window = re.search(r"context window (?:is |of )?(\d[\d,]*) tokens", error.message)
        size = f" of {window.group(1)} tokens" if window else ""
        return (
            f"This message (with the conversation before it) is too long for the model's context window{size}. "
            "Nothing was cut: shorten it, or clear the conversation and start again."
        )
    return error.message
