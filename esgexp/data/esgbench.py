"""ESGBench JSONL loaders: the gold questions, a predictions file, and the join of the two.

Gold lines hold ``doc_name``, ``question``, ``answer``, ``category`` (non-empty strings),
optional ``company`` and ``kpi_name``, and ``evidence``: a non-empty list of objects with an
integer ``evidence_page_num`` (0-based) and ``evidence_text``. Prediction lines hold
``doc_name``, ``question``, ``pred`` (or ``answer``) and optionally ``retrieved_pages`` (0-based integers).
Rows join on (doc_name, question), compared with outer spaces stripped. A bad line, or one
repeating an earlier key, is reported as ``FILE line N: field 'x': reason`` and skipped (the first
one is kept), naming the fields the format has not (``the line holds prediction``). A file whose first
lines are all unusable (a CSV, a predictions file given as gold) is refused as the wrong kind of file.
Gold items without a prediction are left out of the scores and counted, since an absent answer is a
pipeline gap rather than a wrong answer; prediction rows without a gold item are counted too.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from esgexp.core.outputs import json_lines
from esgexp.core.records import LoadedDataset, QAItem
from esgexp.data.base import Dataset
from esgexp.data.text_files import SETTING, decoding, existing_file, open_text, valid_unicode
from esgexp.errors import UserError

log = logging.getLogger(__name__)

Key = tuple[str, str]


@dataclass
class ESGBenchGold(Dataset):
    """Loads ESGBench gold questions; ``limit`` keeps a seeded random subset."""

    def load(self) -> LoadedDataset:
        if not self.path:
            raise UserError("dataset.path is not set: give the ESGBench gold JSONL with dataset.path=FILE")
        loaded = LoadedDataset(items=[])
        first_line: dict[Key, int] = {}
        for number, item in read_jsonl(self.path, loaded.skipped, GOLD, self.encoding, key="dataset.path"):
            key = (item.meta["doc_name"], item.question)
            if key in first_line:
                _skip(loaded.skipped, self.path, number, _repeated(first_line[key]))
                continue
            first_line[key] = number
            loaded.items.append(item)
        if not loaded.items:
            raise UserError(f"{self.path}: no usable question (lines skipped: {len(loaded.skipped)})")
        return loaded.sample(self.limit, self.seed)


def row_to_item(row: dict, line: int) -> QAItem:
    """One gold object to a QAItem, its id ``DOC_NAME#`` plus a hash of doc_name and question (stable
    across line moves and runs); raises ValueError naming the bad field."""
    doc_name, question = _key(row)
    answer = _text(row, "answer")
    category = _text(row, "category")
    pages, texts = _evidence(row)
    digest = hashlib.sha1(f"{doc_name}\n{question}".encode()).hexdigest()[:12]
    meta = {
        "doc_name": doc_name,
        "company": _optional_text(row, "company"),
        "category": category.strip(),
        "kpi_name": _optional_text(row, "kpi_name"),
        "evidence_pages": pages,
        "line": line,
    }
    item_id = f"{doc_name}#{digest}"
    return QAItem(
        id=item_id, question=question, answers=(answer,), qtype="esgbench", context=texts, meta=meta, doc_id=doc_name
    )


@dataclass(frozen=True)
class Prediction:
    """One prediction row: the answer text, the retrieved 0-based pages if given, its line number."""

    text: str
    retrieved_pages: tuple[int, ...] | None
    line: int


@dataclass
class PredictionFile:
    """The usable prediction rows by (doc_name, question), and one message per skipped line."""

    path: str
    by_key: dict[Key, Prediction]
    skipped: list[str]


def load_predictions(path: str | Path, encoding: str = "utf-8") -> PredictionFile:
    """Read a predictions JSONL (the answer in ``pred``, or else ``answer``); bad or repeated lines are
    reported and skipped."""
    loaded = PredictionFile(str(path), {}, [])
    for number, (key, prediction) in read_jsonl(
        path, loaded.skipped, PREDICTIONS, encoding, setting=None, key="predictions"
    ):
        if key in loaded.by_key:
            _skip(loaded.skipped, path, number, _repeated(loaded.by_key[key].line))
            continue
        loaded.by_key[key] = prediction
    return loaded


def read_prediction(row: dict, line: int) -> tuple[Key, Prediction]:
    """One prediction object: its (doc_name, question) and its answer (``pred``; ``answer`` in a line
    without ``pred``); raises ValueError naming the bad field."""
    key = _key(row)
    field = "answer" if "answer" in row and "pred" not in row else "pred"
    text = row.get(field)
    if not isinstance(text, str):
        raise _bad_type(field, row, "a string")
    valid_unicode(text, field)
    return key, Prediction(text, _retrieved_pages(row), line)


@dataclass
class JoinResult:
    """Predictions by gold item id; one message per prediction row without a gold item
    (``unjoined``) and per gold item without a prediction (``missing``)."""

    source: str
    by_item: dict[str, Prediction]
    unjoined: list[str]
    missing: list[str]


def join(items: Sequence[QAItem], predictions: PredictionFile, gold_source: str = "gold") -> JoinResult:
    """Match prediction rows to gold items on (doc_name, question); ``gold_source`` (the gold file)
    names where a missing prediction's question is."""
    ids = {(item.meta["doc_name"], item.question): item.id for item in items}
    result = JoinResult(predictions.path, {}, [], [])
    for key, prediction in predictions.by_key.items():
        if key in ids:
            result.by_item[ids[key]] = prediction
        else:
            result.unjoined.append(
                f"{predictions.path} line {prediction.line}: field 'question': no gold question with "
                f"doc_name {key[0]!r} and question {_short(key[1])!r}"
            )
    result.missing = [
        f"{gold_source} line {item.meta['line']}: no prediction in {predictions.path} for doc_name "
        f"{item.meta['doc_name']!r} and question {_short(item.question)!r}"
        for item in items
        if item.id not in result.by_item
    ]
    for what, messages in (
        ("prediction rows match no gold question", result.unjoined),
        ("gold questions have no prediction", result.missing),
    ):
        if messages:
            log.warning("%d %s (left out of the scores); first: %s", len(messages), what, messages[0])
    return result


