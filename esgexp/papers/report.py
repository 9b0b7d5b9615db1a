"""Ours beside theirs: each published cell with our value, its 95% interval, the difference and whether
the published value lies inside our interval; written as JSON and Markdown, and as an HTML section of
the leaderboard page (``leaderboard_sections``).

Our value is the job's metrics.json value of the cell's metric times the column's ``scale`` (the paper's
units). A cell averaged over variant jobs (ClimRetrieve's generic / inf_* query lengths) averages their
values and their interval ends (wider than the interval of the mean unless the variants move together).
A published range (ESGBench's Recall@5, 70–80%) is inside when it overlaps our interval; its difference
is ours minus the nearer end (0 inside the range)."""

from __future__ import annotations

import json
import math
from html import escape
from pathlib import Path

from esgexp.papers.cells import Cell
from esgexp.papers.grid import Grid

INSIDE_TEXT = {True: "yes", False: "no", None: ""}


def compare(grid: Grid, results: dict[str, dict], status: dict[str, str]) -> list[dict]:
    """One entry per (row, column) of the grid, in the paper's order: published, ours, interval, difference,
    inside, and why ours is missing (``status``: job id -> why it did not give metrics)."""
    published = {(c.row, c.column): c for c in grid.cells}
    out = []
    for row in grid.rows:
        for label, column in grid.columns.items():
            jobs = grid.jobs_of(row, label)
            cell = published.get((row, label))
            metric = cell.metric if cell else None
            entry = {
                "row": row,
                "column": label,
                "metric": metric,
                "published": cell.text if cell else None,
                "source": cell.source if cell else None,
                "jobs": [job.id for job in jobs],
            }
            missing = [job for job in jobs if job.id not in results]
            if missing:
                entry["why"] = "; ".join(dict.fromkeys(status.get(job.id, "not run") for job in missing))
            elif metric:
                entry.update(ours(cell, [results[job.id] for job in jobs], column.scale))
            out.append(entry)
    return out


def ours(cell: Cell, runs: list[dict], scale: float) -> dict:
    """Our value of ``cell`` from the metrics of its runs (mean over variants), interval, difference, inside."""
    found = [m.get(cell.metric) for m in runs]
    if any(not isinstance(v, (int, float)) or math.isnan(v) for v in found):
        return {"why": f"metric {cell.metric} is not in the run's metrics.json"}
    value = sum(found) / len(found) * scale
    lows = [m.get(f"{cell.metric}/ci_low") for m in runs]
    highs = [m.get(f"{cell.metric}/ci_high") for m in runs]
    entry = {"ours": value, "n": runs[0].get("n_items", runs[0].get("n_queries"))}
    if all(isinstance(v, (int, float)) and not math.isnan(v) for v in [*lows, *highs]):
        low, high = sum(lows) / len(lows) * scale, sum(highs) / len(highs) * scale
        entry.update(ci_low=low, ci_high=high, inside=cell.low <= high and cell.high >= low)
    if cell.value is not None:
        entry["difference"] = value - cell.value
    else:
        entry["difference"] = (
            0.0 if cell.low <= value <= cell.high else value - min((cell.low, cell.high), key=lambda e: abs(value - e))
        )
    return entry


def table_json(grid: Grid, entries: list[dict], jobs: list[dict]) -> dict:
    return {
        "table": grid.name,
        "title": grid.title,
        "rows": grid.rows,
        "columns": list(grid.columns),
        "data": grid.data,
        "cells": entries,
        "jobs": jobs,
    }


def _number(value, digits: int) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else ""


def digits_of(table: dict) -> int:
    """As many decimals as the paper prints (at most 4)."""
    printed = [e["published"] for e in table["cells"] if e.get("published")]
    return min(4, max((len(p.split(".")[1]) if "." in p else 1 for p in printed), default=3))


