"""Dataset loaders share one base class (esgexp/data/base.py): its settings, their rules, and the rules a
loader adds, which the settings check collects from the chosen dataset's class."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf

from esgexp.core.config import CONF_DIR
from esgexp.core.records import LoadedDataset, QAItem
from esgexp.core.rules import Integer
from esgexp.data.base import Dataset
from esgexp.errors import UserError
from esgexp.jobs.settings import problems


@dataclass
class WordLines(Dataset):
    """One question per line of a text file, its answer the line's last word (a loader as docs/extending.md adds one)."""

    min_words: int = 2

    rules: ClassVar = {**Dataset.rules, "min_words": Integer(1)}

    def load(self) -> LoadedDataset:
        items = []
        with open(self.path, encoding=self.encoding) as handle:
            for number, line in enumerate(handle, start=1):
                words = line.split()
                if len(words) >= self.min_words:
                    items.append(
                        QAItem(id=f"l{number}", question=" ".join(words[:-1]), answers=(words[-1],), qtype="factoid")
                    )
        return LoadedDataset(items).sample(self.limit, self.seed)


def test_every_dataset_of_conf_is_a_dataset_loader():
    nodes = [OmegaConf.load(path) for path in sorted((CONF_DIR / "dataset").glob("*.yaml"))]
    targets = {node._target_ for node in nodes if "_target_" in node}  # the others extend one of these
    assert targets and all(issubclass(get_class(target), Dataset) for target in targets)


def test_a_loader_s_own_rules_and_the_common_ones_are_checked(make_cfg, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("the capital of France is Paris\nsay yes\nalone\n", encoding="utf-8")
    own = (f"dataset._target_={__name__}.WordLines", f"dataset.path={lines}")
    assert problems(make_cfg(*own, "+dataset.min_words=0", "dataset.limit=0")) == [
        "dataset.limit must be an integer >= 1 or null, got 0",
        "dataset.min_words must be an integer >= 1, got 0",
    ]
    loaded = WordLines("lines", str(lines)).load()
    assert [(item.question, item.answers) for item in loaded.items] == [
        ("the capital of France is", ("Paris",)),
        ("say", ("yes",)),
    ]


def test_climretrieve_base_without_its_corpus_names_the_setting():
    with pytest.raises(UserError, match=r"dataset.corpus is not set"):
        get_class("esgexp.data.climretrieve.ClimRetrieveBase")("c", "base.xlsx").load()
