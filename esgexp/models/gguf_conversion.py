"""A GGUF model file (inside an installed package) turned into a transformers folder: dequantised
safetensors weights, config and tokenizer."""

from __future__ import annotations

import copy
import logging
import shutil
import tempfile
from contextlib import ExitStack, contextmanager
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)


def convert_gguf(gguf_path: Path, target: Path) -> None:
    """The model and tokenizer of ``gguf_path``, dequantised, saved as the folder ``target`` (written in a
    staging folder beside it, then renamed)."""
    log.info("converting %s to safetensors in %s (once)", gguf_path, target)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with gguf_read_once():
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    # The GGUF weights are dequantised on load; drop the quantiser marker so they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / "config.json").is_file():  # not another process finishing first
            raise


@contextmanager
def gguf_read_once():
    """Inside, transformers parses a GGUF file's metadata once (it does so for the tokenizer and again for
    the config) and gguf's tensor name map is built once per architecture (transformers rebuilds it for
    every module it walks). SmolLM2-135M: 36 s to convert, 20 s inside, byte-identical weights. Where either
    library no longer has the function, it is left as it is."""
    import gguf
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    with ExitStack() as patches:
        if hasattr(gguf, "get_tensor_name_map"):
            name_map = lru_cache(maxsize=None)(gguf.get_tensor_name_map)
            patches.enter_context(swapped(gguf, "get_tensor_name_map", name_map))
        if hasattr(gguf_utils, "load_gguf_checkpoint"):
            parse = gguf_utils.load_gguf_checkpoint
            metadata = {}

            def parsed(path, return_tensors=False, **options):
                if return_tensors or options:
                    return parse(path, return_tensors=return_tensors, **options)
                if path not in metadata:
                    metadata[path] = parse(path, return_tensors=False)
                return copy.deepcopy(metadata[path])  # each caller may change what it gets

            patches.enter_context(swapped(gguf_utils, "load_gguf_checkpoint", parsed))
        yield


@contextmanager
def swapped(owner, name: str, replacement):
    """``owner.name`` is ``replacement`` inside, what it was before outside."""
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)
