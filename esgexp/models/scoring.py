"""Turn a tokenized batch of prompts into answers: greedy generation or letter log-probabilities.

A scorer is called as ``scorer(model, ids, input_ids, attention_mask)`` (``ids``: the batch's item ids,
row by row; ``input_ids``/``attention_mask``: the left-padded prompts) and returns one result dict per row.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field

from esgexp.errors import UserError


def letter_token_ids(tokenizer, prompt: str, letters: Sequence[str]) -> dict[str, int]:
    """The single token that continues ``prompt`` with each letter.

    Tokenizers differ in how a letter after ``Answer:`` is split: most BPE vocabularies have
    " A" (leading space) as one token, some only "A". Both spellings are tried on the real
    prompt; the spaced one wins when the prompt does not already end in whitespace.
    """
    prompt_ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    spellings = ["{}", " {}"] if prompt[-1:].isspace() else [" {}", "{}"]
    for spelling in spellings:
        ids = {}
        for letter in letters:
            full = tokenizer(prompt + spelling.format(letter), add_special_tokens=True)["input_ids"]
            if len(full) == len(prompt_ids) + 1 and full[: len(prompt_ids)] == prompt_ids:
                ids[letter] = full[-1]
        if len(ids) == len(letters) and len(set(ids.values())) == len(letters):
            return ids
    raise UserError(f"the tokenizer has no single token for each of the letters {', '.join(letters)} after the prompt")


class StopAfterText:
    """Stops a row of a batch once its new text, past any leading blanks, holds one of ``stop``
    (a transformers stopping criterion; the output is cut at the stop string afterwards)."""

    def __init__(self, tokenizer, stop: Sequence[str], prompt_length: int):
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.prompt_length = prompt_length

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_length :], skip_special_tokens=True)
        done = [any(s in text.lstrip() for s in self.stop) for text in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


@dataclass
class GenerateScorer:
    """Greedy decoding; the output is the decoded text after the prompt, ending at the first of ``stop``
    that follows non-blank text (whole when none occurs). ``constraint`` (structured output) makes the
    fresh logits processors of one batch from its item ids (``constraint(ids) -> [processor]``).

    With ``prefix_ids`` (the tokens every prompt starts with) the prefix's key/value cache is computed
    once; each row is laid out as prefix, padding, rest (the mask hides the padding and positions
    follow the mask), so the prefix's cache is the same for every row and only the rest is run.
    """

    tokenizer: object
    max_new_tokens: int
    stop: tuple[str, ...] = ()
    constraint: object = None
    prefix_ids: list[int] = field(default_factory=list)
    _prefix_cache: object = field(default=None, init=False, repr=False)

    def __call__(self, model, ids, input_ids, attention_mask) -> list[dict]:
        from transformers import LogitsProcessorList, StoppingCriteriaList

        criteria = (
            StoppingCriteriaList([StopAfterText(self.tokenizer, self.stop, input_ids.shape[1])]) if self.stop else None
        )
        processors = LogitsProcessorList(self.constraint(ids)) if self.constraint else None
        cached = {}
        if self.prefix_ids:
            pad_id = self.tokenizer.pad_token_id
            input_ids, attention_mask = padded_after_prefix(input_ids, attention_mask, self.prefix_ids, pad_id)
            if self._prefix_cache is None:
                self._prefix_cache = prefix_cache(model, self.prefix_ids, input_ids.device)
            cached["cache"] = repeated(self._prefix_cache, len(input_ids))
        generated = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=self.max_new_tokens,
            do_sample=False,
            pad_token_id=self.tokenizer.pad_token_id,
            stopping_criteria=criteria,
            logits_processor=processors,
            **cached,
        )
        new_tokens = generated[:, input_ids.shape[1] :]
        texts = self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        return [{"output": cut_after_text(text, self.stop)} for text in texts]


def cut_after_text(text: str, stop: Sequence[str]) -> str:
    """``text`` up to the first of ``stop`` that follows its leading blanks (the blanks kept)."""
    body = text.lstrip()
    ends = [body.find(s) for s in stop if s and s in body]
    return text[: len(text) - len(body) + min(ends)] if ends else text


def prefix_cache(model, prefix_ids: Sequence[int], device):
    """The key/value cache of ``prefix_ids`` run alone (one row)."""
    import torch

    return model(input_ids=torch.tensor([list(prefix_ids)], device=device), use_cache=True).cache


def repeated(cache, rows: int):
    """A fresh copy of a one-row ``cache`` for a batch of ``rows``."""
    cache = copy.deepcopy(cache)
    cache.batch_repeat_interleave(rows)
    return cache


def prompt_rows(input_ids, attention_mask, prefix_ids: Sequence[int]) -> list:
    """Each row's prompt tokens without padding; every one must start with ``prefix_ids``."""
    import torch

    prefix = torch.tensor(list(prefix_ids), device=input_ids.device)
    rows = [ids[mask.bool()] for ids, mask in zip(input_ids, attention_mask)]
    if any(not torch.equal(row[: len(prefix)], prefix) for row in rows):
        raise RuntimeError("a prompt does not start with the cached prefix")
    return rows


