"""A sentence-transformers bi-encoder whose transformer runs in OpenVINO (``retriever.runtime=openvino``).

The transformer (the encoder's first module) is converted from the loaded torch weights (once per process,
or once per machine with a ``saved`` file: the converted model is written there and read back next time)
and compiled for the CPU in bfloat16 or float32; sentence-transformers still tokenises (with the prompt)
and its other modules (pooling, dense layers, normalisation) still run in torch on the float32 token
vectors, so the vectors differ from torch's only by the arithmetic of the transformer. Batches go longest
first by tokens (sentence-transformers sorts by characters, which pads more), through two infer requests
at once (one per CPU stream).
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from esgexp.errors import UserError

log = logging.getLogger(__name__)

# OpenVINO's name for each precision it runs here (float16 is a GPU precision: torch serves it).
HINTS = {"float32": "f32", "bfloat16": "bf16"}
# A batch is padded to a multiple of this many word pieces: fewer distinct shapes for OpenVINO's kernels,
# 8% more passages/s on an AMX CPU (benchmarks/RESULTS.md) for a few pad tokens more.
PAD_MULTIPLE = 16


def installed() -> bool:
    """Whether the ``openvino`` package can be imported here."""
    from importlib.util import find_spec

    return find_spec("openvino") is not None


def computes_bf16() -> bool:
    """Whether OpenVINO's CPU plugin has bf16 kernels here (AMX or AVX512-BF16); elsewhere it compiles float32."""
    import openvino

    return "BF16" in openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


class OpenVINOEncoder:
    """``encoder`` (a loaded SentenceTransformer whose first module is a transformers model) with that module
    compiled by OpenVINO in ``precision`` (float32 or bfloat16), on as many CPU threads as torch uses;
    ``saved``: where the converted model is kept (an ``.xml`` path; None: converted every time)."""

    def __init__(self, encoder: Any, precision: str, saved: Path | None = None) -> None:
        import openvino
        import torch

        if precision not in HINTS:
            raise UserError(f"retriever.runtime=openvino computes in {' or '.join(HINTS)}, not {precision}")
        self.encoder, self.modules = encoder, list(encoder)[1:]
        # two lengths, so that the traced model takes the padded path (the attention mask) as real batches do
        sample = encoder.preprocess(["scope 1", "an example passage about scope 1 and scope 2 emissions"])
        self.input_names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in sample]
        if saved is not None and saved.is_file():
            converted = openvino.Core().read_model(saved)
        else:
            converted = self.converted({name: sample[name] for name in self.input_names})
            if saved is not None:
                keep(converted, saved)
        config = {
            "INFERENCE_PRECISION_HINT": HINTS[precision],
            "PERFORMANCE_HINT": "THROUGHPUT",
            "INFERENCE_NUM_THREADS": torch.get_num_threads(),
        }
        self.compiled = openvino.Core().compile_model(converted, "CPU", config)
        ran = self.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        if precision == "bfloat16" and ran != "bf16":  # OpenVINO keeps f32 on a CPU without bf16 instructions
            raise UserError(
                f"OpenVINO computes no bfloat16 on this CPU (it would run {ran} under retriever.precision=bfloat16; "
                "its CPU capabilities: "
                f"{' '.join(openvino.Core().get_property('CPU', 'OPTIMIZATION_CAPABILITIES'))}): set "
                "retriever.runtime=torch for bf16 (emulated here, slower than float32) or retriever.precision=float32"
            )
        self.requests = max(1, int(self.compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))

    def converted(self, example: dict) -> Any:
        """The transformer as an OpenVINO model, traced on ``example`` inputs; a UserError naming the model when
        OpenVINO cannot convert it."""
        import openvino
        import torch

        model = self.encoder[0].model
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore", torch.jit.TracerWarning)  # shape checks traced as constants
                return openvino.convert_model(token_vectors(model), example_input=example)
        except Exception as error:  # a model OpenVINO cannot trace: named, torch still serves it
            raise UserError(
                f"retriever.runtime=openvino: OpenVINO cannot convert {type(model).__name__} "
                f"({type(error).__name__}: {str(error).splitlines()[0][:200]}); use retriever.runtime=torch"
            ) from error

    def encode(
        self, texts: list[str], prompt: str | None, batch_size: int, normalize: bool, progress: bool = False
    ) -> np.ndarray:
        """float32 vectors, one row per text in the order given (unit vectors when ``normalize``); ``progress``:
        a progress bar over the texts on stderr."""
        import openvino
        import torch
        from tqdm import tqdm

        tokens = self.encoder.tokenizer(texts, truncation=True)["input_ids"] if texts else []
        order = sorted(range(len(texts)), key=lambda i: -len(tokens[i]))  # batches of one length: little padding
        vectors: list[np.ndarray | None] = [None] * len(texts)

        def pooled(request, batch: tuple[list[int], dict]) -> None:
            rows, features = batch
            features["token_embeddings"] = torch.from_numpy(request.get_output_tensor(0).data.copy())
            with torch.inference_mode():
                for module in self.modules:
                    features = module(features)
            found = features["sentence_embedding"].float()
            if normalize:
                found = torch.nn.functional.normalize(found, p=2, dim=1)
            for row, vector in zip(rows, found.numpy()):
                vectors[row] = vector

        queue = openvino.AsyncInferQueue(self.compiled, self.requests)
        queue.set_callback(pooled)
        with tqdm(total=len(texts), desc="embedding", unit="passage", disable=not progress) as bar:
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                features = self.encoder.preprocess(
                    [texts[i] for i in rows],
                    prompt=prompt,
                    processing_kwargs={"text": {"pad_to_multiple_of": PAD_MULTIPLE}},
                )
                inputs = {name: features[name].numpy() for name in self.input_names}
                queue.start_async(inputs, userdata=(rows, features))  # waits while every request is busy
                bar.update(len(rows))
            queue.wait_all()
        if any(vector is None for vector in vectors):
            raise RuntimeError("OpenVINO returned no vector for some texts (a failed infer request)")
        if not texts:
            return np.empty((0, 0), dtype=np.float32)
        return np.ascontiguousarray(np.stack(vectors), dtype=np.float32)


def keep(converted: Any, saved: Path) -> None:
    """Write ``converted`` to ``saved`` (``.xml``, its weights beside it in ``.bin``) so that a reader never sees
    half a file: written under a name of this process's own, then renamed, weights first. A folder that
    cannot be written only costs the next process a conversion."""
    import openvino

    staged = saved.with_name(f".{saved.stem}.{os.getpid()}.xml")
    try:
        saved.parent.mkdir(parents=True, exist_ok=True)
        openvino.save_model(converted, staged, compress_to_fp16=False)
        os.replace(staged.with_suffix(".bin"), saved.with_suffix(".bin"))
        os.replace(staged, saved)
    except Exception as error:  # OSError, or OpenVINO's RuntimeError (a full disk while it writes)
        for left in (staged, staged.with_suffix(".bin")):
            left.unlink(missing_ok=True)
        log.warning("retriever: the converted encoder could not be kept in %s (%s)", saved.parent, error)


def token_vectors(model: Any) -> Any:
    """A torch module around a transformers ``model`` whose one output is the token vectors (what tracing sees)."""
    import torch

    class TokenVectors(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            return self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state

    return TokenVectors().eval()
