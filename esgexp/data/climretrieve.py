"""ClimRetrieve (Schimanski et al., 2024): report-level retrieval data, expert-annotated sources, query texts.

* Report level (``ClimRetrieve_ReportLevel_V1.csv``, columns ``,paragraph,report,question,relevant_text,
  relevance,relevant_text_sim,sim_text_relevance``): one row per (paragraph, question) of a report with a grade
  0-3. ``ClimRetrieveReportLevel`` makes one passage per distinct paragraph text of a report (id
  ``<doc>#p<n>``, first-appearance order) and one query per (report, question) that grades every paragraph of
  its report (a pair without a usable row counts as 0). With ``merge_duplicates=False`` a text that repeats
  within one (report, question) is a passage per repeat (the n-th repeat of every question of the report is
  the same passage), each graded by its own row, as the paper scores every row. The file has no pages:
  passages get page 0, which means "unknown" (real pages are 1-based).
* Base (``ClimRetrieve_base`` saved as CSV): expert-annotated sources. ``load_base_annotations`` reads them;
  ``annotations_to_queries`` grades passages of the ingested report PDFs (doc id = PDF file stem). A passage
  holds an annotated source when it contains the source text (both normalised: NFKC, straight quotes,
  lower-case, collapsed whitespace), or, failing that, when its page span includes the annotated page and it
  holds at least ``min_overlap`` of the source's distinct word tokens. A source with a blank page is matched
  by containment only. The annotated pages are 1-based (the sample has no page 0); whether they are PDF page
  numbers or printed page labels cannot be told from the CSV, which is why the page only gates the fuzzy match.
* Rankings (``Experiments/Embedding_Search_Results/<embedding>__<K>.csv``, a published run): the report-level
  columns and one 0/1 column per query setup (``IR_all__question_with_IR_150len``: 1 when the row's paragraph was
  among the K retrieved for that setup). ``ClimRetrieveRankings`` reads, per (report, question), each row's grade
  and flag in one setup column: what the paper's metric scores.
* Core questions (``Core_Questions_with_Explanations``): ``query_texts`` builds the query formulations of the
  paper's experiment for the 16 core questions (see ``QUERY_MODES``).

A row is named by the file line it starts on (CSV; a quoted cell may span several lines) or by its sheet
row (Excel); the first, unnamed column is an old pandas index and is ignored. Bad rows (in a CSV also a
field count other than the header's) are listed and skipped; a missing file or column, or a byte not valid
in the file's encoding, is a UserError, and so is a CSV row of the core-questions table that does not line
up with its header.
"""

from __future__ import annotations

import logging
import random
import re
import unicodedata
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from esgexp.core.records import LoadedDataset, Passage, RetrievalQuery
from esgexp.core.rules import Flag, Integer, Number, Rule
from esgexp.data.base import Dataset
from esgexp.data.text_files import SETTING, csv_records, decoding, existing_file, open_text
from esgexp.errors import UserError

log = logging.getLogger(__name__)

REPORT_LEVEL_COLUMNS = ("paragraph", "report", "question", "relevance")
# Every report-level column of a rankings file; its other named columns are query setups.
REPORT_LEVEL_FIELDS = (*REPORT_LEVEL_COLUMNS, "relevant_text", "relevant_text_sim", "sim_text_relevance")
RANKINGS_K = re.compile(r"__(\d+)$")  # <embedding>__<K>.csv
BASE_COLUMNS = ("Document", "Question", "Relevant", "Page", "Source From", "Source Relevance Score", "Core 16 Question")
CORE_COLUMNS = ("question", "Definition", "Information Retrieval Background")
QUERY_MODES = ("question", "definition", "concepts")
MODE_COLUMNS = {"definition": "'Refined Definition' and 'Definition'", "concepts": "'Information Retrieval Background'"}
UNKNOWN_PAGE = 0
WORD = re.compile(r"\w+")
QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})
CONCEPT_MARKUP = re.compile(r"^\s*(?:\[\[C\d+\]\])?\s*(?:\|[\s|]*(?:Co|La)[\s|]*)?(?:\d+\.\s*)?")

