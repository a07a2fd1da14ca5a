"""In-process checks of the Space's UI views (no model): the Decide form checked box by box, the calibration
caveat, the answers' confidence formulas, the API tab's snippets, the chat's speed note, and the Rank and Moderate
views."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.space


def test_the_api_tab_openai_snippet_sets_max_tokens():
    from blink.web.auth import ApiKey
    from space import ui_api

    snippet = ui_api.snippets_md("http://127.0.0.1:7860", "blink-4b", ApiKey())
    assert "client.chat.completions.create(" in snippet and "max_tokens=256" in snippet


def test_the_decide_form_is_checked_box_by_box_within_the_limits():
    from blink.errors import InvalidRequest
    from blink.limits import Limits
    from space import ui_form

    limits = Limits(max_options=3, max_levels=3)
    assert ui_form.options_problem("choice", "a\nb\nc\nd", limits) == "4 options: this Space answers at most 3."
    assert "Line 2 has no option name" in ui_form.options_problem("choice", "a: x\n: y", limits)
    assert ui_form.options_problem("choice", "a: first\nb", limits) is None
    assert ui_form.options_problem("score", "low\nhigh", limits) is None
    slots = ["team", "choice", "Which?", "a\nb", "team", "noul", "", "", "q3", "noul", "", "", "q4", "noul", "", ""]
    # only the questions asked (count) are checked; positions are the Decide event's inputs
    assert ui_form.form_problems("x", 1, slots, limits) == {}
    # question 2 repeats an id and has empty instructions: both refused, each next to its box (the wire would
    # accept empty instructions; in the form they are a question not yet written)
    problems = ui_form.form_problems("x", 2, slots, limits)
    assert set(problems) == {6, 8} and "Write the question" in problems[8]
    assert ui_form.form_problems("x", 2, [*slots[:6], "  \n ", *slots[7:]], limits).keys() == {6, 8}
    assert ui_form.box_name(6) == "Question 2 id" and ui_form.box_name(8) == "Question 2 instructions"
    # an empty state is told beside its box, not refused
    assert ui_form.form_problems("", 1, slots, limits) == {}
    assert "state is empty" in ui_form.state_note("  \n") and ui_form.state_note("x") is None
    refused = InvalidRequest(
        "question 'team': a choice question's `criteria` maps option names to descriptions",
        loc=["body", "questions", "team"],
    )
    assert (
        ui_form.wire_error_message(refused, ["urgent", "team"])
        == "Question 2 (team): the Options box maps option names to descriptions"
    )


@pytest.mark.parametrize(
    "mode,loaded,says,never",
    [
        ("fitted", True, ["calibrated for these weights (temperature scaling)."], ["lean", "own"]),
        ("fitted", False, ["model's own: no calibration is applied on this server"], ["calibrated", "lean"]),
        ("raw", True, ["model's own: no calibration is applied to these answers"], ["calibrated", "lean"]),
        ("raw", False, ["model's own: no calibration is applied to these answers"], ["calibrated", "lean"]),
        ("prior", True, ["lean towards some options", "no temperature scaling"], ["own", "calibrated for"]),
        ("prior", False, ["lean towards some options", "no temperature scaling"], ["own", "calibrated for"]),
        ("fitted+prior", True, ["calibrated for these weights (temperature scaling), then freed"], ["own"]),
        ("fitted+prior", False, ["lean towards some options", "no temperature scaling"], ["own", "calibrated for"]),
    ],
)
def test_the_decide_caveat_is_true_to_the_calibration_chosen(mode, loaded, says, never):
    """What the caveat beside answers says for each `x_calibration` (the server's default resolved), with and
    without a calibration file: temperature scaling only where one is loaded, the prior whenever it divides."""
    from space import ui_calibration

    caveat = ui_calibration.decide_caveat("Small model: calibrated estimates.", mode, loaded)
    applied = (loaded and mode in ("fitted", "fitted+prior")) or "prior" in mode  # every answer's `applied`
    assert caveat.startswith("Small model: calibrated estimates." if applied else "Small model: estimates.")
    note = caveat.split("estimates. ", 1)[1]
    assert all(words in note for words in says) and not any(words in note for words in never), note
    choices = ui_calibration.calibration_choices(mode, loaded)
    assert [value for _, value in choices] == [ui_calibration.SPACE_DEFAULT, "fitted", "prior", "fitted+prior", "raw"]
    assert ("none fitted for this model" in choices[1][0]) is not loaded
    assert ui_calibration.chosen_calibration(mode) == mode
    assert ui_calibration.chosen_calibration(ui_calibration.SPACE_DEFAULT) is None


def test_the_answers_name_the_wires_confidence_formulas_and_count_levels_from_0():
    """The caption under the answers gives each answered type's formula, and the value it explains is the wire's
    (computed here by that formula from the probabilities); score levels are counted from 0 in the summary, as in
    the raw response's `score` beside it."""
    from transformers.decision import Question

    from blink.decide.answers import answer_from_probabilities
    from space import ui_answers

    choice_q = Question("team", "choice", "Which team?", ["a", "b", "c"], ["a", "b", "c"], [None] * 3)
    levels = ["Low", "Mid", "High", "Top"]
    score_q = Question("level", "score", "How high?", ["0", "1", "2", "3"], ["0", "1", "2", "3"], levels)
    choice = answer_from_probabilities(choice_q, [0.7, 0.2, 0.1])
    score = answer_from_probabilities(score_q, [0.1, 0.2, 0.6, 0.1])
    # the formulas as the caption states them
    assert choice["confidence"] == pytest.approx((0.7 - 1 / 3) / (1 - 1 / 3))
    d = sum(abs(i - 1.5) for i in range(4)) / 4
    assert score["confidence"] == pytest.approx(1 - (0.1 * 2 + 0.2 * 1 + 0.6 * 0 + 0.1 * 1) / d)
    questions = {"team": {"instructions": "Which team?"}, "level": {"instructions": "How high?"}}
    page = ui_answers.bars_html({"team": choice, "level": score}, questions)
    assert "(p_max − 1/n) / (1 − 1/n)" in page and "1 − Σ pᵢ·|i − top| / D" in page and "entropy" not in page
    assert f"score {score['score']:.2f} (the expected level)" in page and score["score"] == pytest.approx(1.7)
    assert "level 2 on a scale of 0 (Low) to 3 (Top)" in page and "of 1" not in page
    # only the formulas of the types answered
    alone = ui_answers.bars_html({"team": choice}, questions)
    assert "Confidence (choice)" in alone and "Confidence (score)" not in alone
    noul = ui_answers.bars_html({"u": {"type": "noul", "noul": 0.8}}, {})
    assert "Confidence" not in noul


def test_the_api_tab_gives_zerogpu_header_advice_only_on_zerogpu():
    from blink.web.auth import ApiKey
    from space import ui_api

    on = ui_api.snippets_md("http://127.0.0.1:7860", "blink-4b", ApiKey(), {"zero_gpu": True})
    off = ui_api.snippets_md("http://127.0.0.1:7860", "blink-4b", ApiKey(), {"zero_gpu": False})
    assert "X-HF-Authorization" in on and "ZeroGPU quota" in on
    assert "X-HF-Authorization" not in off and "ZeroGPU" not in off


def test_a_chat_reply_on_the_cpu_says_how_slow_before_and_while_it_streams():
    """The note above the chat: before the first token, that a reply can take a minute or more; while it streams,
    the rate measured and the most it may still take; after it, the last reply's rate for the next one. A refused
    turn leaves the rate as it was."""
    import time

    from space import ui_chat

    def replies(n: int, gap: float):
        text = ""
        for i in range(n):
            time.sleep(gap)
            text += f"w{i} "
            yield text

    speed = ui_chat.SpeedNote(512)
    turn = list(speed.turn(replies(6, 0.02)))
    assert turn[0][0] == "" and "can take a minute or more" in turn[0][1]  # before anything comes
    assert [text for text, _ in turn[1:-1]] == list(replies(6, 0))
    assert "~6 tokens at" in turn[-2][1] and "up to 512 in all" in turn[-2][1]
    assert speed.rate is not None and 10 < speed.rate < 60, speed.rate  # 5 gaps of ~20 ms
    assert f"about {speed.rate:.1f} tokens/s (the last reply)" in turn[-1][1] == speed.before()
    rate = speed.rate
    refused = list(speed.turn(iter([ui_chat.NOT_ANSWERED + "busy"])))
    assert refused[-1][0].startswith(ui_chat.NOT_ANSWERED) and speed.rate == rate


def test_the_rank_view_reads_one_document_a_line_and_shows_them_in_the_answers_order():
    """The Rank view's form (no model): one document per non-empty line, the form's gaps named by box, the wire's
    refusals told by box and line, and the documents drawn in the answer's order, each with its bar."""
    from blink.errors import InvalidRequest
    from space import ui_rank, ui_shared

    assert ui_rank.documents_of("first\n\n  \nsecond \n") == ["first", "second"]
    assert ui_rank.form_problem(" ", ["a"], 4).startswith("Query:")
    assert ui_rank.form_problem("q", [], 4).startswith("Documents:")
    assert "5 lines; this Space ranks at most 4" in ui_rank.form_problem("q", list("abcde"), 4)
    assert ui_rank.form_problem("q", ["a"], 4) is None
    # the page's validator: the gap on its box (Query, Documents)
    assert [c["is_valid"] for c in ui_rank.form_check(" ", "a", 4)] == [False, True]
    assert [c["is_valid"] for c in ui_rank.form_check("q", "\n \n", 4)] == [True, False]
    refused = InvalidRequest(
        "documents[2] with the query makes a prompt past this server's context limit of 512 tokens",
        loc=["body", "documents", 2],
        kind="context_length_exceeded",
    )
    told = ui_rank.error_message(refused)
    assert told.startswith("Document 3: too long to rank with this query on this Space (512 tokens for the document")
    assert "`" not in told and "max_tokens_per_doc" not in told and "split it over several lines" in told
    assert ui_shared.error_html("set `x`") == '<div class="blink-error">set x</div>'
    response = {
        "results": [
            {"index": 2, "relevance_score": 0.9, "document": {"text": "third"}},
            {"index": 0, "relevance_score": 0.4, "document": {"text": "x" * 1000}},
        ]
    }
    page = ui_rank.ranking_html(response, "Is it relevant to: q?")
    assert page.index('data-option="#1 · document 3"') < page.index('data-option="#2 · document 1"')
    assert 'class="blink-bar blink-top" data-option="#1 · document 3" data-p="0.900000"' in page
    assert "x" * ui_rank.SHOWN_CHARS + "…" in page and "x" * (ui_rank.SHOWN_CHARS + 1) not in page
    assert "2 documents, most relevant first" in page and "Is it relevant to: q?" in page


def test_the_moderate_view_draws_each_threshold_and_marks_what_it_flags():
    """The Moderate view (no model): text alone is sent as a string, with an image as parts (a PNG data URL the
    wire reads); a bar per category of the policy in its order, its threshold drawn at its place, the flagged
    ones marked and named; the wire's refusals told by box."""
    from PIL import Image

    from blink.api.moderations import inputs_of
    from blink.errors import InvalidRequest
    from blink.moderation_policy import Category, Policy
    from space import ui_moderate

    policy = Policy((Category("spam", "ads", 0.5), Category("hate", "hate", 0.25)), "custom.toml")
    assert ui_moderate.input_of("hello") == "hello"
    parts = ui_moderate.input_of("hello", Image.new("RGB", (4, 4)))
    assert [p["type"] for p in parts] == ["text", "image_url"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert [p["type"] for p in ui_moderate.input_of("  ", Image.new("RGB", (4, 4)))] == ["image_url"]
    (item,) = inputs_of({"input": parts}, policy, 8)  # the wire reads what the view sends
    assert item.types == ["text", "image"] and set(item.body["questions"]) == {"spam", "hate"}
    assert ui_moderate.form_problem(" ") == "Text: write the text to moderate."
    assert ui_moderate.form_problem(" ", Image.new("RGB", (4, 4))) is None
    assert ui_moderate.form_check(" ") == {
        "__type__": "validate",
        "is_valid": False,
        "message": ui_moderate.form_problem(" "),
    }
    assert [c["is_valid"] for c in ui_moderate.form_check(" ", Image.new("RGB", (4, 4)))] == [True, True]
    result = {"categories": {"spam": False, "hate": True}, "category_scores": {"spam": 0.49, "hate": 0.3}}
    page = ui_moderate.categories_html(policy, result)
    assert page.index('data-option="spam"') < page.index('data-option="hate"')
    assert '<div class="blink-bar" data-option="spam"' in page
    assert '<div class="blink-bar blink-flagged" data-option="hate"' in page
    assert 'class="blink-mark" style="left:50.0%"' in page and 'style="left:25.0%"' in page
    assert '<small class="blink-desc">threshold 0.25</small>' in page
    assert "<b>flagged</b>: hate" in page
    calm = ui_moderate.categories_html(policy, {**result, "categories": {"spam": False, "hate": False}})
    assert "<b>not flagged</b>" in calm and "blink-flagged" not in calm
    refused = InvalidRequest("this server's model reads text only: images are not accepted", loc=["body", "input"])
    assert ui_moderate.error_message(refused).startswith("Image: this server's model reads text only")
    too_long = InvalidRequest("the input is too long", loc=["body", "input"])
    assert ui_moderate.error_message(too_long) == "Text: the input is too long"
