"""The Lightning Trainer for fine-tuning: device, precision, distributed strategy, checkpoints, validation."""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig

from esgexp.errors import UserError
from esgexp.models.inference import quiet_lightning
from esgexp.models.loading import cpu_has_fast_bf16, torch_dtype

log = logging.getLogger(__name__)
quiet_lightning()

MONITORS = {"val/loss": "min", "val/gen_em": "max", "val/gen_f1": "max"}


def uses_gpu(trainer_cfg: DictConfig) -> bool:
    """Whether training runs on CUDA GPUs; ``accelerator=gpu`` without one is a user error."""
    accelerator = str(trainer_cfg.accelerator)
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise UserError(
            f"trainer.accelerator={accelerator} but no CUDA GPU is visible; use trainer.accelerator=cpu (or auto)"
        )
    return accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()


def training_precision(trainer_cfg: DictConfig, on_gpu: bool) -> str:
    """The Lightning precision for ``trainer.precision``. auto is 16-mixed on a GPU; on the CPU it is
    bf16-mixed where the CPU computes bf16 natively (``cpu_has_fast_bf16``), else 32-true. The choice and
    its reason are logged; an explicit bf16 setting on a CPU that only emulates bf16 is a warning."""
    precision = str(trainer_cfg.precision)
    if on_gpu:
        if precision == "auto":
            log.info("precision auto -> 16-mixed: CUDA GPU")
            return "16-mixed"
        return precision
    fast_bf16, reason = cpu_has_fast_bf16()
    if precision == "auto":
        precision = "bf16-mixed" if fast_bf16 else "32-true"
        log.info("precision auto -> %s: %s", precision, reason)
        return precision
    if precision == "16-mixed":
        log.warning(
            "trainer.precision=16-mixed on the CPU: Lightning runs it as bf16-mixed (CPU autocast has no float16)"
        )
    if precision != "32-true" and not fast_bf16:
        log.warning(
            "trainer.precision=%s: bf16 is emulated on this CPU and much slower than 32-true (%s)", precision, reason
        )
    return precision


def base_dtype(model_dtype: str, precision: str, on_gpu: bool) -> torch.dtype:
    """The frozen base weights' dtype: model.dtype when set, else the GPU's half type for mixed
    precision, float32 otherwise. Adapter weights stay float32 (peft casts them)."""
    if model_dtype != "auto":
        return torch_dtype(model_dtype, on_gpu)
    if on_gpu and precision == "16-mixed":
        return torch.float16
    if on_gpu and precision == "bf16-mixed":
        return torch.bfloat16
    return torch.float32


def check_strategy(trainer_cfg: DictConfig) -> None:
    strategy = str(trainer_cfg.strategy)
    if strategy.startswith("deepspeed") and importlib.util.find_spec("deepspeed") is None:
        raise UserError(
            f"trainer.strategy={strategy} needs the deepspeed package (pip install deepspeed); or use trainer=ddp|fsdp"
        )


def lightning_strategy(trainer_cfg: DictConfig, model):
    """``trainer.strategy`` as Lightning takes it; FSDP wraps each decoder layer and keeps the
    original parameters, so peft's frozen/trainable split survives sharding."""
    strategy = str(trainer_cfg.strategy)
    if strategy != "fsdp":
        return strategy
    from lightning.pytorch.strategies import FSDPStrategy

    layer_names = set(getattr(model, "_no_split_modules", None) or [])
    layers = {type(m) for m in model.modules() if type(m).__name__ in layer_names}
    return FSDPStrategy(auto_wrap_policy=layers or None, use_orig_params=True)


@contextmanager
def launchable_as_one_job():
    """Lightning's DDP launcher starts each extra rank by running this process's command again, with
    ``hydra.run.dir`` set to this job's run folder. Inside a sweep (``-m``) that command would start
    the whole sweep again: for the fit it becomes this job's own overrides and folder. Afterwards the
    process group and the launcher's environment variables go, so the next job launches its own ranks."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import read_write

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        yield
        return
    hydra_cfg = HydraConfig.get()
    argv, run_dir, environ = sys.argv, hydra_cfg.run.dir, dict(os.environ)
    sys.argv = [argv[0], *hydra_cfg.overrides.task]
    with read_write(hydra_cfg):
        hydra_cfg.run.dir = hydra_cfg.runtime.output_dir
    try:
        yield
    finally:
        sys.argv = argv
        with read_write(hydra_cfg):
            hydra_cfg.run.dir = run_dir
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        os.environ.clear()
        os.environ.update(environ)


def check_monitor(train: DictConfig) -> tuple[str, str]:
    """``train.monitor`` and ``train.monitor_mode``, when they name a logged value and its right direction."""
    monitor, mode = str(train.monitor), str(train.monitor_mode)
    if monitor not in MONITORS or mode != MONITORS[monitor]:
        choices = ", ".join(f"{name} ({direction})" for name, direction in MONITORS.items())
        raise UserError(f"train.monitor={monitor} train.monitor_mode={mode}: choose one of {choices}")
    return monitor, mode


class ValidateAtEnd(L.Callback):
    """Asks for a stop after the last optimiser step, which makes Lightning validate (and checkpoint)
    the final weights even when the step count is not a multiple of the validation interval."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        last_step = trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps
        last_epoch = trainer.max_epochs not in (None, -1) and trainer.current_epoch + 1 >= trainer.max_epochs
        if last_step or (last_epoch and trainer.fit_loop.epoch_loop.batch_progress.is_last_batch):
            trainer.should_stop = True


