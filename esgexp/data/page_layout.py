"""What a PDF page shows, read with PDFium (pypdfium2): its visible box, the rules and borders drawn on it
and its words with their boxes, all in PDF points from the page's top left (pdfplumber's coordinates).

Only what lies inside the page's visible area (its crop box) is kept: a report laid out as spreads holds the
facing page's half of a table beyond the page edge, which the reader of the page does not see. Rules are read
from every path (a line, a rectangle's sides, a polyline's straight pieces, a row of dots) and clipped to the
visible area; a small drawn box with a tick inside reads as the word ``☑``. Words are read only on request
(:meth:`PageLayout.words`: two calls per word, the boxes of its first and last characters).
"""

from __future__ import annotations

import ctypes
import itertools
import re
from dataclasses import dataclass, field

from esgexp.data.pdf import UnreadableDocument

THIN = 3.0  # a path at most this many points high (wide) is one horizontal (vertical) rule
MARK = 14.0  # a path at most this many points high and wide is a drawn symbol (a tick box), not a border
MIN_RULE = 1.0  # shorter pieces are dots and corners, not rules
# PDFium's marks for a hyphen at a line end (current and older builds), written as the hyphen they stand for
_HYPHEN_MARKS = str.maketrans({"\ufffe": "-", "\x02": "-"})
_WORD = re.compile(r"[^\s\x00-\x1f\ufffe]+[\ufffe\x02]?|[\ufffe\x02]")


class Word:
    """One word: its text, box (x0, top, x1, bottom) and middle (x_mid, y_mid)."""

    __slots__ = ("bottom", "text", "top", "x0", "x1", "x_mid", "y_mid")

    def __init__(self, text: str, x0: float, top: float, x1: float, bottom: float):
        self.text, self.x0, self.top, self.x1, self.bottom = text, x0, top, x1, bottom
        self.x_mid, self.y_mid = (x0 + x1) / 2, (top + bottom) / 2

    def __repr__(self) -> str:
        return f"Word({self.text!r}, {self.x0:.1f}, {self.top:.1f}, {self.x1:.1f}, {self.bottom:.1f})"

    def as_dict(self) -> dict:
        """The word as pdfplumber's table finder takes words (its ``text`` strategy)."""
        return {"text": self.text, "x0": self.x0, "x1": self.x1, "top": self.top, "bottom": self.bottom}


@dataclass
class PageLayout:
    """One page: ``number`` (1-based), ``bbox`` the visible area (0, 0, width, height) and ``edges`` its rules
    as pdfplumber's edge dicts (``orientation`` ``h`` or ``v``); ``words()`` reads the words once."""

    number: int
    bbox: tuple[float, float, float, float]
    edges: list[dict]
    _page: object = field(repr=False, default=None)
    ticks: list[Word] = field(repr=False, default_factory=list)
    _words: list[Word] | None = field(repr=False, default=None)

    def words(self) -> list[Word]:
        """The visible words, and the ticked boxes drawn on the page as words ``☑``."""
        if self._words is None:
            self._words = _visible(_page_words(self._page) + self.ticks, self.bbox)
        return self._words

    def extract_words(self, **_settings) -> list[dict]:
        """pdfplumber's page method, for its ``text`` table strategy."""
        return [word.as_dict() for word in self.words()]

    def close(self) -> None:
        if self._page is not None:
            self._page.close()
            self._page = None


def open_pdf(path):
    """The PDF open in PDFium (an encrypted one with the empty password); :class:`UnreadableDocument` when
    it cannot be opened."""
    import pypdfium2 as pdfium

    try:
        return pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as error:
        raise UnreadableDocument(f"not a readable PDF ({error})") from error


def page_layout(document, number: int) -> PageLayout:
    """The layout of page ``number`` (1-based) of an open PDFium document; close it when done."""
    page = document[number - 1]
    left, _, _, top = page.get_mediabox()
    crop = page.get_cropbox()
    visible = (crop[0] - left, top - crop[3], crop[2] - left, top - crop[1])
    origin = (left, top)
    edges, ticks = _page_edges(page, origin)
    edges = [e for e in (_clip(edge, visible) for edge in edges) if e is not None]
    return PageLayout(number, tuple(round(v, 3) for v in visible), edges, page, ticks=ticks)


Matrix = tuple[float, float, float, float, float, float]  # a, b, c, d, e, f: (x, y) -> (ax + cy + e, bx + dy + f)
IDENTITY: Matrix = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)


