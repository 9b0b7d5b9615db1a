"""ESGenius multiple-choice CSV loader (also reads our bundled sample, which uses the same format).

Columns: ``query_id,new_id,query,answer,A,B,C,D,Z``; the ``_w_ref`` variant adds ``ref_doc``,
``ref_page`` and ``source_text``. Bad rows (a field count other than the header's, a bad field) are
reported (file line, field) and skipped; a missing column, or a byte that is not valid in ``encoding``,
is fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from esgexp.core.records import LoadedDataset, MCQItem
from esgexp.data.base import Dataset
from esgexp.data.text_files import csv_records, decoding, existing_file, open_text
from esgexp.errors import UserError

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("query", "answer", "A", "B", "C", "D")
ID_COLUMNS = ("query_id", "new_id")
OPTION_LETTERS = "ABCD"
VALID_ANSWER_LETTERS = set("ABCDZ")


@dataclass
class ESGeniusCSV(Dataset):
    """Loads ESGenius-format questions from a CSV file or a hub dataset id."""

    hf_id: str | None = None
    split: str = "train"

    def load(self) -> LoadedDataset:
        source = f"hub dataset {self.hf_id}" if self.hf_id else str(self.path)
        skipped: list[str] = []
        rows = self._hub_rows() if self.hf_id else self._csv_rows(skipped)
        loaded = rows_to_items(rows, source, "row" if self.hf_id else "line", skipped)
        return loaded.sample(self.limit, self.seed)

    def _csv_rows(self, skipped: list[str]) -> Iterable[tuple[int, Mapping[str, str]]]:
        """The CSV's located rows; a record that does not line up with the header goes to ``skipped``."""
        if not self.path:
            raise UserError("dataset.path is not set: give the CSV file with dataset.path=FILE")
        path = existing_file(self.path, "dataset.path")
        with decoding(path, self.encoding), open_text(path, self.encoding) as handle:
            columns, rows = csv_records(handle, path, skipped)
        check_columns(columns, str(path))
        return rows

    def _hub_rows(self) -> Iterable[tuple[int, Mapping[str, str]]]:
        import datasets

        try:
            table = datasets.load_dataset(self.hf_id, split=self.split)
        except Exception as exc:  # offline, unknown id, unknown split: all user-facing
            raise UserError(
                f"could not load hub dataset {self.hf_id!r} (split {self.split!r}): {exc}. "
                "The hub is off by default (HF_HUB_OFFLINE=1): run once with HF_HUB_OFFLINE=0 to "
                "download it, or give a local file with dataset.path=FILE."
            ) from None
        check_columns(table.column_names, f"hub dataset {self.hf_id}")
        return enumerate(({k: "" if v is None else str(v) for k, v in row.items()} for row in table), start=1)


def check_columns(columns: Iterable[str], source: str) -> None:
    """Raise a UserError naming every required column that ``source`` lacks."""
    columns = list(columns)
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if not any(c in columns for c in ID_COLUMNS):
        missing.append(" or ".join(ID_COLUMNS))
    if missing:
        raise UserError(f"{source}: missing column(s) {', '.join(missing)}; found {', '.join(columns) or 'none'}")


def rows_to_items(
    rows: Iterable[tuple[int, Mapping[str, str]]], source: str, unit: str = "line", skipped: Iterable[str] = ()
) -> LoadedDataset:
    """Turn numbered rows (``unit``: file line, or row of a hub table) into items; each bad row is logged,
    listed after ``skipped`` (rows already left out) and skipped."""
    loaded = LoadedDataset(items=[], skipped=list(skipped))
    seen_ids: set[str] = set()
    for number, row in rows:
        try:
            item = row_to_item(row)
            if item.id in seen_ids:
                raise ValueError(f"field 'query_id': duplicate id {item.id!r}")
        except ValueError as problem:
            message = f"{source} {unit} {number}: {problem}; row skipped"
            log.warning(message)
            loaded.skipped.append(message)
            continue
        seen_ids.add(item.id)
        loaded.items.append(item)
    if not loaded.items:
        raise UserError(f"{source}: no usable question (rows skipped: {len(loaded.skipped)})")
    return loaded


def row_to_item(row: Mapping[str, str]) -> MCQItem:
    """One CSV row to an MCQItem; raises ValueError naming the bad field. The question, options and source text
    are kept as published (a trailing space included: they go into prompts character for character); ids, the
    answer letters and the reference fields are read stripped, and a field of only spaces counts as empty."""
    item_id = cell(row, "query_id").strip() or cell(row, "new_id").strip()
    if not item_id:
        raise ValueError("field 'query_id': empty id")
    question = cell(row, "query")
    if not question.strip():
        raise ValueError(f"field 'query': empty question (id {item_id})")
    options = {}
    for letter in OPTION_LETTERS:
        text = cell(row, letter)
        if not text.strip():
            raise ValueError(f"field '{letter}': empty option (id {item_id})")
        options[letter] = text
    answer = cell(row, "answer").strip().upper()
    if not answer or not set(answer) <= VALID_ANSWER_LETTERS or ("Z" in answer and answer != "Z"):
        raise ValueError(f"field 'answer': {row.get('answer')!r} is not one of A-D or Z (id {item_id})")
    source_text = cell(row, "source_text")
    meta = {key: cell(row, key).strip() for key in ("new_id", "ref_doc", "ref_page") if cell(row, key).strip()}
    return MCQItem(
        id=item_id,
        question=question,
        options=options,
        answer="".join(sorted(set(answer))),
        context=(source_text,) if source_text.strip() else (),
        meta=meta,
        doc_id=meta.get("ref_doc"),
        page=int(meta["ref_page"]) if meta.get("ref_page", "").isdigit() else None,
    )


def cell(row: Mapping[str, str], field: str) -> str:
    """The text of ``row[field]`` as published ("" when absent); ValueError naming the field when it is not text."""
    value = row.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"field {field!r}: expected text, got {type(value).__name__}")
    return value
