"""``backend=vllm``: offline ``vllm.LLM`` on one or more GPUs (``pip install -e ".[vllm]"``).

Greedy decoding with stop strings, letter log-probabilities from the next token's top list (``logprobs``
of the first generated token, the letters looked up by token id), prefix caching on, and
``model.adapter`` served through a LoRA request, so fine-tuned adapters evaluate here too. A request's
``json_schema`` is passed as vLLM's structured-outputs parameter (not run here: no GPU on our machines).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from omegaconf import DictConfig

from esgexp.backends.base import OnResults, Request, Response, RunContext
from esgexp.backends.local import LocalModelBackend, template_opening
from esgexp.core.rules import Choice, Integer, Number


class VLLMBackend(LocalModelBackend):
    """A model served in-process by vLLM: ``dtype``, ``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_model_len``."""

    name = "vllm"
    rules: ClassVar[dict] = {
        "dtype": Choice(("float16", "bfloat16", "auto")),
        "tensor_parallel_size": Integer(1),
        "gpu_memory_utilization": Number(0, 1, above=True),
        "max_model_len": Integer(1, optional=True),
        "max_logprobs": Integer(1),
        "batch_size": Integer(1),
    }
    runtime_keys = ("batch_size", "gpu_memory_utilization")
    packages = ("torch", "transformers", "vllm")
    serves_on_gpu = True
    requires: ClassVar[dict] = {
        "vllm": 'backend=vllm needs the vllm package: pip install -e ".[vllm]" (on a machine with a CUDA GPU)'
    }

    def __init__(
        self,
        model_cfg: DictConfig,
        context: RunContext,
        dtype: str = "auto",
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        max_logprobs: int = 20,
        batch_size: int = 256,
    ):
        super().__init__(model_cfg, context)
        self.settings = {
            "dtype": dtype,
            "tensor_parallel_size": int(tensor_parallel_size),
            "gpu_memory_utilization": float(gpu_memory_utilization),
            "max_model_len": max_model_len,
            "max_logprobs": int(max_logprobs),
        }
        self.batch_size = int(batch_size)
        self.seed = context.seed
        self._llm = None

    def identity(self) -> dict:
        return {**super().identity(), "dtype": self.settings["dtype"]}

    @property
    def llm(self):
        if self._llm is None:
            from vllm import LLM

            self._llm = LLM(
                model=self.source,
                enable_prefix_caching=True,
                enable_lora=bool(self.adapter),
                seed=self.seed,
                **{k: v for k, v in self.settings.items() if v is not None},
            )
        return self._llm

    def lora_request(self):
        if not self.adapter:
            return None
        from vllm.lora.request import LoRARequest

        return LoRARequest("adapter", 1, str(self.adapter[0]))

    def run(self, requests: Sequence[Request], on_results: OnResults) -> None:
        """Chunks of ``batch_size`` requests through ``LLM.generate``; each chunk handed over when done."""
        from vllm import SamplingParams

        from esgexp.models.scoring import letter_token_ids

        letter_ids = None
        for start in range(0, len(requests), self.batch_size):
            chunk = list(requests[start : start + self.batch_size])
            texts = [self.rendered(r) for r in chunk]
            if chunk[0].kind == "logprob":
                letter_ids = letter_ids or letter_token_ids(self.tokenizer, texts[0], list(chunk[0].letters))
                params = [
                    SamplingParams(max_tokens=1, temperature=0, logprobs=self.settings["max_logprobs"]) for _ in chunk
                ]
            else:
                params = [
                    SamplingParams(
                        max_tokens=r.max_new_tokens,
                        temperature=r.temperature,
                        seed=r.seed,
                        stop=list(r.stop) or None,
                        **structured_outputs(r.json_schema),
                    )
                    for r in chunk
                ]
            outputs = self.llm.generate(texts, params, lora_request=self.lora_request(), use_tqdm=False)
            on_results([self.response(r, out, letter_ids, text) for r, out, text in zip(chunk, outputs, texts)])

    def response(self, request: Request, output, letter_ids: dict[str, int] | None, rendered: str) -> Response:
        """vLLM's ``output`` for ``request`` (its prompt as ``rendered``) as a Response; a generated text keeps
        the reasoning block its prompt opened in front (``template_opening``)."""
        completion = output.outputs[0]
        usage = {"prompt_tokens": len(output.prompt_token_ids), "completion_tokens": len(completion.token_ids)}
        if request.kind != "logprob":
            return Response(request.id, output=template_opening(rendered) + completion.text, usage=usage)
        top = completion.logprobs[0]
        scores = {
            letter: float(top[token].logprob) if token in top else -math.inf for letter, token in letter_ids.items()
        }
        return Response(request.id, output=max(scores, key=scores.get), scores=scores, usage=usage)

    def close(self) -> None:
        """Drop the engine and free the GPU for the next job of a sweep."""
        if self._llm is None:
            return
        import gc

        import torch

        self._llm = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def structured_outputs(schema: str | None) -> dict:
    """The SamplingParams keyword for a JSON Schema: ``structured_outputs`` (vLLM >= 0.10.2), else the
    older ``guided_decoding``; nothing without a schema."""
    if schema is None:
        return {}
    try:
        from vllm.sampling_params import StructuredOutputsParams
    except ImportError:
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(json=schema)}
    return {"structured_outputs": StructuredOutputsParams(json=schema)}
