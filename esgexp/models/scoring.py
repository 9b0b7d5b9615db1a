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
    key/value cache is computed once and each batch runs only the rest of its prompts.
    """

    letter_ids: dict[str, int]
    prefix_ids: list[int] = field(default_factory=list)
    _prefix_cache: object = field(default=None, init=False, repr=False)

    def __call__(self, model, ids, input_ids, attention_mask) -> list[dict]:
        import torch

        if self.prefix_ids:
            logits = self.last_logits_after_prefix(model, input_ids, attention_mask)
        else:
            # Left padding puts every prompt's last token last; only that position needs logits.
            logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=1).logits[:, -1, :]
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        letters = list(self.letter_ids)
        chosen = logprobs[:, [self.letter_ids[letter] for letter in letters]].tolist()
        results = []
        for row in chosen:
            scores = dict(zip(letters, row))
            results.append({"output": max(letters, key=lambda letter: scores[letter]), "scores": scores})
        return results

    def last_logits_after_prefix(self, model, input_ids, attention_mask):
        """Next-token logits of each prompt, running only the part after the cached prefix."""
        import torch

        suffixes = [row[len(self.prefix_ids) :] for row in prompt_rows(input_ids, attention_mask, self.prefix_ids)]
        lengths = torch.tensor([len(s) for s in suffixes], device=input_ids.device)
        # Right padding: the cache positions stay contiguous and causal attention never sees the pads.
        batch = torch.zeros(len(suffixes), int(lengths.max()), dtype=input_ids.dtype, device=input_ids.device)
        for i, suffix in enumerate(suffixes):
            batch[i, : len(suffix)] = suffix
        if self._prefix_cache is None:
            self._prefix_cache = prefix_cache(model, self.prefix_ids, input_ids.device)
        cache = repeated(self._prefix_cache, len(suffixes))
        last = (lengths - 1)[:, None]
        return model(input_ids=batch, cache=cache, use_cache=True, logits_to_keep=last).logits[:, 0, :]
