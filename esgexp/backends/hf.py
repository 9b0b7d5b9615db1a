"""``backend=hf``: a transformers model on this machine, batched through Lightning ``Trainer.predict``.

Length-sorted, left-padded batches; the key/value cache of the prefix all prompts share is computed
once (logprob and generate modes); a batch that runs out of memory is retried in halves (models/inference.py).
The weights load on the first request that the cache cannot answer. A request's ``json_schema`` is
enforced while decoding (backends/structured.py): requests that differ only in their schema share
batches, each row under its own; requests without a schema run in batches of their own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from itertools import groupby
from typing import ClassVar

from omegaconf import DictConfig

from esgexp.backends.base import OnResults, Request, Response, RunContext
from esgexp.backends.local import LocalModelBackend, template_opening
from esgexp.core.rules import Choice, Integer, Number
from esgexp.errors import UserError

log = logging.getLogger(__name__)


class HFBackend(LocalModelBackend):
    """A causal LM loaded with transformers, ``model.adapter`` merged into it."""

    name = "hf"
    rules: ClassVar[dict] = {
        "batch_size": Integer(1),
        "logprob_autocast": Choice(("bfloat16",), optional=True),
        "recheck_margin": Number(low=0),
    }
    runtime_keys = ("batch_size", "progress_bar", "accelerator")

    def __init__(
        self,
        model_cfg: DictConfig,
        context: RunContext,
        accelerator: str = "auto",
        batch_size: int = 8,
        progress_bar: bool = True,
        prefix_cache: bool = True,
        logprob_autocast: str | None = None,
        recheck_margin: float = 0.1,
    ):
        super().__init__(model_cfg, context)
        self.accelerator = accelerator
        self.batch_size = batch_size
        self.progress_bar = progress_bar
        self.prefix_cache = prefix_cache
        self.logprob_autocast, self.recheck_margin = logprob_autocast, recheck_margin
        self.n_rechecked = 0  # logprob answers scored again without autocast (close calls)
        self._model = None

    @property
    def on_gpu(self) -> bool:
        import torch

        if self.accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
            raise UserError(f"trainer.accelerator={self.accelerator} but no CUDA GPU is visible; use auto or cpu")
        return self.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()

    def identity(self) -> dict:
        from esgexp.models.loading import torch_dtype

        dtype = str(torch_dtype(self.model_cfg.dtype, self.on_gpu)).removeprefix("torch.")
        identity = {**super().identity(), "dtype": dtype, "load_in_4bit": bool(self.model_cfg.get("load_in_4bit"))}
        if self.logprob_autocast:  # its letter scores differ from the weights' own arithmetic's
            identity.update(logprob_autocast=self.logprob_autocast, recheck_margin=self.recheck_margin)
        return identity

    def loaded_model(self):
        if self._model is None:
            from esgexp.models.generation import load_for_inference

            self._model = load_for_inference(
                self.model_cfg, self.source, self.tokenizer, self.on_gpu, self.context.seed, self.adapter
            )
        return self._model

    def run(self, requests: Sequence[Request], on_results: OnResults) -> None:
        """Each group of requests with the same decoding settings through one ``Trainer.predict``."""
        from esgexp.models.inference import PromptDataModule, run_inference

        def settings(request: Request) -> tuple:
            if request.kind == "logprob":
                return ("logprob", request.letters)
            return ("generate", request.max_new_tokens, request.stop, request.json_schema is not None)

        for _, group in groupby(sorted(requests, key=lambda r: repr(settings(r))), key=lambda r: repr(settings(r))):
            group = list(group)
            texts = [self.rendered(r) for r in group]
            data = PromptDataModule([r.id for r in group], texts, self.tokenizer, self.batch_size)
            scorer = self.scorer(group, texts, [tokens for _, tokens in data.examples])
            generated = group[0].kind != "logprob"
            openings = {r.id: template_opening(text) if generated else "" for r, text in zip(group, texts)}

            def hand_over(results: list[dict], openings=openings) -> None:
                self.n_rechecked += sum(1 for result in results if result.get("rechecked"))
                on_results([response_of(result, openings[result["id"]]) for result in results])

            run_inference(self.loaded_model(), scorer, data, hand_over, self.accelerator, self.progress_bar)

    def scorer(self, group: Sequence[Request], texts: list[str], token_ids: list[list[int]]):
        """The scorer for ``group`` (requests with the same decoding settings), given their rendered
        prompts ``texts`` and the prompts' ``token_ids``."""
        from esgexp.models.scoring import GenerateScorer, LogprobScorer, common_prefix, letter_token_ids

        request = group[0]
        prefix = common_prefix(token_ids) if self.prefix_cache else []
        if request.kind == "logprob":
            letters = letter_token_ids(self.tokenizer, texts[0], list(request.letters))
            return LogprobScorer(letters, prefix, self.checked_autocast(), self.recheck_margin)
        constraint = None
        if request.json_schema is not None:
            from esgexp.backends.structured import json_constraint

            schemas = {r.id: r.json_schema for r in group}
            constraint = json_constraint(self.tokenizer, self.loaded_model().config.vocab_size, schemas)
        return GenerateScorer(self.tokenizer, request.max_new_tokens, tuple(request.stop), constraint, prefix)

    def stats(self) -> dict[str, int]:
        """``n_rechecked`` (the close calls scored again in float32) where ``logprob_autocast`` is set."""
        return {"n_rechecked": self.n_rechecked} if self.logprob_autocast else {}

    def checked_autocast(self) -> str | None:
        """``logprob_autocast``, which runs over float32 weights only (a UserError naming the setting else); on
        a CPU without native bf16 a warning says it is slower there than float32."""
        from esgexp.models.loading import cpu_has_fast_bf16, torch_dtype

        if not self.logprob_autocast:
            return None
        dtype = str(torch_dtype(self.model_cfg.dtype, self.on_gpu)).removeprefix("torch.")
        if dtype != "float32" or self.model_cfg.get("load_in_4bit"):
            raise UserError(
                f"backend.logprob_autocast={self.logprob_autocast} computes over float32 weights and rechecks close "
                f"calls in float32, but model.dtype={self.model_cfg.dtype} loads {dtype} weights here; set "
                "model.dtype=float32, or backend.logprob_autocast=null"
            )
        native, reason = cpu_has_fast_bf16()
        if not self.on_gpu and not native:
            log.warning(
                "backend.logprob_autocast=%s: %s; bf16 is emulated on this CPU and slower than float32 "
                "(backend.logprob_autocast=null is faster here)",
                self.logprob_autocast,
                reason,
            )
        return self.logprob_autocast

    def close(self) -> None:
        """Drop the model and free the GPU's cached memory for the next job of a sweep."""
        self._model = None
        import gc

        import torch

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def response_of(result: dict, opening: str = "") -> Response:
    """A scorer's result dict (``id``, ``output``, ``scores`` or ``failed``/``error``) as a Response; a
    generated output after ``opening`` (the reasoning block its prompt opened) keeps it in front, so an
    answer cut off mid-thought reads as unfinished reasoning (esgexp.eval.mcq.final_answer)."""
    if result.get("failed"):
        return Response(id=result["id"], failed=True, error=result["error"])
    return Response(id=result["id"], output=opening + result["output"], scores=result.get("scores"))
