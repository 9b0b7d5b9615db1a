"""A configured model ready for inference, its chat formatting, and plain text generation."""

from __future__ import annotations

from omegaconf import DictConfig

from esgexp.errors import UserError


def load_for_inference(cfg: DictConfig, model_source: str):
    """The model (on the GPU when the trainer may use one, with ``model.adapter`` merged in) and its tokenizer."""
    import torch

    from esgexp.models.loading import load_model_and_tokenizer

    torch.manual_seed(cfg.seed)
    if cfg.trainer.accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise UserError(f"trainer.accelerator={cfg.trainer.accelerator} but no CUDA GPU is visible; use auto or cpu")
    on_gpu = cfg.trainer.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    model, tokenizer = load_model_and_tokenizer(model_source, cfg.model, on_gpu)
    if cfg.model.adapter:
        from esgexp.models.lora import attach_adapter

        adapter_dir, _ = prepare_adapter(cfg, model_source)
        # A 4-bit base cannot take merged weights: the adapter then runs beside it.
        model = attach_adapter(model, adapter_dir, merge=not cfg.model.load_in_4bit)
        model.eval()
    return model, tokenizer


def prepare_adapter(cfg: DictConfig, model_source: str):
    """``model.adapter`` as a local folder, checked against the base model; and its card."""
    from pathlib import Path

    from esgexp.models.lora import check_adapter_base, resolve_adapter

    adapter_dir = resolve_adapter(cfg.model.adapter, cfg.tracking.uri, Path(cfg.paths.cache_dir))
    return adapter_dir, check_adapter_base(adapter_dir, cfg.model.name, model_source)


def model_input(prompt: str, tokenizer, chat_template: bool) -> str:
    """The raw prompt, or the prompt as one user turn of the model's chat template."""
    if not chat_template:
        return prompt
    if not tokenizer.chat_template:
        raise UserError("model.chat_template=true but the tokenizer has no chat template")
    messages = [{"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def generate_texts(cfg: DictConfig, prompts: dict[str, str], max_new_tokens: int) -> dict[str, str]:
    """Greedy completions of ``prompts`` (id -> prompt) by the configured model, batched through Lightning."""
    from esgexp.models.inference import PromptDataModule, run_inference
    from esgexp.models.loading import resolve_model_dir
    from esgexp.models.scoring import GenerateScorer

    model, tokenizer = load_for_inference(cfg, resolve_model_dir(cfg.model, cfg.paths.cache_dir))
    ids = list(prompts)
    inputs = [model_input(prompts[i], tokenizer, cfg.model.chat_template) for i in ids]
    data = PromptDataModule(ids, inputs, tokenizer, cfg.trainer.batch_size)
    outputs: dict[str, str] = {}

    def keep(results: list[dict]) -> None:
        for result in results:
            if result.get("failed"):
                raise RuntimeError(f"generation failed for {result['id']}: {result['error']}")
            outputs[result["id"]] = result["output"]

    run_inference(model, GenerateScorer(tokenizer, max_new_tokens), data, keep, cfg.trainer.accelerator, cfg.trainer.progress_bar)
    return outputs
