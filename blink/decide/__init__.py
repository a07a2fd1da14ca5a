"""Decisions: questions, prompts, option rotation, answers, calibration, the planner, the decision service and
its batcher."""
