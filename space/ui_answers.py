"""The Decide tab's answers as HTML: a bar per option, the summary line of each question, the confidence explained."""

import html

# what the wire's `confidence` says, in plain words per type, then the formula it uses (blink.decide.answers:
# transformers.decision.Question.answer's): choice and score measure it differently
CONFIDENCE_WORDS = {
    "choice": "Confidence (choice): 1 when all the probability is on one option, 0 when it is spread evenly.",
    "score": "Confidence (score): 1 when all the probability is on one level, 0 when it strays far from the top level.",
}
CONFIDENCE_NOTES = {
    "choice": (
        "Confidence (choice) = (p_max − 1/n) / (1 − 1/n), with p_max the top option's probability and n the number of "
        "options: 1 when all the probability is on one option, 0 when it is spread evenly (never below 0)."
    ),
    "score": (
        "Confidence (score) = 1 − Σ pᵢ·|i − top| / D, with i each level counted from 0, top the most likely level "
        "and D the mean distance of the levels from the middle one (how far an even spread strays from its centre): "
        "1 when all the probability is on one level, 0 when it strays D or more from the top level."
    ),
}


def confidence_html(confidence: float, kind: str) -> str:
    note = html.escape(CONFIDENCE_WORDS[kind])
    return f'<span class="blink-confidence" title="{note}">confidence {confidence:.3f}</span>'


def confidence_notes_html(kinds: list[str]) -> str:
    """Under the answers: what confidence means for each type answered, in words; the formulas behind a
    disclosure."""
    if not kinds:
        return ""
    words = "".join(f"<div>{html.escape(CONFIDENCE_WORDS[k])}</div>" for k in kinds)
    formulas = "".join(f"<p>{html.escape(CONFIDENCE_NOTES[k])}</p>" for k in kinds)
    return (
        f'<div class="blink-legend">{words}<details class="blink-how"><summary>How is this computed?</summary>'
        f"{formulas}</details></div>"
    )


def descriptions_of(question: dict) -> dict:
    """Each option's description, as the question gave it (choice: `criteria` {name: description})."""
    criteria = question.get("criteria")
    return {str(k): v for k, v in criteria.items() if v} if isinstance(criteria, dict) else {}


def bar_html(
    option: str, p: float, *, top: bool = False, desc: str | None = None, mark: float | None = None, cls: str = ""
) -> str:
    """One option's bar: its name (and description), the probability as a filled track, the value; `top` highlights
    it; `mark` draws a line across the track at that value (a threshold); `cls` adds classes (e.g. flagged)."""
    pct = max(0.0, min(100.0, 100.0 * float(p)))
    classes = " ".join(c for c in ("blink-bar", "blink-top" if top else "", cls) if c)
    label = html.escape(option) + (f'<small class="blink-desc">{html.escape(desc)}</small>' if desc else "")
    line = ""
    if mark is not None:
        at = max(0.0, min(100.0, 100.0 * float(mark)))
        line = f'<span class="blink-mark" style="left:{at:.1f}%" title="threshold {mark:g}"></span>'
    return (
        f'<div class="{classes}" data-option="{html.escape(option)}" data-p="{p:.6f}">'
        f'<span class="blink-option">{label}</span>'
        f'<span class="blink-track"><span class="blink-fill" style="width:{pct:.1f}%;display:block">'
        f'</span>{line}</span><span class="blink-p">{p:.3f}</span></div>'
    )


def bars_html(answers: dict, questions: dict) -> str:
    """One block per question: a bar per option with its probability (the top option highlighted) and its
    description when the question gave one; the confidence explained under the answers."""
    parts = ['<div class="blink-results">']
    for qid, ans in answers.items():
        kind = ans.get("type")
        if kind == "noul":
            probs = {"yes": ans["noul"], "no": 1.0 - ans["noul"]}
            summary = f"<b>{'yes' if ans['noul'] >= 0.5 else 'no'}</b> · P(yes) = {ans['noul']:.3f}"
        elif kind == "choice":
            probs = dict(ans["probabilities"])
            summary = f"choice: <b>{html.escape(str(ans['choice']))}</b> · {confidence_html(ans['confidence'], kind)}"
        else:
            legend = ans.get("legend") or {}
            probs = {str(legend.get(k, k)): p for k, p in ans["probabilities"].items()}
            levels = list(probs)
            top_level = max(probs, key=probs.get)
            # levels counted from 0, as the API's `score` (in the raw response beside it) counts them
            summary = (
                f"level: <b>{html.escape(top_level)}</b> (level {levels.index(top_level)} on a scale of 0 "
                f"({html.escape(levels[0])}) to {len(levels) - 1} ({html.escape(levels[-1])})) · "
                f"score {ans['score']:.2f} (the expected level) · {confidence_html(ans['confidence'], kind)}"
            )
        top = max(probs, key=probs.get) if probs else None
        title = html.escape(str(questions.get(qid, {}).get("instructions") or qid))
        parts.append(
            f'<div class="blink-question" data-question="{html.escape(qid)}">'
            f'<h4>{html.escape(qid)} — {title}</h4><div class="blink-summary">{summary}</div>'
        )
        described = descriptions_of(questions.get(qid, {}))
        for option, p in probs.items():
            parts.append(bar_html(option, p, top=option == top, desc=described.get(option)))
        parts.append("</div>")
    # what confidence means for each type answered, under the answers (the formulas one click away)
    parts.append(
        confidence_notes_html([k for k in CONFIDENCE_NOTES if any(a.get("type") == k for a in answers.values())])
    )
    parts.append("</div>")
    return "".join(parts)
