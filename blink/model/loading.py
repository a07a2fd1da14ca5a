"""Model loading: a Hub repo at a revision, a local folder, or the demo model; optional LoRA merged on CPU.

Order matters and is the reason this module exists:
1. a local folder (or the demo model) switches the Hub libraries offline BEFORE they are first imported
   (they read the variables once, at import);
2. `weights.sha256` beside the weights: every listed file is hashed before anything is served;
3. on a machine without CUDA, flash-linear-attention is blocked before the model class is imported (with
   triton installed its kernels are picked and the first CPU forward crashes);
4. base + adapter are assembled and merged on CPU, then moved to the device once (ZeroGPU intercepts
   `.to("cuda")` at module scope, but PEFT's own loading would allocate real CUDA memory);
5. fp32 on CPU, bf16 on GPU.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from blink.errors import StartupError
from blink.executor.passes import fla_version
from blink.logs import quiet_cpu_kernels

log = logging.getLogger("blink")

OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY")


class WeightsMismatch(StartupError):
    pass


def is_local(model: str) -> bool:
    return model in ("demo", "demo-vision") or os.path.isdir(model)


def go_offline_if_local(model: str) -> None:
    """Call before importing transformers/huggingface_hub: serving local weights never touches the network."""
    if is_local(model):
        for var in OFFLINE_VARS:
            os.environ.setdefault(var, "1")


def hub_offline() -> bool | None:
    """The offline setting the Hub library actually uses (it read the environment at import)."""
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except Exception:  # noqa: BLE001 - reported as unknown
        return None


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_weights(root: Path) -> bool | None:
    """True when every file listed in `weights.sha256` ("<hex>  <name>" lines) matches; None without one.
    A mismatch or a missing file refuses to start."""
    manifest = root / "weights.sha256"
    if not manifest.exists():
        return None
    bad = []
    for line in manifest.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        digest, name = line.split(None, 1)
        path = root / name.strip().lstrip("*")
        if not path.is_file() or sha256(path) != digest.lower():
            bad.append(name.strip())
    if bad:
        raise WeightsMismatch(f"weights.sha256 mismatch in {root}: {', '.join(bad)}")
    return True


def resolve(model: str, revision: str | None) -> Path:
    if model in ("demo", "demo-vision"):
        from blink.model.demo import demo_model_dir

        return demo_model_dir(vision=model == "demo-vision")
    if os.path.isdir(model):
        return Path(model)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(model, revision=revision))
    except Exception as error:  # noqa: BLE001 - any way the Hub fails, said in one line (not its traceback)
        raise StartupError(not_found(model, revision, error)) from None


def not_found(model: str, revision: str | None, error: Exception) -> str:
    """One line for a model that is neither a local folder nor a Hub repo we could fetch: what was tried, why it
    failed (the Hub's first line), and what to do."""
    from huggingface_hub import constants

    repo = f"{model}@{revision}" if revision else model
    folder = f"no folder {os.path.abspath(os.path.expanduser(model))}"
    if model.startswith((".", "/", "~")) or model.count("/") > 1:  # a path, not a repo id: the Hub's word is noise
        return f"--model {model}: not found ({folder}); check the path (a folder with config.json and the weights)"
    first = (str(error).strip().splitlines() or [""])[0]
    reason = f"{type(error).__name__}: {first.split('. ')[0].rstrip('.')[:160]}"
    tried = f"{folder}, Hub repo {repo}"
    if constants.HF_HUB_OFFLINE:
        fetch = f"hf download {model}" + (f" --revision {revision}" if revision else "")
        hint = "the Hub is offline here (HF_HUB_OFFLINE=1): only a repo already in the cache loads; fetch it first "
        hint += f"(`{fetch}`) or give --model a local folder"
    else:
        hint = "check the repo id and revision; a private or gated repo needs HF_TOKEN; offline, give --model a "
        hint += "local folder"
    return f"--model {model}: not found ({tried}; {reason}). {hint}"


def without_weights(root: Path):
    """The model's structure on the meta device (no memory, no weights read): its config, generation config and
    module layout, for a process whose forward passes run elsewhere (vLLM)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(root))
    try:
        lm.generation_config = GenerationConfig.from_pretrained(root)
    except OSError:  # none saved: the config's defaults
        pass
    return lm.eval()


def block_fla_without_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        for name in ("fla", "causal_conv1d"):
            sys.modules.setdefault(name, None)  # `import fla` now raises ImportError: transformers falls back
        quiet_cpu_kernels()  # and its advice to install those GPU kernels is no advice here


@dataclass
class Loaded:
    model: object
    tokenizer: object
    root: Path
    info: dict = field(default_factory=dict)
    processor: object = None  # the image processor of a vision model; None for text only


def merge_adapter_on_cpu(model, adapter: str, revision: str | None):
    """PEFT picks its load device from torch.cuda.is_available(), which ZeroGPU patches to True; tell it
    the truth while it loads, so the adapter lands on CPU with the model, then merge."""
    import torch
    from peft import PeftModel

    patched = torch.cuda.is_available
    torch.cuda.is_available = lambda: False
    try:
        with _fail_on_missing_adapter_keys():
            peft_model = PeftModel.from_pretrained(model, adapter, revision=revision)
        return peft_model.merge_and_unload()
    finally:
        torch.cuda.is_available = patched


class _fail_on_missing_adapter_keys(logging.Handler):
    """An adapter trained on another model class loads with only a warning and is silently not applied."""

    def __enter__(self):
        self.seen = []
        self.targets = [logging.getLogger("peft"), logging.getLogger("peft.utils.save_and_load")]
        for logger in self.targets:
            logger.addHandler(self)
        import warnings

        self._warnings = warnings.catch_warnings(record=True)
        self.caught = self._warnings.__enter__()
        warnings.simplefilter("always")
        return self

    def emit(self, record):
        self.seen.append(record.getMessage())

    def __exit__(self, *exc):
        for logger in self.targets:
            logger.removeHandler(self)
        self._warnings.__exit__(*exc)
        messages = self.seen + [str(w.message) for w in self.caught]
        missing = [m for m in messages if "missing adapter keys" in m.lower()]
        if missing and exc[0] is None:
            raise StartupError(f"the adapter does not fit this model class: {missing[0][:300]}")
        return False


def load(
    model: str,
    revision: str | None = None,
    adapter: str | None = None,
    adapter_revision: str | None = None,
    device: str | None = None,
    vision: bool = False,
    vision_tower: str | None = None,
    max_image_pixels: int | None = None,
    weights: bool = True,
) -> Loaded:
    """`max_image_pixels` (vision models): the processor's final resize is capped there, so what the model sees
    (`image_pixels`) never exceeds --max-image-pixels, in decisions and chat alike (default: ImageLimits').
    `weights=False`: tokenizer, templates and config only, the model on the meta device (see `without_weights`)."""
    go_offline_if_local(model)
    import torch

    block_fla_without_cuda()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = resolve(model, revision)  # whole, weights too: the calibration check fingerprints them (unread on the Hub)
    if not (root / "config.json").is_file():
        raise StartupError(f"--model {model}: {root} holds no config.json: not a model folder")
    try:
        tokenizer = AutoTokenizer.from_pretrained(root)
    except (OSError, ValueError) as error:  # a folder that holds no model (or not all of one)
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise StartupError(f"--model {model}: {root} cannot be loaded: {type(error).__name__}: {first}") from None
    if tokenizer.pad_token_id is None:  # left padding needs one; the end-of-sequence token serves
        tokenizer.pad_token = tokenizer.eos_token
    if not weights:
        info = {"model": model, "revision": revision, "adapter": None, "weights_verified": None}
        info |= {"hub_offline": hub_offline(), "device": "none (no weights loaded)", "dtype": None, "kernels": None}
        return Loaded(without_weights(root), tokenizer, root, {**info, "accepts_images": False, "vision_tower": None})
    verified = verify_weights(root)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    processor = None
    if vision or vision_tower:
        from blink.executor.vision import load_processor, load_vision_model

        if max_image_pixels is None:
            from blink.images.intake import ImageLimits

            max_image_pixels = ImageLimits.max_image_pixels
        lm, processor_dir = load_vision_model(root, vision_tower, dtype)
        processor = load_processor(processor_dir, tokenizer, max_image_pixels)
    else:
        lm = AutoModelForCausalLM.from_pretrained(root, dtype=dtype)
    if adapter:
        lm = merge_adapter_on_cpu(lm, adapter, adapter_revision)
    lm = lm.to(device).eval()
    fla = fla_version()
    kernels = (
        f"flash-linear-attention {fla}"
        if fla
        else "reference PyTorch"
        if device == "cpu"  # nothing faster to install on CPU
        else "reference PyTorch (much slower on GPU; install flash-linear-attention there)"
    )
    info = {
        "model": model,
        "revision": revision,
        "adapter": adapter,
        "weights_verified": verified,
        "hub_offline": hub_offline(),
        "device": str(device),
        "dtype": str(dtype).removeprefix("torch."),
        "kernels": kernels,
        "accepts_images": processor is not None,
        "vision_tower": vision_tower,
    }
    log.info("loaded %s (%s, %s, %s)", model, device, info["dtype"], kernels)
    return Loaded(lm, tokenizer, root, info, processor)


def versions() -> dict:
    out = {}
    for name in ("torch", "transformers", "fla", "peft"):
        try:
            out[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001
            out[name] = None
    return out