class LastCheckpoint(L.Callback):
    """``last.ckpt`` after every validation, and where Ctrl-C or a crash stopped the run: ``ckpt_path=last``
    goes on from there. (ModelCheckpoint's own last copy is only written with a new best.)"""

    def __init__(self, path: Path):
        self.path = path

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking and trainer.state.fn == "fit":
            trainer.save_checkpoint(self.path)

    def on_exception(self, trainer, pl_module, exception):
        # Saving waits for every rank: after a crash of one rank only, the others would never come.
        if trainer.world_size == 1 or isinstance(exception, KeyboardInterrupt):
            trainer.save_checkpoint(self.path)
            log.warning(
                "training stopped at step %d (%s); state saved in %s",
                trainer.global_step,
                type(exception).__name__,
                self.path,
            )


class RunLogger(Logger):
    """Lightning's training and validation curves to the job's ``tracking.TrackedRun`` (MLflow, or its
    pending record when offline); the job, not Lightning, ends the run, after its final metrics and adapter."""

    def __init__(self, run):
        super().__init__()
        self.run = run

    @property
    def name(self) -> str:
        return self.run.experiment_name

    @property
    def version(self) -> str:
        return self.run.run_id or "offline"

    @rank_zero_only
    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        self.run.log_metrics(metrics, step)

    @rank_zero_only
    def log_hyperparams(self, params, *args, **kwargs) -> None:
        """Nothing: the job's whole config is already the run's params."""


# The Trainer arguments make_trainer sets from esgexp's own settings: not to be given in trainer.lightning.
SET_HERE = (
    "accelerator",
    "devices",
    "num_nodes",
    "strategy",
    "precision",
    "max_steps",
    "max_epochs",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "log_every_n_steps",
    "val_check_interval",
    "check_val_every_n_epoch",
    "num_sanity_val_steps",
    "logger",
    "callbacks",
    "enable_progress_bar",
    "enable_model_summary",
    "default_root_dir",
)


def lightning_arguments(trainer_cfg: DictConfig) -> dict:
    """``trainer.lightning``: further Lightning Trainer arguments as given; a name the Trainer does not take,
    or one esgexp sets itself, is a UserError naming it (with the close Trainer argument)."""
    import difflib
    import inspect

    from omegaconf import OmegaConf

    node = trainer_cfg.get("lightning")  # {} by default: an empty node, falsy
    given = OmegaConf.to_container(node, resolve=True) if node else {}
    accepted = [name for name in inspect.signature(L.Trainer.__init__).parameters if name != "self"]
    for name in given:
        if name in SET_HERE:
            raise UserError(
                f"trainer.lightning.{name}: esgexp sets {name} itself; use its own setting (trainer.*, train.*)"
            )
        if name not in accepted:
            near = difflib.get_close_matches(name, accepted, n=1)
            hint = f"; did you mean trainer.lightning.{near[0]}?" if near else ""
            raise UserError(f"trainer.lightning.{name} is not an argument of Lightning's Trainer{hint}")
    return given


def make_trainer(
    cfg: DictConfig, output_dir: Path, precision: str, model, extra_callbacks: list
) -> tuple[L.Trainer, ModelCheckpoint]:
    """The fit Trainer: validation every ``train.val_every_n_steps`` optimiser steps and at the end,
    checkpoints ``best`` (by ``train.monitor``) and ``last`` (also on an interrupt), optional early stopping."""
    trainer_cfg, train = cfg.trainer, cfg.train
    monitor, mode = check_monitor(train)
    checkpoint = ModelCheckpoint(
        dirpath=output_dir / "checkpoints",
        filename="best-step{step}",
        monitor=monitor,
        mode=mode,
        save_top_k=1,
        auto_insert_metric_name=False,
    )
    callbacks = [
        checkpoint,
        LastCheckpoint(output_dir / "checkpoints" / "last.ckpt"),
        ValidateAtEnd(),
        *extra_callbacks,
    ]
    if train.early_stopping_patience:
        callbacks.append(EarlyStopping(monitor=monitor, mode=mode, patience=int(train.early_stopping_patience)))
    trainer = L.Trainer(
        **lightning_arguments(trainer_cfg),
        accelerator=trainer_cfg.accelerator,
        devices=trainer_cfg.devices,
        num_nodes=trainer_cfg.num_nodes,
        strategy=lightning_strategy(trainer_cfg, model),
        precision=precision,
        max_steps=trainer_cfg.max_steps or -1,
        max_epochs=trainer_cfg.max_epochs,
        accumulate_grad_batches=trainer_cfg.accumulate_grad_batches,
        gradient_clip_val=trainer_cfg.gradient_clip_val,
        log_every_n_steps=trainer_cfg.log_every_n_steps,
        val_check_interval=int(train.val_every_n_steps) * int(trainer_cfg.accumulate_grad_batches),
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        logger=False,
        callbacks=callbacks,
        enable_progress_bar=trainer_cfg.progress_bar,
        enable_model_summary=False,
        default_root_dir=output_dir,
    )
    return trainer, checkpoint
