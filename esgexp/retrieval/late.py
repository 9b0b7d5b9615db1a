"""Late interaction (ColBERT): per-token embeddings, scored by exact MaxSim.

The encoder is ColBERT's own recipe on transformers: a BERT, a linear projection without bias (the
checkpoint's ``linear.weight``), the query marker ``[unused0]`` / document marker ``[unused1]`` after
[CLS], queries padded to ``query_maxlen`` with [MASK] tokens (ColBERT's query augmentation, not attended
to), documents cut at ``doc_maxlen`` with their punctuation tokens dropped, every vector L2-normalised;
the markers and lengths come from the checkpoint's ``artifact.metadata``. It loads Stanford's checkpoints
(``colbert-ir/colbertv2.0``) as they are. The ColBERT libraries do not run on this stack: PyLate 1.6.0
pins sentence-transformers 5.3.0 and transformers <= 5.3.0 (and, through fast-plaid, another torch), and
installed without them it fails on sentence-transformers 6.2 (a loaded encoder gets a pooling layer it
cannot convert; saving reads a removed attribute); colbert-ai 0.2.22 fails to load any checkpoint under
transformers 5 (its model class predates the tied-weights API).
"""

from __future__ import annotations

import json
import string
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from esgexp.core.records import Passage
from esgexp.core.rules import Integer
from esgexp.retrieval.base import Hit, Retriever, top_k
from esgexp.retrieval.dense import (
    DEVICES,
    encoder_problems,
    hub_offline,
    model_label,
    pick_device,
    resolve_source,
    source_stamp,
)

#: Passages and queries whose token vectors are multiplied at once (bounds one similarity block: about
#: 8 x 32 query tokens x 256 x 180 passage tokens).
PASSAGE_BLOCK = 256
QUERY_BLOCK = 8
#: ColBERT's defaults where a checkpoint has no artifact.metadata.
DEFAULTS = {"query_token_id": "[unused0]", "doc_token_id": "[unused1]", "query_maxlen": 32, "doc_maxlen": 180}


class ColBERTEncoder:
    """A ColBERT checkpoint folder: ``encode(texts, query, length)`` gives each text's token vectors."""

    def __init__(self, folder: Path, device: str) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        metadata = folder / "artifact.metadata"
        self.meta = {**DEFAULTS, **(json.loads(metadata.read_text()) if metadata.is_file() else {})}
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.device = pick_device(device)
        self.bert = AutoModel.from_pretrained(folder).to(self.device).eval()
        if (folder / "model.safetensors").is_file():
            from safetensors.torch import load_file

            weights = load_file(folder / "model.safetensors")
        else:
            weights = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        self.linear = weights["linear.weight"].to(self.device, self.bert.dtype)
        vocab = self.tokenizer.get_vocab()
        self.punctuation = torch.tensor([vocab[c] for c in string.punctuation if c in vocab], device=self.device)

    def encode(self, texts: list[str], query: bool, length: int | None, batch_size: int) -> list[np.ndarray]:
        """Per text its normalised token vectors: a query ``length`` of them (padded with [MASK]), a
        document one per kept token (at most ``length``)."""
        import torch

        length = int(length or self.meta["query_maxlen" if query else "doc_maxlen"])
        marker = self.tokenizer.convert_tokens_to_ids(self.meta["query_token_id" if query else "doc_token_id"])
        out: list[np.ndarray] = []
        for start in range(0, len(texts), batch_size):
            batch = self.tokenizer(
                texts[start : start + batch_size],
                padding="max_length" if query else "longest",
                truncation=True,
                max_length=length - 1,
                return_tensors="pt",
            ).to(self.device)
            ids, mask = batch["input_ids"], batch["attention_mask"]
            ids = torch.cat([ids[:, :1], torch.full_like(ids[:, :1], marker), ids[:, 1:]], dim=1)
            mask = torch.cat([mask[:, :1], torch.ones_like(mask[:, :1]), mask[:, 1:]], dim=1)
            if query:
                ids = ids.masked_fill(mask == 0, self.tokenizer.mask_token_id)
            with torch.inference_mode():
                hidden = self.bert(input_ids=ids, attention_mask=mask).last_hidden_state
                vectors = torch.nn.functional.normalize(hidden @ self.linear.T, dim=-1).float().cpu()
            if query:
                out.extend(v.numpy() for v in vectors)
                continue
            keep = (mask.bool() & ~torch.isin(ids, self.punctuation)).cpu()
            out.extend(v[k].numpy() for v, k in zip(vectors, keep))
        return out


@lru_cache(maxsize=2)
def load_colbert(source: str, device: str) -> ColBERTEncoder:
    """The encoder of a resolved folder or hub id (the hub's snapshot in the local cache)."""
    folder = Path(source)
    if not folder.is_dir():
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(source, local_files_only=hub_offline()))
    return ColBERTEncoder(folder, device)