# (where the row is in its file: "line 5" of a CSV or "row 5" of a sheet, the row's cells by column)
Rows = list[tuple[str, Mapping[str, str]]]


def seeded_draw(queries: list, limit: int, seed: int) -> list:
    """``limit`` of ``queries`` (each with an ``id``) drawn by a seeded shuffle, kept in their order here."""
    shuffled = list(queries)
    random.Random(seed).shuffle(shuffled)
    keep = {query.id for query in shuffled[:limit]}
    return [query for query in queries if query.id in keep]


@dataclass
class RetrievalDataset:
    """Passages to search, graded queries, the number of candidate passages per query, and skipped rows."""

    passages: list[Passage]
    queries: list[RetrievalQuery]
    n_candidates: dict[str, int]
    skipped: list[str] = field(default_factory=list)

    def sample(self, limit: int | None, seed: int) -> RetrievalDataset:
        """``limit`` queries drawn by a seeded shuffle (in their order here) and the passages of their reports;
        this one where ``limit`` is None."""
        if limit is None:
            return self
        queries = seeded_draw(self.queries, limit, seed)
        docs = {query.doc_scope for query in queries}
        return RetrievalDataset(
            passages=[passage for passage in self.passages if passage.doc_id in docs],
            queries=queries,
            n_candidates={query.id: self.n_candidates[query.id] for query in queries},
            skipped=self.skipped,
        )


@dataclass
class ClimRetrieveReportLevel(Dataset):
    """Loads the ClimRetrieve report-level CSV; ``limit`` keeps that many queries (drawn by a seeded shuffle,
    kept in file order) and the passages of their reports."""

    merge_duplicates: bool = True

    rules: ClassVar[dict[str, Rule]] = {**Dataset.rules, "merge_duplicates": Flag()}

    def load(self) -> RetrievalDataset:
        skipped: list[str] = []
        rows = read_rows(self.path, REPORT_LEVEL_COLUMNS, "dataset.path", self.encoding, skipped=skipped)
        dataset = report_level_dataset(rows, str(self.path), self.merge_duplicates, skipped)
        return dataset.sample(self.limit, self.seed)