def cell_text(entry: dict, digits: int) -> str:
    """``published → ours [low, high] ✓`` (✓: published inside our interval, ✗: outside)."""
    published = entry.get("published") or "–"
    if entry.get("ours") is None:
        return f"{published} → –"
    text = f"{published} → {_number(entry['ours'], digits)}"
    if "ci_low" in entry:
        text += f" [{_number(entry['ci_low'], digits)}, {_number(entry['ci_high'], digits)}]"
    if entry.get("inside") is not None and entry.get("published"):
        text += " ✓" if entry["inside"] else " ✗"
    return text


def to_markdown(table: dict) -> str:
    """The table in the paper's shape (published → ours [95% interval], ✓ when covered), then every cell
    with its difference, where it was read, and why a value is missing."""
    digits = digits_of(table)
    by_key = {(e["row"], e["column"]): e for e in table["cells"]}
    lines = [
        f"## {table['title']}",
        "",
        "Each cell: published → ours [95% interval]; ✓ the published value lies inside it.",
        "",
    ]
    lines.append("| | " + " | ".join(table["columns"]) + " |")
    lines.append("|---" * (len(table["columns"]) + 1) + "|")
    for row in table["rows"]:
        cells = [cell_text(by_key[(row, col)], digits) for col in table["columns"]]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| row | column | metric | published | ours | 95% interval | difference | inside | source / why missing |",
    ]
    lines.append("|---" * 9 + "|")
    for e in table["cells"]:
        interval = f"[{_number(e['ci_low'], digits)}, {_number(e['ci_high'], digits)}]" if "ci_low" in e else ""
        note = e.get("why") or e.get("source") or ""
        lines.append(
            f"| {e['row']} | {e['column']} | {e.get('metric') or ''} | {e.get('published') or '–'} | "
            f"{_number(e.get('ours'), digits)} | {interval} | {_number(e.get('difference'), digits)} | "
            f"{INSIDE_TEXT[e.get('inside')]} | {note} |"
        )
    return "\n".join(lines) + "\n"


def to_html(table: dict) -> str:
    """The paper-shaped table as an HTML section (the leaderboard page's ``board`` table style)."""
    digits = digits_of(table)
    by_key = {(e["row"], e["column"]): e for e in table["cells"]}
    head = "<th></th>" + "".join(f"<th>{escape(c)}</th>" for c in table["columns"])
    body = []
    for row in table["rows"]:
        tds = []
        for col in table["columns"]:
            entry = by_key[(row, col)]
            css = {True: "mark-yes", False: "mark-no"}.get(entry.get("inside") if entry.get("published") else None, "")
            title = entry.get("why") or entry.get("source") or ""
            tds.append(f'<td class="num {css}" title="{escape(title)}">{escape(cell_text(entry, digits))}</td>')
        body.append(f"<tr><td>{escape(row)}</td>{''.join(tds)}</tr>")
    return (
        f"<h3 id='paper-{escape(table['table'])}'>{escape(table['title'])}</h3>"
        "<p class='note'>published → ours [95% interval]; ✓ the published value lies inside our interval. "
        f"<code>python -m esgexp.paper table={escape(table['table'])}</code></p>"
        f'<div class="scroll"><table class="board"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
    )


def leaderboard_sections(papers_dir: str | Path | None) -> list[str]:
    """The leaderboard page's "Paper tables" section: every table ``python -m esgexp.paper`` wrote into
    ``papers_dir`` (``<table>.json``), in the order of esgexp.papers.TABLES; nothing when there is none."""
    from esgexp.papers import TABLES

    if not papers_dir or not Path(papers_dir).is_dir():
        return []
    found = {p.stem: p for p in Path(papers_dir).glob("*.json") if p.stem in TABLES}
    if not found:
        return []
    sections = ["<h2 id='papers'>Paper tables</h2>"]
    for name in TABLES:
        if name in found:
            sections.append(to_html(json.loads(found[name].read_text(encoding="utf-8"))))
    return sections
