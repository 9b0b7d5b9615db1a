"""task=finetune: LoRA fine-tuning on a QA dataset's train split, validated on its validation split.

Every check that needs no weights runs first (settings, checkpoint, data, sequence length, target
modules); then the base loads, peft wraps it and Lightning trains. The run folder gets ``adapter/``
(peft files, tokenizer, ``esgexp_adapter.json``), ``checkpoints/`` (best and last, trainable weights
and optimiser state only), ``train_report.json``, ``val_generations.jsonl``, ``config.yaml`` and
``metrics.json``; MLflow gets the curves, the params and the adapter.

Under a multi-process strategy every rank runs this job up to and through ``fit``; only rank 0 writes
files and logs (``Job.writes``).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from esgexp.core.outputs import write_atomic, write_json
from esgexp.errors import Interrupted, UserError
from esgexp.jobs.lifecycle import Job, same_job

log = logging.getLogger(__name__)

CONTEXT_STRATEGIES = ("zero_shot", "zero_context")


class FinetuneJob(Job):
    """Check everything that needs no weights, build the data and the LoRA-wrapped model, train, save the adapter."""

    files = ("train_report.json", "val_generations.jsonl", "skipped_rows.txt")
    step_metric = "train/steps"

    def load(self) -> list[str]:
        cfg = self.cfg
        on_gpu, precision, self.ckpt_path = check_before_loading(cfg)

        from lightning.pytorch.utilities.rank_zero import rank_zero_only

        from esgexp.training.lora_module import RankAgreement
        from esgexp.training.trainer import make_trainer

        train_items, val_items, skipped = load_items(cfg)
        self.model_source = check_model(cfg)
        self.data, self.reports, self.generation, self.tokenizer = build_data(
            cfg, self.model_source, train_items, val_items
        )
        self.module = build_module(cfg, self.model_source, on_gpu, precision, self.generation, self.data.pad_id)
        self.agreement = RankAgreement()
        self.trainer, self.checkpoint = make_trainer(
            cfg, self.output_dir, precision, self.module.model, [self.agreement]
        )
        self.writes = rank_zero_only.rank == 0
        return skipped

    def save(self, skipped: list[str]) -> None:
        super().save(skipped)
        write_json(self.output_dir / "train_report.json", {name: vars(r) for name, r in self.reports.items()})

    def tags(self) -> dict:
        cfg = self.cfg
        return {
            "model": cfg.model.name,
            "strategy": cfg.strategy.name,
            "template": cfg.template.name,
            "resumed_from": self.ckpt_path,
        }

    def work(self, run) -> tuple[dict, dict] | None:
        from esgexp.training.trainer import RunLogger, launchable_as_one_job

        started = time.perf_counter()
        if run is not None:
            self.trainer.loggers = [RunLogger(run)]
        try:
            with launchable_as_one_job():
                self.trainer.fit(self.module, datamodule=self.data, ckpt_path=self.ckpt_path)
        except SystemExit:  # Lightning's end after Ctrl-C (SIGTERM, SIGUSR2), once last.ckpt is saved
            if not self.trainer.interrupted:
                raise
            raise Interrupted(
                f"training stopped at step {self.trainer.global_step}; its state is in "
                f"{self.output_dir / 'checkpoints' / 'last.ckpt'}; ckpt_path=last continues"
            ) from None
        if run is None:
            return None
        self.adapter_dir = save_adapter(
            self.cfg, self.output_dir, self.module, self.checkpoint, self.tokenizer, self.model_source, run.run_id or ""
        )
        seconds = time.perf_counter() - started
        metrics = final_metrics(self.trainer, self.module, self.checkpoint, self.reports, self.agreement, seconds)
        if self.generation is not None and self.generation.outputs:
            outputs = self.generation.outputs
            write_atomic(run.run_dir / "val_generations.jsonl", "".join(json.dumps(o) + "\n" for o in outputs))
        return metrics, {}

    def finished(self, run, metrics: dict) -> None:
        run.log_artifact(self.adapter_dir, artifact_path="adapter")

    def summary(self, metrics: dict) -> tuple[str, list[tuple[str, str]]]:
        cfg = self.cfg
        rows = [
            (key, f"{value:.4f}" if isinstance(value, float) else str(value))
            for key, value in metrics.items()
            if "/n_" not in key
        ]
        return (
            f"{cfg.dataset.name} | {cfg.model.name} | LoRA r={cfg.model.lora.r} | {metrics['train/steps']} steps",
            rows,
        )

    def report(self, run, metrics: dict) -> None:
        super().report(run, metrics)
        print(f"adapter: {self.adapter_dir}")


def check_before_loading(cfg: DictConfig) -> tuple[bool, str, str | None]:
    """Whether training uses a GPU, the Lightning precision and the checkpoint to resume, once every
    setting is checked. The groups and the checkpoint come first, before torch and Lightning load."""
    check_groups(cfg)
    ckpt_path = resolve_ckpt_path(cfg)

    from esgexp.models.loading import check_quantisation
    from esgexp.training.trainer import (
        check_monitor,
        check_strategy,
        lightning_arguments,
        training_precision,
        uses_gpu,
    )

    check_monitor(cfg.train)
    check_strategy(cfg.trainer)
    lightning_arguments(cfg.trainer)
    on_gpu = uses_gpu(cfg.trainer)
    precision = training_precision(cfg.trainer, on_gpu)
    check_quantisation(cfg.model, on_gpu)
    return on_gpu, precision, ckpt_path


def check_model(cfg: DictConfig) -> str:
    """The base model's folder, once its config (no weights) accepts the sequence length and target modules."""
    from esgexp.models.loading import resolve_model_dir
    from esgexp.models.lora import base_config, check_seq_len, check_target_modules

    model_source = resolve_model_dir(cfg.model, cfg.paths.cache_dir)
    config = base_config(model_source)
    check_seq_len(config, cfg.train.max_seq_len, cfg.model.name)
    check_target_modules(config, cfg.model.lora, cfg.model.name)
    return model_source


