"""Batched inference through Lightning: length-sorted, left-padded batches, results written per batch."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence

import lightning as L
import torch

log = logging.getLogger(__name__)


def quiet_lightning() -> None:
    """Keep Lightning's warnings only: it logs device banners and tips at INFO, and its own pytree
    helper trips a torch deprecation on every batch (not ours to fix)."""
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=Warning)
    warnings.filterwarnings("ignore", message=r".*all_gather is deprecated", category=Warning)


quiet_lightning()

PRECISION_OF_DTYPE = {torch.float32: "32-true", torch.bfloat16: "bf16-true", torch.float16: "16-true"}


class PromptDataModule(L.LightningDataModule):
    """Tokenizes prompts once and serves them longest first in fixed-size, left-padded batches."""

    def __init__(self, ids: Sequence[str], prompts: Sequence[str], tokenizer, batch_size: int):
        super().__init__()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        encoded = tokenizer(list(prompts), add_special_tokens=True)["input_ids"]
        order = sorted(range(len(ids)), key=lambda i: -len(encoded[i]))
        self.examples = [(ids[i], encoded[i]) for i in order]

    def predict_dataloader(self):
        return torch.utils.data.DataLoader(
            self.examples, batch_size=self.batch_size, shuffle=False, collate_fn=self.collate
        )

    def collate(self, examples):
        input_ids, attention_mask = left_padded([tokens for _, tokens in examples], self.tokenizer.pad_token_id)
        return {"ids": [item_id for item_id, _ in examples], "input_ids": input_ids, "attention_mask": attention_mask}


def left_padded(token_lists: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Input ids padded on the left to the longest, and the attention mask (0 on padding)."""
    width = max(len(tokens) for tokens in token_lists)
    input_ids = torch.tensor([[pad_id] * (width - len(t)) + list(t) for t in token_lists])
    attention_mask = torch.tensor([[0] * (width - len(t)) + [1] * len(t) for t in token_lists])
    return input_ids, attention_mask


def is_recoverable(error: BaseException) -> bool:
    """Errors worth a retry at a smaller batch: running out of memory on any device."""
    return isinstance(error, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in str(error).lower()


class InferenceModule(L.LightningModule):
    """Wraps a causal LM and a scorer (models/scoring.py); a batch that runs out of memory is retried in halves."""

    def __init__(self, model, scorer: Callable):
        super().__init__()
        self.model = model
        self.scorer = scorer

    def predict_step(self, batch, batch_idx):
        return self.score(batch["ids"], batch["input_ids"], batch["attention_mask"])

    def score(self, ids, input_ids, attention_mask) -> list[dict]:
        try:
            results = self.scorer(self.model, ids, input_ids, attention_mask)
        except (RuntimeError, MemoryError) as error:
            if not is_recoverable(error):
                raise
            if len(ids) == 1:
                log.warning("item %s failed: %s", ids[0], error)
                return [{"id": ids[0], "failed": True, "error": str(error)[:500]}]
            half = len(ids) // 2
            log.warning("batch of %d ran out of memory; retrying as %d + %d", len(ids), half, len(ids) - half)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            return self.score(ids[:half], input_ids[:half], attention_mask[:half]) + self.score(
                ids[half:], input_ids[half:], attention_mask[half:]
            )
        return [{"id": item_id, **result} for item_id, result in zip(ids, results)]


class BatchWriter(L.Callback):
    """Hands each finished batch's results to ``write`` before the next batch starts."""

    def __init__(self, write: Callable[[list[dict]], None]):
        self.write = write

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self.write(outputs)


def run_inference(
    model,
    scorer: Callable,
    data: PromptDataModule,
    write: Callable[[list[dict]], None],
    accelerator: str = "auto",
    progress_bar: bool = True,
) -> None:
    """Run every prompt through ``scorer`` with a Lightning Trainer; results go to ``write`` per batch."""
    precision = PRECISION_OF_DTYPE[next(model.parameters()).dtype]
    trainer = L.Trainer(
        accelerator=accelerator,
        devices=1,
        precision=precision,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=progress_bar,
        callbacks=[BatchWriter(write)],
    )
    trainer.predict(InferenceModule(model, scorer), datamodule=data, return_predictions=False)
