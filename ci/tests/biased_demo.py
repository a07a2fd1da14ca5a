"""A copy of the demo model whose answers favour one label on purpose: a known bias added to that label's LM-head
row (test and benchmark helper for the content-free prior, blink.decide.prior; not a test file).

The demo model ties its LM head to its input embeddings, so the copy unties them (`lm_head.weight` written, the
config's `tie_word_embeddings` off) and edits only the head: row `label` gains `bias * h / |h|^2`, with `h` the mean
final hidden state over a few prompts' read positions, so the label's logit rises by about `bias` on any text
(exactly `bias` at `h`) while the prompts, which show the label token, read exactly as before.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

TEAMS = {"billing": "Charges and refunds", "shipping": "Late or lost parcels", "technical": "Devices", "other": None}
QUESTION = {"type": "choice", "instructions": "Which team should handle this?", "criteria": dict(TEAMS)}
PROBE_STATES = ("I was charged twice.", "My parcel is late.", "The router will not start.", "N/A", "Hello there")


def biased_copy(demo_dir: Path, out: Path, option: str = "billing", bias: float = 3.0) -> dict:
    """`demo_dir` copied to `out` with `option`'s label row of the choice question biased by about `bias` (nats);
    returns what was done: the label token id, the bias, the mean hidden state's norm."""
    import torch
    from safetensors.torch import load_file, save_file

    from blink.decide.planner import Engine
    from blink.model.loading import load

    engine = Engine(load(str(demo_dir)))
    prompts = [engine.prepare({"state": s, "questions": {"team": QUESTION}}).prompts[0] for s in PROBE_STATES]
    label = prompts[0].reads[0].label_ids[list(TEAMS).index(option)]
    model = engine.loaded.model
    hidden = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt.ids], device=model.device)
            states = model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0]
            hidden.append(states[prompt.reads[0].position].double().cpu())
    mean = torch.stack(hidden).mean(0)
    shutil.copytree(demo_dir, out, dirs_exist_ok=True)
    weights = load_file(str(out / "model.safetensors"))
    head = weights["model.embed_tokens.weight"].clone()
    head[label] += (bias * mean / mean.dot(mean)).to(head.dtype)
    weights["lm_head.weight"] = head.contiguous()
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((out / "config.json").read_text())
    config["tie_word_embeddings"] = False
    if isinstance(config.get("text_config"), dict):
        config["text_config"]["tie_word_embeddings"] = False
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for stale in ("weights.sha256", "calibration.json"):
        (out / stale).unlink(missing_ok=True)
    return {"label_id": int(label), "option": option, "bias": bias, "hidden_norm": float(mean.norm())}
