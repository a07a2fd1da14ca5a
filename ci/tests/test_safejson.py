"""Bodies whose cost is bounded by the limits: decoding, JSON depth, Unicode, and the capped token count."""

from __future__ import annotations

import gzip
import json
import time
import tracemalloc
import zlib

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from blink import tokens
from blink.errors import BlinkError, InvalidRequest, PayloadTooLarge
from blink.web import safejson

MB = 2**20


def bomb(n_bytes: int) -> bytes:
    return b'{"state": "' + b"a" * n_bytes + b'"}'


@pytest.mark.parametrize("encoding", ["zstd", "gzip", "deflate", "raw-deflate"])
def test_decoding_stops_at_the_limit_in_memory_proportional_to_it(encoding):
    data = bomb(48 * MB)
    if encoding == "zstd":
        packed = zstandard.ZstdCompressor(level=3).compress(data)
    elif encoding == "gzip":
        packed = gzip.compress(data, 1)
    elif encoding == "deflate":
        packed = zlib.compress(data, 1)
    else:
        c = zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS)
        packed = c.compress(data) + c.flush()
    del data
    limit = 4 * MB
    tracemalloc.start()
    t = time.perf_counter()
    with pytest.raises(PayloadTooLarge) as refused:
        safejson.decode(packed, "deflate" if encoding == "raw-deflate" else encoding, limit)
    took = time.perf_counter() - t
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert refused.value.status == 413 and str(limit) in refused.value.message
    assert peak < 3 * limit, f"{peak / MB:.0f} MB held to refuse at {limit / MB:.0f} MB"
    assert took < 2.0  # a 48 MB bomb is refused after decoding ~4 MB


@pytest.mark.parametrize("encoding", ["zstd", "gzip", "deflate", "identity", None])
def test_decoding_round_trips_under_the_limit(encoding):
    data = json.dumps({"state": "x" * 1000, "questions": {}}).encode()
    packed = {
        "zstd": lambda d: zstandard.ZstdCompressor().compress(d),
        "gzip": gzip.compress,
        "deflate": zlib.compress,
    }.get(encoding, lambda d: d)(data)
    assert safejson.decode(packed, encoding, len(data)) == data


def test_bad_encodings():
    with pytest.raises(BlinkError) as unsupported:
        safejson.decode(b"x", "br", 100)
    assert unsupported.value.status == 415
    with pytest.raises(BlinkError) as garbage:
        safejson.decode(b"not gzip at all", "gzip", 100)
    assert garbage.value.status == 400
    truncated = gzip.compress(b"x" * 10000)[:-12]
    with pytest.raises(BlinkError) as cut:
        safejson.decode(truncated, "gzip", 10**6)
    assert cut.value.status == 400


@pytest.mark.parametrize("depth", [65, 1000, 100_000, 1_000_000])
def test_deep_nesting_is_a_located_422(depth):
    data = b'{"state": ' + b"[" * depth + b"]" * depth + b"}"
    with pytest.raises(InvalidRequest) as refused:
        safejson.loads(data)
    assert refused.value.status == 422 and refused.value.kind == "json_too_deep"
    assert refused.value.loc[:2] == ["body", "state"] or refused.value.loc == ["body"]


def test_objects_count_toward_depth_and_the_limit_is_exact():
    ok = json.dumps({"a": [[[{"b": [1]}]]]})
    assert safejson.loads(ok.encode(), max_depth=6) == json.loads(ok)
    with pytest.raises(InvalidRequest):
        safejson.loads(ok.encode(), max_depth=5)