@dataclass(frozen=True)
class LineFormat:
    """One kind of ESGBench JSONL file: its name in messages, the fields its lines must and may hold, and
    ``read`` (a line's object and number -> what the loader keeps; ValueError naming the bad field)."""

    name: str
    fields: tuple[str, ...]
    optional: tuple[str, ...]
    read: Callable[[dict, int], object]

    def foreign(self, row: dict) -> str:
        """`` (the line holds X, Y: not fields of NAME)`` for a line with fields this kind has not, or ""."""
        other = [field for field in row if field not in self.fields + self.optional]
        return f" (the line holds {', '.join(other)}: not fields of {self.name})" if other else ""


GOLD = LineFormat(
    "an ESGBench gold file",
    ("doc_name", "question", "answer", "category", "evidence"),
    ("company", "kpi_name", "esgbench_id"),
    row_to_item,
)
PREDICTIONS = LineFormat(
    "an ESGBench predictions file", ("doc_name", "question", "pred"), ("answer", "retrieved_pages"), read_prediction
)
# This many unusable lines before any usable one: the file is another kind of file (a CSV, a predictions
# file given as gold), refused at once rather than warned about line by line.
WRONG_KIND_AFTER = 5


def read_jsonl(
    path: str | Path,
    skipped: list[str],
    form: LineFormat,
    encoding: str = "utf-8",
    setting: str | None = SETTING,
    key: str | None = None,
) -> Iterator[tuple[int, object]]:
    """Each usable line of a JSONL file of kind ``form``, read (``form.read``), with its 1-based number; a
    bad line goes to ``skipped``, naming fields the kind has not.

    A missing (``key`` names the path's setting in the message), undecodable (``setting`` names the
    encoding's key) or empty file is a UserError at once; so is one whose first WRONG_KIND_AFTER lines are
    all unusable: the wrong kind of file."""
    path = existing_file(path, key)
    with decoding(path, encoding, setting), open_text(path, encoding) as handle:
        lines = handle.read().split("\n")
    if not any(line.strip() for line in lines):
        raise UserError(f"{path} is empty: expected one JSON object per line")
    return _objects(path, lines, skipped, form)


