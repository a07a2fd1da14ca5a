"""Image checks that keep decoding inside a stated budget, and name the asset at fault when they refuse.

`blink.images.intake` gathers a request's image bytes; this module decides whether each may be decoded and decodes it
under the bounds (one hook: `images.load_images` calls `decode_all`):

- from the header alone, before a pixel is allocated: PNG or JPEG only, the sides' ratio (the Qwen vision
  processor refuses past 200:1, with a 500 today), the declared pixels, and what the decoded pixels will cost in
  memory, summed over the request against `request_bytes`;
- the file must be one image: bytes after a PNG's IEND are refused, and so is another format's signature after a
  JPEG's end (polyglot files: ZIP, PDF, HTML or script riding inside an "image");
- decoding itself: at most `concurrent` images at once in the process (so peak memory is bounded by
  concurrent x the largest image, and glibc's per-thread arenas don't grow with the number of clients), a
  truncated or corrupt file is a 422, and JPEGs are decoded at reduced scale (`draft`) when they are larger than
  what the model will see.

Per-request budget, stated: decoded pixels of one request at most `request_bytes` (default 256 MiB: two images
at the default 20-megapixel source limit, RGB), and at most `concurrent` x the largest image being decoded at
any moment across requests.
"""

from __future__ import annotations

import io
import math
import threading
from dataclasses import dataclass

from PIL import Image

from blink.errors import InvalidRequest

FORMATS = {"PNG": "png", "JPEG": "jpeg"}
PNG_END = b"IEND\xaeB`\x82"
FOREIGN = (
    b"PK\x03\x04",
    b"%PDF",
    b"<html",
    b"<HTML",
    b"<script",
    b"<svg",
    b"<?xml",
    b"\x89PNG",
    b"GIF8",
    b"\x7fELF",
    b"MZ",
)
BYTES_PER_SAMPLE = {
    "1": 1,
    "L": 1,
    "P": 1,
    "RGB": 3,
    "RGBA": 4,
    "CMYK": 4,
    "YCbCr": 3,
    "LA": 2,
    "I": 4,
    "F": 4,
    "I;16": 2,
    "I;16B": 2,
    "I;16L": 2,
    "PA": 2,
    "RGBa": 4,
    "La": 2,
}


@dataclass(frozen=True)
class DecodeBudget:
    max_ratio: float = 200.0  # longest side / shortest side (the vision processor's own bound)
    request_bytes: int = 256 * 2**20  # decoded memory all images of one request may take
    concurrent: int = 2  # images decoded at once in this process


@dataclass(frozen=True)
class Header:
    name: str
    format: str
    width: int
    height: int
    mode: str

    @property
    def pixels(self) -> int:
        return self.width * self.height

    def decoded_bytes(self) -> int:
        """The decoded image in its own mode plus its RGB copy (what `decode` holds at its peak)."""
        return self.pixels * (BYTES_PER_SAMPLE.get(self.mode, 4) + 3)


def open_header(data: bytes):
    """The image as PIL opens it, header read, pixels not yet decoded. PNG and JPEG are opened by their own
    plugins, which skip `Image.open`'s bomb check: that one reads a process-wide limit (left as it is) and raises
    a message naming no limit of ours; ours are checked next. Other formats are opened only to be named."""
    from PIL import JpegImagePlugin, PngImagePlugin  # noqa: F401 - the imports register the plugins

    for kind in FORMATS:
        factory, accept = Image.OPEN[kind]
        if accept(data[:16]) is True:
            return factory(io.BytesIO(data), "")
    return Image.open(io.BytesIO(data))


def refuse(name: str, message: str, kind: str) -> InvalidRequest:
    return InvalidRequest(f"asset {name!r} {message}", loc=["body", "assets", name], kind=kind)


