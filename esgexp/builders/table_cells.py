"""Where a table question's answer is printed: the cells of a table passage's Markdown grid (as
``esgexp.data.tables.Table.markdown`` writes it) that state the answer, each named by its row and column."""

from __future__ import annotations

import re

from esgexp.builders.verify import normal

_PIPE = re.compile(r"(?<!\\)\|")
_SEPARATOR = re.compile(r"^:?-{3,}:?$")


def grid(markdown: str) -> tuple[list[str], list[list[str]]]:
    """The header and body rows of the first Markdown grid in ``markdown`` (its ``---`` line dropped, escaped
    pipes restored); ``([], [])`` when it holds none."""
    lines = [line.strip() for line in markdown.splitlines()]
    block, rows = False, []
    for line in lines:
        if line.startswith("|") and line.endswith("|") and len(line) > 1:
            block = True
            rows.append([cell.strip().replace("\\|", "|") for cell in _PIPE.split(line[1:-1])])
        elif block:
            break
    body = [row for row in rows[1:] if not all(_SEPARATOR.match(cell) for cell in row if cell)]
    return (rows[0], body) if rows else ([], [])


def states(answer: str, cell: str) -> bool:
    """Whether ``answer`` says what ``cell`` prints: the same text, or (a cell with a figure) the figure as a whole
    in the answer (``4.1`` in "4.1%" or "4.1 percent", not in "14.1" or "4.15"). Both are compared normalised."""
    said, printed = normal(answer).lower(), normal(cell).lower()
    if not printed:
        return False
    if said == printed:
        return True
    if not re.search(r"\d", printed):
        return False
    return re.search(rf"(?<![\w.,]){re.escape(printed)}(?!\w|[.,]\d)", said) is not None


def answer_cells(answer: str, markdown: str) -> tuple[tuple[str, str], ...]:
    """The cells of the table in ``markdown`` that state ``answer``, each as (its row's first non-empty cell, its
    column's header), in the table's order."""
    header, rows = grid(markdown)
    found = []
    for row in rows:
        label = next((cell for cell in row if cell), "")
        found += [(label, column) for column, cell in zip(header, row) if states(answer, cell)]
    return tuple(found)
