"""Fine-tuning examples: the evaluation prompt plus the gold answer, with the prompt masked out of the loss.

An item too long for ``max_seq_len`` loses tokens from the end of its context passage, never from the
instruction, question or answer; one still too long without any context is dropped. Both are counted.
With packing, whole examples share a row; each restarts its position ids, which transformers turns into
a block-diagonal attention mask, so no example attends to another.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import partial

import lightning as L
import torch

from esgexp.core.records import QAItem
from esgexp.models.generation import model_input
from esgexp.strategies.qa import QAPrompter

IGNORE_INDEX = -100


@dataclass
class Example:
    """One training row: token ids, labels (-100 on prompt and padding) and, when packed, position ids."""

    input_ids: list[int]
    labels: list[int]
    position_ids: list[int] | None = None

    @property
    def n_answer_tokens(self) -> int:
        return sum(1 for label in self.labels if label != IGNORE_INDEX)


@dataclass
class BuildReport:
    """How the items became examples: kept, shortened (context cut) and dropped (too long without context)."""

    n_items: int = 0
    n_examples: int = 0
    truncated: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    def as_metrics(self, prefix: str) -> dict[str, int]:
        return {
            f"{prefix}/n_items": self.n_items,
            f"{prefix}/n_examples": self.n_examples,
            f"{prefix}/n_truncated": len(self.truncated),
            f"{prefix}/n_dropped": len(self.dropped),
        }


class ExampleBuilder:
    """Turns QA items into examples with the evaluation template (and chat template, if the model uses one)."""

    def __init__(self, prompter: QAPrompter, tokenizer, chat_template: bool, max_seq_len: int):
        self.prompter = prompter
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.max_seq_len = max_seq_len

    def prompt_text(self, item: QAItem, passages: list[str] | None = None) -> str:
        return model_input(self.prompter.build(item, passages), self.tokenizer, self.chat_template)

    def prompt_ids(self, item: QAItem, passages: list[str] | None = None) -> list[int]:
        return self.tokenizer(self.prompt_text(item, passages), add_special_tokens=True)["input_ids"]

    def answer_ids(self, prompt: str, answer: str) -> list[int]:
        """The answer's tokens and the end of turn: the rest of the chat rendering with the answer as the
        assistant turn, or (raw prompts, or a template that does not extend the prompt) the answer and EOS."""
        if self.chat_template:
            turns = [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
            prompt_text = self.tokenizer.apply_chat_template(turns[:1], tokenize=False, add_generation_prompt=True)
            full = self.tokenizer.apply_chat_template(turns, tokenize=False)
            if full.startswith(prompt_text):
                return self.tokenizer(full[len(prompt_text) :], add_special_tokens=False)["input_ids"]
        ids = self.tokenizer(" " + answer, add_special_tokens=False)["input_ids"]
        return [*ids, self.tokenizer.eos_token_id]

    def build(self, items: list[QAItem]) -> tuple[list[Example], BuildReport]:
        report = BuildReport(n_items=len(items))
        examples = []
        for item in items:
            answer = self.answer_ids(self.prompter.build(item), item.answers[0])
            prompt = self.fit_prompt(item, len(answer), report)
            if prompt is None:
                report.dropped.append(item.id)
                continue
            examples.append(Example(prompt + answer, [IGNORE_INDEX] * len(prompt) + answer))
        report.n_examples = len(examples)
        return examples, report

    def fit_prompt(self, item: QAItem, answer_len: int, report: BuildReport) -> list[int] | None:
        """The prompt's tokens, its context cut from the end until prompt + answer fit; None if nothing fits."""
        prompt = self.prompt_ids(item)
        overflow = len(prompt) + answer_len - self.max_seq_len
        if overflow <= 0:
            return prompt
        if not (self.prompter.context and item.context):
            return None
        context = self.tokenizer("\n".join(item.context), add_special_tokens=False)["input_ids"]
        keep = len(context) - overflow
        while keep > 0:
            prompt = self.prompt_ids(item, [self.tokenizer.decode(context[:keep]).strip()])
            overflow = len(prompt) + answer_len - self.max_seq_len
            if overflow <= 0:
                report.truncated.append(item.id)
                return prompt
            keep -= overflow  # decoding and re-encoding may merge tokens differently: cut again
        return None


