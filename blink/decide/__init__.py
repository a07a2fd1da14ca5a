"""Decisions: questions, prompts, option rotation, answers, calibration (and the `calibrate` command), the prior,
the planner, the decision service and its batcher (bulk rows paced in calls of their own)."""
