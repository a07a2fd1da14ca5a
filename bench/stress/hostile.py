"""Hostile-input benchmark: each case of issue 12 against a real `python -m blink serve`, one table.

    .venv/bin/python bench/stress/hostile.py [--column before|after] [--only CASE,...] [--slow-seconds N]
        [--wire systemone|gemini]

Loopback only, every case bounded in time. For each case: the status the hostile request got, the seconds it
took, the worst `/healthz` latency seen while it ran (polled every 50 ms), and the server's RSS peak and kept
(growth over the RSS just before the case; the server's process tree). The "in limits" cases are the largest
single requests the default limits accept (their peak must stay under 500 MB, their kept under 100 MB); the
overload cases offer 200 requests at 64 connections and at 2x and 4x the server's 24 places (8 queued + 16 in
the running batch) and report goodput (served req/s over one-at-a-time req/s), p99 of the served requests and
the median cost of a refusal. Servers start as the tests start theirs (bench/servers.py). Results are saved to
bench/stress/hostile-results.json under --column, and the table prints every saved column side by side, so the
numbers taken before the fixes stay beside the ones taken after. `--wire gemini` sends the cases that ask a
decision (the bomb, deep JSON, the lone surrogate, the key in the query, the images, the in-limits states, the
overloads, the slow clients) on Gemini's decisions wire (`/v1beta/decisions`) instead of System One's; the
other cases are their own routes either way.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
from offline import ROOT  # first: the repository importable, the Hub off

# isort: split

from hostile_harness import WIRES, log, serve, use_wire
from hostile_overload import OVERLOAD_PLACES, case_overload, case_refusal_cost
from hostile_requests import (
    case_aspect_png,
    case_chat_12mb,
    case_healthz_path,
    case_lone_surrogate,
    case_mcp_past_the_context,
    case_nested_json,
    case_past_the_context,
    case_png_memory,
    case_png_one_request,
    case_query_key_in_log,
    case_state_at_limit,
    case_zstd_bomb,
)
from hostile_slow import case_slow_clients
from servers import Server

RESULTS = ROOT / "bench" / "stress" / "hostile-results.json"


CASES = {
    "zstd bomb 2KB->24MB": ("text", case_zstd_bomb),
    "chat message 12MB": ("text", case_chat_12mb),
    **{
        f"zstd past the context: {route}": ("text", functools.partial(case_past_the_context, route=route))
        for route in (
            "/v1/systemone",
            "/v1/decisions",
            "/v1beta/decisions",
            "/v1/chat/completions",
            "/v1/responses",
            "/v1/completions",
            "/v1/completions (echo, a list)",
            "/tokenize",
            "/v1/moderations",
            "/v1/moderations 32 inputs",
        )
    },
    "MCP decide past the context": ("text", case_mcp_past_the_context),
    "nested JSON 100k": ("text", case_nested_json),
    "lone surrogate": ("text", case_lone_surrogate),
    "?api_key= in log": ("text", case_query_key_in_log),
    "/healthz local path": ("text", case_healthz_path),
    "slow clients": ("text", None),
    "PNG 32x6500": ("vision", case_aspect_png),
    "PNGs 8x2x20MP": ("vision", case_png_memory),
    "in limits: state at 32k tokens": ("text", case_state_at_limit),
    "in limits: state at 32k tokens, prefix cache off": ("text-nocache", case_state_at_limit),
    "in limits: 32k tokens x 128 questions": ("text-nocache", functools.partial(case_state_at_limit, questions=128)),
    "in limits: 32k x 128, --pass-cache-mib 256": (
        "text-small-pass",
        functools.partial(case_state_at_limit, questions=128),
    ),
    "in limits: PNGs 2x20MP": ("vision", case_png_one_request),
    "overload 200@64": ("overload", functools.partial(case_overload, 64)),
    "overload 2x: 200@48": ("overload", functools.partial(case_overload, 2 * OVERLOAD_PLACES)),
    "overload 4x: 200@96": ("overload", functools.partial(case_overload, 4 * OVERLOAD_PLACES)),
    "refusal cost (server full)": ("overload", case_refusal_cost),
}


def table(saved: dict) -> str:
    columns = list(saved)
    rows = [
        "| case | " + " | ".join(f"{c}: status | s | healthz max s | RSS peak/kept MB" for c in columns) + " |",
        "|---|" + "---|---|---|---|" * len(columns),
    ]
    names = list(dict.fromkeys(name for col in saved.values() for name in col))
    for name in names:
        cells = []
        for col in columns:
            r = saved[col].get(name)
            if r is None:
                cells += ["", "", "", ""]
                continue
            rss = f"{r.get('rss_peak_mb', '')}/{r.get('rss_kept_mb', '')}" if "rss_peak_mb" in r else ""
            if r.get("prefix_cache_mb"):
                rss += f" (cache {r['prefix_cache_mb']})"
            refusal_ms = r.get("refusal_p50_s") and round(r["refusal_p50_s"] * 1000, 1)
            status = str(r["status"]) + (
                f", goodput {r['goodput']}, p99 {r['p99_s']} s, refusal p50 {refusal_ms} ms, "
                f"{r['refused_finally']} refused"
                if "goodput" in r
                else ""
            )
            if "refusal_server_p50_ms" in r:
                status += (
                    f", refusal p50 {r['refusal_client_p50_ms']} ms (server {r['refusal_server_p50_ms']} ms), "
                    f"worst {r['refusal_client_max_ms']} ms"
                )
            cells += [status, str(r.get("seconds", "")), str(r.get("healthz_max_s", "")), rss]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--column", default="before", help="the column these results are saved under")
    parser.add_argument("--only", default="", help="comma-separated case names (substring match)")
    parser.add_argument("--slow-seconds", type=float, default=35.0, help="how long the slow clients hold on")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--wire", choices=sorted(WIRES), default="systemone", help="the decision cases' wire")
    args = parser.parse_args()
    use_wire(args.wire)
    wanted = [n for n in CASES if not args.only or any(w.strip().lower() in n.lower() for w in args.only.split(","))]
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results = saved.setdefault(args.column, {})
    servers: dict[str, Server] = {}
    try:
        for name in wanted:
            group, fn = CASES[name]
            log(f"case {name}")
            if group == "overload":
                results[name] = fn()
            else:
                if group not in servers:
                    # the text server gets its model as a local folder, as most deployments do (the /healthz case)
                    from blink.model.demo import demo_model_dir

                    flags = {
                        "text-nocache": ("--prefix-cache-mib", "0"),
                        "text-small-pass": ("--prefix-cache-mib", "0", "--pass-cache-mib", "256"),
                    }.get(group, ())
                    servers[group] = serve(*flags, model="demo-vision" if group == "vision" else str(demo_model_dir()))
                s = servers[group]
                if s.proc.poll() is not None:
                    results[name] = {"status": f"server died ({s.proc.returncode})", "seconds": 0}
                    continue
                results[name] = case_slow_clients(s, args.slow_seconds) if name == "slow clients" else fn(s)
            results[name]["measured"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            log(f"  -> {json.dumps(results[name])[:400]}")
            if not args.no_save:
                RESULTS.write_text(json.dumps(saved, indent=1) + "\n")
    finally:
        for s in servers.values():
            s.stop()
    print(table(saved))


if __name__ == "__main__":
    main()
