"""Tables of a report PDF (pdfplumber): each found table -> a ``Table`` (page, header, cells) and a Markdown
passage of kind ``table``.

A table passage has the id ``<doc_id>#t<n>`` (n from 0 in page order), ``page_start == page_end`` = its
1-based page and ``text`` a Markdown table: the header row, a ``---`` rule, then the body rows; a cell's line
breaks become spaces (cleaned like page text), ``|`` is written ``\\|``, a merged or empty cell is blank. The
header and cells themselves are kept in the corpus's ``tables.jsonl`` (``Table`` fields, ``id`` = passage id).
"""

from __future__ import annotations

import itertools
import logging
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from esgexp.core.records import Passage
from esgexp.data.pdf import UnreadableDocument, clean_text
from esgexp.errors import UserError

log = logging.getLogger(__name__)

STRATEGIES = ("rules", "lines", "text")


@dataclass(frozen=True)
class Table:
    """One table: its passage id, 1-based page, box on the page (x0, top, x1, bottom in PDF points from
    the top left), header cells and body rows (every row as long as the header)."""

    id: str
    doc_id: str
    page: int
    bbox: tuple[float, float, float, float]
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def markdown(self) -> str:
        def line(cells) -> str:
            return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

        return "\n".join([line(self.header), line(["---"] * len(self.header)), *map(line, self.rows)])

    def passage(self) -> Passage:
        return Passage(self.id, self.doc_id, self.markdown(), self.page, self.page, kind="table")

    def record(self) -> dict:
        return {**asdict(self), "page_index": self.page - 1}

    @classmethod
    def from_record(cls, record: dict) -> Table:
        return cls(
            record["id"],
            record["doc_id"],
            int(record["page"]),
            tuple(record["bbox"]),
            tuple(record["header"]),
            tuple(tuple(row) for row in record["rows"]),
        )


