"""A scripted vLLM replica: the part of vLLM's HTTP wire blink uses (blink/vllm/scoring.py, chat.py, replicas.py),
answered well-formed after a fixed sleep, computing nothing. For the replica simulation
(bench/scale_out/replicas_sim.py) and its CI test (ci/tests/test_replicas_sim.py); not a test module.

    python ci/tests/scripted_vllm.py --port P [--delay-ms 100] [--parallel 1]
                                     [--abort-after N | --close-after N | --hang]

- `GET /health` (200), `GET /v1/models` (one model, its `max_model_len`);
- `POST /v1/completions` without `stream`: one choice per prompt of `prompt` (a list of token-id lists), each with
  `logprobs.top_logprobs[0]` holding `"token_id:N"` for every N of `logprob_token_ids` (fixed made-up values);
- `POST /v1/completions` with `stream`: server-sent events of `choices[0].token_ids`, `max_tokens` tokens, the last
  with `finish_reason: "length"`, then `data: [DONE]`.

`--hang` answers `/health` and `/v1/models` but never a completion (the request is read, then nothing): a replica
stuck in its engine while its HTTP server lives. `--fail-status N` answers every completion with status N (a 500: a
replica whose engine is broken while `/health` still answers 200); `POST /script {"fail_status": N or null}` changes
that while it runs, and `GET /script` says what it has served and how many `/health` calls it answered.

Two faults a real replica shows while it shuts down: `--abort-after N` ends every stream after N tokens with
`finish_reason: "abort"` and `[DONE]`, and answers every read aborted (no log-probabilities), as vLLM does with the
requests in flight when it is stopped; `--close-after N` closes the connection after N tokens, a clean end of the
body with no `[DONE]`.

The replica answers `--parallel` requests at a time (default 1: a replica that is never faster with more load),
each after `--delay-ms`. It binds loopback only. To hang it, stop its process (SIGSTOP): the kernel still accepts
connections, nothing answers, as with a real replica stuck in a kernel or a GC pause.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "scripted"
STREAM_TOKEN = 1000  # an ordinary token id of any Qwen tokenizer (never an end-of-sequence id)


def scores(body: dict, aborted: bool = False) -> dict:
    prompts = body.get("prompt") or []
    if prompts and not isinstance(prompts[0], list):
        prompts = [prompts]
    labels = body.get("logprob_token_ids") or []
    top = {f"token_id:{token}": -1.0 - 0.25 * k for k, token in enumerate(labels)}
    return {
        "id": "cmpl-scripted",
        "object": "text_completion",
        "model": MODEL,
        "choices": [
            {"index": i, "text": "", "finish_reason": "abort", "logprobs": None}
            if aborted
            else {"index": i, "text": "", "finish_reason": "length", "logprobs": {"top_logprobs": [top]}}
            for i in range(len(prompts))
        ],
        "usage": {"prompt_tokens": sum(len(p) for p in prompts), "completion_tokens": len(prompts)},
    }


def make_handler(
    delay_s: float,
    slots: threading.Semaphore,
    counts: dict,
    abort_after=None,
    close_after=None,
    hang=False,
    script=None,
):
    script = {"fail_status": None} if script is None else script

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def _json(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                counts["health"] = counts.get("health", 0) + 1
                self._json(200, {})
            elif self.path == "/script":
                self._json(200, {**counts, **script})
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": 32768}]})
            else:
                self._json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/script":
                script.update(body)
                self._json(200, script)
                return
            if self.path != "/v1/completions":
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            if hang:
                threading.Event().wait()  # never answered: the client's timeout ends it
            if script["fail_status"]:
                self._json(script["fail_status"], {"error": {"message": "scripted failure"}})
                return
            with slots:  # `parallel` at a time, each after the fixed delay
                time.sleep(delay_s)
                counts["served"] += 1
                if not body.get("stream"):
                    self._json(200, scores(body, aborted=abort_after is not None))
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                wanted = int(body.get("max_tokens") or 16)
                for k in range(wanted):
                    if k == close_after:
                        return  # the body ends with the connection: no [DONE]
                    end = "abort" if k + 1 == abort_after else "length" if k + 1 == wanted else None
                    chunk = {"choices": [{"index": 0, "text": "", "token_ids": [STREAM_TOKEN], "finish_reason": end}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    if end:
                        break
                    time.sleep(0.005)
                self.wfile.write(b"data: [DONE]\n\n")

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # a stopped replica's backlog keeps accepting, as a real one's does


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--parallel", type=int, default=1)
    faults = parser.add_mutually_exclusive_group()
    faults.add_argument("--abort-after", type=int, help="end every stream after N tokens, aborted; abort every read")
    faults.add_argument("--close-after", type=int, help="close every stream after N tokens, with no [DONE]")
    faults.add_argument("--hang", action="store_true", help="answer /health and /v1/models, never a completion")
    faults.add_argument("--fail-status", type=int, help="answer every completion with this status")
    args = parser.parse_args()
    counts = {"served": 0}
    server = Server(
        ("127.0.0.1", args.port),
        make_handler(
            args.delay_ms / 1000,
            threading.Semaphore(args.parallel),
            counts,
            args.abort_after,
            args.close_after,
            args.hang,
            {"fail_status": args.fail_status},
        ),
    )
    print(f"scripted vLLM replica on http://127.0.0.1:{args.port} ({args.delay_ms} ms, {args.parallel} at a time)")
    server.serve_forever()


if __name__ == "__main__":
    main()
