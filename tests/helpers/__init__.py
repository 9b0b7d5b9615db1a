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


def assert_rankings_agree(approx: list, exact: list, top: list[str], tolerance: float) -> None:
    """What a lower-precision (or other-runtime) retriever promises against float32, and nothing CPU-dependent:
    ``approx`` and ``exact`` are each query's hits over every passage (``search(queries, n)``). Each query's
    labelled passage in ``top`` is the first hit of both; every score is within ``tolerance`` of float32's; and
    two passages whose float32 scores are more than twice the tolerance apart keep their order. Near-ties may
    swap: their order is the CPU's arithmetic, not the product's."""
    for query, (fast, slow, label) in enumerate(zip(approx, exact, top, strict=True)):
        assert fast[0].passage_id == slow[0].passage_id == label, f"query {query}: top hit"
        fast_scores = {hit.passage_id: hit.score for hit in fast}
        slow_scores = {hit.passage_id: hit.score for hit in slow}
        assert fast_scores.keys() == slow_scores.keys(), f"query {query}: the hits cover other passages"
        for pid, score in slow_scores.items():
            assert abs(fast_scores[pid] - score) <= tolerance, f"query {query}, {pid}: {fast_scores[pid]} vs {score}"
        clearly_apart = [
            (a, b) for a in slow_scores for b in slow_scores if slow_scores[a] - slow_scores[b] > 2 * tolerance
        ]
        for a, b in clearly_apart:
            assert fast_scores[a] > fast_scores[b], f"query {query}: {a} fell below {b}"
