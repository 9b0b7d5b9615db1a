"""``python -m esgexp.export_adapter RUN_DIR [model=NAME] [out_dir=DIR]``: merge a LoRA adapter into its
base and save a standalone model (save_pretrained layout, with the tokenizer and the adapter's card).

The adapter (an adapter folder, a training run folder or an MLflow run id) is the one argument without
``=``, or ``model.adapter=...``."""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from esgexp.cli.command import run_command
from esgexp.core.config import CONF_DIR
from esgexp.errors import UserError

log = logging.getLogger("esgexp")


def export(cfg: DictConfig) -> Path:
    """Merge ``model.adapter`` into ``model``'s weights; return the new model folder."""
    from esgexp.models.generation import prepare_adapter
    from esgexp.models.loading import load_model_and_tokenizer, resolve_model_dir
    from esgexp.models.lora import ADAPTER_CARD, attach_adapter, base_config

    quantised = "model.load_in_4bit=true" if cfg.model.load_in_4bit else None
    model_source = resolve_model_dir(cfg.model, cfg.paths.cache_dir)
    if getattr(base_config(model_source), "quantization_config", None):
        quantised = f"{model_source} holds quantised weights"
    if quantised:
        raise UserError(
            f"cannot merge into a quantised base ({quantised}): merged 4-bit weights would lose the adapter's "
            "precision. Merge into the float16, bfloat16 or float32 base (model.load_in_4bit=false, unquantised weights)."
        )
    adapter_dir, card = prepare_adapter(cfg.model, model_source, cfg.tracking.uri, cfg.paths.cache_dir)
    if card.get("load_in_4bit"):
        log.warning(
            "the adapter was trained on a 4-bit base: merged into full-precision weights its outputs differ slightly"
        )
    out_dir = Path(cfg.out_dir) if cfg.out_dir else adapter_dir.parent / "merged"
    if out_dir.exists() and any(out_dir.iterdir()):
        raise UserError(f"out_dir={out_dir} exists and is not empty; choose another folder")
    model, tokenizer = load_model_and_tokenizer(model_source, cfg.model, on_gpu=False)
    merged = attach_adapter(model, adapter_dir, merge=True)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}-"))
    try:
        merged.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if (adapter_dir / ADAPTER_CARD).is_file():
            shutil.copy(adapter_dir / ADAPTER_CARD, staging / ADAPTER_CARD)
        if out_dir.exists():
            out_dir.rmdir()
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir


USAGE = "esgexp-export-adapter RUN_DIR [model=NAME] [out_dir=DIR] (or model.adapter=RUN_DIR)"


def adapter_given(args: list[str]) -> list[str]:
    """``args`` with the adapter given on its own (``RUN_DIR``: no ``=``, or an existing path) as the override
    ``model.adapter=RUN_DIR``; a UserError for two adapters."""
    given = [arg for arg in args if not arg.startswith("-") and ("=" not in arg or Path(arg).exists())]
    named = [arg for arg in args if arg.startswith("model.adapter=")]
    if len(given + named) > 1:
        raise UserError(f"one adapter at a time, got {', '.join(given + named)}: {USAGE}")
    quote = "'" if "'" not in "".join(given) else '"'
    return [f"model.adapter={quote}{arg}{quote}" if arg in given else arg for arg in args]


def main(args: list[str]) -> None:
    from esgexp.jobs.settings import check_settings

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("export_adapter", overrides=adapter_given(args))
    if OmegaConf.is_missing(cfg.model, "adapter"):
        raise UserError(
            "Missing mandatory value: model.adapter (an adapter folder, a training run folder or an MLflow run "
            f"id): {USAGE}"
        )
    check_settings(cfg)
    out_dir = export(cfg)
    print(f"merged model: {out_dir}")
    print(f"evaluate it with: python -m esgexp model=local model.path={out_dir} ...")


def cli() -> None:
    """``esgexp-export-adapter`` and ``python -m esgexp.export_adapter``."""
    run_command(lambda: main(sys.argv[1:]), "export_adapter")


if __name__ == "__main__":
    cli()
