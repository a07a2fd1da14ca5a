"""bench/latency/run.py's table: each row's figures beside its target (the targets are declared here), as printed at
the end of a run. Apart from the measuring, so what is measured and how it is judged read separately."""

from __future__ import annotations

import math

from run_throughput import THROUGHPUT_STATE

TARGET_TS_16 = 4.0  # ours >= 4x faster than transformers serve at 16 questions
TARGET_TS_1 = 1.0  # never slower at 1 question
TARGET_BATCHING_16 = 2.0  # batched >= 2x unbatched throughput at 16 clients
TARGET_OUTSIDE = 0.10  # < 10% of a 16-question request's time outside the model (larger model)
BF16_BOUND = 5e-2  # the bf16 drift we state: |p_bf16 - p_fp32| per probability
TARGET_DURATION_RATIO = 2.0  # GPU seconds requested <= 2x used, over calls of more than 1 s of work


def fmt_ms(ms: float) -> str:
    return "—" if math.isnan(ms) else (f"{ms:.0f} ms" if ms >= 100 else f"{ms:.1f} ms")


def mark(ok: bool) -> str:
    return "✓" if ok else "✗ MISSED"


def table(results: list[dict], larger: str | None) -> str:
    head = [
        "model",
        "row",
        "ours",
        "transformers serve",
        "plain fwd / unbatched",
        "TS ÷ ours",
        "plain ÷ ours / batched ÷ unbatched",
        "outside model",
        "n ours/TS/plain",
        "target",
    ]
    rows = []
    for res in results:
        m = res["model"]
        for c in res["cells"]:
            targets = []
            if c["questions"] == 16:
                targets.append(f"TS ≥{TARGET_TS_16:g}× {mark(c['x_ts'] >= TARGET_TS_16)}")
                if m == larger:
                    targets.append(f"outside <{TARGET_OUTSIDE:.0%} {mark(c['outside_share'] < TARGET_OUTSIDE)}")
            if c["questions"] == 1:
                targets.append(f"TS ≥{TARGET_TS_1:g}× {mark(c['x_ts'] >= TARGET_TS_1)}")
            n = c["n"]
            rows.append(
                [
                    m,
                    f"latency {c['state_tokens']} tok × {c['questions']} q",
                    fmt_ms(c["ours_ms"]),
                    fmt_ms(c["ts_ms"]),
                    fmt_ms(c["plain_ms"]),
                    f"{c['x_ts']:.2f}×",
                    f"{c['x_plain']:.2f}×",
                    f"{c['outside_share']:.1%} (prepare {c['prepare_share']:.0%})",
                    f"{n['ours']}/{n['ts']}/{n['plain']}",
                    "; ".join(targets),
                ]
            )
        for t in res["throughput"]:
            target = (
                f"≥{TARGET_BATCHING_16:g}× {mark(t['x_batching'] >= TARGET_BATCHING_16)}" if t["clients"] == 16 else ""
            )
            errs = sum(t["errors"].values())
            rows.append(
                [
                    m,
                    f"throughput {t['clients']} clients × 1 q ({THROUGHPUT_STATE} tok each)"
                    + (f", {errs} errors" if errs else ""),
                    f"{t['batched_rps']:.1f} req/s batched (mean batch {t['mean_batch']:.1f})",
                    "—",
                    f"{t['unbatched_rps']:.1f} req/s",
                    "—",
                    f"{t['x_batching']:.2f}×",
                    "",
                    f"{t['reps']}×{t['clients'] * t['requests_each']} req",
                    target,
                ]
            )
        mb_ = res["mixed_batch"]
        rows.append(
            [
                m,
                "lopsided batch: 1 × 2,200 tok + 15 × 64 tok, 1 q each",
                f"{fmt_ms(mb_['one_call_ms'])} in one call",
                "—",
                f"{fmt_ms(mb_['each_ms'])} one call each",
                "—",
                f"{mb_['x']:.2f}×",
                "",
                "3 reps (in-process)",
                f"≥1× {mark(mb_['x'] >= 1)}",
            ]
        )
        mem = res["memory"]
        mb = lambda b: f"{b / 2**20:.0f} MB"  # noqa: E731
        rows.append(
            [
                m,
                "peak RSS (server process)",
                f"{mb(mem['ours']['peak_rss'])} (batched server {mb(mem['batched']['peak_rss'])})",
                mb(mem["ts"]["peak_rss"]),
                f"bench process {mb(mem['bench_process_rss'])}",
                f"{mem['ts']['peak_rss'] / mem['ours']['peak_rss']:.2f}×",
                "",
                "",
                "",
                "",
            ]
        )
        worst = max(c["max_abs_diff"]["ours_vs_plain"] for c in res["cells"])
        worst_ts = max(c["max_abs_diff"]["ts_vs_plain"] for c in res["cells"])
        rows.append(
            [
                m,
                "max |Δ probability| vs plain forward",
                f"{worst:.1e}",
                f"{worst_ts:.1e}",
                "0 (reference)",
                "",
                "",
                "",
                "",
                "fp32: ≤ 1e-5 " + mark(worst <= 1e-5),
            ]
        )
        b = res["bf16"]
        rows.append(
            [
                m,
                "bf16 drift: max |Δ probability|, ours in bf16 vs plain fp32",
                f"{b['max_abs_diff']:.1e}",
                "",
                "0 (reference)",
                "",
                "",
                "",
                f"{b['answers']} answers, argmax {b['argmax_agree']}/{b['answers']}",
                f"bound {BF16_BOUND:g} " + mark(b["max_abs_diff"] <= BF16_BOUND),
            ]
        )
        d = res["durations"]
        rows.append(
            [
                m,
                "duration honesty: requested vs used s (CPU compute)",
                f"{d['requested_s']:.0f} s asked / {d['used_s']:.1f} s used = {d['ratio']:.1f}×",
                "",
                "",
                "",
                "",
                "",
                f"{d['calls']} calls",
                f"cut off: {d['cut_off']}/{d['calls']} " + mark(d["cut_off"] == 0),
            ]
        )
        if d.get("long_calls"):
            ok = d["long_ratio"] <= TARGET_DURATION_RATIO
            rows.append(
                [
                    m,
                    f"… of which calls over {d['long_s']:g} s of work",
                    f"{d['long_requested_s']:.0f} s asked / {d['long_used_s']:.1f} s used = "
                    f"{d['long_ratio']:.2f}× (worst call {d['long_worst']:.2f}×)",
                    "",
                    "",
                    "",
                    "",
                    "",
                    f"{d['long_calls']} calls",
                    f"≤{TARGET_DURATION_RATIO:g}× {mark(ok)}",
                ]
            )
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: "| " + " | ".join(str(x).ljust(w) for x, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows])