def report_level_dataset(
    rows: Iterable[tuple[str, Mapping[str, str]]],
    source: str,
    merge_duplicates: bool = True,
    skipped: Iterable[str] = (),
) -> RetrievalDataset:
    """Passages and per-report queries from located report-level rows (``skipped``: rows already left out).
    Merged, a paragraph text is one passage of its report and conflicting grades keep the highest; unmerged,
    each repeat within a question is its own."""
    skipped = list(skipped)
    paragraphs: dict[str, dict[tuple[str, int], str]] = {}  # report -> (text, repeat) -> passage id
    grades: dict[tuple[str, str], dict[str, tuple[int, str]]] = {}  # (report, question) -> id -> (grade, where)
    repeats: dict[tuple[str, str, str], int] = {}  # (report, question, text) -> rows seen
    annotations: dict[tuple[str, str], dict[str, int]] = {}  # (report, question) -> annotated text -> grade
    for number, row in rows:
        try:
            report, question, paragraph = (required_text(row, name) for name in ("report", "question", "paragraph"))
            grade = parse_whole(row.get("relevance"), "relevance", 0, 3, "a grade 0-3")
        except ValueError as problem:
            note(skipped, f"{source} {number}: {problem}; row skipped")
            continue
        seen = repeats.get((report, question, paragraph), 0)
        repeats[(report, question, paragraph)] = seen + 1
        ids = paragraphs.setdefault(report, {})
        key = (paragraph, 0 if merge_duplicates else seen)
        passage_id = ids.setdefault(key, f"{doc_id_for(report)}#p{len(ids) + 1}")
        graded = grades.setdefault((report, question), {})
        earlier = graded.get(passage_id)
        if earlier is not None and earlier[0] != grade:
            (low, low_row), (high, high_row) = sorted([earlier, (grade, number)])
            note(
                skipped,
                f"{source} {low_row}: field 'relevance': grade {low} conflicts with grade {high} "
                f"in {high_row} for the same paragraph and question; kept {high}",
            )
        graded[passage_id] = max(earlier or (grade, number), (grade, number))
        if grade:
            annotated = (row.get("relevant_text") or "").strip() or paragraph
            annotations.setdefault((report, question), {}).setdefault(annotated, grade)

    passages = [
        Passage(id=pid, doc_id=doc_id_for(report), text=text, page_start=UNKNOWN_PAGE, page_end=UNKNOWN_PAGE)
        for report, ids in paragraphs.items()
        for (text, _), pid in ids.items()
    ]
    dataset = RetrievalDataset(passages=passages, queries=[], n_candidates={}, skipped=skipped)
    numbers: dict[str, int] = {}
    for (report, question), graded in grades.items():
        doc_id = doc_id_for(report)
        numbers[doc_id] = numbers.get(doc_id, 0) + 1
        query_id = f"{doc_id}#q{numbers[doc_id]}"
        relevance = {pid: graded[pid][0] if pid in graded else 0 for pid in paragraphs[report].values()}
        dataset.queries.append(
            RetrievalQuery(
                id=query_id,
                text=question,
                relevance=relevance,
                doc_scope=doc_id,
                meta={
                    "report": report,
                    "question": question,
                    "annotations": [(g, t) for t, g in annotations.get((report, question), {}).items()],
                },
            )
        )
        dataset.n_candidates[query_id] = len(relevance)
    if not dataset.queries:
        raise UserError(f"{source}: no usable row (rows skipped: {len(skipped)})")
    return dataset


@dataclass(frozen=True)
class RankedQuery:
    """One (report, question) of a rankings file: the (grade, flag) of each of its rows (flag 1: retrieved)."""

    id: str
    report: str
    question: str
    rows: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class PublishedRankings:
    """The ``column`` of a rankings file at its ``k``: counts per query, rows scored, rows without a flag (left
    out, as the paper's analysis drops them), and skipped rows."""

    column: str
    k: int
    queries: list[RankedQuery]
    n_rows: int
    n_unflagged: int
    skipped: list[str] = field(default_factory=list)

    def sample(self, limit: int | None, seed: int) -> PublishedRankings:
        """``limit`` queries drawn by a seeded shuffle (kept in file order); this one where ``limit`` is None."""
        if limit is None:
            return self
        queries = seeded_draw(self.queries, limit, seed)
        return PublishedRankings(self.column, self.k, queries, self.n_rows, self.n_unflagged, self.skipped)


@dataclass
class ClimRetrieveRankings(Dataset):
    """A published run's rankings file (``<embedding>__<K>.csv``): ``column``, the query setup scored (None: the
    file's only one); ``k``, the K it was retrieved at (None: read from the file name)."""

    column: str | None = None
    k: int | None = None

    rules: ClassVar[dict[str, Rule]] = {**Dataset.rules, "k": Integer(1, optional=True)}

    def load(self) -> PublishedRankings:
        skipped: list[str] = []
        rows = read_rows(self.path, REPORT_LEVEL_COLUMNS, "dataset.path", self.encoding, skipped=skipped)
        column = self.setup_column(rows)
        return rankings_counts(rows, str(self.path), column, self.rankings_k(), skipped).sample(self.limit, self.seed)

    def setup_column(self, rows: Rows) -> str:
        """The query setup scored: ``column``, or the file's only setup column; a UserError naming the file's."""
        setups = [name for name in (rows[0][1] if rows else {}) if name and name not in REPORT_LEVEL_FIELDS]
        if self.column in setups or (self.column is None and len(setups) == 1):
            return self.column or setups[0]
        found = ", ".join(setups) or "none"
        if self.column is None:
            raise UserError(
                f"{self.path}: choose the query setup to score with dataset.column=NAME (several: -m "
                f"dataset.column=A,B); its setup columns: {found}"
            )
        raise UserError(f"dataset.column={self.column}: {self.path} has no such column; its setup columns: {found}")

    def rankings_k(self) -> int:
        """``k``, or the K of a file named ``<embedding>__<K>.csv``."""
        named = RANKINGS_K.search(Path(str(self.path)).stem)
        if self.k is None and named is None:
            raise UserError(f"dataset.k: {self.path} is not named <embedding>__<K>.csv; give its K with dataset.k=K")
        return self.k if self.k is not None else int(named.group(1))


