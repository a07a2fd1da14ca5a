"""Bulk below the server: many rows through the server's own routes, called in this process (`inproc`).

- the OpenAI Batch API on `serve` (`/v1/files`, `/v1/batches`): its SQLite `store`, its `jobs` (what the routes ask)
  and its `worker`; `blink/server.py` mounts it.
- what every bulk surface shares (the Batch API, run-batch in `blink/run_batch/`, the Space's Sheet): rows read and
  written (`requests_file`, `tables`, `dialect`, `parts`) and `inproc`.
"""
