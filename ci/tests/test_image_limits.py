"""Image limits and what decoding costs: --max-images, --max-image-bytes and --max-image-pixels name themselves (a
vision server of their own); decoding changes no process-wide PIL setting and the pixel cap is the processor's from
loading; two noisy 2,000 x 2,000 PNGs decode inside the request's memory budget, and the memory comes back.
Images on the vision server's wires: test_images.py."""

from __future__ import annotations

import base64

import httpx
import pytest

from helpers import png, running
from helpers.images import QUESTIONS, vision_serve

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_limits_name_themselves(vision_root):
    argv = vision_serve("--max-images", "1", "--max-image-bytes", "4096", "--max-image-pixels", "65536")
    small = base64.b64encode(png(size=(40, 40))).decode()
    with running(argv, vision_root, name="serve-vision-limits") as url:
        two = httpx.post(
            url + "/v1/systemone",
            json={
                "state": "<image:a> and <image:b>",
                "questions": QUESTIONS,
                "assets": {
                    n: {"type": "image", "format": "png", "data_base64": small} for n in ("<image:a>", "<image:b>")
                },
            },
        )
        assert two.status_code == 422 and "--max-images" in two.json()["error"]
        big = httpx.post(
            url + "/v1/systemone",
            json={
                "state": "<image:a>",
                "questions": QUESTIONS,
                "assets": {
                    "<image:a>": {
                        "type": "image",
                        "format": "png",
                        "data_base64": base64.b64encode(png(size=(200, 200), noise=True)).decode(),
                    }
                },
            },
        )
        assert big.status_code == 413 and "--max-image-bytes" in big.json()["error"]
        wide = png(size=(1000, 500))  # compresses well: under 4 KB, but 500,000 pixels
        assert len(wide) < 4096
        resized = httpx.post(
            url + "/v1/systemone",
            json={
                "state": "<image:a>",
                "questions": QUESTIONS,
                "assets": {
                    "<image:a>": {"type": "image", "format": "png", "data_base64": base64.b64encode(wide).decode()}
                },
            },
        )
        assert resized.status_code == 200 and resized.json()["usage"]["image_pixels"] <= 65536


def test_image_decoding_leaves_pil_settings_alone(vision_root):
    """Importing and using blink's image code changes no process-wide PIL setting (the bomb limit is ours,
    checked from the header), and the pixel cap is the processor's from loading, not set later by the engine
    (`vision_root`: demo-vision, which it loads by name, built)."""
    from PIL import Image

    from blink.decide.planner import Engine
    from blink.images.intake import ImageLimits, decode
    from blink.model.loading import load

    default = Image.MAX_IMAGE_PIXELS
    assert default is not None
    decode("<image:a>", png(size=(40, 40)), ImageLimits())
    assert Image.MAX_IMAGE_PIXELS == default
    loaded = load("demo-vision", vision=True, max_image_pixels=65536)
    assert loaded.processor.image_processor.size["longest_edge"] == 65536
    Engine(loaded, image_limits=ImageLimits(max_image_pixels=4 * 65536))
    assert loaded.processor.image_processor.size["longest_edge"] == 65536


def rss_bytes() -> int:
    for line in open("/proc/self/status").read().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def test_image_decoding_memory_is_bounded_and_given_back():
    """Two noisy 2,000 x 2,000 PNGs (what a client can send inside the byte limit) decoded as a request is:
    the process's RSS peak (sampled; PIL allocates outside Python's tracer) stays inside the request's stated
    budget, and the memory comes back afterwards."""
    import threading

    from blink.images.guard import DecodeBudget
    from blink.images.intake import ImageLimits, decode_all
    from blink.memory import give_back_memory

    raw = {f"<image:{i}>": png(size=(2000, 2000), noise=True) for i in range(2)}
    limits = ImageLimits(max_image_bytes=64 * 2**20)
    give_back_memory()
    before = peak = rss_bytes()
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_bytes())
            done.wait(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    images = decode_all(raw, limits)
    done.set()
    sampler.join()
    assert all(image.size[0] * image.size[1] <= limits.max_image_pixels for image in images.values())
    del images
    give_back_memory()
    kept = rss_bytes() - before
    assert peak - before < DecodeBudget.request_bytes, (peak - before) / 2**20
    assert kept < 100 * 2**20, kept / 2**20
