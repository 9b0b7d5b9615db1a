"""Tables of a report PDF: each found table -> a ``Table`` (page, title, header, units, rows, notes, and
whether the page edge cuts it) and a Markdown passage of kind ``table``.

Pages are read with PDFium (``page_layout``: rules and words inside the page's visible area); pdfplumber's
table finder lays the grid out from the rules. A table passage has the id ``<doc_id>#t<n>`` (n from 0 in
page order), ``page_start == page_end`` = its 1-based page and ``text`` the table as printed: its title,
a line saying where the page edge cuts it, the Markdown table (header row, ``---`` rule, the unit line
and the body rows) and its footnotes. A cell's lines are joined with spaces (cleaned like page text, so a
word hyphenated at a line end is whole), ``|`` is written ``\\|``, a merged or empty cell is blank. The
fields themselves are kept in the corpus's ``tables.jsonl`` (``Table`` fields, ``id`` = passage id).
"""

from __future__ import annotations

import itertools
import logging
import re
import statistics
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from esgexp.core.records import Passage
from esgexp.data.page_layout import PageLayout, Word, open_pdf, page_layout
from esgexp.data.pdf import UnreadableDocument, clean_text, formula_subscripts
from esgexp.errors import UserError

log = logging.getLogger(__name__)

STRATEGIES = ("rules", "lines", "text")
VERSION = 2  # bump when what is extracted changes: corpora extracted before get their tables again
EDGES = ("left", "right", "top", "bottom")


@dataclass(frozen=True)
class Table:
    """One table: its passage id, 1-based page, box on the page (x0, top, x1, bottom in PDF points from
    the top left), header cells and body rows (every row as long as the header), and what frames them:
    ``title`` (the heading right above it), ``groups`` (per column, the group header spanning it, as
    "Substantial contribution criteria"; empty when none), ``units`` (per column, the unit line under the
    header: "€ million", "%"; empty when none), ``notes`` (its footnotes), ``cut`` (the page edges it
    runs past, of ``left``, ``right``, ``top``, ``bottom``) and the pages it is continued from or on."""

    id: str
    doc_id: str
    page: int
    bbox: tuple[float, float, float, float]
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    title: str = ""
    groups: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    notes: str = ""
    cut: tuple[str, ...] = ()
    continued_from: int | None = None
    continues_on: int | None = None

    def columns(self) -> tuple[str, ...]:
        """Each column's full name: its group header, a colon, its own header (just the header without a group)."""
        groups = self.groups or ("",) * len(self.header)
        return tuple(
            f"{group}: {name}" if group and name else group or name for group, name in zip(groups, self.header)
        )

    def edge_note(self) -> str:
        """A line saying where the page edge cuts the table and where it goes on ("" when it is whole)."""
        notes = []
        if self.continued_from is not None:
            notes.append(
                f"continued from page {self.continued_from}: its first columns are there, its row labels repeated here"
            )
        if self.continues_on is not None:
            notes.append(f"continues on page {self.continues_on}: its further columns are there")
        if self.cut and not notes:
            notes.append(f"cut at the page's {' and '.join(self.cut)} edge: columns or rows beyond it are missing")
        return f"(Table {'; '.join(notes)}.)" if notes else ""

    def markdown(self) -> str:
        def line(cells) -> str:
            return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

        table = [line(self.columns()), line(["---"] * len(self.header))]
        table += [line(self.units)] if self.units else []
        table += map(line, self.rows)
        parts = [self.title, self.edge_note(), "\n".join(table), self.notes]
        return "\n\n".join(part for part in parts if part)

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
            record.get("title", ""),
            tuple(record.get("groups", ())),
            tuple(record.get("units", ())),
            record.get("notes", ""),
            tuple(record.get("cut", ())),
            record.get("continued_from"),
            record.get("continues_on"),
        )


@dataclass
class Found:
    """A table as found on its page, before the size filter: ``cells`` its rows (header first, cells as
    read, None for a cell another one spans), ``texts`` each row's whole text (its lines across the
    table), ``tops`` each row's top, ``groups`` per column the group header over it."""

    page: int
    bbox: tuple[float, float, float, float]
    cells: list[list[str | None]]
    texts: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    title: str = ""
    cut: tuple[str, ...] = ()
    tops: list[float] = field(default_factory=list)
    continued_from: int | None = None
    continues_on: int | None = None


