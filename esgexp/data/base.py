"""What every dataset loader is: the settings each dataset node has, their rules, and ``load``.

A loader is the ``_target_`` of its ``conf/dataset/NAME.yaml`` and is built from that node; it adds the
settings of its own format as fields (with defaults) and their rules to ``rules``, which the settings check
collects (esgexp/jobs/settings.py) as it does a backend's or a retriever's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from esgexp.core.records import LoadedDataset
from esgexp.core.rules import Encoding, Integer, Rule


@dataclass
class Dataset(ABC):
    """``name``; ``path``, its file or folder; ``limit`` items drawn with ``seed`` (None: all of them);
    ``cluster_key``, the field whose items form one cluster of the intervals (esgexp/eval/stats.py); the text
    files' ``encoding`` (esgexp/data/text_files.py)."""

    name: str
    path: str | None = None
    limit: int | None = None
    seed: int = 42
    cluster_key: str | None = None
    encoding: str = "utf-8"

    # The rules of the dataset node's settings, keyed as under ``dataset.`` (a subclass adds its own).
    rules: ClassVar[dict[str, Rule]] = {
        "limit": Integer(1, optional=True),
        "seed": Integer(0, 2**32 - 1),
        "encoding": Encoding(),
    }

    @abstractmethod
    def load(self) -> LoadedDataset:
        """The items (or, for a retrieval dataset, passages and queries) and the skipped rows' messages."""
