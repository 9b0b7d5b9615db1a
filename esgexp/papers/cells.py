"""Published cells: one row of ``tables/<name>.csv`` per cell (paper, table, row, column, metric, value,
source: the paper file, its table and the line it was read from). A value is a number or a range
``low–high`` (ESGBench's Recall@5, "70–80%"); numbers are kept in the paper's own units."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from esgexp.errors import UserError

TABLES_DIR = Path(__file__).resolve().parent / "tables"
FIELDS = ("paper", "table", "row", "column", "metric", "value", "source")
RANGE_DASHES = ("–", "-")


@dataclass(frozen=True)
class Cell:
    """One published number (or range ``low``..``high``, where ``value`` is None) and where it was read."""

    paper: str
    table: str
    row: str
    column: str
    metric: str
    value: float | None
    low: float
    high: float
    source: str
    text: str  # the value as printed in the paper


def parse_value(text: str) -> tuple[float | None, float, float]:
    """``0.3134`` -> (0.3134, 0.3134, 0.3134); ``70–80`` -> (None, 70, 80)."""
    text = text.strip().rstrip("%")
    for dash in RANGE_DASHES:
        low, sep, high = text.partition(dash)
        if sep and low and high:
            return None, float(low), float(high)
    value = float(text)
    return value, value, value


def load_cells(name: str) -> list[Cell]:
    """The published cells of table ``name`` (``tables/<name>.csv``), in the paper's row order."""
    path = TABLES_DIR / f"{name}.csv"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in TABLES_DIR.glob("*.csv")))
        raise UserError(f"no published cells for table {name!r} ({path} is missing; known: {known})")
    cells = []
    with path.open(encoding="utf-8", newline="") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            try:
                value, low, high = parse_value(row["value"])
            except (TypeError, ValueError) as error:
                raise UserError(f"{path} line {line}: value {row.get('value')!r} is not a number or range") from error
            cells.append(Cell(*(row[f] for f in FIELDS[:5]), value, low, high, row["source"], row["value"]))
    return cells
