"""Bulk: many rows through the server's own routes, called in this process (`inproc`).

- `run-batch` (`python -m blink run-batch`): an OpenAI batch file or a table in, answers out, resumable exactly once;
  its command, its drivers (one machine: `runner`; Ray: `ray_run`, `ray_data`) and its progress.
- the OpenAI Batch API on `serve` (`/v1/files`, `/v1/batches`): its SQLite `store`, its `jobs` (what the routes ask)
  and its `worker`.
- what both share: rows read and written (`requests_file`, `tables`, `dialect`, `parts`, `journal`) and `inproc`.
"""
