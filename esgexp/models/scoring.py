"""Turn a tokenized batch of prompts into answers: greedy generation or letter log-probabilities."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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


@dataclass
class GenerateScorer:
    """Greedy decoding; the output is the decoded text after the prompt."""

    tokenizer: object
    max_new_tokens: int

    def __call__(self, model, input_ids, attention_mask) -> list[dict]:
        generated = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=self.max_new_tokens,
            do_sample=False,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        new_tokens = generated[:, input_ids.shape[1] :]
        texts = self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        return [{"output": text} for text in texts]


@dataclass
class LogprobScorer:
    """One forward pass; the answer is the letter whose next token is most probable."""

    letter_ids: dict[str, int]

    def __call__(self, model, input_ids, attention_mask) -> list[dict]:
        import torch

        # Left padding puts every prompt's last token in the last position; only it needs logits.
        logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=1).logits[:, -1, :]
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        letters = list(self.letter_ids)
        chosen = logprobs[:, [self.letter_ids[letter] for letter in letters]].tolist()
        results = []
        for row in chosen:
            scores = dict(zip(letters, row))
            results.append({"output": max(letters, key=lambda letter: scores[letter]), "scores": scores})
        return results