def _page_edges(page, origin: tuple[float, float]) -> tuple[list[dict], list[Word]]:
    """Every straight horizontal or vertical piece of every path on the page, forms' paths included, and the
    ticked boxes drawn on it as words ``☑`` (a small shape with another one inside: a box and its tick)."""
    import pypdfium2.raw as raw

    edges: list[dict] = []
    reader = _EdgeReader(raw, origin, edges)
    handle = page.raw
    for index in range(raw.FPDFPage_CountObjects(handle)):
        reader.add(raw.FPDFPage_GetObject(handle, index), IDENTITY)
    left, top = origin
    ticks = []
    for box in reader.marks:
        inside = [
            m
            for m in reader.marks
            if m is not box
            and box[0] - 0.5 <= m[0]
            and m[2] <= box[2] + 0.5
            and box[1] - 0.5 <= m[1]
            and m[3] <= box[3] + 0.5
        ]
        if inside:
            ticks.append(Word("\u2611", box[0] - left, top - box[3], box[2] - left, top - box[1]))
    return edges, ticks


class _EdgeReader:
    """Adds the edges of page objects to ``edges`` (one set of ctypes buffers for all of them)."""

    def __init__(self, raw, origin: tuple[float, float], edges: list[dict]):
        self.raw, self.origin, self.edges = raw, origin, edges
        self.marks: list[tuple[float, float, float, float]] = []  # small shapes, in page coordinates (y up)
        self.box = [ctypes.c_float() for _ in range(4)]
        self.point = (ctypes.c_float(), ctypes.c_float())

    def add(self, obj, outer: Matrix) -> None:
        """``obj``'s edges (a path's, or those of a form's paths); ``outer`` maps its parent's coordinates
        to the page's."""
        raw = self.raw
        kind = raw.FPDFPageObj_GetType(obj)
        if kind == raw.FPDF_PAGEOBJ_FORM:
            inner = _then(_matrix(raw, obj), outer)
            for index in range(raw.FPDFFormObj_CountObjects(obj)):
                self.add(raw.FPDFFormObj_GetObject(obj, index), inner)
            return
        if kind != raw.FPDF_PAGEOBJ_PATH:
            return
        left, bottom, right, top = self.box
        raw.FPDFPageObj_GetBounds(obj, left, bottom, right, top)
        x0, y0, x1, y1 = left.value, bottom.value, right.value, top.value
        if outer is not IDENTITY:
            corners = [_apply(outer, x, y) for x, y in ((x0, y0), (x1, y1), (x0, y1), (x1, y0))]
            xs, ys = [c[0] for c in corners], [c[1] for c in corners]
            x0, y0, x1, y1 = min(xs), min(ys), max(xs), max(ys)
        if y1 - y0 <= THIN or x1 - x0 <= THIN:  # one rule: its box is enough
            self.edges += _edge(x0, y0, x1, y1, self.origin, "line")
            return
        if x1 - x0 <= MARK and y1 - y0 <= MARK:  # a drawn symbol (a tick box's square or tick), no border
            self.marks.append((x0, y0, x1, y1))
            return
        to_page = _then(_matrix(raw, obj), outer)
        subpaths: list[list[tuple[float, float]]] = []
        x, y = self.point
        for index in range(raw.FPDFPath_CountSegments(obj)):
            segment = raw.FPDFPath_GetPathSegment(obj, index)
            raw.FPDFPathSegment_GetPoint(segment, x, y)
            point = _apply(to_page, x.value, y.value)
            if raw.FPDFPathSegment_GetType(segment) == raw.FPDF_SEGMENT_MOVETO or not subpaths:
                subpaths.append([])
            subpaths[-1].append(point)
            if raw.FPDFPathSegment_GetClose(segment):
                subpaths[-1].append(subpaths[-1][0])
        dots = []
        for points in subpaths:
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            if max(xs) - min(xs) <= THIN and max(ys) - min(ys) <= THIN:
                dots.append((min(xs), min(ys), max(xs), max(ys)))
                continue
            for a, b in itertools.pairwise(points):
                box = (min(a[0], b[0]), min(a[1], b[1]), max(a[0], b[0]), max(a[1], b[1]))
                self.edges += _edge(*box, self.origin, "rect_edge")
        for box in _dotted_lines(dots):
            self.edges += _edge(*box, self.origin, "line")


def _dotted_lines(dots: list[tuple[float, float, float, float]]) -> list[tuple[float, float, float, float]]:
    """Rows and columns of dots (a dotted border drawn as tiny squares in one path), each at most ``THIN``
    from the next, as the boxes of the lines they draw."""
    lines = []
    for axis in (0, 1):  # rows of dots along x, then columns along y
        along, across = axis, 1 - axis
        runs: list[list] = []
        for dot in sorted(dots, key=lambda d: (round(d[across]), d[along])):
            run = runs[-1] if runs else None
            if run and abs(dot[across] - run[-1][across]) <= 0.5 and dot[along] - run[-1][along + 2] <= THIN:
                run.append(dot)
            else:
                runs.append([dot])
        for run in runs:
            if len(run) > 2:
                lines.append(
                    (min(d[0] for d in run), min(d[1] for d in run), max(d[2] for d in run), max(d[3] for d in run))
                )
    return lines