def pack(examples: list[Example], max_seq_len: int, seed: int) -> list[Example]:
    """Whole examples, in a seeded order, greedily filled into rows of at most ``max_seq_len`` tokens."""
    order = list(examples)
    random.Random(seed).shuffle(order)
    rows: list[Example] = []
    current = Example([], [], [])
    for example in order:
        if current.input_ids and len(current.input_ids) + len(example.input_ids) > max_seq_len:
            rows.append(current)
            current = Example([], [], [])
        current.input_ids += example.input_ids
        current.labels += example.labels
        current.position_ids += list(range(len(example.input_ids)))
    if current.input_ids:
        rows.append(current)
    return rows


def collate(examples: list[Example], pad_id: int, pad_to_multiple_of: int = 1) -> dict:
    """Tensors right-padded to the longest row rounded up to a multiple of ``pad_to_multiple_of`` (so
    batches come in few shapes), and ``n_tokens`` (the tokens before padding). Padding has label -100.
    Unpacked rows get an attention mask (0 on padding); packed rows get position ids, and the padding
    becomes a segment of its own, so it attends to no example."""
    longest = max(len(e.input_ids) for e in examples)
    width = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    input_ids = torch.tensor([e.input_ids + [pad_id] * (width - len(e.input_ids)) for e in examples])
    labels = torch.tensor([e.labels + [IGNORE_INDEX] * (width - len(e.labels)) for e in examples])
    batch = {"input_ids": input_ids, "labels": labels, "n_tokens": sum(len(e.input_ids) for e in examples)}
    if examples[0].position_ids is None:
        batch["attention_mask"] = torch.tensor(
            [[1] * len(e.input_ids) + [0] * (width - len(e.input_ids)) for e in examples]
        )
    else:
        batch["position_ids"] = torch.tensor(
            [e.position_ids + list(range(width - len(e.position_ids))) for e in examples]
        )
    return batch


@dataclass
class GenerationSet:
    """Validation items answered by greedy generation during training: prompt token ids and references."""

    ids: list[str]
    prompts: list[list[int]]
    references: list[tuple[str, ...]]


class SFTDataModule(L.LightningDataModule):
    """Training rows (shuffled with the seed, split between ranks) and validation rows, batched by
    ``collate`` (padded to a multiple of ``pad_to_multiple_of`` tokens)."""

    def __init__(
        self,
        train: list[Example],
        val: list[Example],
        batch_size: int,
        pad_id: int,
        seed: int,
        pad_to_multiple_of: int = 1,
    ):
        super().__init__()
        self.train, self.val = train, val
        self.batch_size, self.pad_id, self.seed, self.pad_to_multiple_of = batch_size, pad_id, seed, pad_to_multiple_of

    def train_dataloader(self):
        # A seeded sampler that Lightning moves to the next epoch's order (set_epoch) and that splits the
        # rows between ranks: the same config gives the same batches, also when resumed at an epoch end.
        world, rank = (self.trainer.world_size, self.trainer.global_rank) if self.trainer else (1, 0)
        sampler = torch.utils.data.DistributedSampler(
            self.train, num_replicas=world, rank=rank, shuffle=True, seed=self.seed
        )
        return self._loader(self.train, sampler)

    def val_dataloader(self):
        return self._loader(self.val, None)

    def _loader(self, rows: list[Example], sampler):
        batch = partial(collate, pad_id=self.pad_id, pad_to_multiple_of=self.pad_to_multiple_of)
        return torch.utils.data.DataLoader(
            rows, batch_size=self.batch_size, sampler=sampler, shuffle=False, collate_fn=batch
        )