def check_groups(cfg: DictConfig) -> None:
    """The groups fine-tuning needs (the numbers are checked with every setting, esgexp/jobs/settings.py)."""
    if cfg.strategy.name not in CONTEXT_STRATEGIES:
        raise UserError(
            f"fine-tuning prompts are {' or '.join(CONTEXT_STRATEGIES)} (with or without the passage), not strategy={cfg.strategy.name}"
        )
    if cfg.get("train") is None or cfg.model.get("lora") is None:
        raise UserError("task=finetune needs train=lora and model.lora (use experiment=finetune_sustainableqa)")


def resolve_ckpt_path(cfg: DictConfig) -> str | None:
    """``ckpt_path``: last (the newest run of this config with checkpoints/last.ckpt), a .ckpt file, or a run folder."""
    value = cfg.get("ckpt_path")
    if not value:
        return None
    if str(value) == "last":
        root = Path(cfg.paths.runs_dir) / cfg.experiment_name
        found = sorted(root.glob("**/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime, reverse=True)
        for ckpt in found:
            if same_job(cfg, ckpt.parent.parent):
                log.info("resuming from %s", ckpt)
                return str(ckpt)
        raise UserError(f"ckpt_path=last: no earlier run of this config under {root} has checkpoints/last.ckpt")
    path = Path(str(value)).expanduser()
    if path.is_dir():
        path = path / "checkpoints" / "last.ckpt" if (path / "checkpoints").is_dir() else path / "last.ckpt"
    if not path.is_file():
        raise UserError(f"ckpt_path={value}: no such checkpoint ({path})")
    return str(path)


def load_items(cfg: DictConfig) -> tuple[list, list, list[str]]:
    """The train and validation items (seeded draws when limited) and the skipped-row messages."""
    loader = instantiate(cfg.dataset)
    if not hasattr(loader, "load_split"):
        raise UserError(f"dataset {cfg.dataset.name!r} has no train and validation splits to fine-tune on")
    try:
        train = loader.load_split(cfg.train.train_split).sample(cfg.train.train_limit, cfg.seed)
    except UserError as error:
        raise UserError(f"the train split is empty or unusable: {error}") from None
    val = loader.load_split(cfg.train.val_split).sample(cfg.train.val_limit, cfg.seed)
    return train.items, val.items, train.skipped + val.skipped


def build_data(cfg: DictConfig, model_source: str, train_items: list, val_items: list):
    """The data module (tokenised examples, packed if asked), the build reports, the generative check, the tokenizer."""
    from transformers import AutoTokenizer

    from esgexp.models.scoring import GenerateScorer
    from esgexp.strategies.qa import QAPrompter
    from esgexp.training.lora_module import GenerationCheck
    from esgexp.training.sft_data import BuildReport, ExampleBuilder, GenerationSet, SFTDataModule, pack

    tokenizer = AutoTokenizer.from_pretrained(model_source)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    prompter = QAPrompter(template=OmegaConf.to_container(cfg.template), context=cfg.strategy.context)
    builder = ExampleBuilder(prompter, tokenizer, bool(cfg.model.chat_template), int(cfg.train.max_seq_len))
    train, train_report = builder.build(train_items)
    if not train:
        raise UserError(
            f"no train item fits train.max_seq_len={cfg.train.max_seq_len} tokens, even without its passage"
        )
    val, val_report = builder.build(val_items)
    reports = {"train": train_report, "val": val_report}
    for name, report in reports.items():
        if report.truncated or report.dropped:
            log.warning(
                "%s: %d of %d items had their passage shortened to fit %d tokens; %d dropped as too long",
                name,
                len(report.truncated),
                report.n_items,
                cfg.train.max_seq_len,
                len(report.dropped),
            )
    if cfg.train.packing:
        train = pack(train, int(cfg.train.max_seq_len), cfg.seed)
    generation = None
    if cfg.train.val_generate_items:
        gen_report = BuildReport()
        chosen = [
            (i, builder.fit_prompt(i, int(cfg.train.val_max_new_tokens), gen_report))
            for i in val_items[: cfg.train.val_generate_items]
        ]
        chosen = [(item, prompt) for item, prompt in chosen if prompt is not None]
        if chosen:
            gen_set = GenerationSet([i.id for i, _ in chosen], [p for _, p in chosen], [i.answers for i, _ in chosen])
            scorer = GenerateScorer(tokenizer, int(cfg.train.val_max_new_tokens))
            generation = GenerationCheck(gen_set, scorer, tokenizer.pad_token_id, int(cfg.train.batch_size))
    data = SFTDataModule(
        train, val, int(cfg.train.batch_size), tokenizer.pad_token_id, cfg.seed, int(cfg.train.pad_to_multiple_of)
    )
    return data, reports, generation, tokenizer


def build_module(cfg: DictConfig, model_source: str, on_gpu: bool, precision: str, generation, pad_id: int):
    """The base model (seeded, in its training dtype), wrapped with LoRA, inside the LightningModule."""
    import lightning as L

    from esgexp.models.loading import load_model_and_tokenizer
    from esgexp.models.lora import wrap_for_training
    from esgexp.training.lora_module import LoraFineTuner, OptimSettings
    from esgexp.training.trainer import base_dtype

    L.seed_everything(cfg.seed, workers=True, verbose=False)
    dtype = base_dtype(str(cfg.model.dtype), precision, on_gpu)
    model, _ = load_model_and_tokenizer(model_source, cfg.model, on_gpu, dtype=dtype)
    model.config.pad_token_id = model.config.pad_token_id if model.config.pad_token_id is not None else pad_id
    model = wrap_for_training(
        model, cfg.model.lora, bool(cfg.train.gradient_checkpointing), bool(cfg.model.load_in_4bit)
    )
    trainable, total = model.get_nb_trainable_parameters()
    log.info(
        "LoRA r=%s: %d trainable of %d parameters (%.3f%%), base %s, precision %s",
        cfg.model.lora.r,
        trainable,
        total,
        100 * trainable / total,
        dtype,
        precision,
    )
    optim = OptimSettings(
        float(cfg.train.lr), float(cfg.train.weight_decay), int(cfg.train.warmup_steps), str(cfg.train.schedule)
    )
    return LoraFineTuner(model, optim, generation)


def save_adapter(
    cfg: DictConfig, output_dir: Path, module, checkpoint, tokenizer, model_source: str, run_id: str
) -> Path:
    """Save the adapter with the best validated weights (by ``train.monitor``), else the last ones."""
    import torch

    from esgexp.models.lora import write_card

    best = checkpoint.best_model_path
    if best and Path(best).is_file():
        state = torch.load(best, map_location="cpu", weights_only=False)["state_dict"]
        module.load_state_dict(state, strict=False)
        log.info(
            "adapter: the weights of %s (%s %.4f)",
            Path(best).name,
            cfg.train.monitor,
            float(checkpoint.best_model_score),
        )
    adapter_dir = output_dir / "adapter"
    module.model.save_pretrained(adapter_dir)
    tokenizer.save_pretrained(adapter_dir)
    write_card(adapter_dir, cfg, model_source, run_id)
    return adapter_dir


def final_metrics(trainer, module, checkpoint, reports: dict, agreement, seconds: float) -> dict:
    """What the run ends with: last logged values, the best monitored value, throughput and data counts."""
    metrics: dict = {
        key: float(value) for key, value in trainer.callback_metrics.items() if key.startswith(("val/", "train/loss"))
    }
    metrics["train/steps"] = int(trainer.global_step)
    if checkpoint.best_model_score is not None:
        metrics[f"best/{checkpoint.monitor}"] = float(checkpoint.best_model_score)
    if module.train_seconds:
        metrics["train/tokens_per_s"] = module.train_tokens / module.train_seconds
    metrics["train/seconds"] = seconds
    if trainer.world_size > 1:
        metrics["ddp/ranks_agree"] = int(agreement.agree)
    for name, report in reports.items():
        metrics.update(report.as_metrics(name))
    return metrics
