"""Test utilities every test file shares: reading a JSONL file, and composing a config of conf/."""

from __future__ import annotations

import json
from pathlib import Path

from hydra import compose, initialize_config_dir

from esgexp.core.config import CONF_DIR


def read_jsonl(path: str | Path) -> list[dict]:
    """Every line of a JSONL file as a dict (a line that is not JSON fails the test)."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def read_jsonl_lenient(path: str | Path) -> list[dict]:
    """The complete lines of a JSONL file that a kill may have cut in the middle of its last line."""
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def composed(config_name: str, overrides=(), return_hydra_config: bool = False):
    """``conf/CONFIG_NAME.yaml`` composed with ``overrides``, as a command composes it."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(config_name, overrides=list(overrides), return_hydra_config=return_hydra_config)
