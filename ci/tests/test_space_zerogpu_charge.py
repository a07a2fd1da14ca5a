"""What a GPU call is charged on today's ZeroGPU hardware, end to end: `python app.py` in ZeroGPU mode (the real
`spaces` package, .venv-zerogpu) against the fake scheduler (ci/tests/fake_zerogpu.py), on the RTX PRO 6000
Blackwell entry of `spaces`' own configuration (duration factor 1.5, xlarge threshold 45,097,156,608 bytes),
with each size: `large`, `xlarge`, and `auto` below and past the threshold of packed weights.

For each: the seconds the scheduler is sent are what `spaces` computes from what blink asked (its factor on
`large`), they cover the estimate and stay within the cap, and /healthz and the UI's API tab say the size, the
factor and the charge."""

from __future__ import annotations

import subprocess

import httpx
import pytest
from fake_zerogpu import FakeScheduler
from gradio_page import page_call

from helpers import ROOT, running

VENV = ROOT / ".venv-zerogpu"
BLACKWELL = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
THRESHOLD = 45_097_156_608
DECISION = {
    "state": "I was charged twice for order #8812 and nobody answers my emails.",
    "questions": {"urgent": {"type": "noul", "instructions": "Does this need a reply today?"}},
}

# (setting, packed bytes, the size the call gets)
CASES = [
    ("large", 0, "large"),
    ("xlarge", 0, "xlarge"),
    ("auto", THRESHOLD + 1, "xlarge"),  # the platform's rule: past the threshold its default is xlarge
    ("auto", 1024, "large"),
]


@pytest.fixture(scope="module")
def zerogpu_python():
    if not (VENV / ".ready").exists():
        subprocess.run(["bash", str(ROOT / "ci" / "zerogpu-venv.sh")], check=True, timeout=1800)
    return VENV / "bin" / "python"


@pytest.fixture(scope="module", params=CASES, ids=[f"{s}-{b}" for s, b, _ in CASES])
def charged_space(request, demo_root, zerogpu_python, tmp_path_factory):
    setting, packed, size = request.param
    with FakeScheduler() as fake:
        env = {
            "SPACES_ZERO_GPU": "true",
            "SPACES_ZERO_DEVICE_API_URL": fake.url,
            "ZEROGPU_TEST_CARD": BLACKWELL,
            "ZEROGPU_TEST_PACKED_BYTES": str(packed),
            "BLINK_MODEL": "demo",
            "BLINK_GPU_SIZE": setting,
            "BLINK_BATCH_WINDOW_MS": "0",
            "BLINK_DURATION_COLD_S": "80",  # a first call that needs more than the cap allows after the factor
            "BLINK_DURATION_MAX_S": "60",
            "ZEROGPU_OFFLOAD_DIR": str(tmp_path_factory.mktemp("zerogpu-offload")),
            "HOME": str(tmp_path_factory.mktemp("zerogpu-home")),
            "TOKENIZERS_PARALLELISM": "false",
        }
        with running(
            [str(zerogpu_python), str(ROOT / "ci" / "tests" / "zerogpu_entry.py")],
            demo_root,
            env=env,
            name=f"space-zerogpu-{setting}-{packed}",
        ) as url:
            yield url, fake, setting, size


def test_a_call_is_charged_as_the_platform_says(charged_space):
    url, fake, setting, size = charged_space
    factor = 1.0 if size == "xlarge" else 1.5
    multiplier = 2.0 if size == "xlarge" else 1.5
    health = httpx.get(url + "/healthz", timeout=10).json()
    assert health["gpu_size"] == size and health["gpu_size_setting"] == setting
    charge = health["gpu_seconds"]["charge"]
    assert charge["card"] == BLACKWELL and charge["source"] == "platform"
    assert charge["duration_factor"] == 1.5 and charge["charged_per_requested_s"] == multiplier
    assert charge["xlarge_threshold_bytes"] == THRESHOLD

    for _ in range(2):  # the first call cold (its need is past the cap), the second warm
        mark = fake.mark()
        r = httpx.post(url + "/v1/systemone", json=DECISION, timeout=120)
        assert r.status_code == 200, r.text
        (schedule,) = fake.since(mark, "/schedule")
        params = schedule["params"]
        ledger = httpx.get(url + "/healthz", timeout=10).json()["gpu_seconds"]["decide"]
        asked, sent = ledger["last_requested_s"], int(params["durationSeconds"])
        assert sent == round(asked * factor) == ledger["last_scheduled_s"]  # spaces' own arithmetic
        assert ledger["last_charged_s"] == sent * (2 if size == "xlarge" else 1) <= 60  # within the cap
        # `auto` leaves the size to the platform: no gpuSize is sent, and the scheduler applies its own rule
        assert params.get("gpuSize") == (None if setting == "auto" else setting)

    # the UI's API tab says the same, in words
    snippets, *_ = page_call(url, "ui_load")
    assert f"ZeroGPU `{size}`" in snippets and BLACKWELL in snippets
    assert ("charged 2 x N s" if size == "xlarge" else "charged 1.5 x N s") in snippets