@dataclass
class TableExtractor:
    """Tables found from the rules drawn on a page (``page_layout``: PDFium's rules and words, inside the
    visible area), with ``strategy``:

    * ``rules`` (the default): each group of horizontal rules (rules more than ``max_row_height`` points
      apart start a new group, unless the text between is one tall row of the same table) is a grid: a row
      between each two rules of 20+ points (not a tick box's stroke, not a link's underline), a column
      between each two borders where the rules' pieces end (ends within ``rule_gap`` points are one border).
      Its header is the text stacked above its first rule, up to a rule across the table, a wider gap,
      running text or a larger heading: each column's lines read top to bottom as one header, and a label
      over a partial rule (or written across several columns above others) is those columns' group. A group
      with a drawn left border is a drawn grid, left to pdfplumber's finder (``lines``);
    * ``lines``: pdfplumber's finder on the lines and cell borders drawn (its default);
    * ``text``: pdfplumber's finder, columns and rows guessed from word positions.

    Pages with fewer than two horizontal rules have no table for ``rules`` and ``lines`` and are not read
    further. A found table is kept when, after dropping its empty rows and columns, it has at least
    ``min_rows`` rows (header included) and ``min_cols`` columns: a framed text box is one column, a ruled
    page banner two rows. A header split over two rows whose filled cells do not overlap, the second with
    an empty first cell (a highlighted year above the others), is joined into one. A first body row of
    units (``€ million``, ``%``) is the table's unit line; trailing rows of footnotes (``* ...``) its
    notes; the heading right above it its title; a drawn tick box ``☑``. A table reaching the page's edge
    is cut there; the halves of a spread are linked and the right one repeats the left one's row labels.
    """

    name: str = "pdfium"
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
            "version": VERSION,
            "pdfplumber": version("pdfplumber"),
            "pypdfium2": version("pypdfium2"),
        }

    def extract(self, path: Path, doc_id: str, pages: Sequence[int] | None = None) -> list[Table]:
        """The tables of one PDF (of its 1-based ``pages``; all when None) in page order, ids
        ``<doc_id>#t<n>``; see :meth:`found` for failures."""
        return self.keep(self.found(path, pages), doc_id)

    def found(self, path: Path, pages: Sequence[int] | None = None) -> list[Found]:
        """Every table found, before the size filter, in page order. A page that cannot be read is logged and
        has none; raises :class:`UnreadableDocument` when the file cannot be opened at all."""
        try:
            document = open_pdf(path)
        except UnreadableDocument as error:
            raise UnreadableDocument(f"tables: {error}") from error
        found = []
        try:
            for number in pages if pages is not None else range(1, len(document) + 1):
                try:
                    layout = page_layout(document, number)
                except Exception as error:  # a broken page: lose its tables, not the document's
                    log.warning(
                        "%s page %d: table extraction failed (%s: %s)", path, number, type(error).__name__, error
                    )
                    continue
                try:
                    found += self.page_tables(layout)
                except Exception as error:
                    log.warning(
                        "%s page %d: table extraction failed (%s: %s); no tables kept from it",
                        path,
                        number,
                        type(error).__name__,
                        error,
                    )
                finally:
                    layout.close()
        finally:
            document.close()
        return found

    def page_tables(self, layout: PageLayout) -> list[Found]:
        """The tables of one page, top to bottom; none without two horizontal rules (``rules``, ``lines``).
        ``rules`` lays out each group of rules as its own grid and leaves pdfplumber's finder the pages with
        drawn vertical borders (a drawn grid); ``lines`` and ``text`` are pdfplumber's finder alone."""
        from pdfplumber.table import TableFinder

        if self.strategy != "text" and sum(edge["orientation"] == "h" for edge in layout.edges) < 2:
            return []
        grids: list[tuple[object, _Band | None]] = []
        if self.strategy == "rules":
            grids = [(_Grid.of(band), band) for band in self._rule_bands(layout)]
        if self.strategy != "rules" or sum(edge["orientation"] == "v" for edge in layout.edges) >= 2:
            plumber = "lines" if self.strategy == "rules" else self.strategy
            settings = {"vertical_strategy": plumber, "horizontal_strategy": plumber}
            grids += [(table, None) for table in TableFinder(layout, settings).tables]
        found = [
            self._read(layout, grid, band) for grid, band in sorted(grids, key=lambda g: (g[0].bbox[1], g[0].bbox[0]))
        ]
        return _without_nested(found)

    def keep(self, found: list[Found], doc_id: str) -> list[Table]:
        """The found tables large enough to keep, numbered in order, the halves of a spread linked (see
        :func:`_join_spread`)."""
        for left in found:
            if "right" in left.cut:
                right = next(
                    (f for f in found if f.page == left.page + 1 and "left" in f.cut and _overlap(f, left)), None
                )
                if right is not None and right.continued_from is None:
                    _join_spread(left, right)
        tables: list[Table] = []
        for item in found:
            table = self._table(item, f"{doc_id}#t{len(tables)}", doc_id)
            if table is not None:
                tables.append(table)
        return tables

    # ---- one table -----------------------------------------------------------------------------------

    def _read(self, layout: PageLayout, table, band: _Band | None) -> Found:
        """The cells of one table pdfplumber found (each word in the cell its middle lies in; a word that
        crosses a cell border joins the cells it spans in that row), the header read from its band, its
        title and the page edges it touches."""
        words = layout.words()
        x0, top, x1, bottom = table.bbox
        rows = table.rows
        if band is not None and band.lines:  # the header is read from the band: no grid row above the first rule
            rows = [row for row in rows if row.bbox[3] > band.grid[1] + 0.5]
            top = min(top, band.grid[1])
        within = sorted((w for w in words if x0 <= w.x_mid < x1 and top <= w.y_mid < bottom), key=lambda w: w.y_mid)
        middles = [w.y_mid for w in within]
        row_words = [within[bisect_left(middles, row.bbox[1]) : bisect_left(middles, row.bbox[3])] for row in rows]
        cells = [self._row_texts(row, inside) for row, inside in zip(rows, row_words)]
        texts = [_text(inside) for inside in row_words]
        tops = [row.bbox[1] for row in rows]
        groups: list[str] = []
        if band is not None and band.lines:
            header, groups = _band_header(band, _column_borders(table), words)
            cells.insert(0, header)
            texts.insert(0, " ".join(header))
            tops.insert(0, band.top)
            top = band.top
        title = _title(words, (x0, top, x1, bottom))
        cut = _cut(table.bbox, layout.bbox)
        return Found(layout.number, (x0, top, x1, bottom), cells, texts, groups, title, cut, tops)

    def _row_texts(self, row, inside: list[Word]) -> list[str | None]:
        """One grid row's cell texts from the words ``inside`` it; in a row taller than ``max_row_height``
        (a page read as one cell) each word goes to the cell its middle lies in, without joining cells."""
        boxes = row.cells
        _, top, _, bottom = row.bbox
        joined = list(range(len(boxes)))  # each cell's group: the first cell of the run it is joined into
        if bottom - top <= self.max_row_height:
            for word in inside:
                spanned = [i for i, box in enumerate(boxes) if box and word.x0 < box[2] - 1 and word.x1 > box[0] + 1]
                for i in spanned[1:]:
                    for j in range(spanned[0] + 1, i + 1):
                        joined[j] = joined[spanned[0]]
        texts: list[str | None] = [None if box is None else "" for box in boxes]
        for first in sorted(set(joined)):
            run = [i for i, group in enumerate(joined) if group == first and boxes[i]]
            if not run:
                continue
            x0, x1 = min(boxes[i][0] for i in run), max(boxes[i][2] for i in run)
            texts[run[0]] = _text([w for w in inside if x0 <= w.x_mid < x1])
        return texts

    def _table(self, item: Found, table_id: str, doc_id: str) -> Table | None:
        """The ``Table`` of a found one: cleaned, without empty rows and columns, the header joined, the
        unit line and footnotes set apart; None when too small."""
        width = max(map(len, item.cells), default=0)
        cleaned = [[clean_text(cell or "") for cell in row] + [""] * (width - len(row)) for row in item.cells]
        texts = item.texts or [" ".join(row) for row in cleaned]
        kept = [(row, text) for row, text in zip(cleaned, texts) if any(row)]
        rows, texts = [row for row, _ in kept], [text for _, text in kept]
        groups = (list(item.groups) + [""] * width)[:width]
        if (
            len(rows) > 1
            and not rows[1][0]
            and not any(a and b for a, b in zip(rows[0], rows[1]))
            and not _units(rows[1])
        ):
            rows[:2] = [[a or b for a, b in zip(rows[0], rows[1])]]
            texts[:2] = [" ".join(texts[:2])]
        notes: list[str] = []
        while len(rows) > 2 and _footnote(rows[-1]):
            rows.pop()
            notes.insert(0, clean_text(texts.pop()))
        columns = [j for j in range(width) if any(row[j] for row in rows)]
        if len(rows) < self.min_rows or len(columns) < self.min_cols:
            return None
        header, body = [rows[0][j] for j in columns], [[row[j] for j in columns] for row in rows[1:]]
        units: list[str] = []
        if body and _units(body[0]):
            units = body.pop(0)
            if not header[0] and units[0]:
                header[0], units[0] = units[0], ""
        groups = [groups[j] for j in columns]
        return Table(
            table_id,
            doc_id,
            item.page,
            tuple(round(v, 1) for v in item.bbox),
            tuple(header),
            tuple(map(tuple, body)),
            item.title,
            tuple(groups) if any(groups) else (),
            tuple(units),
            "\n".join(notes),
            item.cut,
            item.continued_from,
            item.continues_on,
        )

    # ---- the rules strategy's borders and header bands ------------------------------------------------

    def _rule_bands(self, layout: PageLayout) -> list[_Band]:
        """Each group of rules of a page that is a table (not a drawn grid) with its header band. Rules inside
        another group's header band (under its group headers, under its title) are that table's, not a
        table of their own."""
        spans = _rule_spans([e for e in layout.edges if e["orientation"] == "h"], self.rule_gap)
        spans = _not_underlines([span for span in spans if span["x1"] - span["x0"] >= MIN_BORDER], layout.words())
        long = [piece for span in spans for piece in span["pieces"]]
        rules = sorted(long, key=lambda e: e["top"])
        drawn = [e for e in layout.edges if e["orientation"] == "v"]
        groups: list[list[dict]] = []
        for rule in rules:
            if groups and rule["top"] - groups[-1][-1]["top"] <= self.max_row_height:
                groups[-1].append(rule)
            elif groups and self._tall_row(layout, groups[-1], rule, rules):
                groups[-1].append(rule)
            else:
                groups.append([rule])
        bands = [self._band(layout, rules, drawn, group) for group in groups]
        taken = [(band.ceiling, band.grid[1] - 0.5) if band and band.lines else None for band in bands]
        kept = []
        for k, (group, band) in enumerate(zip(groups, bands)):
            others = [region for i, region in enumerate(taken) if i != k and region]
            own = [r for r in group if not any(a <= r["top"] < b for a, b in others)]
            if len(own) < len(group):  # some of its rules are another table's header rules
                band = self._band(layout, rules, drawn, own) if own else None
            if band is not None:
                kept.append(band)
        return kept

    def _tall_row(self, layout: PageLayout, group: list[dict], rule: dict, rules: list[dict]) -> bool:
        """Whether ``rule``, more than ``max_row_height`` below the group's last rule, closes a row of the same
        table taller than that (a cell of many lines): both rules span the same width and the text between
        starts right under the upper one (a new table would leave room for its title)."""
        upper = _rule_spans(group, self.rule_gap)[-1]
        lower = _rule_spans([r for r in rules if abs(r["top"] - rule["top"]) <= 1], self.rule_gap)
        lower = next((s for s in lower if s["x0"] <= rule["x0"] + 1 and s["x1"] >= rule["x1"] - 1), None)
        if (
            lower is None
            or abs(lower["x0"] - upper["x0"]) > self.rule_gap
            or abs(lower["x1"] - upper["x1"]) > self.rule_gap
        ):
            return False
        if lower["top"] - upper["top"] > 3 * self.max_row_height:
            return False
        between = [
            w for w in layout.words() if upper["top"] < w.y_mid < lower["top"] and upper["x0"] <= w.x_mid <= upper["x1"]
        ]
        if not between:
            return False
        first = min(between, key=lambda w: w.top)
        return first.top - upper["top"] <= first.bottom - first.top

    def _band(self, layout: PageLayout, rules: list[dict], drawn: list[dict], group: list[dict]) -> _Band | None:
        """The header band of one group of rules; None for a single rule or a drawn grid (``lines`` reads it)."""
        borders = _clusters(sorted(x for rule in group for x in (rule["x0"], rule["x1"])), self.rule_gap)
        # a mark drawn with short strokes (a tick box) is no row border, nor is a short bar over the first
        # row (a highlighted column's top)
        spans = _rule_spans(group, self.rule_gap)
        while spans and spans[0]["x1"] - spans[0]["x0"] < HIGHLIGHT * (borders[-1] - borders[0]):
            spans.pop(0)
        ys = sorted({round(span["top"], 1) for span in spans})
        if len(ys) < 2:
            return None
        left = sum(
            max(0.0, min(e["bottom"], ys[-1]) - max(e["top"], ys[0]))
            for e in drawn
            if abs(e["x0"] - borders[0]) <= self.rule_gap
        )
        if left >= FRAMED * (ys[-1] - ys[0]):  # a drawn grid: the lines strategy reads it as drawn
            return None
        row_height = statistics.median(b - a for a, b in itertools.pairwise(ys))
        return _header_band(layout, rules, ys, borders, row_height)


