"""Crafted image files (made here with Pillow): every failure a 422 naming the asset, decoding inside its budget."""

from __future__ import annotations

import io
import struct
import threading
import time
import zlib

import pytest
from PIL import Image

from blink.errors import InvalidRequest
from blink.images import guard as image_guard

SOURCE_PIXELS = 20_000_000
MODEL_PIXELS = 1920 * 1088


def encoded(image: Image.Image, fmt: str = "PNG", **kw) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **kw)
    return out.getvalue()


def png(width: int, height: int, mode: str = "RGB") -> bytes:
    return encoded(Image.new(mode, (width, height), "red" if mode == "RGB" else 0))


def refused(data: bytes, name: str = "<img>") -> InvalidRequest:
    with pytest.raises(InvalidRequest) as error:
        image_guard.decode_all({name: data}, SOURCE_PIXELS, MODEL_PIXELS)
    assert error.value.status == 422 and name in error.value.message
    return error.value


def test_a_plain_image_decodes_to_rgb():
    images = image_guard.decode_all(
        {"<a>": png(64, 48), "<b>": encoded(Image.new("L", (40, 40)), "JPEG")}, SOURCE_PIXELS, MODEL_PIXELS
    )
    assert {k: (v.mode, v.size) for k, v in images.items()} == {"<a>": ("RGB", (64, 48)), "<b>": ("RGB", (40, 40))}


def test_an_extreme_aspect_ratio_is_refused_from_the_header():
    error = refused(png(32, 6500))
    assert (
        error.kind == "image_aspect_ratio" and "32x6500" in error.message and error.loc == ["body", "assets", "<img>"]
    )


def test_a_declared_pixel_bomb_is_refused_unread():
    # a 30,000 x 30,000 PNG header with a tiny (bogus) body: refused before a pixel is allocated
    header = b"\x89PNG\r\n\x1a\n"
    ihdr = struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    bomb = header + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + chunk(b"IEND", b"")
    assert refused(bomb).kind == "image_too_many_pixels"


def test_truncated_files_are_refused():
    whole = encoded(Image.effect_noise((256, 256), 50).convert("RGB"))
    assert refused(whole[: len(whole) // 2]).kind == "corrupt_image"
    jpeg = encoded(Image.effect_noise((256, 256), 50).convert("RGB"), "JPEG")
    assert refused(jpeg[: len(jpeg) // 2]).kind == "corrupt_image"


@pytest.mark.parametrize(
    "rider", [b"PK\x03\x04" + b"\0" * 100, b"<html><script>alert(1)</script></html>", b"%PDF-1.7\n"]
)
def test_polyglot_files_are_refused(rider):
    assert refused(png(32, 32) + rider).kind == "image_trailing_data"
    jpeg = encoded(Image.new("RGB", (32, 32), "blue"), "JPEG")
    assert refused(jpeg + rider).kind == "image_trailing_data"


def test_other_formats_and_non_images_are_refused():
    assert refused(encoded(Image.new("RGB", (8, 8)), "GIF")).kind == "unsupported_image"
    assert refused(encoded(Image.new("RGB", (8, 8)), "BMP")).kind == "unsupported_image"
    assert refused(b"GIF89a not really").kind == "not_an_image"
    assert refused(b"").kind == "not_an_image"


def test_the_request_budget_counts_every_image_before_any_is_decoded():
    decoded = []
    original = image_guard.decode
    image_guard.decode = lambda *a, **k: decoded.append(a) or original(*a, **k)
    try:
        with pytest.raises(InvalidRequest) as error:
            image_guard.decode_all(
                {f"<i{k}>": png(4000, 4000) for k in range(3)},
                SOURCE_PIXELS,
                MODEL_PIXELS,
                image_guard.DecodeBudget(request_bytes=200 * 2**20),
            )
    finally:
        image_guard.decode = original
    assert error.value.kind == "images_too_large" and decoded == []


def test_large_images_are_resized_to_what_the_model_sees():
    images = image_guard.decode_all(
        {"<p>": png(4000, 3000), "<j>": encoded(Image.new("RGB", (4000, 3000)), "JPEG")}, SOURCE_PIXELS, MODEL_PIXELS
    )
    for image in images.values():
        assert image.size[0] * image.size[1] <= MODEL_PIXELS


def test_decoding_is_bounded_in_concurrency():
    image_guard.set_concurrency(2)
    inside, peak, lock = [0], [0], threading.Lock()
    original = Image.Image.load

    def slow_load(self):
        with lock:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
        time.sleep(0.05)
        try:
            return original(self)
        finally:
            with lock:
                inside[0] -= 1

    Image.Image.load = slow_load
    try:
        threads = [
            threading.Thread(target=image_guard.decode_all, args=({"<x>": png(64, 64)}, SOURCE_PIXELS, MODEL_PIXELS))
            for _ in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        Image.Image.load = original
    assert peak[0] == 2
