"""What the backends that load weights on this machine share (hf, vllm): the weights found from the
model config (``model.path`` | packaged GGUF | hub cache), ``model.adapter`` checked against them,
the tokenizer (loaded without the model: a cached rerun never loads weights) and the model input."""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

from omegaconf import DictConfig

from esgexp.backends.base import REASONING_OPEN, Backend, Request, RunContext

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


def files_stamp(folder: Path) -> str:
    """A hash of the names, sizes and modification times (nanoseconds: a file saved over within the same
    second is new) of the weight files in ``folder``."""
    entries = sorted(
        (p.name, p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.iterdir()
        if p.is_file() and p.suffix in WEIGHT_SUFFIXES
    )
    return hashlib.sha256(repr(entries).encode()).hexdigest()[:16]


def weights_stamp(source: str) -> str:
    """A local folder's weight files, or the hub snapshot (commit) in the local cache."""
    path = Path(source)
    if path.is_dir():
        return files_stamp(path)
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(source, "config.json")
    return Path(config).parent.name if isinstance(config, str) else "unknown"


class LocalModelBackend(Backend):
    """A model whose weights are on this machine; subclasses load and run it."""

    packages = ("torch", "transformers", "peft")

    @classmethod
    def preflight(cls, backend_cfg, model_cfg, cache_dir: str) -> list[str]:
        """Local weights missing or not in the (offline) Hugging Face cache; a model.adapter folder not there."""
        from esgexp.errors import UserError
        from esgexp.models.loading import check_hub_cache, find_package_file, resolve_model_dir

        try:
            if model_cfg.get("path"):
                resolve_model_dir(model_cfg, cache_dir)
            elif model_cfg.get("gguf"):
                find_package_file(model_cfg.gguf.package, model_cfg.gguf.file)
            elif model_cfg.get("hub_id"):
                check_hub_cache(model_cfg.name, model_cfg.hub_id)
            adapter = model_cfg.get("adapter")
            if adapter and not re.fullmatch(r"[0-9a-f]{32}", str(adapter)) and not Path(str(adapter)).exists():
                return [f"model.adapter: {adapter} does not exist"]
        except UserError as error:
            return [f"weights: {str(error).split('. Download')[0]}"]
        return []

    def __init__(self, model_cfg: DictConfig, context: RunContext):
        from esgexp.models.generation import prepare_adapter
        from esgexp.models.loading import resolve_model_dir

        self.model_cfg = model_cfg
        self.context = context
        # Finding the weights (and checking the adapter) comes first: a wrong model config fails here.
        self.source = resolve_model_dir(model_cfg, context.cache_dir)
        self.adapter = (
            prepare_adapter(model_cfg, self.source, context.tracking_uri, context.cache_dir)
            if model_cfg.adapter
            else None
        )
        self._tokenizer = None

    def identity(self) -> dict:
        identity = {
            "backend": self.name,
            "model": self.model_cfg.get("hub_id") or self.model_cfg.name,
            "weights": weights_stamp(self.source),
        }
        if self.adapter:
            identity["adapter"] = {"path": str(self.adapter[0]), "weights": files_stamp(self.adapter[0])}
        return identity

    def supports(self, kind: str) -> bool:
        return kind in ("generate", "logprob")

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from esgexp.models.loading import load_tokenizer

            self._tokenizer = load_tokenizer(self.source)
            # model=local knows nothing of the model: a named config (conf/model/) chose its setting on purpose
            if self.model_cfg.name == "local" and self._tokenizer.chat_template and not self.model_cfg.chat_template:
                log.warning(
                    "model %s: its tokenizer has a chat template, but model.chat_template=false sends prompts as "
                    "plain text; an instruct model answers far better through it: model.chat_template=true",
                    self.model_cfg.name,
                )
        return self._tokenizer

    def rendered(self, request: Request) -> str:
        """The prompt as the model config says (raw, or one user turn of the chat template), or the chat messages."""
        from esgexp.models.generation import model_input

        if request.messages is not None:
            return self.tokenizer.apply_chat_template(
                [{"role": role, "content": content} for role, content in request.messages],
                tokenize=False,
                add_generation_prompt=True,
            )
        return model_input(request.prompt, self.tokenizer, self.model_cfg.chat_template)


def template_opening(rendered: str) -> str:
    """The reasoning block that a chat template opens at the end of the rendered prompt ``rendered``
    (DeepSeek-R1 distills and QwQ end the generation prompt with ``<think>``), which the model's output
    continues; '' when the prompt opens none."""
    return REASONING_OPEN + "\n" if rendered.rstrip().endswith(REASONING_OPEN) else ""
