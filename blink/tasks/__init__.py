"""Decisions measured on a team's own labels: `evaluation` (the figures of one question's answers against its
labels), `labelled` (a labelled table's answers and labels read into them, and the report beside the table) and
`report_page` (that report as a page people read).
"""