@dataclass
class _Band:
    """The header above a group of rules: ``top`` of its highest line (one row height above the first rule
    when it has no ``lines`` of text), ``grid`` the box of the rules (x0, first rule, x1, last rule),
    ``borders`` their column borders, ``rules`` the partial rules inside the band (under group headers)
    and ``ceiling`` where the band ends above: the rule across the table over it, or its top."""

    top: float
    grid: tuple[float, float, float, float]
    borders: list[float]
    ys: list[float]
    rules: list[dict]
    lines: int
    ceiling: float


@dataclass
class _Row:
    """One row of a grid as pdfplumber's tables have them: its cells' boxes and its box."""

    cells: list[tuple[float, float, float, float]]
    bbox: tuple[float, float, float, float]


@dataclass
class _Grid:
    """The grid of a rules table (pdfplumber's table shape: ``bbox``, ``rows``, ``cells``): a row between
    each two rules, a column between each two borders; with no header text above the first rule, one
    row height above it is the header row."""

    bbox: tuple[float, float, float, float]
    rows: list[_Row]
    cells: list[tuple[float, float, float, float]]

    @classmethod
    def of(cls, band: _Band) -> _Grid:
        ys = band.ys
        xs = band.borders
        rows = [
            _Row([(a, top, b, bottom) for a, b in itertools.pairwise(xs)], (xs[0], top, xs[-1], bottom))
            for top, bottom in itertools.pairwise(ys)
        ]
        return cls((xs[0], ys[0], xs[-1], ys[-1]), rows, [cell for row in rows for cell in row.cells])