def inspect(name: str, data: bytes, max_source_pixels: int, budget: DecodeBudget = DecodeBudget()) -> Header:
    """Everything that can be checked from the header and the file's ends, before decoding."""
    try:
        image = open_header(data)  # reads the header only
        fmt, (width, height), mode = image.format, image.size, image.mode
    except Exception:  # noqa: BLE001 - not an image at all
        raise refuse(name, "is not a PNG or JPEG image", "not_an_image") from None
    if fmt not in FORMATS:
        raise refuse(name, f"is {fmt}; send PNG or JPEG", "unsupported_image")
    if width < 1 or height < 1:
        raise refuse(name, f"declares {width}x{height} pixels", "image_empty")
    ratio = max(width, height) / min(width, height)
    if ratio >= budget.max_ratio:
        raise refuse(
            name,
            f"is {width}x{height}: its sides' ratio {ratio:.0f}:1 is past the {budget.max_ratio:.0f}:1 "
            "this server's vision model accepts",
            "image_aspect_ratio",
        )
    if width * height > max_source_pixels:
        raise refuse(
            name,
            f"declares {width}x{height} = {width * height} pixels; this server decodes at most "
            f"{max_source_pixels} (--max-image-source-pixels)",
            "image_too_many_pixels",
        )
    check_single_file(name, fmt, data)
    return Header(name, fmt, width, height, mode)


def check_single_file(name: str, fmt: str, data: bytes) -> None:
    """A polyglot (an image with another file riding behind it) is refused: nothing may follow a PNG's IEND
    chunk, and no other format's signature may follow a JPEG's last end-of-image marker."""
    if fmt == "PNG":
        end = data.rfind(PNG_END)
        if end < 0:
            raise refuse(name, "is a corrupt or truncated PNG (no IEND chunk)", "corrupt_image")
        if end + len(PNG_END) != len(data):
            raise refuse(
                name,
                f"has {len(data) - end - len(PNG_END)} bytes after its PNG end: send the image alone",
                "image_trailing_data",
            )
    elif fmt == "JPEG":
        end = data.rfind(b"\xff\xd9")
        if end < 0:
            raise refuse(name, "is a corrupt or truncated JPEG (no end-of-image marker)", "corrupt_image")
        trailer = data[data.find(b"\xff\xd9") + 2 :]
        for signature in FOREIGN:
            if signature in trailer:
                raise refuse(
                    name,
                    f"carries another file ({signature!r}) after its JPEG data: send the image alone",
                    "image_trailing_data",
                )


def check_request(headers: list[Header], budget: DecodeBudget = DecodeBudget()) -> None:
    total = sum(h.decoded_bytes() for h in headers)
    if total > budget.request_bytes:
        raise InvalidRequest(
            f"the request's images would take {total // 2**20} MiB decoded; this server decodes at "
            f"most {budget.request_bytes // 2**20} MiB of images per request: send fewer or smaller "
            "images",
            loc=["body", "assets"],
            kind="images_too_large",
        )


_decoding = threading.BoundedSemaphore(DecodeBudget.concurrent)


def set_concurrency(n: int) -> None:
    """How many images the process decodes at once (the server's setting, applied at startup)."""
    global _decoding
    _decoding = threading.BoundedSemaphore(n)


def decode(header: Header, data: bytes, max_pixels: int):
    """The checked RGB image, resized to at most `max_pixels`, decoded under the process's concurrency bound."""
    with _decoding:
        try:
            image = open_header(data)
            if header.format == "JPEG" and header.pixels > max_pixels:
                # JPEG decodes at 1/2, 1/4 or 1/8 scale directly: less memory for the same pixels the model sees
                scale = math.sqrt(max_pixels / header.pixels)
                image.draft("RGB", (max(1, int(header.width * scale)), max(1, int(header.height * scale))))
            image.load()
            rgb = image.convert("RGB")
        except Exception as exc:  # noqa: BLE001 - truncated or corrupt data
            raise refuse(header.name, f"is a corrupt or truncated image: {exc}", "corrupt_image") from None
        width, height = rgb.size
        if width * height > max_pixels:
            scale = math.sqrt(max_pixels / (width * height))
            rgb = rgb.resize((max(1, int(width * scale)), max(1, int(height * scale))), Image.Resampling.BICUBIC)
        return rgb


def decode_all(
    raw: dict[str, bytes], max_source_pixels: int, max_pixels: int, budget: DecodeBudget = DecodeBudget()
) -> dict:
    """{name: RGB image} for a request's images: every header checked (and the request's budget) before the
    first is decoded."""
    headers = [inspect(name, data, max_source_pixels, budget) for name, data in raw.items()]
    check_request(headers, budget)
    return {h.name: decode(h, raw[h.name], max_pixels) for h in headers}