def padded_after_prefix(input_ids, attention_mask, prefix_ids: Sequence[int], pad_id: int):
    """Left-padded prompts laid out as prefix, padding (``pad_id``), rest: the same width, the prefix first
    in every row."""
    import torch

    rows = prompt_rows(input_ids, attention_mask, prefix_ids)
    width, start = input_ids.shape[1], len(prefix_ids)
    new_ids, new_mask = input_ids.clone(), torch.zeros_like(attention_mask)
    new_mask[:, :start] = 1
    for i, row in enumerate(rows):
        new_ids[i, :start] = row[:start]
        new_ids[i, start : width - len(row) + start] = pad_id
        new_ids[i, width - len(row) + start :] = row[start:]
        new_mask[i, width - len(row) + start :] = 1
    return new_ids, new_mask


def common_prefix(sequences: Sequence[Sequence[int]]) -> list[int]:
    """The longest token prefix shared by all sequences, leaving at least one token of each."""
    if not sequences:
        return []
    limit = min(len(s) for s in sequences) - 1
    first = sequences[0]
    length = 0
    while length < limit and all(s[length] == first[length] for s in sequences):
        length += 1
    return list(first[:length])


@dataclass
class LogprobScorer:
    """One forward pass; the answer is the letter whose next token is most probable.

    With ``prefix_ids`` (the tokens every prompt starts with, e.g. the instruction), the prefix's
    key/value cache is computed once and each batch runs only the rest of its prompts. With ``autocast``
    (a torch dtype name, e.g. ``bfloat16``) the pass runs under torch's autocast to it (matrix products in
    that type over the model's own weights), and each row whose letters lie within ``recheck_margin`` of
    each other in log-probability (``close_calls``) runs again without it; such a row's result says
    ``rechecked``.
    """

    letter_ids: dict[str, int]
    prefix_ids: list[int] = field(default_factory=list)
    autocast: str | None = None
    recheck_margin: float = 0.0
    _prefix_caches: dict = field(default_factory=dict, init=False, repr=False)

    def __call__(self, model, ids, input_ids, attention_mask) -> list[dict]:
        chosen = self.letter_logprobs(model, input_ids, attention_mask, self.autocast)
        rechecked = close_calls(chosen, self.recheck_margin if self.autocast else 0.0)
        if rechecked.any():
            rows = rechecked.nonzero().flatten().to(input_ids.device)
            chosen[rechecked] = self.letter_logprobs(model, input_ids[rows], attention_mask[rows], None)
        letters = list(self.letter_ids)
        results = []
        for row, again in zip(chosen.tolist(), rechecked.tolist()):
            scores = dict(zip(letters, row))
            result = {"output": max(letters, key=lambda letter: scores[letter]), "scores": scores}
            results.append({**result, "rechecked": True} if again else result)
        return results

    def letter_logprobs(self, model, input_ids, attention_mask, autocast: str | None):
        """The letters' next-token log-probabilities (float32, on the CPU), one row per prompt, the passes
        under ``autocast`` to that dtype (None: the weights' own)."""
        import contextlib

        import torch

        device = input_ids.device
        arithmetic = (
            torch.autocast(device.type, dtype=getattr(torch, autocast)) if autocast else contextlib.nullcontext()
        )
        with arithmetic:
            if self.prefix_ids:
                logits = self.last_logits_after_prefix(model, input_ids, attention_mask, autocast)
            else:
                # Left padding puts every prompt's last token last; only that position needs logits.
                logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=1).logits[:, -1, :]
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        return logprobs[:, [self.letter_ids[letter] for letter in self.letter_ids]].cpu()

    def last_logits_after_prefix(self, model, input_ids, attention_mask, autocast: str | None = None):
        """Next-token logits of each prompt, running only the part after the cached prefix (one cache per
        ``autocast``: its keys and values come out in that arithmetic)."""
        import torch

        suffixes = [row[len(self.prefix_ids) :] for row in prompt_rows(input_ids, attention_mask, self.prefix_ids)]
        lengths = torch.tensor([len(s) for s in suffixes], device=input_ids.device)
        # Right padding: the cache positions stay contiguous and causal attention never sees the pads.
        batch = torch.zeros(len(suffixes), int(lengths.max()), dtype=input_ids.dtype, device=input_ids.device)
        for i, suffix in enumerate(suffixes):
            batch[i, : len(suffix)] = suffix
        if autocast not in self._prefix_caches:
            self._prefix_caches[autocast] = prefix_cache(model, self.prefix_ids, input_ids.device)
        cache = repeated(self._prefix_caches[autocast], len(suffixes))
        last = (lengths - 1)[:, None]
        return model(input_ids=batch, cache=cache, use_cache=True, logits_to_keep=last).logits[:, 0, :]


def close_calls(letter_logprobs, margin: float):
    """Which rows of ``letter_logprobs`` (one row of letter log-probabilities per prompt) hold two letters,
    next to each other in their order, less than ``margin`` apart: rows whose ranking a small change of
    arithmetic can flip (a bool tensor)."""
    ordered = letter_logprobs.sort(dim=1, descending=True).values
    if ordered.shape[1] < 2:
        return ordered.new_zeros(len(ordered)).bool()
    return (ordered[:, :-1] - ordered[:, 1:]).min(dim=1).values < margin