@dataclass
class TableExtractor:
    """pdfplumber's table finder with ``strategy``:

    * ``lines``: the lines and cell borders drawn in the PDF (pdfplumber's default);
    * ``rules``: those, plus column borders where horizontal rules end (rule ends within ``rule_gap``
      points are one border) for tables whose rows are only underlined, as report KPI tables often are;
      rules more than ``max_row_height`` points apart belong to different tables, a group of rules with
      a drawn left border is left to ``lines``, and one without gets a top edge one row height above
      its first rule (its header sits there);
    * ``text``: columns and rows guessed from word positions.

    A found table is kept when, after dropping its empty rows and columns, it has at least ``min_rows``
    rows (header included) and ``min_cols`` columns: a framed text box is one column, a ruled page banner
    two rows. A header split over two rows whose filled cells do not overlap, the second with an empty
    first cell (a highlighted year above the others), is joined into one.
    """

    name: str = "pdfplumber"
    strategy: str = "rules"
    min_rows: int = 3
    min_cols: int = 2
    rule_gap: float = 8.0
    max_row_height: float = 50.0

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise UserError(f"table_extractor.strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if self.rule_gap < 0 or self.max_row_height <= 0:
            raise UserError(
                f"table_extractor: need rule_gap >= 0 and max_row_height > 0, got {self.rule_gap} and {self.max_row_height}"
            )
        if self.min_rows < 2 or self.min_cols < 1:
            raise UserError(
                f"table_extractor: need min_rows >= 2 (a header and a row) and min_cols >= 1, "
                f"got {self.min_rows} and {self.min_cols}"
            )

    def config(self) -> dict:
        """The settings, as recorded in the corpus manifest (a change extracts the tables again)."""
        from importlib.metadata import version

        return {
            "_target_": f"{type(self).__module__}.{type(self).__qualname__}",
            **asdict(self),
            "pdfplumber": version("pdfplumber"),
        }

    def extract(self, path: Path, doc_id: str, pages: Sequence[int] | None = None) -> list[Table]:
        """The tables of one PDF (of its 1-based ``pages``; all when None) in page order, ids
        ``<doc_id>#t<n>``; see :meth:`found` for failures."""
        return self.keep(self.found(path, pages), doc_id)

    def found(self, path: Path, pages: Sequence[int] | None = None) -> list[tuple[int, tuple, list[list[str | None]]]]:
        """Every table pdfplumber finds, unfiltered: (1-based page, bbox, raw cells). A page it cannot read
        is logged and has none; raises :class:`UnreadableDocument` when the file cannot be opened at all."""
        import pdfplumber

        plumber = "lines" if self.strategy == "rules" else self.strategy
        settings = {"vertical_strategy": plumber, "horizontal_strategy": plumber}
        try:
            document = pdfplumber.open(path, password="", pages=list(pages) if pages is not None else None)
        except Exception as error:  # pdfminer raises many types on a damaged or locked file
            raise UnreadableDocument(f"tables: not a readable PDF ({type(error).__name__}: {error})") from error
        found = []
        with document:
            for page in document.pages:
                number = page.page_number
                try:
                    extra = self._rule_borders(page) if self.strategy == "rules" else {}
                    tables = page.find_tables({**settings, **extra})
                    words = page.extract_words() if tables else []
                    found += [(number, t.bbox, whole_words(page, t, words, self.max_row_height)) for t in tables]
                except Exception as error:
                    log.warning(
                        "%s page %d: table extraction failed (%s: %s); no tables kept from it",
                        path,
                        number,
                        type(error).__name__,
                        error,
                    )
                finally:
                    page.close()
        return found

    def keep(self, found: list[tuple[int, tuple, list[list[str | None]]]], doc_id: str) -> list[Table]:
        """The found tables large enough to keep, numbered in order."""
        tables: list[Table] = []
        for number, bbox, cells in found:
            grid = self._grid(cells)
            if grid:
                tables.append(
                    Table(
                        f"{doc_id}#t{len(tables)}",
                        doc_id,
                        number,
                        tuple(round(v, 1) for v in bbox),
                        grid[0],
                        tuple(grid[1:]),
                    )
                )
        return tables

    def _rule_borders(self, page) -> dict:
        """pdfplumber settings adding the ``rules`` strategy's explicit borders for one page."""
        rules = sorted((e for e in page.edges if e["orientation"] == "h"), key=lambda e: e["top"])
        drawn = [e for e in page.edges if e["orientation"] == "v"]
        groups: list[list[dict]] = []
        for rule in rules:
            if groups and rule["top"] - groups[-1][-1]["top"] <= self.max_row_height:
                groups[-1].append(rule)
            else:
                groups.append([rule])
        vertical, horizontal = [], []
        for group in groups:
            ys = sorted({round(rule["top"], 1) for rule in group})
            if len(ys) < 2:
                continue
            borders = _clusters(sorted(x for rule in group for x in (rule["x0"], rule["x1"])), self.rule_gap)
            framed = any(
                abs(e["x0"] - borders[0]) <= self.rule_gap and e["top"] <= ys[0] + 1 and e["bottom"] >= ys[1] - 1
                for e in drawn
            )
            if framed:  # a drawn grid: the lines strategy reads it as drawn
                continue
            top = max(ys[0] - statistics.median(b - a for a, b in itertools.pairwise(ys)), 0.0)
            vertical += [_line(x, top, x, ys[-1]) for x in borders]
            horizontal.append(_line(borders[0], top, borders[-1], top))
        return {
            "explicit_vertical_lines": vertical,
            "explicit_horizontal_lines": horizontal,
            "join_x_tolerance": self.rule_gap,
        }

    def _grid(self, cells: list[list[str | None]]) -> list[tuple[str, ...]] | None:
        """Cleaned cells without empty rows and columns, or None when too small to be a table."""
        rows = [[clean_text(cell or "") for cell in row] for row in cells]
        rows = [row for row in rows if any(row)]
        if len(rows) > 1 and not rows[1][0] and not any(a and b for a, b in zip(rows[0], rows[1])):
            rows[:2] = [[a or b for a, b in zip(rows[0], rows[1])]]
        columns = [j for j in range(max(map(len, rows), default=0)) if any(j < len(row) and row[j] for row in rows)]
        if len(rows) < self.min_rows or len(columns) < self.min_cols:
            return None
        return [tuple(row[j] if j < len(row) else "" for j in columns) for row in rows]


def whole_words(page, table, words: list[dict], max_row_height: float) -> list[list[str | None]]:
    """The table's cells with no word cut in two: where a word crosses a cell border (a header written over
    two columns, a label running into the next cell, a border taken from a rule below), the cells it
    spans in that row are read as one, its text in the first and the others left empty. pdfplumber alone
    shares out a word's characters by position: ``Tu`` | ``rnover``. A row taller than ``max_row_height``
    (a page read as one cell) is left as it is."""
    cells = table.extract()
    for r, row in enumerate(table.rows):
        if row.bbox[3] - row.bbox[1] > max_row_height:
            continue
        boxes = row.cells
        joined = list(range(len(boxes)))  # each cell's group: the first cell of the run it is joined into
        for word in words:
            if word["top"] < row.bbox[1] - 1 or word["bottom"] > row.bbox[3] + 1:
                continue
            spanned = [i for i, box in enumerate(boxes) if box and word["x0"] < box[2] - 1 and word["x1"] > box[0] + 1]
            for i in spanned[1:]:
                for j in range(spanned[0] + 1, i + 1):
                    joined[j] = joined[spanned[0]]
        for first in sorted(set(joined)):
            run = [i for i, group in enumerate(joined) if group == first]
            if len(run) < 2:
                continue
            real = [boxes[i] for i in run if boxes[i]]
            bbox = (min(box[0] for box in real), row.bbox[1], max(box[2] for box in real), row.bbox[3])
            cells[r][run[0]] = page.within_bbox(bbox).extract_text()
            for i in run[1:]:
                cells[r][i] = ""
    return cells


def _clusters(values: list[float], gap: float) -> list[float]:
    """The means of runs of sorted ``values`` whose neighbours are at most ``gap`` apart."""
    runs: list[list[float]] = []
    for value in values:
        if runs and value - runs[-1][-1] <= gap:
            runs[-1].append(value)
        else:
            runs.append([value])
    return [statistics.fmean(run) for run in runs]


def _line(x0: float, top: float, x1: float, bottom: float) -> dict:
    """A line object as pdfplumber's explicit table lines take it (page coordinates from the top left)."""
    return {
        "object_type": "line",
        "x0": x0,
        "x1": x1,
        "top": top,
        "bottom": bottom,
        "width": x1 - x0,
        "height": bottom - top,
    }