def nesting(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(nesting, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(nesting, value), default=0)
    return 0


JSON_TREES = st.recursive(
    st.none() | st.integers() | st.text(alphabet='[]{}ab"\\', max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(alphabet="[{a", max_size=3), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(JSON_TREES, st.integers(min_value=1, max_value=8))
def test_a_body_is_refused_exactly_when_it_nests_past_the_limit(value, max_depth):
    # brackets inside strings and side by side open no depth: the count that spares the walk must never decide
    data = json.dumps({"state": value})
    if 1 + nesting(value) > max_depth:
        with pytest.raises(InvalidRequest) as refused:
            safejson.loads(data.encode(), max_depth=max_depth)
        assert refused.value.kind == "json_too_deep"
    else:
        assert safejson.loads(data.encode(), max_depth=max_depth) == json.loads(data)


@pytest.mark.parametrize(
    "raw,where",
    [
        (b'{"state": "hello \\ud800 world"}', ["body", "state"]),
        (b'{"state": {"k": ["ok", "\\uDFFF"]}}', ["body", "state", "k", 1]),
        (b'{"\\ud800key": 1}', ["body", "\ud800key"]),
    ],
)
def test_lone_surrogates_are_a_422_naming_the_string(raw, where):
    with pytest.raises(InvalidRequest) as refused:
        safejson.loads(raw)
    assert refused.value.kind == "invalid_unicode" and refused.value.loc == where


def test_valid_surrogate_pairs_pass():
    assert safejson.loads(b'{"s": "\\ud83d\\ude00"}') == {"s": "\U0001f600"}


@pytest.mark.parametrize("raw", [b'{"s": "\xff"}', b'{"s": "\xed\xa0\x80"}', b'{"s": "\xc3"}'])
def test_invalid_utf8_is_a_422_naming_the_byte(raw):
    with pytest.raises(InvalidRequest) as refused:
        safejson.loads(raw)
    assert refused.value.kind == "invalid_utf8" and refused.value.loc == ["body", 7]


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_are_not_json(constant):
    with pytest.raises(InvalidRequest) as refused:
        safejson.loads(b'{"metadata": {"a": [1, ' + constant + b"]}}")
    assert refused.value.kind == "json_invalid" and constant.decode().lstrip("-") in refused.value.message


@pytest.mark.parametrize(
    "raw,where",
    [
        (b'{"metadata": {"a": [1, 1e400]}}', ["body", "metadata", "a", 1]),
        (b'{"x": -2.5E+309}', ["body", "x"]),
        (b'{"x": 0.01e0311}', ["body", "x"]),
        (b'{"x": ' + b"9" * 320 + b".5}", ["body", "x"]),  # no exponent: 320 digits
        (b'{"x": ' + b"1" * 220 + b"e99}", ["body", "x"]),  # a 2-digit exponent on 220 digits
        (b"1e999", ["body"]),
    ],
)
def test_a_number_past_a_doubles_range_is_a_422_naming_it(raw, where):
    with pytest.raises(InvalidRequest) as refused:
        safejson.loads(raw)
    assert refused.value.kind == "json_invalid" and refused.value.loc == where


def test_a_number_past_the_range_before_nesting_past_the_interpreters_limit_is_a_422():
    deep = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(InvalidRequest) as refused:
        safejson.loads(b"[1e400, " + deep + b"]")
    assert refused.value.kind == "json_too_deep"


def test_numbers_near_the_range_and_words_that_look_like_them_pass():
    big = int("1" * 220)
    value = safejson.loads(b'{"a": 1.7e308, "b": 1e-400, "c": ' + str(big).encode() + b', "d": "NaN 1e400"}')
    assert value == {"a": 1.7e308, "b": 0.0, "c": big, "d": "NaN 1e400"}


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text("ab \u00e9", max_size=8),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text("ab", max_size=4), inner, max_size=4),
        max_leaves=12,
    )
)
def test_a_body_is_refused_for_its_numbers_exactly_when_one_is_not_finite(value):
    """Any value written as JSON (infinities as Python writes them, or as an overflowing literal): refused exactly
    when it holds an infinity, and otherwise read back as `json.loads` reads it."""
    text = json.dumps(value).replace("-Infinity", "-1e999").replace("Infinity", "1e999")
    finite = "1e999" not in text
    if finite:
        assert safejson.loads(text.encode()) == json.loads(text)
    else:
        with pytest.raises(InvalidRequest):
            safejson.loads(text.encode())


def test_not_json_and_size():
    with pytest.raises(InvalidRequest) as bad:
        safejson.loads(b"{nope")
    assert bad.value.kind == "json_invalid" and bad.value.loc == ["body", 1]
    with pytest.raises(PayloadTooLarge):
        safejson.loads(b"[" + b"1," * 100 + b"1]", max_bytes=50)
    assert safejson.loads("\ufeff".encode() + b"[1]") == [1]  # a UTF-8 BOM is allowed


def test_a_wide_flat_body_is_linear():
    data = json.dumps({"state": ["x"] * 200_000, "questions": {f"q{i}": {"type": "noul"} for i in range(1000)}})
    t = time.perf_counter()
    safejson.loads(data.encode())
    assert time.perf_counter() - t < 2.0


# the capped token count -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer(demo_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_dir)


def test_capped_tokens_is_exact_within_the_limit(tokenizer):
    encode = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    longest = tokens.longest_token_chars(tokenizer)
    for text in ["hi", "The quick brown fox " * 50, "数字和文字 " * 40, " " * 900]:
        exact = len(encode(text))
        assert tokens.capped_tokens(encode, text, exact, longest) == exact
        assert tokens.capped_tokens(encode, text, exact + 10, longest) == exact
        if exact > 2:
            assert tokens.capped_tokens(encode, text, exact - 2, longest) is None


def test_capped_tokens_refuses_a_huge_text_without_tokenizing_it_whole(tokenizer):
    calls = []

    def encode(s):
        calls.append(len(s))
        return tokenizer(s, add_special_tokens=False)["input_ids"]

    longest = tokens.longest_token_chars(tokenizer)
    text = "The quick brown fox jumps over the lazy dog. " * 200_000  # 9 MB, ~2M tokens
    t = time.perf_counter()
    assert tokens.capped_tokens(encode, text, 4096, longest) is None
    took = time.perf_counter() - t
    assert sum(calls) <= 4096 * 4 * 2, calls  # only a prefix proportional to the limit was tokenized
    assert took < 2.0
    calls.clear()
    assert tokens.capped_tokens(encode, "x" * (4096 * longest + 1), 4096, longest) is None
    assert calls == []  # past the character bound: refused untokenized


@pytest.fixture(scope="module")
def cap(tokenizer):
    """One TokenCap for every example (building one reads the whole vocabulary, a second or more each)."""
    return tokens.TokenCap(tokenizer)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(text=st.text(max_size=200), limit=st.integers(min_value=1, max_value=120))
def test_token_cap_fits_exactly_when_the_full_count_fits(cap, text, limit):
    """The byte shortcut (no tokenize at all for a text of no more bytes than the limit) never lets through a
    text the full count refuses, nor refuses one it allows."""
    assert cap.fits(text, limit) == (len(cap.encode(text)) <= limit)
