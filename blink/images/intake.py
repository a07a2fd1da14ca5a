"""Images in a decision request: intake, checks and limits, before anything is decoded.

Accepted forms, all turned into one map {placeholder: image}:
- TypeSafe `assets` {placeholder: {"type": "image", "format": "png"|"jpg"|"jpeg", "data_base64": ...}}, or with
  `"part": "asset-0"` naming a multipart part (the Python SDK's wire); the placeholder may appear anywhere in a
  string of the state, the instructions or the criteria;
- data URIs (`data:image/png;base64,...`) as strings inside the state (a self-host extension);
- a sibling `images` list of base64 strings or data URIs (a self-host extension): shown before the state.

Every refusal is a 4xx that names the asset (or part) and the limit at fault. A decompression bomb is refused
from its header (the declared width x height), before a single pixel is allocated.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

from blink.errors import InvalidRequest, PayloadTooLarge
from blink.limits import ImageLimits

DATA_URI = re.compile(r"^data:image/(png|jpe?g|webp|gif);base64,", re.IGNORECASE)
FORMATS = {"PNG": "png", "JPEG": "jpeg"}


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def has_images(body, parts: dict) -> bool:
    if parts:
        return True
    if not isinstance(body, dict):
        return False
    if body.get("assets") or body.get("images"):
        return True
    return any(DATA_URI.match(s) for s in _strings(body.get("state")))


def check_count(count: int, limits: ImageLimits, loc: list) -> None:
    if count > limits.max_images:
        raise InvalidRequest(
            f"{count} images; this server accepts at most {limits.max_images} per request (--max-images)",
            loc=loc,
            kind="too_many_images",
        )


def check_size(label: str, data: bytes, limits: ImageLimits, loc: list) -> None:
    if len(data) > limits.max_image_bytes:
        raise PayloadTooLarge(
            f"image {label} is {len(data)} bytes; this server accepts at most "
            f"{limits.max_image_bytes} bytes per image (--max-image-bytes)",
            loc=loc,
            kind="image_too_large",
        )


def decode_base64(name: str, data, loc: list) -> bytes:
    if not isinstance(data, str):
        raise InvalidRequest(f"asset {name!r}: `data_base64` must be a base64 string", loc=loc)
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest(
            f"asset {name!r}: `data_base64` is not valid base64 ({exc})", loc=loc, kind="invalid_base64"
        ) from None


def _lift_data_uris(state, found: list):
    """Replace data-URI strings inside the state by placeholders; collect their bytes."""
    if isinstance(state, str) and DATA_URI.match(state):
        placeholder = f"<image:data-uri-{len(found)}>"
        found.append((placeholder, state.split(",", 1)[1]))
        return placeholder
    if isinstance(state, dict):
        return {k: _lift_data_uris(v, found) for k, v in state.items()}
    if isinstance(state, list):
        return [_lift_data_uris(v, found) for v in state]
    return state


def gather(body: dict, parts: dict, limits: ImageLimits) -> tuple[dict, dict[str, bytes], list[str]]:
    """The request with every image as a placeholder, the raw bytes per placeholder, and the placeholders
    that go first (the `images` list). Checks counts, bytes, parts and references; decodes nothing."""
    body = dict(body)
    raw = _asset_bytes(body.pop("assets", None), parts)
    uris: list = []
    body["state"] = _lift_data_uris(body.get("state"), uris)
    for placeholder, data in uris:
        raw[placeholder] = decode_base64(placeholder, data, ["body", "state"])
    first = _listed_bytes(body.pop("images", None), raw)
    check_count(len(raw), limits, ["body", "assets"])
    for name, data in raw.items():
        check_size(repr(name), data, limits, ["body", "assets", name])
    _check_referenced(body, raw, first)
    return body, raw, first


def _asset_bytes(assets, parts: dict) -> dict[str, bytes]:
    """The bytes of each of `assets` (base64, or the multipart part it names); every part must be claimed by
    exactly one asset."""
    if assets is not None and not isinstance(assets, dict):
        raise InvalidRequest("`assets` maps placeholders to assets", loc=["body", "assets"], kind="dict_type")
    raw: dict[str, bytes] = {}
    claimed = set()
    for name, asset in (assets or {}).items():
        loc = ["body", "assets", name]
        if not isinstance(asset, dict) or asset.get("type", "image") != "image":
            raise InvalidRequest(
                f"asset {name!r}: only image assets are supported "
                '({"type": "image", "format": "png", "data_base64": ...})',
                loc=loc,
            )
        if asset.get("part") is not None:
            raw[name] = _claim_part(name, asset["part"], parts, claimed, loc)
        else:
            raw[name] = decode_base64(name, asset.get("data_base64"), loc)
    unclaimed = sorted(set(parts) - claimed)
    if unclaimed:
        raise InvalidRequest(
            f"multipart part {unclaimed[0]!r} is not claimed by any asset",
            loc=["body", unclaimed[0]],
            kind="unknown_part",
        )
    return raw


def _claim_part(name: str, part, parts: dict, claimed: set, loc: list) -> bytes:
    if part not in parts:
        raise InvalidRequest(
            f"asset {name!r} names multipart part {part!r}, which the body doesn't have", loc=loc, kind="missing_part"
        )
    if part in claimed:
        raise InvalidRequest(f"multipart part {part!r} is claimed by two assets", loc=loc)
    claimed.add(part)
    return parts[part][1]


def _listed_bytes(listed, raw: dict[str, bytes]) -> list[str]:
    """The `images` list's bytes into `raw` under their placeholders, which it returns in order."""
    if listed is None:
        return []
    if not isinstance(listed, list):
        raise InvalidRequest("`images` is a list of base64 strings or data URIs", loc=["body", "images"])
    first = []
    for i, item in enumerate(listed):
        placeholder = f"<image:list-{i}>"
        data = item.split(",", 1)[1] if isinstance(item, str) and DATA_URI.match(item) else item
        raw[placeholder] = decode_base64(f"images[{i}]", data, ["body", "images", i])
        first.append(placeholder)
    return first


