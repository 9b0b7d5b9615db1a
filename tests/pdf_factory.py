"""Tiny PDFs with known text for the ingestion tests: one Helvetica text line per string, one list per page,
and optionally ruled tables (every cell boxed by drawn lines) below a page's lines."""

from __future__ import annotations

import io
from pathlib import Path


def _escape(line: str) -> str:
    return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


COLUMN_WIDTH, ROW_HEIGHT, LEFT, TOP, LEADING = 130, 20, 72, 740, 14


def ruled_table(grid: list[list[str]], top: float) -> str:
    """Content-stream operators drawing ``grid`` (rows of cell texts, all rows equally long) with its top
    edge at ``top``: a line on every row and column border, each cell's text 4 points in from its left."""
    rows, cols = len(grid), len(grid[0])
    right, bottom = LEFT + cols * COLUMN_WIDTH, top - rows * ROW_HEIGHT
    lines = [f"{LEFT} {top - r * ROW_HEIGHT} m {right} {top - r * ROW_HEIGHT} l" for r in range(rows + 1)]
    lines += [f"{LEFT + c * COLUMN_WIDTH} {top} m {LEFT + c * COLUMN_WIDTH} {bottom} l" for c in range(cols + 1)]
    texts = [
        f"BT /F1 10 Tf {LEFT + c * COLUMN_WIDTH + 4} {top - (r + 1) * ROW_HEIGHT + 6} Td ({_escape(cell)}) Tj ET"
        for r, row in enumerate(grid)
        for c, cell in enumerate(row)
        if cell
    ]
    return "1 w " + " ".join(lines) + " S " + " ".join(texts)


def underlined_table(grid: list[list[str]], top: float) -> str:
    """Like :func:`ruled_table`, but no borders: only a rule under each cell, 6 points shorter than its
    column (the gaps mark the columns), as report KPI tables are often drawn."""
    texts = []
    rules = []
    for r, row in enumerate(grid):
        y = top - (r + 1) * ROW_HEIGHT
        rules += [f"{LEFT + c * COLUMN_WIDTH} {y} m {LEFT + (c + 1) * COLUMN_WIDTH - 6} {y} l" for c in range(len(row))]
        texts += [
            f"BT /F1 10 Tf {LEFT + c * COLUMN_WIDTH + 4} {y + 6} Td ({_escape(cell)}) Tj ET"
            for c, cell in enumerate(row)
            if cell
        ]
    return "1 w " + " ".join(rules) + " S " + " ".join(texts)


def pdf_bytes(
    pages: list[list[str]], tables: list[list[list[list[str]]]] | None = None, underlined: bool = False
) -> bytes:
    """A valid PDF 1.4 whose page ``i`` shows the lines ``pages[i]`` top to bottom (an empty list: a blank page)
    and below them the ruled tables ``tables[i]`` (each a grid of cell texts), 30 points apart; ``underlined``
    draws every table with rules under its cells only."""
    n = len(pages)
    tables = tables or [[] for _ in pages]
    page_ids = [4 + 2 * i for i in range(n)]
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % i for i in page_ids) + b"] /Count %d >>" % n,
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    }
    for page_id, lines, grids in zip(page_ids, pages, tables):
        shows = " T* ".join(f"({_escape(line)}) Tj" for line in lines)
        parts = [f"BT /F1 11 Tf {LEADING} TL {LEFT} {TOP} Td {shows} ET"] if lines else []
        top = TOP - LEADING * len(lines) - 30
        for grid in grids:
            parts.append((underlined_table if underlined else ruled_table)(grid, top))
            top -= len(grid) * ROW_HEIGHT + 30
        content = " ".join(parts).encode("cp1252")
        objects[page_id] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (page_id + 1)
        )
        objects[page_id + 1] = b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream"
    out = bytearray(b"%PDF-1.4\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n" % number + objects[number] + b"\nendobj\n"
    xref = len(out)
    size = max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    out += b"".join(b"%010d 00000 n \n" % offsets[i] for i in range(1, size))
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


def encrypted(data: bytes, user_password: str, algorithm: str = "AES-128") -> bytes:
    """``data`` encrypted by pypdf with the given user password (and an owner password)."""
    from pypdf import PdfWriter

    writer = PdfWriter(clone_from=io.BytesIO(data))
    writer.encrypt(user_password=user_password, owner_password="owner-secret", algorithm=algorithm)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def write_pdf(
    path: Path, pages: list[list[str]], tables: list[list[list[list[str]]]] | None = None, underlined: bool = False
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pdf_bytes(pages, tables, underlined))
    return path
