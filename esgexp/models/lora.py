"""LoRA adapters: wrapping a base model for training, and finding, checking and loading a trained adapter.

A trained adapter folder holds peft's files, the tokenizer and ``esgexp_adapter.json`` (the card):
the base model's name and shape, the training run and the prompt settings, so that evaluation can
refuse an adapter trained on another base before loading anything.
"""

from __future__ import annotations

import json
import logging
import re
import warnings
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from esgexp.errors import UserError

log = logging.getLogger(__name__)
# peft asks transformers about gradient checkpointing by a name transformers 5 deprecates: not ours to fix.
warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.* is deprecated", category=FutureWarning)

ADAPTER_CARD = "esgexp_adapter.json"
# The config.json fields that must agree between an adapter's base and the model it is loaded on.
BASE_SHAPE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads")
POSITION_LIMIT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def base_config(model_source: str):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model_source)


def base_shape(config) -> dict:
    """The fields of a model config that an adapter depends on (text config for multimodal models)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return {key: getattr(text, key, None) for key in BASE_SHAPE_KEYS}


def check_seq_len(config, max_seq_len: int, model_name: str) -> None:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    limit = next((getattr(text, key) for key in POSITION_LIMIT_KEYS if getattr(text, key, None)), None)
    if limit is not None and max_seq_len > limit:
        raise UserError(
            f"train.max_seq_len={max_seq_len} is longer than model {model_name!r} accepts ({limit} positions)"
        )


def adaptable_modules(model) -> dict[str, str]:
    """Module path -> class name of every layer LoRA can adapt (linear, embedding, convolution)."""
    supported = ("Linear", "Embedding", "Conv1D", "Conv1d", "Conv2d")
    return {name: type(m).__name__ for name, m in model.named_modules() if name and type(m).__name__ in supported}


def check_target_modules(config, lora: DictConfig, model_name: str) -> None:
    """Fail before loading weights when a target module (or a module to save) matches nothing; list the
    names there are. The model is built on the meta device: no memory, no weights."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    all_names = {name.rsplit(".", 1)[-1] for name, _ in skeleton.named_modules() if name}
    missing = [name for name in (lora.modules_to_save or []) if name not in all_names]
    if missing:
        raise UserError(f"model.lora.modules_to_save: {', '.join(missing)} not in model {model_name!r}")
    target_modules = lora.target_modules
    if target_modules == "all-linear":
        return
    modules = adaptable_modules(skeleton)
    available = sorted({name.rsplit(".", 1)[-1] for name in modules})
    if isinstance(target_modules, str):  # peft reads a single string as a regular expression
        if not any(re.fullmatch(target_modules, name) for name in modules):
            raise UserError(
                f"model.lora.target_modules={target_modules!r} matches no module of {model_name!r}; available: {', '.join(available)}"
            )
        return
    unknown = [t for t in target_modules if not any(n == t or n.endswith("." + t) for n in modules)]
    if unknown:
        raise UserError(
            f"model.lora.target_modules: {', '.join(unknown)} not in model {model_name!r}; "
            f"available: {', '.join(available)} (or all-linear)"
        )


def lora_config(lora: DictConfig):
    from peft import LoraConfig, TaskType

    target = lora.target_modules
    if not isinstance(target, str):
        target = list(target)
    return LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=target,
        bias=lora.bias,
        modules_to_save=list(lora.modules_to_save) if lora.modules_to_save else None,
    )


def wrap_for_training(model, lora: DictConfig, gradient_checkpointing: bool, quantised: bool):
    """The peft model with only the adapter (and ``modules_to_save``) trainable."""
    from peft import get_peft_model, prepare_model_for_kbit_training

    if quantised:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)
    elif gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    return get_peft_model(model, lora_config(lora))


def write_card(adapter_dir: Path, cfg: DictConfig, model_source: str, run_id: str | None) -> None:
    card = {
        "base_model": cfg.model.name,
        "base_source": model_source,
        "base_shape": base_shape(base_config(model_source)),
        "load_in_4bit": bool(cfg.model.load_in_4bit),
        "chat_template": bool(cfg.model.chat_template),
        "mlflow_run_id": run_id,
        "dataset": cfg.dataset.name,
        "strategy": cfg.strategy.name,
        "template": cfg.template.name,
        "lora": OmegaConf.to_container(cfg.model.lora, resolve=True),
    }
    (adapter_dir / ADAPTER_CARD).write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")


