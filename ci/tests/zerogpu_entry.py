"""Runs app.py in ZeroGPU mode on a machine without a GPU (test code only, never part of the Space).

Run with .venv-zerogpu's python (a CUDA build of torch: ZeroGPU mode cannot import with a CPU build),
SPACES_ZERO_GPU=true and SPACES_ZERO_DEVICE_API_URL pointing at ci/tests/fake_zerogpu.py's scheduler.

Everything of `spaces` is real (torch emulation in the main process, packing hook, scheduling, queueing,
fork, pickling, worker reuse, error mapping, duration conversion) except the worker's three device steps,
replaced by a CPU stand-in (research/space-platform.md §8): `init` (CUDA init) is a no-op, `pack` packs
nothing, and `move` points every emulated CUDA tensor at its CPU original instead of copying it to a GPU.

Two test knobs stand in for the card the Space would find: `ZEROGPU_TEST_CARD` is the model name `spaces` reads
from the NVIDIA driver (`/proc/driver/nvidia/gpus/*/information`) to pick its entry of `spaces/zero/configs.json`
(its `duration_factor` and `xlarge_threshold`), and `ZEROGPU_TEST_PACKED_BYTES` is the size `pack` reports
(what the platform compares with the threshold to make `xlarge` its default size).
"""

import os
import runpy
import sys
from pathlib import Path

assert os.environ.get("SPACES_ZERO_GPU", "").lower() == "true", "run with SPACES_ZERO_GPU=true"

import spaces  # noqa: E402,F401 - ZeroGPU mode: patches torch
import spaces.zero.torch as zero_torch  # noqa: E402
import torch  # noqa: E402
from spaces.zero.torch import patching  # noqa: E402


def init(nvidia_uuid: str) -> None:
    pass


def pack() -> int:
    return int(os.environ.get("ZEROGPU_TEST_PACKED_BYTES", "0"))


def move(callback=None) -> None:
    for fake, original in patching.cuda_aliases.items():
        if original is not None:
            fake.data = torch.Tensor(original)


for module in (zero_torch, patching):
    module.init, module.pack, module.move = init, pack, move

if os.environ.get("ZEROGPU_TEST_CARD"):
    from spaces.zero import config as zero_config

    card = os.environ["ZEROGPU_TEST_CARD"]
    zero_config._read_gpu_information = lambda: f"Model: \t {card}\nIRQ: 0\n"
    zero_config.get_config.cache_clear()
    assert zero_config.get_config()["model"] == card, f"no entry for {card} in spaces' configs.json"

app = Path(__file__).resolve().parents[2] / "app.py"
sys.argv = [str(app)]
runpy.run_path(str(app), run_name="__main__")