def rankings_counts(rows: Rows, source: str, column: str, k: int, skipped: list[str]) -> PublishedRankings:
    """Per (report, question), in file order, the grade and the ``column`` flag of each row. A row with an empty
    flag is left out (the paper's analysis drops it); a bad flag or grade skips the row."""
    queries: dict[tuple[str, str], RankedQuery] = {}
    numbers: dict[str, int] = {}
    scored = unflagged = 0
    for number, row in rows:
        if not (row.get(column) or "").strip():
            unflagged += 1
            continue
        try:
            report, question = (required_text(row, name) for name in ("report", "question"))
            grade = parse_whole(row.get("relevance"), "relevance", 0, 3, "a grade 0-3")
            flag = parse_whole(row.get(column), column, 0, 1, "0 or 1")
        except ValueError as problem:
            note(skipped, f"{source} {number}: {problem}; row skipped")
            continue
        query = queries.get((report, question))
        if query is None:
            doc_id = doc_id_for(report)
            numbers[doc_id] = numbers.get(doc_id, 0) + 1
            query = queries[(report, question)] = RankedQuery(f"{doc_id}#q{numbers[doc_id]}", report, question)
        query.rows.append((grade, flag))
        scored += 1
    if not queries:
        raise UserError(f"{source}: no row with a value in column {column!r} (rows skipped: {len(skipped)})")
    return PublishedRankings(column, k, list(queries.values()), scored, unflagged, skipped)


@dataclass(frozen=True)
class SourceAnnotation:
    """One expert-annotated source: ``relevant`` text of ``document`` for ``question``.

    ``page`` is 1-based as annotated (None when blank), ``relevance`` 1-3, ``source`` text/table/graph,
    ``core`` whether the question is one of the 16 core questions, ``where`` the file and row.
    """

    document: str
    question: str
    relevant: str
    page: int | None
    relevance: int
    source: str
    core: bool
    where: str


def load_base_annotations(path: str | Path, encoding: str = "utf-8") -> LoadedDataset:
    """The usable annotations of a ClimRetrieve base CSV; a row without source text or score, or with a bad
    number, is skipped (a blank page is kept as None)."""
    loaded, unusable = LoadedDataset(items=[]), []
    for number, row in read_rows(path, BASE_COLUMNS, "dataset.path", encoding, skipped=loaded.skipped):
        where = f"{path} {number}"
        try:
            loaded.items.append(parse_annotation(row, where))
        except ValueError as problem:
            unusable.append(f"{where}: {problem}; row skipped")
    warn_once("row(s) skipped: a field empty or out of range", unusable)
    loaded.skipped.extend(unusable)
    if not loaded.items:
        raise UserError(f"{path}: no usable annotation (rows skipped: {len(loaded.skipped)})")
    return loaded


def parse_annotation(row: Mapping[str, str], where: str) -> SourceAnnotation:
    """One base row to a SourceAnnotation; raises ValueError naming the bad field."""
    document, question = required_text(row, "Document"), required_text(row, "Question")
    relevant = required_text(row, "Relevant")
    relevance = parse_whole(row.get("Source Relevance Score"), "Source Relevance Score", 1, 3, "a score 1-3")
    page_text = (row.get("Page") or "").strip()
    page = parse_whole(page_text, "Page", 1, None, "a page number (1 or more)") if page_text else None
    core = parse_whole(row.get("Core 16 Question"), "Core 16 Question", 0, 1, "0 or 1") == 1
    source = (row.get("Source From") or "").strip().lower()
    return SourceAnnotation(document, question, relevant, page, relevance, source, core, where)


