"""Decisions measured on a team's own labels: `evaluation` (the figures of one question's answers against its
labels) and `labelled` (a labelled table's answers and labels read into them, and the report beside the table).
"""
