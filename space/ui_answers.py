"""The Decide tab's answers as HTML: a bar per option, the summary line of each question, the confidence explained."""

import html

CONFIDENCE_NOTE = (
    "Confidence: how far the answer is from a coin toss over its options (1 − normalised entropy): 1 when all the "
    "probability is on one option, 0 when it is spread evenly."
)


def confidence_html(confidence: float) -> str:
    return f'<span class="blink-confidence" title="{html.escape(CONFIDENCE_NOTE)}">confidence {confidence:.3f}</span>'


def descriptions_of(question: dict) -> dict:
    """Each option's description, as the question gave it (choice: `criteria` {name: description})."""
    criteria = question.get("criteria")
    return {str(k): v for k, v in criteria.items() if v} if isinstance(criteria, dict) else {}


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
            summary = f"choice: <b>{html.escape(str(ans['choice']))}</b> · {confidence_html(ans['confidence'])}"
        else:
            legend = ans.get("legend") or {}
            probs = {str(legend.get(k, k)): p for k, p in ans["probabilities"].items()}
            levels = list(probs)
            top_level = max(probs, key=probs.get)
            # levels counted from 1, as people count them (the API's `score` counts from 0)
            summary = (
                f"level: <b>{html.escape(top_level)}</b> ({levels.index(top_level) + 1} of {len(levels)}) · "
                f"expected level {ans['score'] + 1:.2f} of 1 ({html.escape(levels[0])}) to {len(levels)} "
                f"({html.escape(levels[-1])}) · {confidence_html(ans['confidence'])}"
            )
        top = max(probs, key=probs.get) if probs else None
        title = html.escape(str(questions.get(qid, {}).get("instructions") or qid))
        parts.append(
            f'<div class="blink-question" data-question="{html.escape(qid)}">'
            f'<h4>{html.escape(qid)} — {title}</h4><div class="blink-summary">{summary}</div>'
        )
        described = descriptions_of(questions.get(qid, {}))
        for option, p in probs.items():
            pct = max(0.0, min(100.0, 100.0 * float(p)))
            cls = "blink-bar blink-top" if option == top else "blink-bar"
            desc = described.get(option)
            label = html.escape(option) + (f'<small class="blink-desc">{html.escape(desc)}</small>' if desc else "")
            parts.append(
                f'<div class="{cls}" data-option="{html.escape(option)}" data-p="{p:.6f}">'
                f'<span class="blink-option">{label}</span>'
                f'<span class="blink-track"><span class="blink-fill" style="width:{pct:.1f}%;display:block">'
                f'</span></span><span class="blink-p">{p:.3f}</span></div>'
            )
        parts.append("</div>")
    if any(ans.get("type") in ("choice", "score") for ans in answers.values()):
        parts.append(f'<div class="blink-legend">{html.escape(CONFIDENCE_NOTE)}</div>')
    parts.append("</div>")
    return "".join(parts)
