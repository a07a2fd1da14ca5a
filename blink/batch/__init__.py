"""Bulk decisions: `python -m blink run-batch` (an OpenAI batch file or a table in, answers out), resumable."""