# A line taller than this many of its own heights above the line under it is not part of the same header.
STACKED_GAP = 1.5
# The header band of a rules table holds at most this many lines (more is running text above the table).
MAX_HEADER_LINES = 8
# A run of words wider than this share of the table's width above it is running text, not its header.
RUNNING_WIDTH = 0.45
# Rules with a drawn left border along this share of their height are a drawn grid (left to ``lines``).
FRAMED = 0.5
# A rule shorter than this (points) is a drawn mark (a tick box's stroke), not a row border.
MIN_BORDER = 20.0
# A first rule shorter than this share of the table's width is a highlight bar, not a row border.
HIGHLIGHT = 0.3
# A header line taller than this many times the header's last line is a heading above the table.
HEADING = 1.25
# A rule spanning this share of the table's width closes its header band (the rule under a title).
FULL_RULE = 0.8


def _header_band(
    layout: PageLayout, rules: list[dict], ys: list[float], borders: list[float], row_height: float
) -> _Band:
    """The lines stacked right above a rules table's first rule (``ys`` its row borders), within its width:
    each at most ``STACKED_GAP`` line heights above the one below (twice that over a partial rule), up to
    a rule across the table, at most ``MAX_HEADER_LINES``, none running text or in a heading's larger font."""
    x0, first, x1 = borders[0], ys[0], borders[-1]
    grid = (x0, first, x1, ys[-1])
    words = [w for w in layout.words() if x0 - 1 <= w.x_mid <= x1 + 1 and first - 200 < w.y_mid < first]
    spans = [r for r in _rule_spans(rules) if r["top"] < first - 0.5 and r["x1"] > x0 and r["x0"] < x1]
    full = [r["top"] for r in spans if min(r["x1"], x1) - max(r["x0"], x0) >= FULL_RULE * (x1 - x0)]
    ceiling = max(full, default=-1.0)
    top, count, header_height = first, 0, None
    for line in reversed(_lines(words)):
        height = statistics.median(w.bottom - w.top for w in line)
        header_height = header_height or height
        line_top, line_bottom = min(w.top for w in line), max(w.bottom for w in line)
        over_rule = any(line_bottom <= r["top"] <= top for r in spans)  # a group header over a partial rule
        if (
            line_top <= ceiling
            or top - line_bottom > (2 * STACKED_GAP if over_rule else STACKED_GAP) * height
            or count == MAX_HEADER_LINES
            or _running_text(line, x1 - x0)
            or height > HEADING * header_height
        ):
            break
        top, count = min(top, line_top) - 0.5, count + 1
    if not count:  # the first rule is the table's top border
        return _Band(first, grid, borders, ys, [], 0, first)
    near = ceiling if ceiling >= top - 2 * row_height else top
    partial = [r for r in spans if top < r["top"] and r["top"] > ceiling]
    return _Band(top, grid, borders, ys, partial, count, near)


