"""The questions editor Decide and the Sheet share: up to SLOTS questions (id, type, instructions, options), a
question shown at first, "+ question" and "− question" buttons. The boxes' values are read and checked by
space/ui_form.py (no Gradio there), in the order `QuestionEditor.boxes` lists them."""

from dataclasses import dataclass
from typing import Any

import gradio as gr

from space.ui_form import SLOTS
from space.ui_shared import PRIVATE

# (what the dropdown shows, the System One type it sends)
TYPES = [
    ("noul: yes or no", "noul"),
    ("choice: one of the options listed", "choice"),
    ("score: a level on the scale listed", "score"),
]
TYPE_INFO = "noul: a yes/no question, answered with P(yes) · choice: picks one option · score: picks one level"
OPTIONS_LABEL = "Options (choice) or levels (score), one per line"
OPTIONS_INFO = "choice: name: description (the description may be left out) · score: lowest level first · noul: empty"


@dataclass
class QuestionEditor:
    count: gr.Number  # how many slots are shown (and asked)
    slots: list[tuple]  # (id, type, instructions, options) boxes per slot
    groups: list[gr.Group]

    @property
    def boxes(self) -> list:
        """Every slot's boxes in ui_form's order: id, type, instructions, options, slot after slot."""
        return [c for slot in self.slots for c in slot]

    @property
    def outputs(self) -> list:
        """What `filled` sets: the count, then each slot's group and boxes."""
        return [self.count] + [c for slot, group in zip(self.slots, self.groups, strict=True) for c in (group, *slot)]


def filled(questions: list[tuple]) -> list[Any]:
    """The editor's values for `questions` ((id, type, instructions, options) each), in `outputs`' order."""
    out: list[Any] = [len(questions)]
    for i in range(SLOTS):
        if i < len(questions):
            qid, kind, instructions, options = questions[i]
            out += [gr.update(visible=True), qid, kind, instructions, options]
        else:
            out += [gr.update(visible=False), f"q{i + 1}", "noul", "", ""]
    return out


def set_count(count: int, delta: int):
    count = max(1, min(SLOTS, int(count or 1) + delta))
    return [count] + [gr.update(visible=i < count) for i in range(SLOTS)]


def question_editor(prefix: str = "") -> QuestionEditor:
    """The editor's boxes, inside the current Blocks context; `prefix` keeps two editors' element ids apart."""
    count = gr.Number(value=1, visible=False, precision=0)
    slots, groups = [], []
    for i in range(SLOTS):
        with gr.Group(visible=i == 0) as group:
            with gr.Row():
                # min widths: on a phone the two wrap onto lines of their own rather than cut the menu off
                q_name = gr.Textbox(
                    label=f"Question {i + 1} id",
                    value=f"q{i + 1}",
                    scale=1,
                    min_width=140,
                    elem_id=f"{prefix}q{i}-name",
                )
                q_type = gr.Dropdown(
                    TYPES,
                    value="noul",
                    label="Type",
                    info=TYPE_INFO,
                    scale=2,
                    min_width=260,
                    elem_id=f"{prefix}q{i}-type",
                )
            q_instr = gr.Textbox(
                label="Instructions", elem_id=f"{prefix}q{i}-instructions", placeholder="What should the model decide?"
            )
            q_opts = gr.Textbox(label=OPTIONS_LABEL, info=OPTIONS_INFO, lines=3, elem_id=f"{prefix}q{i}-options")
        groups.append(group)
        slots.append((q_name, q_type, q_instr, q_opts))
    with gr.Row():
        add = gr.Button("+ question", size="sm")
        remove = gr.Button("− question", size="sm")
    add.click(lambda c: set_count(c, +1), count, [count, *groups], api_visibility=PRIVATE)
    remove.click(lambda c: set_count(c, -1), count, [count, *groups], api_visibility=PRIVATE)
    return QuestionEditor(count, slots, groups)
