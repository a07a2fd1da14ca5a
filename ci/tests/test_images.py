"""Images on the vision demo model's server (one for the module): TypeSafe assets (multipart and JSON base64), data
URIs, the images list and the first layout, bad assets and a decompression bomb refused naming the asset, OpenAI's
image parts (decisions and chat) and the text model's refusal of them, a borrowed vision tower, and chat's decode
loop against transformers' generate. The image limits and what decoding costs: test_image_limits.py."""

from __future__ import annotations

import base64
import io
import struct
import tracemalloc
import zlib

import httpx
import pytest
from PIL import Image as PILImage
from typesafe_sdk import Choice, Image, Noul, TypeSafeClient

from helpers import blink_serve, png, running
from helpers.images import QUESTIONS, vision_serve

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def huge_png_header(width=50_000, height=50_000) -> bytes:
    """A PNG that declares 50,000 x 50,000 pixels in a few hundred bytes (its data is a few rows)."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * (width * 3 + 1) * 2, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def vision_server(vision_root):
    with running(vision_serve(), vision_root, name="serve-vision") as url:
        yield url


def probabilities(response) -> dict:
    assert response.status_code == 200, response.text
    answers = response.json()["answers"]
    return {"red": answers["red"]["noul"], **answers["kind"]["probabilities"]}


def close(a: dict, b: dict) -> bool:
    return all(abs(a[k] - b[k]) < 1e-5 for k in a)


def test_same_image_four_ways_same_probabilities(vision_server, monkeypatch):
    data = png(noise=True)  # ~180 KB: the SDK sends multipart, zstd-compressed
    monkeypatch.setenv("TYPESAFE_BASE_URL", vision_server)
    monkeypatch.setenv("TYPESAFE_API_KEY", "k")
    with TypeSafeClient() as client:
        r = client.system_one(
            state={"photo": Image(data), "note": "What arrived today"},
            questions={
                "red": Noul(instructions="Is the photo mostly red?"),
                "kind": Choice(instructions="What is it?", criteria={"parcel": None, "letter": None}),
            },
        )
    via_sdk = {"red": r.nouls["red"].noul, **r.choices["kind"].probabilities}
    assert r.usage.input_tokens > 0

    b64 = base64.b64encode(data).decode()
    as_asset = httpx.post(
        vision_server + "/v1/systemone",
        timeout=60,
        json={
            "state": {"photo": "<image:p1>", "note": "What arrived today"},
            "questions": QUESTIONS,
            "assets": {"<image:p1>": {"type": "image", "format": "png", "data_base64": b64}},
        },
    )
    as_uri = httpx.post(
        vision_server + "/v1/systemone",
        timeout=60,
        json={"state": {"photo": f"data:image/png;base64,{b64}", "note": "What arrived today"}, "questions": QUESTIONS},
    )
    assert close(via_sdk, probabilities(as_asset))
    assert close(via_sdk, probabilities(as_uri))
    usage = as_asset.json()["usage"]
    assert usage["image_pixels"] > 0 and usage["visual_tokens"] > 0


def test_text_only_response_shape_unchanged(vision_server):
    r = httpx.post(vision_server + "/v1/systemone", json={"state": "no images here", "questions": QUESTIONS})
    assert r.status_code == 200 and set(r.json()["usage"]) == {"input_tokens", "output_tokens"}
    assert httpx.get(vision_server + "/healthz").json()["accepts_images"] is True


@pytest.mark.parametrize(
    "case, expect",
    [
        ("unreferenced", "not referenced"),
        ("not an image", "not a PNG or JPEG"),
        ("corrupt", "corrupt"),
        ("bad base64", "base64"),
        ("gif", "send PNG or JPEG"),
    ],
)
def test_bad_assets_are_4xx_naming_the_asset(vision_server, case, expect):
    good = base64.b64encode(png()).decode()
    gif = io.BytesIO()
    PILImage.new("RGB", (10, 10)).save(gif, "GIF")
    data = {
        "unreferenced": good,
        "not an image": base64.b64encode(b"hello world").decode(),
        "corrupt": base64.b64encode(png()[:80]).decode(),
        "bad base64": "!!!",
        "gif": base64.b64encode(gif.getvalue()).decode(),
    }[case]
    state = "a photo" if case == "unreferenced" else "photo: <image:x>"
    r = httpx.post(
        vision_server + "/v1/systemone",
        json={
            "state": state,
            "questions": QUESTIONS,
            "assets": {"<image:x>": {"type": "image", "format": "png", "data_base64": data}},
        },
    )
    assert 400 <= r.status_code < 500, r.text
    assert "<image:x>" in r.json()["error"] and expect in r.json()["error"]


def test_unclaimed_multipart_part_is_refused(vision_server):
    import json

    files = {
        "request": (None, json.dumps({"state": "s", "questions": QUESTIONS}), "application/json"),
        "asset-0": ("asset-0", png(), "image/png"),
    }
    r = httpx.post(vision_server + "/v1/systemone", files=files)
    assert r.status_code == 422 and "asset-0" in r.json()["error"]


def test_decompression_bomb_refused_before_decoding(vision_server):
    bomb = huge_png_header()
    assert len(bomb) < 8 * 1024  # a few KB declaring 2.5 billion pixels
    r = httpx.post(
        vision_server + "/v1/systemone",
        json={
            "state": "photo: <image:b>",
            "questions": QUESTIONS,
            "assets": {"<image:b>": {"type": "image", "format": "png", "data_base64": base64.b64encode(bomb).decode()}},
        },
    )
    assert r.status_code == 422 and "--max-image-source-pixels" in r.json()["error"]
    # the same check in-process, with the peak allocation measured: the pixels are never allocated
    from blink.errors import InvalidRequest
    from blink.images.intake import ImageLimits, decode

    tracemalloc.start()
    with pytest.raises(InvalidRequest):
        decode("<image:b>", bomb, ImageLimits())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 2 * 1024 * 1024, peak  # decoding would need 7.5 GB


def test_images_list_and_first_layout(vision_root):
    b64 = base64.b64encode(png()).decode()
    with running(vision_serve("--image-layout", "first"), vision_root, name="serve-vision-first") as url:
        listed = httpx.post(
            url + "/v1/systemone", json={"state": "What arrived today", "questions": QUESTIONS, "images": [b64]}
        )
        inline = httpx.post(
            url + "/v1/systemone",
            json={
                "state": "<image:p>What arrived today",
                "questions": QUESTIONS,
                "assets": {"<image:p>": {"type": "image", "format": "png", "data_base64": b64}},
            },
        )
        assert listed.status_code == 200 and inline.status_code == 200
        assert listed.json()["usage"]["visual_tokens"] == inline.json()["usage"]["visual_tokens"] > 0


def test_openai_decisions_input_image_matches_systemone(vision_server):
    from openai import OpenAI

    b64 = base64.b64encode(png()).decode()
    client = OpenAI(base_url=vision_server + "/v1", api_key="unused")
    d = client.decisions.create(
        model="demo-vision",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": f"data:image/png;base64,{b64}"},
                    {"type": "input_text", "text": "What arrived today"},
                ],
            }
        ],
        questions=[
            {"type": "predicate", "name": "red", "instructions": "Is the photo mostly red?"},
            {
                "type": "choice",
                "name": "kind",
                "instructions": "What is it?",
                "choices": [{"value": "parcel"}, {"value": "letter"}],
            },
        ],
    )
    via_openai = {"red": d.answers[0].probability, **{p.value: p.probability for p in d.answers[1].probabilities}}
    native = httpx.post(
        vision_server + "/v1/systemone",
        timeout=60,
        json={
            "state": "<image:p>\nWhat arrived today",
            "questions": QUESTIONS,
            "assets": {"<image:p>": {"type": "image", "format": "png", "data_base64": b64}},
        },
    )
    assert close(via_openai, probabilities(native))


def test_text_model_refuses_openai_image_parts(server):
    r = httpx.post(
        server + "/v1/decisions",
        json={
            "model": "demo",
            "input": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "input_image",
                            "image_url": "data:image/png;base64," + base64.b64encode(png()).decode(),
                        }
                    ],
                }
            ],
            "questions": [{"type": "predicate", "instructions": "Red?"}],
        },
    )
    assert r.status_code == 400 and "text only" in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == "input[0].content[0]"  # the part, not System One's `assets`


def test_borrowed_vision_tower_matches_the_model_that_owns_it(vision_root, vision_server):
    """A text model + the vision tower of a matching base (`--vision-tower repo@revision`; a local folder
    here). The text demo's language weights equal the vision demo's, so the answers must be the same."""
    tower = f"{vision_root / 'demo-vision-model'}@local"
    body = {
        "state": {"photo": "<image:p>"},
        "questions": QUESTIONS,
        "assets": {"<image:p>": {"type": "image", "format": "png", "data_base64": base64.b64encode(png()).decode()}},
    }
    own = probabilities(httpx.post(vision_server + "/v1/systemone", json=body, timeout=60))
    with running(blink_serve("--vision-tower", tower), vision_root, name="serve-borrowed-tower") as url:
        assert httpx.get(url + "/healthz").json()["accepts_images"] is True
        borrowed = probabilities(httpx.post(url + "/v1/systemone", json=body, timeout=60))
    assert close(own, borrowed)


def test_chat_with_an_image_on_the_vision_model(vision_server):
    from openai import OpenAI

    client = OpenAI(base_url=vision_server + "/v1", api_key="unused")
    url = "data:image/png;base64," + base64.b64encode(png()).decode()
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": url}},
                {"type": "text", "text": "What is in the picture?"},
            ],
        }
    ]
    out = client.chat.completions.create(model="demo-vision", messages=messages, max_tokens=6, temperature=0)
    assert out.choices[0].finish_reason in ("length", "stop")
    # the prompt holds the image tokens: far more prompt tokens than the text alone
    text_only = client.chat.completions.create(
        model="demo-vision",
        max_tokens=1,
        temperature=0,
        messages=[{"role": "user", "content": "What is in the picture?"}],
    )
    assert out.usage.prompt_tokens > text_only.usage.prompt_tokens
    # streamed, the same greedy text
    streamed = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model="demo-vision", messages=messages, max_tokens=6, temperature=0, stream=True
        )
        if c.choices
    )
    assert streamed == out.choices[0].message.content


def test_chat_image_on_the_vision_model_equals_transformers_generate(vision_root):
    """The hand-written decode loop with Qwen's 3-D positions equals transformers' own greedy generate."""
    import torch

    from blink.generate.chat_engine import ChatEngine
    from blink.model.loading import load
    from blink.plan import GenerationParams

    loaded = load("demo-vision", vision=True)
    engine = ChatEngine(loaded)
    blocks = [
        {"type": "image", "data_base64": base64.b64encode(png()).decode(), "loc": ["messages", 0, "content", 0]},
        {"type": "text", "text": "Describe it"},
    ]
    rendered = engine.prepare([{"role": "user", "content": blocks}], None, 8)
    items = list(engine.generate(rendered.ids, GenerationParams(max_tokens=8, temperature=0, images=rendered.images)))
    ours = [i for i in items if isinstance(i, str)]
    ids = torch.tensor([rendered.ids])
    with torch.no_grad():
        ref = loaded.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=8,
            do_sample=False,
            pixel_values=torch.cat([i.pixel_values for i in rendered.images]),
            image_grid_thw=torch.tensor([i.grid_thw for i in rendered.images]),
            mm_token_type_ids=(ids == loaded.model.config.image_token_id).int(),
        )
    expected = loaded.tokenizer.decode(ref[0, ids.shape[1] :], skip_special_tokens=False)
    assert "".join(ours) == expected.split("<|im_end|>")[0].replace("<|endoftext|>", "")


def test_text_model_refuses_chat_images(server):
    r = httpx.post(
        server + "/v1/chat/completions",
        json={
            "model": "demo",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/png;base64," + base64.b64encode(png()).decode()},
                        }
                    ],
                }
            ],
        },
    )
    assert r.status_code == 400 and "text only" in r.json()["error"]["message"]


@pytest.mark.parametrize("route", ["/v1/systemone", "/v1/decisions"])
def test_an_extreme_aspect_ratio_is_a_4xx_naming_the_asset(vision_server, route):
    """A 690-byte 32 x 6,500 PNG: the vision processor refuses past 200:1 (it was a 500 with a traceback)."""
    b64 = base64.b64encode(png(size=(32, 6500))).decode()
    if route == "/v1/systemone":
        r = httpx.post(
            vision_server + route,
            timeout=60,
            json={
                "state": "photo: <image:tall>",
                "questions": QUESTIONS,
                "assets": {"<image:tall>": {"type": "image", "format": "png", "data_base64": b64}},
            },
        )
        assert 400 <= r.status_code < 500 and "<image:tall>" in r.json()["error"], r.text[:300]
        assert r.json()["detail"][0]["type"] == "image_aspect_ratio"
    else:
        r = httpx.post(
            vision_server + route,
            timeout=60,
            json={
                "model": "demo-vision",
                "questions": [{"type": "predicate", "name": "q", "instructions": "Red?"}],
                "input": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_image", "image_url": f"data:image/png;base64,{b64}"},
                            {"type": "input_text", "text": "a photo"},
                        ],
                    }
                ],
            },
        )
        assert r.status_code == 400 and "ratio" in r.json()["error"]["message"], r.text[:300]
        assert r.json()["error"]["param"] == "input[0].content[0]", r.text[:300]  # names the part
    assert httpx.get(vision_server + "/healthz", timeout=10).json()["ok"] is True
