"""What every bench starts with: the repository and the test suite's helpers importable, the Hub off.

Imported first (`from offline import ROOT`; a script's own folder is already on its path): nothing a bench runs may
reach the Hugging Face Hub, and the demo models are built offline.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT / "ci" / "tests", ROOT / "bench", ROOT):  # each put first, so the repository comes first
    if str(path) not in sys.path[:3]:
        sys.path.insert(0, str(path))
for var, value in (
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("TRANSFORMERS_VERBOSITY", "error"),
    ("TOKENIZERS_PARALLELISM", "false"),
    ("HF_HUB_DISABLE_TELEMETRY", "1"),
):
    os.environ.setdefault(var, value)
