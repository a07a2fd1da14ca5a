"""Model loading: weights.sha256 checked before serving, local folders offline, LoRA merged on CPU."""

from __future__ import annotations

import shutil
import subprocess
import sys

import httpx
import pytest

from helpers import ROOT, blink_serve, running, server_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_weights_manifest_verified(tmp_path, demo_dir, demo_root):
    from blink.model.loading import sha256

    model = tmp_path / "model"
    shutil.copytree(demo_dir, model)
    (model / "weights.sha256").write_text(f"{sha256(model / 'model.safetensors')}  model.safetensors\n")
    argv = [sys.executable, "-m", "blink", "serve", "--model", str(model), "--port", "{port}"]
    with running(argv, demo_root, name="serve-verified") as url:
        health = httpx.get(url + "/healthz").json()
        assert health["weights_verified"] is True and health["hub_offline"] is True


def test_weights_mismatch_refuses_to_start(tmp_path, demo_dir, demo_root):
    model = tmp_path / "model"
    shutil.copytree(demo_dir, model)
    (model / "weights.sha256").write_text("0" * 64 + "  model.safetensors\n")
    proc = subprocess.run(
        [sys.executable, "-m", "blink", "serve", "--model", str(model), "--port", "1"],
        env=server_env(demo_root),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "weights.sha256 mismatch" in proc.stderr + proc.stdout and "model.safetensors" in proc.stderr + proc.stdout


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory, demo_dir):
    """A real LoRA adapter trained for a few steps on the demo model (offline)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("adapter")
    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(demo_dir),
        LoraConfig(r=4, lora_alpha=16, task_type="CAUSAL_LM", target_modules="all-linear", init_lora_weights=False),
    )
    model.save_pretrained(out)
    return out


def test_adapter_is_merged_and_applied(adapter_dir, demo_dir, demo_root, server):
    body = {"state": "The parcel never arrived.", "questions": {"late": {"type": "noul", "instructions": "Late?"}}}
    base = httpx.post(server + "/v1/systemone", json=body).json()["answers"]["late"]["noul"]
    with running(blink_serve("--adapter", str(adapter_dir)), demo_root, name="serve-adapter") as url:
        merged = httpx.post(url + "/v1/systemone", json=body).json()["answers"]["late"]["noul"]
        # /healthz names a local adapter by its folder, never by its path on the server
        assert httpx.get(url + "/healthz").json()["adapter"] == adapter_dir.name
    # the adapter's effect equals PEFT's own (unmerged) forward of the same prompt
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from blink.decide.planner import Engine
    from blink.model.loading import load

    engine = Engine(load(str(demo_dir)))
    prompt = engine.prepare(body).prompts[0]
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(demo_dir), adapter_dir).eval()
    import torch

    with torch.no_grad():
        logits = peft_model(input_ids=torch.tensor([prompt.ids])).logits[0, prompt.reads[0].position]
    yes, no = logits[prompt.reads[0].label_ids].softmax(-1).tolist()
    assert abs(merged - yes) < 1e-4
    assert abs(merged - base) > 1e-4  # and it is not the base model's answer


def test_without_weights_the_model_is_structure_only(demo_dir, tmp_path):
    """`serve --engine vllm` loads no weights: the model lives on the meta device, yet prompts render as with the
    weights (the same tokenizer, templates and config), and a corrupt weight file is never read."""
    from blink.decide.planner import DecisionPlanner, Engine
    from blink.generate.chat_engine import ChatEngine
    from blink.model.loading import load

    folder = tmp_path / "model"
    shutil.copytree(demo_dir, folder)
    (folder / "model.safetensors").write_bytes(b"not weights")
    bare = load(str(folder), weights=False)
    assert {p.device.type for p in bare.model.parameters()} == {"meta"}
    assert bare.info["device"] == "none (no weights loaded)"
    remote, local = DecisionPlanner(bare), Engine(load(str(demo_dir)))  # the planner alone: no executor to build
    assert not hasattr(remote, "executor")
    body = {"state": "A parcel is late.", "questions": {"late": {"type": "noul", "instructions": "Late?"}}}
    assert [p.ids for p in remote.prepare(body).prompts] == [p.ids for p in local.prepare(body).prompts]
    messages = [{"role": "user", "content": "Hello."}]
    assert ChatEngine(bare).render(messages).ids == ChatEngine(local.loaded).render(messages).ids


def startup(argv: list[str], demo_root, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv,
        env=server_env(demo_root, {"HF_HUB_OFFLINE": "1", **env}),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.parametrize(
    "model,says",
    [
        ("thegovind/blink-4bx", ["Hub repo", "HF_HUB_OFFLINE=1", "hf download thegovind/blink-4bx"]),
        ("./no-such-model", ["no folder", "no-such-model", "check the path"]),
        ("{empty}", ["holds no config.json"]),
    ],
)
def test_a_model_that_cannot_be_found_is_one_line(model, says, demo_root, tmp_path):
    """A misspelled repo, a missing or empty folder: one line that says what was tried and what to do, exit 1,
    on `serve` and on the Space alike (not the Hub library's 100-line traceback)."""
    model = model.replace("{empty}", str(tmp_path))
    serve = startup([sys.executable, "-m", "blink", "serve", "--model", model, "--port", "1"], demo_root)
    space = startup([sys.executable, str(ROOT / "app.py")], demo_root, BLINK_MODEL=model, GRADIO_SERVER_PORT="1")
    for proc in (serve, space):
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
        line = proc.stderr.strip().splitlines()[-1]
        assert model in line and all(s in line for s in says), line


def test_make_demo_model_writes_outside_the_checkout_unless_told(tmp_path):
    """Without DIR the model goes to the cache folder ($BLINK_DEMO_DIR here), named after its options, and its path
    is the only line on stdout (scripts capture it); an explicit DIR is still written where it says."""
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    env = {**server_env(tmp_path), "BLINK_DEMO_DIR": str(cache)}
    made = subprocess.run(
        [sys.executable, "-m", "blink", "make-demo-model", "--seed", "3"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    out = made.stdout.strip()
    assert out == str(cache / "made-demo-qwen3_5-seed3") and (cache / out / "config.json").is_file()
    assert not list(work.iterdir())
    explicit = subprocess.run(
        [sys.executable, "-m", "blink", "make-demo-model", "here", "--seed", "3"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert explicit.returncode == 0 and (work / "here" / "config.json").is_file(), explicit.stderr[-2000:]
