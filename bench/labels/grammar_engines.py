"""The two constrained-decoding engines bench/labels/grammar.py compares, xgrammar and llguidance, behind one small
interface (compile, matcher, bitmask, fill, apply, accept, done), so the measurements run the same code on both."""

from __future__ import annotations

import json


# the two engines behind one small interface -----------------------------------------------------------------
class XGrammar:
    name = "xgrammar"

    def __init__(self, tokenizer, vocab_size: int):
        import xgrammar as xgr

        self.xgr = xgr
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self.vocab_size = vocab_size

    def compile(self, schema: dict):
        compiler = self.xgr.GrammarCompiler(self.info, cache_enabled=False)
        return compiler.compile_json_schema(json.dumps(schema), strict_mode=True)

    def matcher(self, compiled):
        return self.xgr.GrammarMatcher(compiled)

    def bitmask(self):
        return self.xgr.allocate_token_bitmask(1, self.vocab_size)

    def fill(self, matcher, bitmask):
        matcher.fill_next_token_bitmask(bitmask)

    def apply(self, logits, bitmask):
        self.xgr.apply_token_bitmask_inplace(logits, bitmask)

    def accept(self, matcher, token: int) -> bool:
        return matcher.accept_token(token)

    def done(self, matcher) -> bool:  # EOS allowed here
        return matcher.is_completed() if hasattr(matcher, "is_completed") else matcher.is_terminated()


class LLGuidance:
    name = "llguidance"

    def __init__(self, tokenizer, vocab_size: int):
        import llguidance
        import llguidance.hf
        import llguidance.torch

        self.llg = llguidance
        self.tok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)
        self.vocab_size = vocab_size

    def compile(self, schema: dict):
        grammar = self.llg.LLMatcher.grammar_from_json_schema(schema)
        error = self.llg.LLMatcher.validate_grammar(grammar, self.tok)
        if error:
            raise ValueError(error)
        return grammar

    def matcher(self, compiled):
        matcher = self.llg.LLMatcher(self.tok, compiled, log_level=0)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return matcher

    def bitmask(self):
        return self.llg.torch.allocate_token_bitmask(1, self.vocab_size)

    def fill(self, matcher, bitmask):
        self.llg.torch.fill_next_token_bitmask(matcher, bitmask, 0)

    def apply(self, logits, bitmask):
        """What blink.generate.structured.Grammars.apply_mask does (llguidance's own applier is a torch.compile
        kernel)."""
        import numpy as np
        import torch

        allowed = np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[: logits.shape[-1]]
        logits.masked_fill_(torch.from_numpy(allowed) == 0, float("-inf"))

    def accept(self, matcher, token: int) -> bool:
        return matcher.consume_token(token)

    def done(self, matcher) -> bool:
        return matcher.is_accepting()