class SourceMatcher:
    """Whether a passage holds an annotated source (rule in the module docstring); caches passage text."""

    def __init__(self, min_overlap: float = 0.5):
        if not 0 < min_overlap <= 1:
            raise UserError(f"min_overlap must be a fraction in (0, 1], got {min_overlap}")
        self.min_overlap = min_overlap
        self._texts: dict[str, tuple[str, set[str]]] = {}

    def __call__(self, annotation: SourceAnnotation, passage: Passage) -> bool:
        if passage.id not in self._texts:
            text = normalise(passage.text)
            self._texts[passage.id] = (text, set(WORD.findall(text)))
        text, passage_words = self._texts[passage.id]
        relevant = normalise(annotation.relevant)
        if relevant in text:
            return True
        if annotation.page is None or not passage.page_start <= annotation.page <= passage.page_end:
            return False
        words = set(WORD.findall(relevant))
        return bool(words) and len(words & passage_words) / len(words) >= self.min_overlap


@dataclass
class ClimRetrieveBase(Dataset):
    """The expert-annotated sources (ClimRetrieve_base.xlsx, or a CSV of it) graded on the passages of an
    ingested corpus of the same reports (``corpus``: its folder; doc ids are the PDF file stems)."""

    corpus: str | None = None
    min_overlap: float = 0.5
    core_only: bool = False

    rules: ClassVar[dict[str, Rule]] = {**Dataset.rules, "min_overlap": Number(0, 1, above=True), "core_only": Flag()}

    def load(self) -> RetrievalDataset:
        from esgexp.data.corpus import Corpus

        if not self.corpus:
            raise UserError("dataset.corpus is not set: give the ingested corpus of the reports, dataset.corpus=DIR")
        loaded = load_base_annotations(self.path, self.encoding)
        annotations = [a for a in loaded.items if a.core or not self.core_only]
        dataset = annotations_to_queries(annotations, Corpus.load(self.corpus).passages, self.min_overlap)
        dataset.skipped[:0] = loaded.skipped
        return dataset.sample(self.limit, self.seed)


def annotations_to_queries(
    annotations: Sequence[SourceAnnotation], passages: Sequence[Passage], min_overlap: float = 0.5
) -> RetrievalDataset:
    """One query per (document, question), grading each matching passage with its best annotation's score.

    Only matched passages are listed in ``relevance`` (others count as 0). A document missing from the
    passages' doc ids, an annotation that matches no passage and a query left with no match are reported.
    """
    matches = SourceMatcher(min_overlap)
    by_doc: dict[str, list[Passage]] = {}
    for passage in passages:
        by_doc.setdefault(passage.doc_id, []).append(passage)
    doc_ids = {normalise(doc_id): doc_id for doc_id in by_doc}
    groups: dict[tuple[str, str], list[SourceAnnotation]] = {}
    for annotation in annotations:
        groups.setdefault((annotation.document.strip(), normalise(annotation.question)), []).append(annotation)

    dataset = RetrievalDataset(passages=list(passages), queries=[], n_candidates={})
    kinds: dict[str, list[str]] = {}  # what was skipped, by kind: one warning line each, every message kept
    numbers: dict[str, int] = {}
    for (document, _), group in groups.items():
        first = group[0]
        doc_id = doc_ids.get(normalise(doc_id_for(document)))
        if doc_id is None:
            tally(
                kinds,
                "question(s) skipped: their report is not in the corpus",
                f"{first.where}: document {document!r} is not in the corpus ({len(by_doc)} docs); "
                f"question {first.question!r} skipped ({len(group)} annotation row(s))",
            )
            continue
        relevance: dict[str, int] = {}
        for annotation in group:
            hits = [passage for passage in by_doc[doc_id] if matches(annotation, passage)]
            if not hits:
                tally(
                    kinds,
                    "annotation(s) unused: no passage of their report holds the annotated text",
                    f"{annotation.where}: field 'Relevant': no passage of {doc_id!r} holds the "
                    "annotated text; annotation unused",
                )
            for passage in hits:
                relevance[passage.id] = max(relevance.get(passage.id, 0), annotation.relevance)
        if not relevance:
            tally(
                kinds,
                "question(s) skipped: no passage matches any of their annotations",
                f"{first.where}: question {first.question!r} of {document!r} has no matching passage; query skipped",
            )
            continue
        numbers[doc_id] = numbers.get(doc_id, 0) + 1
        query_id = f"{doc_id}#q{numbers[doc_id]}"
        dataset.queries.append(
            RetrievalQuery(
                id=query_id,
                text=first.question,
                relevance=relevance,
                doc_scope=doc_id,
                meta={
                    "document": document,
                    "core": any(a.core for a in group),
                    "sources": len(group),
                    "annotations": [(a.relevance, a.relevant) for a in group if a.relevance],
                },
            )
        )
        dataset.n_candidates[query_id] = len(by_doc[doc_id])
    for kind, messages in kinds.items():
        warn_once(kind, messages)
        dataset.skipped.extend(messages)
    return dataset