def _objects(path: Path, lines: list[str], skipped: list[str], form: LineFormat) -> Iterator[tuple[int, object]]:
    usable, first_bad = 0, ""

    def unusable(number: int, problem: object, row: dict | None) -> None:
        """Skip line ``number``; refuse the file when its first WRONG_KIND_AFTER lines are all unusable."""
        nonlocal first_bad
        shown = (
            f"{problem}{form.foreign(row)}"
            if row is not None
            else f"{problem}: {_short(lines[number - 1].strip(), 60)!r}"
        )
        first_bad = first_bad or f"line {number}: {shown}"
        if not usable and len(skipped) + 1 >= WRONG_KIND_AFTER:
            raise UserError(
                f"{path} is not {form.name}: its first {len(skipped) + 1} lines are unusable, e.g. {first_bad}; "
                f"{form.name} holds one JSON object per line with {', '.join(form.fields)}"
            ) from None
        _skip(skipped, path, number, shown if row is not None else problem)

    def not_json(number: int, line: str, error: json.JSONDecodeError) -> None:
        unusable(number, f"invalid JSON ({error.msg} at column {error.colno})", None)

    for number, row in json_lines(lines, path, not_json):
        if not isinstance(row, dict):
            unusable(number, "not a JSON object", None)
            continue
        try:
            value = form.read(row, number)
        except ValueError as problem:
            unusable(number, problem, row)
            continue
        usable += 1
        yield number, value


def _skip(skipped: list[str], path: str | Path, number: int, problem: object) -> None:
    message = f"{path} line {number}: {problem}"
    log.warning("%s; line skipped", message)
    skipped.append(message)


def _key(row: dict) -> Key:
    return _text(row, "doc_name").strip(), _text(row, "question").strip()


def _text(row: dict, field: str) -> str:
    value = row.get(field)
    if not isinstance(value, str):
        raise _bad_type(field, row, "a string")
    if not value.strip():
        raise ValueError(f"field '{field}': empty")
    return valid_unicode(value, field)


def _optional_text(row: dict, field: str) -> str:
    value = row.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _bad_type(field, row, "a string")
    return valid_unicode(value, field).strip()


def _evidence(row: dict) -> tuple[list[int], tuple[str, ...]]:
    """The evidence pages (0-based, first occurrence order) and the non-empty evidence texts."""
    evidence = row.get("evidence")
    if not isinstance(evidence, list) or not evidence:
        raise _bad_type("evidence", row, "a non-empty list of objects")
    pages, texts = [], []
    for index, entry in enumerate(evidence):
        if not isinstance(entry, dict):
            raise ValueError(f"field 'evidence[{index}]': expected an object, got {type(entry).__name__}")
        page = entry.get("evidence_page_num")
        if not _is_page(page):
            label = f"evidence[{index}].evidence_page_num"
            raise _bad_type("evidence_page_num", entry, "a 0-based page number (an integer >= 0)", label=label)
        text = entry.get("evidence_text")
        if text is None:
            text = ""
        if not isinstance(text, str):
            raise _bad_type("evidence_text", entry, "a string", label=f"evidence[{index}].evidence_text")
        valid_unicode(text, f"evidence[{index}].evidence_text")
        pages.append(page)
        if text.strip():
            texts.append(text)
    return list(dict.fromkeys(pages)), tuple(texts)


def _retrieved_pages(row: dict) -> tuple[int, ...] | None:
    value = row.get("retrieved_pages")
    if value is None:
        return None
    if not isinstance(value, list) or not all(_is_page(page) for page in value):
        raise _bad_type("retrieved_pages", row, "a list of 0-based page numbers")
    return tuple(value)


def _is_page(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _bad_type(field: str, row: dict, expected: str, label: str | None = None) -> ValueError:
    """The error for ``row[field]`` missing or not of the ``expected`` kind; ``label`` names the field."""
    label = label or field
    if field not in row:
        return ValueError(f"field '{label}': missing")
    value = row[field]
    found = "null" if value is None else f"{type(value).__name__} {value!r}"
    return ValueError(f"field '{label}': expected {expected}, got {_short(found)}")


def _repeated(first: int) -> ValueError:
    return ValueError(f"field 'question': repeats line {first} (same doc_name and question)")


def _short(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
