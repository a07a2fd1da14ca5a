"""What this Space serves: the single-Space configuration `python app.py` reads at the repository root.

A plain module of UPPERCASE constants, one per knob of `blink/settings.py` (the knob's name upper-cased); a knob
left out takes its Space default, and the variable `BLINK_<NAME>` overrides either at start-up, so a Space's
Variables (or Secrets, for BLINK_API_KEY) tune it without a rebuild. A name no knob owns stops start-up.
`build.py` writes one of these per Space from `spaces.toml`, with every knob spelled out.
"""

MODEL = "thegovind/blink-4b"  # local try-out: BLINK_MODEL=demo (the offline random demo model)
REVISION = "v1.0"
SERVED_MODEL_NAME = "blink-4b"
BATCH_WINDOW_MS = 10.0  # requests from the SAME caller arriving within 10 ms share one GPU call

TITLE = "blink-4b"
DESCRIPTION = (
    "Typed decisions from one forward pass: ask yes/no, choice and score questions about a text "
    "and get a probability for every option. Also speaks the OpenAI API (chat and decisions)."
)
CAVEAT = (
    "blink-4b is a small model: its probabilities are estimates, not facts. "
    "Check important answers before acting on them."
)