def _matrix(raw, obj) -> Matrix:
    matrix = raw.FS_MATRIX()
    raw.FPDFPageObj_GetMatrix(obj, matrix)
    return (matrix.a, matrix.b, matrix.c, matrix.d, matrix.e, matrix.f)


def _then(first: Matrix, second: Matrix) -> Matrix:
    """The matrix applying ``first``, then ``second``."""
    a, b, c, d, e, f = first
    p, q, r, s, t, u = second
    return (a * p + b * r, a * q + b * s, c * p + d * r, c * q + d * s, e * p + f * r + t, e * q + f * s + u)


def _apply(m: Matrix, x: float, y: float) -> tuple[float, float]:
    return m[0] * x + m[2] * y + m[4], m[1] * x + m[3] * y + m[5]


def _edge(x0: float, y0: float, x1: float, y1: float, origin, kind: str) -> list[dict]:
    """A horizontal or vertical edge dict for the box (x0, y0, x1, y1) in PDF coordinates (y up); none for a
    dot or a slanted piece."""
    left, top = origin
    if x1 - x0 >= MIN_RULE and y1 - y0 <= THIN:
        y = top - (y0 + y1) / 2
        return [_dict(x0 - left, y, x1 - left, y, "h", kind)]
    if y1 - y0 >= MIN_RULE and x1 - x0 <= THIN:
        x = (x0 + x1) / 2 - left
        return [_dict(x, top - y1, x, top - y0, "v", kind)]
    return []


def _dict(x0: float, top: float, x1: float, bottom: float, orientation: str, kind: str) -> dict:
    return {
        "object_type": kind,
        "orientation": orientation,
        "x0": x0,
        "x1": x1,
        "top": top,
        "bottom": bottom,
        "width": x1 - x0,
        "height": bottom - top,
    }


def _clip(edge: dict, visible: tuple[float, float, float, float]) -> dict | None:
    """The part of ``edge`` inside the visible area (None when nothing of it is)."""
    x0, top, x1, bottom = visible
    a, b = max(edge["x0"], x0), min(edge["x1"], x1)
    c, d = max(edge["top"], top), min(edge["bottom"], bottom)
    if (
        a > b
        or c > d
        or (edge["orientation"] == "h" and b - a < MIN_RULE)
        or (edge["orientation"] == "v" and d - c < MIN_RULE)
    ):
        return None
    if (a, b, c, d) == (edge["x0"], edge["x1"], edge["top"], edge["bottom"]):
        return edge
    return _dict(a, c, b, d, edge["orientation"], edge["object_type"])


def _page_words(page) -> list[Word]:
    """The page's words in PDFium's reading order: runs of characters between whitespace (PDFium's own
    spaces and line breaks included); a line-end hyphen mark is a ``-``. A word's box is the union of its
    first and last characters' boxes (one call each, not one per character)."""
    import pypdfium2.raw as raw

    left, top = page.get_mediabox()[0], page.get_mediabox()[3]
    text_page = raw.FPDFText_LoadPage(page.raw)
    try:
        count = raw.FPDFText_CountChars(text_page)
        buffer = ctypes.create_string_buffer(2 * (count + 1))
        raw.FPDFText_GetText(text_page, 0, count, ctypes.cast(buffer, ctypes.POINTER(ctypes.c_ushort)))
        text = buffer.raw[: 2 * count].decode("utf-16-le", errors="replace")
        if len(text) != count:  # characters beyond the BMP: one call per character
            text = "".join(chr(raw.FPDFText_GetUnicode(text_page, i)) for i in range(count))
        words: list[Word] = []
        first = raw.FS_RECTF()
        last = raw.FS_RECTF()
        for match in _WORD.finditer(text):
            start, end = match.span()
            raw.FPDFText_GetLooseCharBox(text_page, start, first)
            raw.FPDFText_GetLooseCharBox(text_page, end - 1, last)
            words.append(
                Word(
                    match.group().translate(_HYPHEN_MARKS),
                    min(first.left, last.left) - left,
                    top - max(first.top, last.top),
                    max(first.right, last.right) - left,
                    top - min(first.bottom, last.bottom),
                )
            )
        return words
    finally:
        raw.FPDFText_ClosePage(text_page)


def _visible(words: list[Word], visible: tuple[float, float, float, float]) -> list[Word]:
    x0, top, x1, bottom = visible
    return [w for w in words if x0 <= w.x_mid <= x1 and top <= w.y_mid <= bottom]
