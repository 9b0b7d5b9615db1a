"""A configured model ready for inference (``model.adapter`` merged in) and its chat formatting."""

from __future__ import annotations

from omegaconf import DictConfig

from esgexp.errors import UserError


def load_for_inference(model_cfg: DictConfig, source: str, tokenizer, on_gpu: bool, seed: int, adapter=None):
    """The model at ``source`` in eval mode (on the GPU when ``on_gpu``), with ``adapter`` (its folder and
    card, from ``prepare_adapter``) merged in; a 4-bit base keeps it unmerged beside it."""
    import torch

    from esgexp.models.loading import load_model_and_tokenizer

    torch.manual_seed(seed)
    model, _ = load_model_and_tokenizer(source, model_cfg, on_gpu, tokenizer=tokenizer)
    if adapter:
        from esgexp.models.lora import attach_adapter

        model = attach_adapter(model, adapter[0], merge=not model_cfg.load_in_4bit)
        model.eval()
    return model


def prepare_adapter(model_cfg: DictConfig, model_source: str, tracking_uri: str, cache_dir: str):
    """``model.adapter`` as a local folder, checked against the base model; and its card."""
    from pathlib import Path

    from esgexp.models.lora import check_adapter_base, resolve_adapter

    adapter_dir = resolve_adapter(model_cfg.adapter, tracking_uri, Path(cache_dir))
    return adapter_dir, check_adapter_base(adapter_dir, model_cfg.name, model_source)


def model_input(prompt: str, tokenizer, chat_template: bool) -> str:
    """The raw prompt, or the prompt as one user turn of the model's chat template."""
    if not chat_template:
        return prompt
    if not tokenizer.chat_template:
        raise UserError("model.chat_template=true but the tokenizer has no chat template")
    messages = [{"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
