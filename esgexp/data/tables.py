"""Tables of a report PDF (pdfplumber): each found table -> a ``Table`` (page, header, cells) and a Markdown
passage of kind ``table``.

A table passage has the id ``<doc_id>#t<n>`` (n from 0 in page order), ``page_start == page_end`` = its
1-based page and ``text`` a Markdown table: the header row, a ``---`` rule, then the body rows; a cell's line
breaks become spaces (cleaned like page text), ``|`` is written ``\\|``, a merged or empty cell is blank. The
header and cells themselves are kept in the corpus's ``tables.jsonl`` (``Table`` fields, ``id`` = passage id).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from esgexp.data.pdf import UnreadableDocument, clean_text
from esgexp.errors import UserError
from esgexp.records import Passage

log = logging.getLogger(__name__)

STRATEGIES = ("lines", "text")


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
        return cls(record["id"], record["doc_id"], int(record["page"]), tuple(record["bbox"]), tuple(record["header"]),
                   tuple(tuple(row) for row in record["rows"]))


@dataclass
class TableExtractor:
    """pdfplumber's table finder with ``strategy`` (``lines``: ruling lines and cell borders drawn in the
    PDF; ``text``: columns and rows guessed from word positions) for both directions. A found table is kept
    when, after dropping its empty rows and columns, it has at least ``min_rows`` rows (header included)
    and ``min_cols`` columns: a framed text box is one column, a ruled page banner two rows."""

    name: str = "pdfplumber"
    strategy: str = "lines"
    min_rows: int = 3
    min_cols: int = 2

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise UserError(f"table_extractor.strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if self.min_rows < 2 or self.min_cols < 1:
            raise UserError(f"table_extractor: need min_rows >= 2 (a header and a row) and min_cols >= 1, "
                            f"got {self.min_rows} and {self.min_cols}")

    def config(self) -> dict:
        """The settings, as recorded in the corpus manifest (a change extracts the tables again)."""
        from importlib.metadata import version

        return {"_target_": f"{type(self).__module__}.{type(self).__qualname__}", **asdict(self),
                "pdfplumber": version("pdfplumber")}

    def extract(self, path: Path, doc_id: str, pages: Sequence[int] | None = None) -> list[Table]:
        """The tables of one PDF (of its 1-based ``pages``; all when None) in page order, ids
        ``<doc_id>#t<n>``; see :meth:`found` for failures."""
        return self.keep(self.found(path, pages), doc_id)

    def found(self, path: Path, pages: Sequence[int] | None = None) -> list[tuple[int, tuple, list[list[str | None]]]]:
        """Every table pdfplumber finds, unfiltered: (1-based page, bbox, raw cells). A page it cannot read
        is logged and has none; raises :class:`UnreadableDocument` when the file cannot be opened at all."""
        import pdfplumber

        settings = {"vertical_strategy": self.strategy, "horizontal_strategy": self.strategy}
        try:
            document = pdfplumber.open(path, password="", pages=list(pages) if pages is not None else None)
        except Exception as error:  # pdfminer raises many types on a damaged or locked file
            raise UnreadableDocument(f"tables: not a readable PDF ({type(error).__name__}: {error})") from error
        found = []
        with document:
            for page in document.pages:
                number = page.page_number
                try:
                    found += [(number, t.bbox, t.extract()) for t in page.find_tables(settings)]
                except Exception as error:
                    log.warning("%s page %d: table extraction failed (%s: %s); no tables kept from it",
                                path, number, type(error).__name__, error)
                finally:
                    page.close()
        return found

    def keep(self, found: list[tuple[int, tuple, list[list[str | None]]]], doc_id: str) -> list[Table]:
        """The found tables large enough to keep, numbered in order."""
        tables: list[Table] = []
        for number, bbox, cells in found:
            grid = self._grid(cells)
            if grid:
                tables.append(Table(f"{doc_id}#t{len(tables)}", doc_id, number, tuple(round(v, 1) for v in bbox),
                                    grid[0], tuple(grid[1:])))
        return tables

    def _grid(self, cells: list[list[str | None]]) -> list[tuple[str, ...]] | None:
        """Cleaned cells without empty rows and columns, or None when too small to be a table."""
        rows = [[clean_text(cell or "") for cell in row] for row in cells]
        rows = [row for row in rows if any(row)]
        columns = [j for j in range(max(map(len, rows), default=0)) if any(j < len(row) and row[j] for row in rows)]
        if len(rows) < self.min_rows or len(columns) < self.min_cols:
            return None
        return [tuple(row[j] if j < len(row) else "" for j in columns) for row in rows]
