"""tiktoken's answer (`blink/decide/fast_bpe.py`) is `tokenizers`' own, ids and end offsets, wherever it gives one:
by property on ASCII text built from the vocabulary's own pieces, on the repository's files, on every ASCII token
of Qwen3.5's vocabulary; and it refuses what it can't reproduce (added tokens, non-ASCII text, the tokens merging
never reaches, vocabularies trained as merges)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blink.decide.fast_bpe import FastBPE, _every_split_in_rank_order

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def encoder():
    from blink.decide.prefix_encoder import PrefixReusingEncoder
    from blink.model.demo import build_tokenizer

    encoder = PrefixReusingEncoder(build_tokenizer())
    assert encoder.enabled and encoder.fast is not None, "Qwen3.5's tokenizer takes the fast path"
    return encoder


def agrees(encoder, text: str) -> bool:
    """True when the fast path answered (and equals the library), False when it refused."""
    fast = encoder.fast.encode(text)
    if fast is not None:
        assert fast == encoder.library_encode(text), repr(text)
    assert encoder(text, add_special_tokens=False) == encoder.full(text, add_special_tokens=False)
    return fast is not None


@pytest.fixture(scope="module")
def ascii_tokens(encoder) -> list[str]:
    """Every ASCII token of the vocabulary, as text (the unreached ones among them)."""
    decoded = {rank: encoder.backend.decode([rank]) for rank, size in enumerate(encoder.fast.lengths) if size}
    return [text for text in decoded.values() if text.isascii()]


def test_every_ascii_token_alone_and_glued(encoder, ascii_tokens):
    answered = sum(agrees(encoder, text) for text in ascii_tokens[::7])
    assert answered > len(ascii_tokens[::7]) * 0.9
    glued = ["".join(ascii_tokens[i : i + 40]) for i in range(0, len(ascii_tokens), 997)]
    assert sum(agrees(encoder, text) for text in glued) > len(glued) * 0.5


def test_the_repositorys_own_files(encoder):
    files = subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "*.sh", "*.toml"], cwd=REPO, text=True, capture_output=True, check=True
    ).stdout.split()
    chunks = [
        chunk
        for name in files
        for text in [(REPO / name).read_text(encoding="utf-8", errors="replace")]
        for chunk in (text[i : i + 3000] for i in range(0, len(text), 3000))
    ]
    answered = [agrees(encoder, chunk) for chunk in chunks]  # every chunk: the encoder equals the library
    plain = [done for chunk, done in zip(chunks, answered) if chunk.isascii() and "<|" not in chunk]
    assert sum(plain) > len(plain) * 0.95, (sum(plain), len(plain))  # and plain text takes the fast path


ASCII = "".join(map(chr, range(128)))  # control characters too: the two regex engines must agree on \s
PIECES = st.sampled_from(
    [
        "\n",
        "\n\n",
        "\r\n",
        " ",
        "  ",
        "\t",
        "'s",
        "'LL",
        "123",
        "4567",
        "...",
        "?!",
        " Kaffee",
        "Negeri",
        " the",
        "http://x.io/a?b=1",
        "__init__",
        '{"a": 1}',
        "  \n  ",
        "A.",
        "caf",
    ]
)


@settings(max_examples=400, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(st.text(alphabet=ASCII, max_size=12), PIECES), max_size=30).map("".join))
def test_ascii_text_by_property(encoder, text):
    agrees(encoder, text)


@pytest.mark.parametrize(
    "text",
    [
        "a question<|im_end|> and more",  # an added token: `tokenizers` splits it out first
        "<think>plain ascii around it</think>",
        "café au lait, plain otherwise",  # not ASCII
        "ein guter Kaffee",  # " Kaffee" is a token merging never reaches: tiktoken would take it whole
    ],
)
def test_what_it_cannot_reproduce_goes_to_the_library(encoder, text):
    assert encoder.fast.encode(text) is None
    assert encoder(text, add_special_tokens=False) == encoder.full(text, add_special_tokens=False)


def test_a_vocabulary_trained_as_merges_takes_no_fast_path():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    from blink.model.demo import build_tokenizer

    qwen = json.loads(build_tokenizer()._tokenizer.to_str())
    tokenizer = Tokenizer(models.BPE())
    pattern = qwen["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    corpus = [(REPO / "README.md").read_text(encoding="utf-8")] * 3
    tokenizer.train_from_iterator(
        corpus,
        trainers.BpeTrainer(vocab_size=2000, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
    )
    spec = json.loads(tokenizer.to_str())
    assert FastBPE.for_tokenizer(tokenizer, spec) is None


def test_the_merge_order_check_sees_a_swap_or_a_missing_merge():
    """On Qwen3.5's printable-ASCII tokens (whitespace is not ASCII in byte-level form): true as shipped, false
    with two merges swapped or one left out."""
    from blink.model.demo import build_tokenizer

    model = json.loads(build_tokenizer()._tokenizer.to_str())["model"]
    vocab = {token: rank for token, rank in model["vocab"].items() if token.isascii() and token.isprintable()}
    merges = [m for m in model["merges"] if "".join(m) in vocab]
    assert _every_split_in_rank_order(vocab, merges)
    swapped = merges[:]
    swapped[100], swapped[5000] = swapped[5000], swapped[100]
    assert not _every_split_in_rank_order(vocab, swapped)
    assert not _every_split_in_rank_order(vocab, merges[:5000] + merges[5001:])