def _not_underlines(spans: list[dict], words: list[Word]) -> list[dict]:
    """The rules (joined pieces) that do not underline text (a link, an emphasis): an underline runs through
    the lower part of a run of words (no gap wider than a space), from where its first word starts to
    within its last; a table's rule lies under a row's cells, with gaps between them."""
    words = sorted(words, key=lambda w: w.bottom)
    bottoms = [w.bottom for w in words]
    kept = []
    for span in spans:
        near = words[bisect_left(bottoms, span["top"] - 1) : bisect_left(bottoms, span["top"] + 12)]
        under = sorted(
            (w for w in near if w.y_mid < span["top"] and w.x1 > span["x0"] and w.x0 < span["x1"]), key=lambda w: w.x0
        )
        underline = (
            bool(under)
            and len(_phrases(under, [])) == 1
            and abs(under[0].x0 - span["x0"]) <= 1.5
            and under[-1].x0 < span["x1"] <= under[-1].x1 + 1.5
        )
        if not underline:
            kept.append(span)
    return kept


def _rule_spans(rules: list[dict], gap: float = 8.0) -> list[dict]:
    """Horizontal rules drawn in pieces (one per column) joined: pieces on one height (within a point) whose
    ends are at most ``gap`` apart are one span ``{"x0", "x1", "top", "pieces"}``."""
    spans: list[dict] = []
    for rule in sorted(rules, key=lambda r: (round(r["top"]), r["x0"])):
        last = spans[-1] if spans else None
        if last and abs(rule["top"] - last["top"]) <= 1 and rule["x0"] - last["x1"] <= gap:
            last["x1"] = max(last["x1"], rule["x1"])
            last["pieces"].append(rule)
        else:
            spans.append({"x0": rule["x0"], "x1": rule["x1"], "top": rule["top"], "pieces": [rule]})
    return spans


