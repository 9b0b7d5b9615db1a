"""The input check every open-QA metric shares."""

from __future__ import annotations

from collections.abc import Sequence

from esgexp.errors import UserError


def check_inputs(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> None:
    """Raise unless there is one tuple of at least one reference string per prediction string.

    Wrong types or lengths are programming errors (ValueError); an item with no reference at
    all, or no item at all, is a data problem (UserError)."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} reference tuples")
    if not predictions:
        raise UserError("nothing to score: 0 predictions")
    for index, (prediction, refs) in enumerate(zip(predictions, references)):
        if not isinstance(prediction, str):
            raise ValueError(f"item {index}: prediction is {type(prediction).__name__}, not str")
        if isinstance(refs, str) or not all(isinstance(ref, str) for ref in refs):
            raise ValueError(f"item {index}: references must be a tuple of str, got {refs!r}")
        if not refs:
            raise UserError(f"item {index}: no reference answer to score against")
