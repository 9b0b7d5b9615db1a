"""Structured output where decoding runs on this machine (``backend=hf``): a request's JSON Schema
compiled by xgrammar into a grammar whose token mask is applied at every generation step, so the
text is JSON matching the schema unless ``max_new_tokens`` cuts it short. Each row of a batch has
its own grammar, so requests with different schemas share batches.

xgrammar was chosen by measurement (benchmarks/RESULTS.md): with SmolLM2-135M on this CPU it kept
plain greedy decoding's speed and gave valid JSON for every prompt (plain decoding: none), while
lm-format-enforcer 0.11.3's transformers integration does not import under transformers 5.
No free whitespace between JSON tokens (only the ", " and ": " separators): a small model would fill its budget with it.
xgrammar reads a string's ``pattern`` alone and warns about a ``minLength``/``maxLength`` beside it;
those lengths are dropped before compiling, and the caller checks them after decoding.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache

from esgexp.errors import UserError


def json_constraint(tokenizer, vocab_size: int, schemas: Mapping[str, str]):
    """A factory ``constraint(ids) -> [logits processor]`` for batches of the items in ``schemas``
    (item id -> JSON Schema text), each distinct schema compiled once for ``tokenizer``; row i of a
    batch follows the schema of ``ids[i]``. A fresh processor per batch (xgrammar's matchers are stateful)."""
    compiler = _compiler(tokenizer, vocab_size)
    compiled = {
        text: compiler.compile_json_schema(
            json.dumps(without_lengths_beside_patterns(json.loads(text))), any_whitespace=False
        )
        for text in set(schemas.values())
    }

    def constraint(ids: Sequence[str]) -> list:
        from xgrammar.contrib.hf import LogitsProcessor

        return [LogitsProcessor([compiled[schemas[item_id]] for item_id in ids])]

    return constraint


def without_lengths_beside_patterns(schema):
    """``schema`` with ``minLength``/``maxLength`` removed wherever a ``pattern`` stands beside them."""
    if isinstance(schema, list):
        return [without_lengths_beside_patterns(entry) for entry in schema]
    if not isinstance(schema, dict):
        return schema
    dropped = ("minLength", "maxLength") if isinstance(schema.get("pattern"), str) else ()
    return {key: without_lengths_beside_patterns(value) for key, value in schema.items() if key not in dropped}


@lru_cache(maxsize=4)
def _compiler(tokenizer, vocab_size: int):
    try:
        import xgrammar
    except ImportError:
        raise UserError("structured output with backend=hf needs the xgrammar package: pip install xgrammar") from None
    info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
    return xgrammar.GrammarCompiler(info)