def _band_header(band: _Band, borders: list[float], words: list[Word]) -> tuple[list[str], list[str]]:
    """Each column's header (its lines in the band, top to bottom) and group header. The words right above a
    partial rule are the group header of the columns under it; then, line by line, runs of words not
    separated by a column border: one across several columns with more header text below it is their group
    header, one with nothing below a merged header cell (its text in the first column it spans)."""
    n = len(borders) - 1
    inside = [w for w in words if band.top <= w.y_mid < band.grid[1] and borders[0] - 1 <= w.x_mid <= borders[-1] + 1]
    groups = [""] * n

    def columns_within(x0: float, x1: float) -> list[int]:
        return [j for j in range(n) if x0 - 1 <= (borders[j] + borders[j + 1]) / 2 <= x1 + 1]

    for rule in band.rules:
        label = [w for w in inside if 0 <= rule["top"] - w.bottom <= 8 and rule["x0"] - 2 <= w.x_mid <= rule["x1"] + 2]
        label = [w for w in label if abs(w.y_mid - max(label, key=lambda w: w.bottom).y_mid) < 2]
        if label:
            for j in columns_within(rule["x0"], rule["x1"]):
                groups[j] = _text(label)
            inside = [w for w in inside if w not in label]
    column_words: list[list[Word]] = [[] for _ in range(n)]
    for phrase in (p for line in _lines(inside) for p in _phrases(line, borders)):
        x0, x1, bottom = phrase[0].x0, phrase[-1].x1, max(w.bottom for w in phrase)
        spanned = [j for j in range(n) if x0 < borders[j + 1] - 1 and x1 > borders[j] + 1]
        below = len(spanned) > 1 and any(
            w.top >= bottom - 0.5 and any(borders[j] <= w.x_mid < borders[j + 1] for j in spanned) for w in inside
        )
        if below:
            for j in spanned:
                groups[j] = _text(phrase)
        elif spanned:
            column_words[spanned[0]] += phrase
    return [_text(ws) for ws in column_words], groups


