"""Structured output where decoding runs on this machine (``backend=hf``): a request's JSON Schema
compiled by xgrammar into a grammar whose token mask is applied at every generation step, so the
text is JSON matching the schema unless ``max_new_tokens`` cuts it short.

xgrammar was chosen by measurement (benchmarks/RESULTS.md): with SmolLM2-135M on this CPU it kept
plain greedy decoding's speed and gave valid JSON for every prompt (plain decoding: none), while
lm-format-enforcer 0.11.3's transformers integration does not import under transformers 5.
No free whitespace between JSON tokens (only the ", " and ": " separators): a small model would fill its budget with it.
"""

from __future__ import annotations

from functools import lru_cache

from esgexp.errors import UserError


def json_constraint(tokenizer, vocab_size: int, schema: str):
    """A factory ``constraint(batch_size) -> [logits processor]`` holding ``schema`` (JSON text) compiled
    for ``tokenizer``; a fresh processor per batch (xgrammar's matchers are stateful)."""
    compiled = _compiler(tokenizer, vocab_size).compile_json_schema(schema, any_whitespace=False)

    def constraint(batch_size: int) -> list:
        from xgrammar.contrib.hf import LogitsProcessor

        return [LogitsProcessor([compiled] * batch_size)]

    return constraint


@lru_cache(maxsize=4)
def _compiler(tokenizer, vocab_size: int):
    try:
        import xgrammar
    except ImportError:
        raise UserError("structured output with backend=hf needs the xgrammar package: pip install xgrammar") from None
    info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
    return xgrammar.GrammarCompiler(info)