def maxsim(queries: list[np.ndarray], tokens: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """ColBERT's score of each query against each passage: for every query token its best inner product
    with the passage's tokens, summed over the query's tokens. ``tokens`` holds the passages' token vectors
    one after another, passage ``j`` from row ``starts[j]`` (every passage has at least one token);
    returns a (queries x passages) matrix."""
    sims = np.concatenate(queries) @ tokens.T
    best = np.maximum.reduceat(sims, starts, axis=1)
    bounds = np.cumsum([0, *(len(q) for q in queries)])
    return np.add.reduceat(best, bounds[:-1], axis=0)


class ColBERTRetriever(Retriever):
    """MaxSim over ColBERT token vectors, computed exactly over every passage in scope.

    ``model``: a hub id from the local Hugging Face cache (``colbert-ir/colbertv2.0``) or a checkpoint
    folder; ``query_length`` / ``document_length``: token budgets (None: the checkpoint's own, ColBERT's 32
    and 180 where it names none); ``device``: ``auto``, ``cpu`` or ``cuda``. The index (token vectors in
    float16 and each passage's first row) depends on the model, its files and ``document_length``.
    """

    rules: ClassVar[dict] = {
        "query_length": Integer(1, optional=True),
        "document_length": Integer(1, optional=True),
        "batch_size": Integer(1),
        "device": DEVICES,
    }

    @classmethod
    def preflight(cls, node) -> list[str]:
        return encoder_problems(node, ("model",))

    @classmethod
    def encoder_label(cls, node) -> str | None:
        return model_label(node)

    def __init__(
        self,
        name: str = "colbert",
        model: str | None = None,
        query_length: int | None = None,
        document_length: int | None = None,
        batch_size: int = 32,
        device: str = "auto",
    ) -> None:
        super().__init__(name)
        self.model = resolve_source(model, name)
        self.query_length, self.document_length = query_length, document_length
        self.batch_size, self.device = batch_size, device
        self.tokens = np.empty((0, 0), dtype=np.float16)
        self.starts = np.empty(0, dtype=np.int64)

    def settings(self) -> dict[str, Any]:
        return {"model": self.model, "model_files": source_stamp(self.model), "document_length": self.document_length}

    def encode(self, texts: list[str], query: bool) -> list[np.ndarray]:
        """Per text, its token vectors (float32, one row per token)."""
        length = self.query_length if query else self.document_length
        return load_colbert(self.model, self.device).encode(texts, query, length, self.batch_size)

    def build_index(self, passages: list[Passage]) -> None:
        vectors = self.encode([p.text for p in passages], query=False)
        self.starts = np.cumsum([0, *(len(v) for v in vectors)])[:-1]
        self.tokens = np.concatenate(vectors).astype(np.float16)

    def save_index(self, directory: Path) -> None:
        np.save(directory / "tokens.npy", self.tokens)
        np.save(directory / "starts.npy", self.starts)

    def load_index(self, directory: Path) -> None:
        self.tokens = np.load(directory / "tokens.npy")
        self.starts = np.load(directory / "starts.npy")

    def passage_scores(self, queries: list[np.ndarray], rows: np.ndarray) -> np.ndarray:
        """MaxSim of each query against the passages ``rows`` (ascending): ``PASSAGE_BLOCK`` passages at a
        time, against ``QUERY_BLOCK`` queries at a time (bounds the similarity matrix)."""
        ends = np.append(self.starts[1:], len(self.tokens))
        scores = np.empty((len(queries), len(rows)), dtype=np.float32)
        for at in range(0, len(rows), PASSAGE_BLOCK):
            block = rows[at : at + PASSAGE_BLOCK]
            picked = np.concatenate([np.arange(s, e) for s, e in zip(self.starts[block], ends[block])])
            tokens = self.tokens[picked].astype(np.float32)
            starts = np.cumsum([0, *(ends[block] - self.starts[block])])[:-1]
            for first in range(0, len(queries), QUERY_BLOCK):
                chunk = queries[first : first + QUERY_BLOCK]
                scores[first : first + len(chunk), at : at + len(block)] = maxsim(chunk, tokens, starts)
        return scores

    def _search(self, queries: list[str], k: int, scopes: list[str | None]) -> list[list[Hit]]:
        vectors = self.encode(queries, query=True)
        by_scope: dict[str | None, list[int]] = {}
        for i, doc in enumerate(scopes):
            by_scope.setdefault(doc, []).append(i)
        results: list[list[Hit]] = [[] for _ in queries]
        for doc, members in by_scope.items():
            scope = self.rows(doc)
            rows = np.arange(len(self.passages)) if scope is None else scope
            for i, scores in zip(members, self.passage_scores([vectors[i] for i in members], rows)):
                best = top_k(scores, k)
                results[i] = self._hits(rows[best], scores[best])
        return results