def _column_borders(table) -> list[float]:
    """The x positions of the table's column borders: the left edges of its cells (one per cell position
    of its rows), then its right edge."""
    return sorted({round(cell[0], 1) for cell in table.cells} | {round(table.bbox[2], 1)})


def _title(words: list[Word], box: tuple[float, float, float, float]) -> str:
    """The heading right above a table: the nearest line above its box, starting within its width and at
    most three line heights above it, with the lines of the same heading stacked tight above that one; ""
    when that line is a sentence (ends with a full stop) or longer than a heading."""
    x0, top, x1, _ = box
    above = [w for w in words if w.bottom <= top + 0.5 and x0 - 2 <= w.x0 <= x1 and w.x_mid <= x1]
    lines = _lines(above)
    title: list[list[Word]] = []
    edge = top
    for line in reversed(lines):
        height = statistics.median(w.bottom - w.top for w in line)
        gap = edge - max(w.bottom for w in line)
        if gap > (3 if not title else 0.6) * height or min(w.x0 for w in line) > x0 + 0.5 * (x1 - x0):
            break
        title.insert(0, line)
        edge = min(w.top for w in line)
        if len(title) == 2:
            break
    text = clean_text("\n".join(_text(line) for line in title))
    return "" if not text or text.endswith(".") or len(text) > 120 else text


def _cut(bbox, visible) -> tuple[str, ...]:
    """The page edges (left, right, top, bottom) a table's box reaches: the page cuts it there."""
    x0, top, x1, bottom = bbox
    a, b, c, d = visible
    reached = (x0 <= a + 0.5, x1 >= c - 0.5, top <= b + 0.5, bottom >= d - 0.5)
    return tuple(edge for edge, hit in zip(EDGES, reached) if hit)


def _overlap(a: Found, b: Found) -> bool:
    """Whether two tables' boxes share vertical extent (the halves of a spread side by side)."""
    return min(a.bbox[3], b.bbox[3]) - max(a.bbox[1], b.bbox[1]) > 0


def _join_spread(left: Found, right: Found) -> None:
    """Link the halves of a table printed across a spread (``left`` cut at its page's right edge, ``right``
    at the next page's left edge) and give the right half the left half's row labels (its first column, on
    the same height: the rules run across both pages), so each of its rows says what it is about."""
    left.continues_on, right.continued_from = right.page, left.page
    labels = {round(top): row[0] or "" for top, row in zip(left.tops, left.cells) if row}
    right.cells = [[labels.get(round(top), ""), *row] for top, row in zip(right.tops, right.cells)]
    right.texts = [
        " ".join(filter(None, (labels.get(round(top), ""), text))) for top, text in zip(right.tops, right.texts)
    ]
    right.groups = ["", *right.groups] if right.groups else []


