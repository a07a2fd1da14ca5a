"""The two requirement files: the Space's GPU runtime (requirements.txt) and the CPU tests' (ci/requirements.txt),
both pinned with ==, agreeing on every shared pin, with a torch ZeroGPU offers."""

from __future__ import annotations

import re
from pathlib import Path

from . import ROOT, ConfigError

CPU_REQUIREMENTS = ROOT / "ci" / "requirements.txt"
GPU_REQUIREMENTS = ROOT / "requirements.txt"
ZEROGPU_TORCH = ("2.8.0", "2.9.1", "2.10.0", "2.11.0")  # the torch versions ZeroGPU lists
TORCHVISION_FOR = {"2.8.0": "0.23.0", "2.9.1": "0.24.1", "2.10.0": "0.25.0", "2.11.0": "0.26.0"}
SPACE_NEEDS = (
    "spaces",
    "transformers",
    "flash-linear-attention",
    "peft",
    "safetensors",
    "huggingface-hub",
    "fastapi",
    "uvicorn",
)


def read_pins(path: Path) -> dict[str, str]:
    """name -> version for every `name==version` line (names normalised as pip does)."""
    pins = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;]+)", line)
        if not m:
            raise ConfigError(path.name, line, "not pinned with ==")
        pins[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(3)
    return pins


def check_requirements() -> str:
    """Both requirement files pinned, shared pins equal, torch on ZeroGPU's list; returns the Gradio pin."""
    for path in (GPU_REQUIREMENTS, CPU_REQUIREMENTS):
        if not path.is_file():
            raise ConfigError(str(path.relative_to(ROOT)), None, "missing")
    gpu, cpu = read_pins(GPU_REQUIREMENTS), read_pins(CPU_REQUIREMENTS)
    for name in sorted(set(gpu) & set(cpu)):
        if gpu[name] != cpu[name]:
            raise ConfigError(
                "requirements.txt", name, f"=={gpu[name]} disagrees with ci/requirements.txt =={cpu[name]}"
            )
    if "gradio" not in cpu:
        raise ConfigError("ci/requirements.txt", "gradio", "not pinned (the Spaces' sdk_version comes from it)")
    if "gradio" in gpu:
        raise ConfigError("requirements.txt", "gradio", "leave gradio out: the README's sdk_version installs it")
    if gpu.get("torch") not in ZEROGPU_TORCH:
        raise ConfigError(
            "requirements.txt", "torch", f"=={gpu.get('torch')} is not a ZeroGPU torch ({', '.join(ZEROGPU_TORCH)})"
        )
    if "torchvision" in gpu and gpu["torchvision"] != TORCHVISION_FOR[gpu["torch"]]:
        raise ConfigError(
            "requirements.txt",
            "torchvision",
            f"=={gpu['torchvision']} does not match torch=={gpu['torch']} (use =={TORCHVISION_FOR[gpu['torch']]})",
        )
    if "fla-core" in gpu and gpu["fla-core"] != gpu.get("flash-linear-attention"):
        raise ConfigError("requirements.txt", "fla-core", "must equal the flash-linear-attention version")
    for name in SPACE_NEEDS:
        if name not in gpu:
            raise ConfigError("requirements.txt", name, "missing")
    return cpu["gradio"]