@dataclass(frozen=True)
class CoreQuestion:
    """A core question's definition ("Refined Definition", else "Definition") and cleaned concept lines."""

    question: str
    definition: str
    concepts: tuple[str, ...]
    where: str


def load_core_questions(path: str | Path) -> dict[str, CoreQuestion]:
    """The core-questions table by normalised question text; rows with a blank question are ignored."""
    table: dict[str, CoreQuestion] = {}
    for number, row in read_rows(path, CORE_COLUMNS, "query.core_questions", setting=None):
        question = (row.get("question") or "").strip()
        if not question:
            continue
        where = f"{path} {number}"
        key = normalise(question)
        if key in table:
            raise UserError(f"{where}: question {question!r} repeats {table[key].where}")
        definition = (row.get("Refined Definition") or "").strip() or (row.get("Definition") or "").strip()
        background = (row.get("Information Retrieval Background") or "").splitlines()
        concepts = tuple(filter(None, map(clean_concept, background)))
        table[key] = CoreQuestion(question, " ".join(definition.split()), concepts, where)
    return table


def clean_concept(line: str) -> str:
    """``[[C1]] ||Co|| 1. **Name**: text`` -> ``Name: text`` (level, core/latent tag, number and bold dropped)."""
    return " ".join(CONCEPT_MARKUP.sub("", line).replace("**", "").split())


def query_texts(
    queries: Sequence[RetrievalQuery], mode: str, core_questions_path: str | Path | None = None
) -> dict[str, str]:
    """The text to search with for each query id, by ``mode`` (one of ``QUERY_MODES``).

    ``question``: the question; ``definition``: question, newline, its definition; ``concepts``: question and
    one concept per line. The last two look the question up in the core-questions table (normalised text)
    and raise a UserError listing every question the table lacks: a silent fall-back to the bare question
    would mix formulations within one run.
    """
    if mode not in QUERY_MODES:
        raise UserError(f"query mode {mode!r} is not one of {', '.join(QUERY_MODES)}")
    if mode == "question":
        return {query.id: query.text for query in queries}
    if not core_questions_path:
        raise UserError(f"query mode {mode!r} needs the core-questions table: set query.core_questions=FILE")
    table = load_core_questions(core_questions_path)
    unknown = sorted({query.text for query in queries if normalise(query.text) not in table})
    if unknown:
        raise UserError(
            f"{core_questions_path}: {len(unknown)} question(s) not in the core-questions table, which query mode "
            f"{mode!r} needs: {'; '.join(map(repr, unknown))}. Keep only core questions or use query=question"
        )
    texts = {}
    for query in queries:
        entry = table[normalise(query.text)]
        extra = entry.definition if mode == "definition" else "\n".join(entry.concepts)
        if not extra:
            raise UserError(
                f"{entry.where}: {MODE_COLUMNS[mode]} empty for {entry.question!r}; query mode {mode!r} needs it"
            )
        texts[query.id] = f"{query.text}\n{extra}"
    return texts