def _check_referenced(body: dict, raw: dict[str, bytes], first: list[str]) -> None:
    """Every asset must be used: an unreferenced image is a client mistake, not something to drop silently."""
    texts = list(_strings(body.get("state")))
    questions = body.get("questions")
    if isinstance(questions, dict):
        for question in questions.values():
            if isinstance(question, dict):
                texts += list(_strings(question.get("instructions"))) + list(_strings(question.get("criteria")))
    for name in raw:
        if name not in first and not any(name in text for text in texts):
            raise InvalidRequest(
                f"asset {name!r} is not referenced: put its placeholder in the state, the instructions or the criteria",
                loc=["body", "assets", name],
                kind="unreferenced_asset",
            )


def decode(name: str, data: bytes, limits: ImageLimits):
    """A checked RGB image (blink.images.guard: header, ratio, polyglots, budget, bounded decoding)."""
    return decode_all({name: data}, limits)[name]


def decode_all(raw: dict[str, bytes], limits: ImageLimits) -> dict:
    from blink.images import guard as image_guard

    return image_guard.decode_all(raw, limits.max_image_source_pixels, limits.max_image_pixels)


def load_images(body: dict, parts: dict, limits: ImageLimits) -> tuple[dict, dict, list[str]]:
    """The request with its images as placeholders, the decoded images by placeholder (PIL, RGB, resized), and
    the placeholders that go first. Every header is checked before the first image is decoded."""
    body, raw, first = gather(body, parts, limits)
    return body, decode_all(raw, limits), first


def place_images(body: dict, first: list[str], layout: str, placeholders: list[str]) -> dict:
    """`inline`: images stay where their placeholders are. `first`: the state's images (and the `images`
    list) go before the state text, each placeholder in the state replaced by a reference to it."""
    state = body.get("state")
    if layout == "first":
        text = state if isinstance(state, str) else json.dumps(state, ensure_ascii=False)
        moved = sorted((p for p in placeholders if p in text and p not in first), key=text.index)
        for k, placeholder in enumerate(moved, start=len(first) + 1):
            text = text.replace(placeholder, f"[image {k}]")
        front = first + moved
        return {**body, "state": "".join(front) + "\n" + text} if front else body
    if first:
        text = state if isinstance(state, str) else json.dumps(state, ensure_ascii=False)
        return {**body, "state": "".join(first) + "\n" + text}
    return body
