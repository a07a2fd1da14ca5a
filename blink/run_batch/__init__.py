"""run-batch (`python -m blink run-batch`), above the server: it builds one in its process (`blink.server`) and
sends a file's rows through its routes (`blink.batch.inproc`). An OpenAI batch file or a table in, answers out,
resumable exactly once: its `command`, its drivers (one machine: `runner`; Ray: `ray_run`, `ray_data`), the sidecar
that makes a resume exact (`journal`) and what a run shows while it works (`progress`).
"""