def read_rows(
    path: str | Path,
    required: Sequence[str],
    key: str,
    encoding: str = "utf-8",
    setting: str | None = SETTING,
    skipped: list[str] | None = None,
) -> Rows:
    """The located data rows of a CSV (in ``encoding``; ``setting`` names its key in a decoding error) or
    Excel (.xlsx, first sheet: the published ClimRetrieve files) file, every cell as text; a missing file
    (named by its setting ``key``) or required column is a UserError. A CSV row that does not line up with the header goes to ``skipped``
    (a UserError without that list: ``csv_records``)."""
    path = existing_file(path, key)
    if path.suffix.lower() == ".xlsx":
        columns, records = excel_rows(path)
        rows = [(f"row {number}", record) for number, record in records]
    else:
        with decoding(path, encoding, setting), open_text(path, encoding) as handle:
            columns, records = csv_records(handle, path, skipped)
        rows = [(f"line {number}", record) for number, record in records]
    columns = [name for name in columns if name]
    missing = [name for name in required if name not in columns]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)}; found {', '.join(columns) or 'none'}")
    return rows


def excel_rows(path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Header and rows of the first sheet, each with its sheet row number (the header is row 1); numbers
    keep their written form (``2``, not ``2.0``)."""
    import pandas as pd

    try:
        frame = pd.read_excel(path, sheet_name=0, dtype=str, keep_default_na=False)
    except (ValueError, OSError, KeyError, zipfile.BadZipFile) as error:
        raise UserError(f"{path}: not a readable Excel workbook ({error})") from None
    columns = ["" if str(name).startswith("Unnamed:") else str(name) for name in frame.columns]
    rows = frame.itertuples(index=False, name=None)
    return columns, [(number, dict(zip(columns, values))) for number, values in enumerate(rows, start=2)]


def required_text(row: Mapping[str, str], name: str) -> str:
    """The stripped cell ``name``; ValueError when blank."""
    text = (row.get(name) or "").strip()
    if not text:
        raise ValueError(f"field {name!r}: empty")
    return text


def parse_whole(value: str | None, name: str, low: int, high: int | None, expected: str) -> int:
    """A whole number in ``low..high`` (``2`` or ``2.0``); ValueError naming the field otherwise."""
    text = (value or "").strip()
    if not text:
        raise ValueError(f"field {name!r}: empty")
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"field {name!r}: {text!r} is not a number") from None
    if not number.is_integer() or number < low or (high is not None and number > high):
        raise ValueError(f"field {name!r}: {text!r} is not {expected}")
    return int(number)


def normalise(text: str) -> str:
    """NFKC, straight quotes, lower-case, whitespace runs collapsed: the form texts are compared in."""
    return " ".join(unicodedata.normalize("NFKC", text).translate(QUOTES).lower().split())


def doc_id_for(name: str) -> str:
    """A report's doc id: its file name without ``.pdf``, stripped (the PDF's stem, up to outer spaces)."""
    name = name.strip()
    return name[:-4].strip() if name.lower().endswith(".pdf") else name


def tally(kinds: dict[str, list[str]], kind: str, message: str) -> None:
    """Keep ``message`` under ``kind``, to be warned about once per kind, with a count."""
    kinds.setdefault(kind, []).append(message)


def warn_once(kind: str, messages: list[str]) -> None:
    """One warning line for ``messages`` of one ``kind``: their count and the first (the job lists them all)."""
    if messages:
        log.warning(
            "%d %s (e.g. %s); each is listed in the run folder's skipped_rows.txt", len(messages), kind, messages[0]
        )


def note(messages: list[str], message: str) -> None:
    """Log ``message`` as a warning and keep it."""
    log.warning(message)
    messages.append(message)
