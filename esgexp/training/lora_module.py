"""The LightningModule that fine-tunes a peft-wrapped causal LM, and its generative validation check."""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import lightning as L
import torch

from esgexp.eval.qa_metrics import score_item
from esgexp.models.inference import left_padded
from esgexp.training.sft_data import IGNORE_INDEX, GenerationSet


@dataclass(frozen=True)
class OptimSettings:
    lr: float
    weight_decay: float
    warmup_steps: int
    schedule: str


def lr_factor(step: int, warmup: int, total: int, schedule: str) -> float:
    """The learning-rate multiplier at optimiser step ``step``: linear warm-up, then the schedule to ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


@dataclass
class GenerationCheck:
    """Greedy answers to a few validation items, scored by exact match and token F1 (span rules).

    ``generate`` is the evaluation's scorer: ``(model, ids, input_ids, attention_mask) -> [{"output": text}]``."""

    items: GenerationSet
    generate: Callable
    pad_id: int
    batch_size: int = 8
    outputs: list[dict] = field(default_factory=list)

    @torch.no_grad()
    def run(self, model, device) -> dict[str, float]:
        self.outputs = []
        for start in range(0, len(self.items.ids), self.batch_size):
            end = start + self.batch_size
            input_ids, attention_mask = left_padded(self.items.prompts[start:end], self.pad_id)
            results = self.generate(model, self.items.ids[start:end], input_ids.to(device), attention_mask.to(device))
            for index, result in enumerate(results, start):
                answer = result["output"].strip()
                values = score_item(answer, self.items.references[index])
                self.outputs.append(
                    {
                        "id": self.items.ids[index],
                        "answer": answer,
                        "references": list(self.items.references[index]),
                        **values,
                    }
                )
        n = len(self.outputs)
        return {
            "val/gen_em": sum(o["em"] for o in self.outputs) / n,
            "val/gen_f1": sum(o["f1"] for o in self.outputs) / n,
        }


class LoraFineTuner(L.LightningModule):
    """Trains the trainable (LoRA) weights of ``model`` on masked-prompt batches.

    Logs train/loss, train/lr, train/tokens_per_s, val/loss (token-weighted) and, with a generation
    check, val/gen_em and val/gen_f1. Checkpoints hold the trainable weights only."""

    def __init__(self, model, optim: OptimSettings, generation: GenerationCheck | None = None):
        super().__init__()
        self.model = model
        self.model.train()  # transformers loads models in eval mode: dropout (LoRA's too) would be off
        self.optim = optim
        self.generation = generation
        self.strict_loading = False  # the frozen base weights are not in the checkpoints
        self.train_tokens = 0
        self.train_seconds = 0.0
        self._batch_started = 0.0

    def forward(self, batch: dict):
        # No KV cache in training: with one, transformers skips the block-diagonal mask of packed rows.
        return self.model(**{k: v for k, v in batch.items() if k != "n_tokens"}, use_cache=False)

    def training_step(self, batch, batch_idx):
        loss = self(batch).loss
        n_answer = int((batch["labels"] != IGNORE_INDEX).sum())
        self.log("train/loss", loss, on_step=True, prog_bar=True, batch_size=n_answer)
        self.log("train/lr", self.lr_schedulers().get_last_lr()[0], on_step=True)
        return loss

    def on_train_batch_start(self, batch, batch_idx):
        self._batch_started = time.perf_counter()

    def on_train_batch_end(self, outputs, batch, batch_idx):
        seconds = time.perf_counter() - self._batch_started
        self.train_tokens += batch["n_tokens"]
        self.train_seconds += seconds
        self.log("train/tokens_per_s", batch["n_tokens"] / max(seconds, 1e-9), on_step=True)

    def validation_step(self, batch, batch_idx):
        loss = self(batch).loss
        n_answer = int((batch["labels"] != IGNORE_INDEX).sum())
        self.log("val/loss", loss, on_epoch=True, prog_bar=True, batch_size=n_answer, sync_dist=True)

    def on_validation_epoch_end(self):
        if self.generation is None or self.trainer.sanity_checking:
            return
        # Every rank answers the same items (a sharded model needs all ranks to take part).
        for name, value in self.generation.run(self.model, self.device).items():
            self.log(name, value, prog_bar=name.endswith("f1"), sync_dist=True)

    def configure_optimizers(self):
        trainable = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        groups = [
            {"params": [p for _, p in trainable if p.ndim >= 2], "weight_decay": self.optim.weight_decay},
            {"params": [p for _, p in trainable if p.ndim < 2], "weight_decay": 0.0},  # biases and norms
        ]
        optimizer = torch.optim.AdamW([g for g in groups if g["params"]], lr=self.optim.lr)
        total = int(self.trainer.estimated_stepping_batches)
        factor = partial(lr_factor, warmup=self.optim.warmup_steps, total=total, schedule=self.optim.schedule)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint):
        trainable = {name for name, p in self.named_parameters() if p.requires_grad}
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in trainable}


def trainable_fingerprint(module: torch.nn.Module) -> str:
    """sha256 of every trainable weight's bytes, in name order: equal on ranks that trained the same adapter."""
    digest = hashlib.sha256()
    for name, param in sorted(module.named_parameters()):
        if param.requires_grad:
            digest.update(name.encode())
            digest.update(param.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()


class RankAgreement(L.Callback):
    """After training, every rank's adapter fingerprint is gathered; ``agree`` says whether all are equal."""

    def __init__(self):
        self.fingerprints: list[str] = []

    def on_train_end(self, trainer, pl_module):
        mine = trainable_fingerprint(pl_module)
        code = torch.tensor([int(mine[:15], 16)], dtype=torch.int64)
        gathered = trainer.strategy.all_gather(code.to(pl_module.device))
        values = gathered.reshape(-1).tolist() if trainer.world_size > 1 else [int(mine[:15], 16)]
        self.fingerprints = [f"{v:015x}" for v in values]

    @property
    def agree(self) -> bool:
        return len(set(self.fingerprints)) == 1