def read_card(adapter_dir: Path) -> dict:
    path = adapter_dir / ADAPTER_CARD
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def resolve_adapter(spec: str, tracking_uri: str, cache_dir: str | Path) -> Path:
    """The adapter folder named by ``model.adapter``: an adapter folder, a training run folder (its
    ``adapter/``), or an MLflow run id (its run folder, else its logged ``adapter`` artifact)."""
    path = Path(str(spec)).expanduser()
    for candidate in (path, path / "adapter"):
        if (candidate / "adapter_config.json").is_file():
            return candidate
    if path.exists():
        raise UserError(f"model.adapter={spec}: no adapter_config.json in {path} or {path / 'adapter'}")
    if not RUN_ID.match(str(spec)):
        raise UserError(f"model.adapter={spec}: no such folder, and not an MLflow run id (32 hex characters)")
    return adapter_of_run(str(spec), tracking_uri, Path(cache_dir))


def adapter_of_run(run_id: str, tracking_uri: str, cache_dir: Path) -> Path:
    import mlflow
    from mlflow.exceptions import MlflowException

    mlflow.set_tracking_uri(tracking_uri)
    try:
        run = mlflow.get_run(run_id)
    except MlflowException:
        raise UserError(f"model.adapter={run_id}: no such MLflow run in {tracking_uri}") from None
    local = Path(run.data.tags.get("run_dir", "")) / "adapter"
    if run.data.tags.get("run_dir") and (local / "adapter_config.json").is_file():
        return local
    target = cache_dir / "adapters" / run_id
    if not (target / "adapter" / "adapter_config.json").is_file():
        try:
            mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="adapter", dst_path=str(target))
        except (MlflowException, OSError):
            raise UserError(f"model.adapter={run_id}: the run has no adapter (not a fine-tuning run?)") from None
    return target / "adapter"


def check_adapter_base(adapter_dir: Path, model_name: str, model_source: str) -> dict:
    """Refuse an adapter whose card names a base of another shape than ``model_source``; return the card."""
    card = read_card(adapter_dir)
    if not card:
        log.warning("adapter %s has no %s: its base model cannot be checked before loading", adapter_dir, ADAPTER_CARD)
        return card
    shape = base_shape(base_config(model_source))
    if card["base_shape"] != shape:
        differ = ", ".join(
            f"{k} {card['base_shape'].get(k)} vs {shape.get(k)}"
            for k in BASE_SHAPE_KEYS
            if card["base_shape"].get(k) != shape.get(k)
        )
        raise UserError(
            f"model.adapter={adapter_dir} was trained on {card['base_model']!r}, which does not match model={model_name} ({differ}); "
            f"evaluate it with model={card['base_model']}"
        )
    return card


def attach_adapter(model, adapter_dir: Path, merge: bool):
    """``model`` with the adapter loaded; merged into the weights when ``merge`` (faster inference)."""
    from peft import PeftModel

    try:
        peft_model = PeftModel.from_pretrained(model, str(adapter_dir))
    except (RuntimeError, ValueError, KeyError) as error:
        raise UserError(f"model.adapter={adapter_dir} does not fit this base model: {str(error)[:400]}") from None
    return peft_model.merge_and_unload() if merge else peft_model


def adapter_tags(cfg: DictConfig, adapter_dir: Path, card: dict) -> dict[str, str]:
    """Tags that set an adapter run apart from its base on the leaderboard; a warning when the
    evaluation prompts differ from those the adapter was trained on."""
    trained = {key: card.get(key) for key in ("strategy", "template", "chat_template") if key in card}
    used = {
        "strategy": cfg.strategy.name,
        "template": cfg.template.name,
        "chat_template": bool(cfg.model.chat_template),
    }
    differ = {key: value for key, value in trained.items() if used[key] != value}
    if differ:
        log.warning(
            "adapter %s was trained with %s; this run uses %s",
            adapter_dir,
            ", ".join(f"{k}={v}" for k, v in differ.items()),
            ", ".join(f"{k}={used[k]}" for k in differ),
        )
    label = (card.get("mlflow_run_id") or "")[:8] or adapter_dir.parent.name
    return {
        "model": f"{cfg.model.name}+lora:{label}",
        "finetuned_from": cfg.model.name,
        "adapter": str(adapter_dir),
        "adapter_run_id": card.get("mlflow_run_id") or "",
    }