def _without_nested(found: list[Found]) -> list[Found]:
    """The tables not lying inside another one's box (a title and group rules found as a table of their own)."""

    def within(a, b) -> bool:
        return (
            a is not b
            and a.bbox[0] >= b.bbox[0] - 2
            and a.bbox[2] <= b.bbox[2] + 2
            and a.bbox[1] >= b.bbox[1] - 2
            and a.bbox[3] <= b.bbox[3] + 2
        )

    return [t for t in found if not any(within(t, other) for other in found)]


# ---- words into lines, phrases and text ----------------------------------------------------------------


def _lines(words: list[Word]) -> list[list[Word]]:
    """``words`` in lines top to bottom (a word whose middle lies within the line's first word's height
    joins it), each line left to right."""
    lines: list[list[Word]] = []
    for word in sorted(words, key=lambda w: (w.y_mid, w.x0)):
        if lines and abs(word.y_mid - lines[-1][0].y_mid) <= (lines[-1][0].bottom - lines[-1][0].top) / 2:
            lines[-1].append(word)
        else:
            lines.append([word])
    return [sorted(line, key=lambda w: w.x0) for line in lines]


def _phrases(line: list[Word], borders: list[float]) -> list[list[Word]]:
    """One line's words in runs: a gap wider than a space (about half the line's height) or a column border
    in the gap starts a new one."""
    phrases: list[list[Word]] = []
    for word in line:
        gap = (phrases[-1][-1].x1, word.x0) if phrases else None
        if gap and gap[1] - gap[0] <= 0.6 * (word.bottom - word.top) and not any(gap[0] < b < gap[1] for b in borders):
            phrases[-1].append(word)
        else:
            phrases.append([word])
    return phrases


def _text(words: list[Word]) -> str:
    """The words as text: lines top to bottom joined by line breaks, words left to right by spaces."""
    return formula_subscripts("\n".join(" ".join(w.text for w in line) for line in _lines(words)))


def _running_text(line: list[Word], width: float) -> bool:
    """Whether a line reads as running text, not a header: a run of four words or more ending a sentence,
    or one over ``RUNNING_WIDTH`` of the table's width."""
    return any(
        (len(run) >= 4 and run[-1].text.endswith((".", ":"))) or run[-1].x1 - run[0].x0 > RUNNING_WIDTH * width
        for run in _phrases(line, [])
    )


FOOTNOTE = re.compile(r"^(\*+|\d{1,2}\)|\(\d{1,2}\)|[¹²³⁴⁵⁶⁷⁸⁹]|Note\b|Source\b)")
UNIT = re.compile(
    r"€|\$|£|%|\b(?:in\s|million|thousand|billion|bn|mn|m|k|t|kt|tCO|MWh|GWh|kWh|GJ|TJ|m²|m³|FTE|number)\b", re.I
)


def _footnote(row: list[str]) -> bool:
    """Whether a row is a footnote under the table: starts with a footnote mark, in one or two cells."""
    filled = [cell for cell in row if cell]
    return bool(filled) and len(filled) <= 2 and bool(FOOTNOTE.match(filled[0])) and len(" ".join(filled)) > 20


def _units(row: list[str]) -> bool:
    """Whether a row is a unit line: no figures, and a unit (currency, %, million, t, MWh...) in a cell
    after the first."""
    return not any(re.search(r"\d", cell) for cell in row) and any(UNIT.search(cell) for cell in row[1:] if cell)


def _clusters(values: list[float], gap: float) -> list[float]:
    """The means of runs of sorted ``values`` whose neighbours are at most ``gap`` apart."""
    runs: list[list[float]] = []
    for value in values:
        if runs and value - runs[-1][-1] <= gap:
            runs[-1].append(value)
        else:
            runs.append([value])
    return [statistics.fmean(run) for run in runs]
