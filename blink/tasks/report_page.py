"""The evaluation report as a page people read at a glance: one self-contained HTML file (no script, no request to
anywhere: it opens from a disk, an e-mail or a ticket), per question its figures, the reliability diagram, the
confusion matrix and the risk–coverage curve as inline SVG.

Drawn by hand in ~100 lines rather than with a plotting library: three simple charts do not earn matplotlib's
~40 MB in the server, and SVG text is escaped like the rest of the page.
"""

from __future__ import annotations

from html import escape

SIZE, PAD = 240, 32  # a chart's square plot area and its margin, in px
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1f2328;max-width:1100px}
h1{font-size:20px}h2{font-size:17px;margin-top:32px;border-top:1px solid #d0d7de;padding-top:16px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #d0d7de;padding:3px 8px;text-align:right}
th{background:#f6f8fa}.charts{display:flex;flex-wrap:wrap;gap:24px}figure{margin:0;width:304px}figcaption{font-size:13px}
.muted{color:#59636e}svg text{font-size:11px;fill:#1f2328}
"""


def page(report: dict) -> str:
    """The whole page of a report (blink.tasks.labelled.report_of plus what served it)."""
    title = f"<h1>Evaluation of {escape(str(report.get('table') or 'a labelled table'))}</h1>"
    served = f"model {report.get('model')}, weights {str(report.get('weights') or '')[:12]}, {report.get('rows')} rows"
    parts = [title, f"<p class=muted>{escape(served)}</p>"]
    parts += [question(qid, r) for qid, r in report["questions"].items()]
    body = "\n".join(parts)
    viewport = '<meta name=viewport content="width=device-width,initial-scale=1">'
    head = f"<meta charset=utf-8>{viewport}<title>blink evaluation</title><style>{STYLE}</style>"
    return f"<!doctype html><html><head>{head}</head><body>{body}</body></html>\n"


def question(qid: str, r: dict) -> str:
    about = f"({r['type']}, label column {r['label_column']})"
    title = f"<h2>{escape(qid)} <span class=muted>{escape(about)}</span></h2>"
    skipped = f"<p class=muted>{r['unusable']} of {r['rows']} rows not counted (listed in the JSON report).</p>"
    if not r["n"]:
        return title + "<p>No row could be counted.</p>" + skipped
    charts = [
        figure(
            reliability_chart(r["reliability"]), "Reliability: accuracy per confidence bin (the diagonal is calibrated)"
        ),
        figure(confusion_chart(r["options"], r["confusion"]), "Confusion: rows the label, columns the answer"),
        figure(
            curve_chart(r["risk_coverage"], r["certificate"]),
            "Risk–coverage: error rate among answers at confidence ≥ t; dashed, α; the dot, the certified t",
        ),
    ]
    side = side_by_side(r)
    return (
        title
        + figures_table(r)
        + side
        + (skipped if r["unusable"] else "")
        + f"<div class=charts>{''.join(charts)}</div>"
    )


def figures_table(r: dict) -> str:
    lo, hi = r["intervals"]["accuracy"]
    elo, ehi = r["intervals"]["ece"]
    rows = [
        ("n", f"{r['n']}"),
        ("accuracy (95 % interval)", f"{r['accuracy']:.3f} ({lo:.3f}–{hi:.3f})"),
        ("macro-F1", f"{r['macro_f1']:.3f}"),
        ("NLL", f"{r['nll']:.4f}"),
        ("Brier", f"{r['brier']:.4f}"),
        ("ECE, 10 bins (95 % interval)", f"{r['ece']:.4f} ({elo:.4f}–{ehi:.4f})"),
        ("ECE, equal mass", f"{r['ece_equal_mass']:.4f}"),
    ]
    if "mae_levels" in r:
        rows.append(("mean absolute error, levels", f"{r['mae_levels']:.3f}"))
    for g in r["gates"]:
        err = "—" if g["error_rate"] is None else f"{g['error_rate']:.3f}"
        rows.append(
            (f"confidence ≥ {g['threshold']}", f"{g['coverage']:.1%} answered, error {err}, {g['wrong']} wrong")
        )
    rows.append(certificate_row(r["certificate"]))
    cells = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f"<table>{cells}</table>"


def side_by_side(r: dict) -> str:
    """As served, and as a fit to these labels would serve them (out of fold: each row from a fit that never saw it)."""
    f = r["fitted"]
    if "cross_validated" not in f:
        return f"<p class=muted>Fitted to these labels: nothing ({escape(f['why'])}).</p>"
    params = ", ".join(
        f"{k} {v:.3f}" if isinstance(v, float) else f"{k} [{', '.join(f'{b:+.2f}' for b in v)}]"
        for k, v in f["params"].items()
    )
    head = "<tr><th></th><th>as served</th><th>fitted, held out</th></tr>"
    cells = "".join(
        f"<tr><th>{escape(name)}</th><td>{r[name]:.4f}</td><td>{f['cross_validated'][name]:.4f}</td></tr>"
        for name in f["cross_validated"]
    )
    kept = f"{f['kept']} kept" + (f" ({params})" if params else "")
    about = f"Fitted to these labels ({f['folds']}-fold cross-validation): {kept}; {f['why']}."
    c = f["certificate"]
    name, value = certificate_row(c)
    split = f"A fit made on {c['fit_rows']} of the rows, {name} on the other {c['certify_rows']}: {value}."
    return f"<p>{escape(about)}</p><table>{head}{cells}</table><p>{escape(split)}</p>"


def certificate_row(c: dict) -> tuple[str, str]:
    name = f"certified (α {c['alpha']:g}, δ {c['delta']:g})"
    if c["threshold"] is None:
        return name, f"nothing: {c['reason']}"
    return name, (
        f"confidence ≥ {c['threshold']:g}: {c['coverage']:.1%} answered, {c['wrong']} of {c['answered']} wrong; "
        f"with probability ≥ {1 - c['delta']:g}, at most {c['alpha']:g} of such answers are wrong"
    )


def figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>"


def svg(inner: str) -> str:
    side = SIZE + 2 * PAD
    return f'<svg xmlns="http://www.w3.org/2000/svg" width="{side}" height="{side}" role="img">{inner}</svg>'


def xy(x: float, y: float) -> tuple[float, float]:
    """A point of the unit square on the plot (y up)."""
    return round(PAD + x * SIZE, 1), round(PAD + (1 - y) * SIZE, 1)


def axes(x_label: str, y_label: str) -> str:
    (x0, y0), (_, y1) = xy(0, 0), xy(1, 1)
    ticks = "".join(
        f'<text x="{xy(t, 0)[0]}" y="{y0 + 14}" text-anchor="middle">{t:g}</text>'
        f'<text x="{x0 - 4}" y="{xy(0, t)[1] + 4}" text-anchor="end">{t:g}</text>'
        for t in (0, 0.5, 1)
    )
    return (
        f'<rect x="{x0}" y="{y1}" width="{SIZE}" height="{SIZE}" fill="none" stroke="#8c959f"/>{ticks}'
        f'<text x="{PAD + SIZE / 2}" y="{y0 + 28}" text-anchor="middle">{escape(x_label)}</text>'
        f'<text x="10" y="{PAD + SIZE / 2}" transform="rotate(-90 10 {PAD + SIZE / 2})" text-anchor="middle">'
        f"{escape(y_label)}</text>"
    )


def reliability_chart(bins: list[dict]) -> str:
    bars = []
    for b in bins:
        lo, hi = b["bin"]
        (x, top), (x2, base) = xy(lo, b["accuracy"]), xy(hi, 0)
        tip = f"{lo:g}–{hi:g}: {b['count']} answers, confidence {b['confidence']:.3f}, accuracy {b['accuracy']:.3f}"
        bars.append(
            f'<rect x="{x}" y="{top}" width="{x2 - x - 1}" height="{base - top}" fill="#54aeff">'
            f"<title>{escape(tip)}</title></rect>"
        )
    (a, b), (c, d) = xy(0, 0), xy(1, 1)
    return svg(
        axes("confidence", "accuracy") + "".join(bars) + f'<line x1="{a}" y1="{b}" x2="{c}" y2="{d}" stroke="#cf222e"/>'
    )


def confusion_chart(options: list[str], counts: list[list[int]]) -> str:
    k, most = len(options), max(max(row) for row in counts) or 1
    cell = SIZE / k
    cells = []
    for i, row in enumerate(counts):
        for j, count in enumerate(row):
            shade = round(0.08 + 0.82 * count / most, 3)
            x, y = PAD + j * cell, PAD + i * cell
            cells.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{cell:.1f}" height="{cell:.1f}" fill="#0969da" '
                f'fill-opacity="{shade}"><title>label {escape(options[i])}, answer {escape(options[j])}: {count}'
                f"</title></rect>"
            )
            if k <= 8:
                cells.append(
                    f'<text x="{x + cell / 2:.1f}" y="{y + cell / 2 + 4:.1f}" text-anchor="middle">{count}</text>'
                )
    names = "".join(
        f'<text x="{PAD + (j + 0.5) * cell:.1f}" y="{PAD - 6}" text-anchor="middle">{escape(o[:10])}</text>'
        f'<text x="{PAD - 4}" y="{PAD + (j + 0.5) * cell + 4:.1f}" text-anchor="end">{escape(o[:6])}</text>'
        for j, o in enumerate(options)
        if k <= 8
    )
    return svg("".join(cells) + names)


def curve_chart(points: list[dict], certificate: dict) -> str:
    line = " ".join(f"{x},{y}" for x, y in (xy(p["coverage"], p["error_rate"]) for p in points))
    (x0, ya), (x1, _) = xy(0, certificate["alpha"]), xy(1, certificate["alpha"])
    marks = f'<line x1="{x0}" y1="{ya}" x2="{x1}" y2="{ya}" stroke="#cf222e" stroke-dasharray="4 3"/>'
    if certificate["threshold"] is not None:
        x, y = xy(certificate["coverage"], certificate["error_rate"])
        tip = f"certified: confidence ≥ {certificate['threshold']:g}"
        marks += f'<circle cx="{x}" cy="{y}" r="4" fill="#cf222e"><title>{escape(tip)}</title></circle>'
    return svg(
        axes("share answered (coverage)", "error rate")
        + f'<polyline points="{line}" fill="none" stroke="#1a7f37" stroke-width="2"/>'
        + marks
    )
