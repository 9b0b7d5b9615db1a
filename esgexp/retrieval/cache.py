"""Indexes saved on disk, keyed by corpus and retriever settings (the retriever factory: factory.py).

It knows a retriever only by the ``Indexed`` protocol below, so it imports no retriever module."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Protocol

from esgexp.errors import UserError

log = logging.getLogger(__name__)

# Bump when a saved index's layout changes: every old entry then misses.
FORMAT = 1


class Indexed(Protocol):
    """What the cache reads of a retriever (esgexp/retrieval/base.py): its name, passages, index settings,
    and how it builds, saves and loads its index."""

    name: str
    passages: list

    def settings(self) -> dict[str, Any] | None: ...
    def build_index(self, passages: list) -> None: ...
    def save_index(self, directory: Path) -> None: ...
    def load_index(self, directory: Path) -> None: ...


class IndexCache:
    """Indexes under ``<cache_dir>/retrieval/<name>-<key>``.

    ``key``: sha256 of the corpus hash, the retriever class and its ``settings()`` (the knobs the
    index depends on: search-time knobs such as a dense backend share one entry). A hit loads the
    index instead of building it; a miss builds it and saves it (written aside, then renamed into
    place) with ``ids.json`` (the passage ids in row order, checked on every hit) and ``settings.json``.
    """

    def __init__(self, cache_dir: str | Path, corpus_hash: str) -> None:
        self.root = Path(cache_dir) / "retrieval"
        self.corpus_hash = corpus_hash

    def directory(self, retriever: Indexed) -> Path:
        cls = type(retriever)
        spec = {
            "format": FORMAT,
            "corpus": self.corpus_hash,
            "class": f"{cls.__module__}.{cls.__qualname__}",
            "settings": retriever.settings(),
        }
        key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()[:16]
        return self.root / f"{retriever.name}-{key}"

    def load_or_build(self, retriever: Indexed) -> None:
        """Load ``retriever``'s saved index, or build and save it."""
        path = self.directory(retriever)
        ids = [p.id for p in retriever.passages]
        if path.is_dir():
            try:
                cached_ids = json.loads((path / "ids.json").read_text(encoding="utf-8"))
                if cached_ids == ids:
                    retriever.load_index(path)
            except (OSError, ValueError) as error:  # an entry cut short or from an older layout
                log.warning(
                    "retriever %s: the cached index %s is unreadable (%s); rebuilding it", retriever.name, path, error
                )
                shutil.rmtree(path, ignore_errors=True)
            else:
                if cached_ids != ids:
                    raise UserError(
                        f"retriever {retriever.name}: the cached index {path} holds other passages; corpus hash {self.corpus_hash!r} names two corpora"
                    )
                log.info("retriever %s: reusing the index in %s", retriever.name, path)
                return
        retriever.build_index(retriever.passages)
        partial = path.with_name(f"{path.name}.partial-{os.getpid()}")
        partial.mkdir(parents=True, exist_ok=True)
        retriever.save_index(partial)
        (partial / "ids.json").write_text(json.dumps(ids), encoding="utf-8")
        (partial / "settings.json").write_text(
            json.dumps({"corpus": self.corpus_hash, **retriever.settings()}, indent=2), encoding="utf-8"
        )
        try:
            partial.rename(path)
        except OSError:  # another process saved the same index first
            shutil.rmtree(partial)
        log.info("retriever %s: index saved in %s", retriever.name, path)
