"""Ours beside theirs: each published cell with our value, its 95% interval (or why there is none), the items
behind it, the difference, a verdict and what ran; written as JSON and Markdown, and as an HTML section of the
leaderboard page (``leaderboard_sections``).

Our value is the job's metrics.json value of the cell's metric times the column's ``scale`` (the paper's
units). A cell averaged over variant jobs (ClimRetrieve's generic / inf_* query lengths) averages their
values and their interval ends (wider than the interval of the mean unless the variants move together).
A published range (ESGBench's Recall@5, 70–80%) is within when it overlaps our interval; its difference
is ours minus the nearer end (0 inside the range).

Verdicts: ``exact`` (a table that re-scores the paper's own predictions, ``rescored: true``, gives the
published value at the paper's printed precision), ``exact to the scorer`` (it does not, but it gives what the
paper's own scorer prints, of which the paper's value is a shortening: the grid's ``scorer``), ``differs``
(neither), ``inside`` / ``outside the published range`` (a re-scored value against a published range),
``within`` / ``outside`` (the published value inside / outside our 95% interval), ``no interval`` (the reason is
shown), and ``not comparable`` (the job ran with substitutions: another model, a ``dataset.limit``, other data,
LLM-written queries that fell back to the generic one)."""

from __future__ import annotations

import json
import math
from fnmatch import fnmatch
from html import escape
from pathlib import Path

from esgexp.eval.stats import interval_na
from esgexp.papers.cells import Cell
from esgexp.papers.grid import Grid

LEGEND = (
    "Each cell: published → ours [95% interval] n=items, verdict.",
    "Intervals: Wilson's for a share and for any metric whose items are all hits or all misses, a percentile "
    "bootstrap over items for a mean; another method (clusters) is named in the cell.",
    "Verdicts: exact — the table re-scores the paper's own predictions and ours equals the published value at "
    "the paper's printed precision; exact to the scorer — ours equals what the paper's own scorer prints, and the "
    "paper printed that number shortened; differs — neither; inside / outside the published range — a re-scored "
    "value against a published range; within / outside — the published value lies inside / outside our 95% "
    "interval; not comparable — the job ran with substitutions (another model or a moving API alias, a "
    "dataset.limit, data that is not the paper's file, LLM-written queries that fell back to the generic one), "
    "listed below; a cell without an interval says why.",
    "Data is the paper's only when each file's hash is the registry's (conf/data/, docs/data.md), never by its "
    "name or place: our bundled samples, copies or subsets of the published files and one's own files are always "
    "not comparable.",
)
GOOD = ("exact", "exact to the scorer", "inside the published range", "within")
BAD = ("differs", "outside the published range", "outside")
# The interval methods a cell does not name (esgexp.eval.stats): Wilson for a share, the item bootstrap for a mean.
DEFAULT_METHODS = ("wilson", "bootstrap", None)
METHOD_LABELS = {
    "cluster_bootstrap": "cluster bootstrap",
    "cluster_bootstrap_floored": "cluster bootstrap, widened to the unclustered interval (few clusters)",
    "cluster_wilson": "Wilson over clusters",
}


def compare(
    grid: Grid, results: dict[str, dict], status: dict[str, str], runs: dict[str, dict] | None = None
) -> list[dict]:
    """One entry per (row, column) of the grid, in the paper's order: published, ours, interval (or ``ci_note``),
    ``n``, difference, verdict, values ``beside``, why ours is missing (``status``: job id -> why it gave no
    metrics) and the provenance of each job behind the cell (``runs``: job id -> esgexp.papers.provenance)."""
    published = {(c.row, c.column): c for c in grid.cells}
    runs = runs or {}
    out = []
    for row in grid.rows:
        for label, column in grid.columns.items():
            jobs = grid.jobs_of(row, label)
            cell = published.get((row, label))
            entry = {
                "row": row,
                "column": label,
                "metric": cell.metric if cell else None,
                "published": cell.text if cell else None,
                "source": cell.source if cell else None,
                "jobs": [job.id for job in jobs],
                "runs": [runs[job.id] for job in jobs if job.id in runs],
            }
            missing = [job for job in jobs if job.id not in results]
            if not jobs and (row, label) in grid.left_out:
                entry["why"] = grid.left_out[(row, label)]
            elif missing:
                entry["why"] = "; ".join(dict.fromkeys(status.get(job.id, "not run") for job in missing))
            elif cell:
                metrics = [results[job.id] for job in jobs]
                entry.update(ours(cell, metrics, column.scale))
                entry.update(beside(grid.beside, cell.metric, metrics, column.scale))
                collapsed = [r["generic_fallback"] for r in entry["runs"] if r.get("collapsed")]
                if collapsed:
                    entry["collapsed"] = collapsed[0]
                if "ours" in entry:
                    entry.update(verdict(cell, entry, grid, substituted(entry["runs"])))
            out.append(entry)
    return out


def ours(cell: Cell, runs: list[dict], scale: float) -> dict:
    """Our value of ``cell`` from the metrics of its runs (mean over variants), ``n``, the interval (or the run's
    reason for none, ``ci_note``) and the difference."""
    found = [m.get(cell.metric) for m in runs]
    if any(not is_number(v) for v in found):
        return {"why": f"metric {cell.metric} is not in the run's metrics.json"}
    value = sum(found) / len(found) * scale
    entry = {"ours": value, "n": items_of(cell.metric, runs[0])}
    lows = [m.get(f"{cell.metric}/ci_low") for m in runs]
    highs = [m.get(f"{cell.metric}/ci_high") for m in runs]
    if all(is_number(v) for v in [*lows, *highs]):
        entry.update(ci_low=sum(lows) / len(lows) * scale, ci_high=sum(highs) / len(highs) * scale)
        methods = list(dict.fromkeys(m.get(f"{cell.metric}/ci_method") for m in runs))
        if methods != [None]:
            entry["ci_method"] = " / ".join(str(m) for m in methods)
    else:
        notes = [m.get(f"{cell.metric}/ci_note") for m in runs]
        entry["ci_note"] = next((n for n in notes if n), "the run's metrics.json has no interval for it")
    if cell.value is not None:
        entry["difference"] = value - cell.value
    else:
        entry["difference"] = (
            0.0 if cell.low <= value <= cell.high else value - min((cell.low, cell.high), key=lambda e: abs(value - e))
        )
    return entry


def items_of(metric: str, metrics: dict) -> int | None:
    """The items behind ``metric``: its group's count (``category/Strategy/accuracy`` -> ``category/Strategy/n``)
    when metrics.json has one, else the run's items or queries."""
    group = metric.rpartition("/")[0]
    if group and is_number(metrics.get(f"{group}/n")):
        return int(metrics[f"{group}/n"])
    return metrics.get("n_items", metrics.get("n_queries"))


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not math.isnan(value)


def beside(prefixes: dict[str, str], metric: str, runs: list[dict], scale: float) -> dict:
    """``{"beside": {label: value}}``: the value of ``<prefix><metric>`` (mean over variants, in the paper's
    units) for each label of the grid's ``beside`` whose key every run's metrics.json has; {} for none."""
    found = {}
    for label, prefix in prefixes.items():
        values = [m.get(prefix + metric) for m in runs]
        if values and all(is_number(v) for v in values):
            found[label] = sum(values) / len(values) * scale
    return {"beside": found} if found else {}


def substituted(runs: list[dict]) -> list[str]:
    """Every substitution of the runs behind a cell, once."""
    return list(dict.fromkeys(text for run in runs for text in run.get("substitutions") or []))


def printed_digits(text: str) -> int:
    """The decimals the paper printed in ``text`` (``21.0`` -> 1, ``0.3134`` -> 4)."""
    return len(text.split(".")[1]) if "." in text else 0


def verdict(cell: Cell, entry: dict, grid: Grid, changes: list[str]) -> dict:
    """``verdict`` (exact, exact to the scorer, differs, inside / outside the published range, within, outside,
    no interval, not comparable) and ``verdict_note``."""
    if changes:
        return {"verdict": "not comparable", "verdict_note": "; ".join(changes)}
    value = entry["ours"]
    if grid.rescored and cell.value is None:
        return range_verdict(cell, value, grid.scorer)
    if grid.rescored:
        return rescored_verdict(cell, value, grid.scorer)
    if "ci_low" not in entry:
        return {"verdict": "no interval", "verdict_note": interval_na(entry["ci_note"])}
    inside = cell.low <= entry["ci_high"] and cell.high >= entry["ci_low"]
    return {"verdict": "within" if inside else "outside"}


def range_verdict(cell: Cell, value: float, scorer: dict) -> dict:
    """A re-scored value against a published range: ``inside`` / ``outside the published range``, the note saying
    that the paper's figure is a range, not a value ours could equal, and, for a metric the paper's own scorer
    (``scorer``) does not compute (ESGBench's Recall@5), that it computes none."""
    where = "inside" if cell.low <= value <= cell.high else "outside"
    note = f"ours {where} {cell.text}; the paper's figure is a range, not a value ours could equal"
    if scorer and not any(fnmatch(cell.metric, pattern) for pattern in scorer.get("metrics") or ()):
        note += f", and {scorer['name']} computes no {cell.column}: no value of the authors' to re-score"
    return {"verdict": f"{where} the published range", "verdict_note": note}


def rescored_verdict(cell: Cell, value: float, scorer: dict) -> dict:
    """A re-scored value against the paper's print: ``exact`` at the paper's printed precision; else, for a metric
    the paper's own scorer prints (``scorer``: its ``name``, ``digits`` and ``metrics``), ``exact to the scorer``
    when the paper's value is that print shortened (cut or rounded to the paper's decimals); else ``differs``."""
    digits = printed_digits(cell.text)
    if f"{value:.{digits}f}" == f"{cell.value:.{digits}f}":
        return {"verdict": "exact", "verdict_note": f"compared at {digits} decimals, as printed"}
    if scorer and any(fnmatch(cell.metric, pattern) for pattern in scorer.get("metrics") or ()):
        printed = f"{value:.{scorer['digits']}f}"
        whole, _, decimals = printed.partition(".")
        cut = whole + ("." + decimals[:digits] if digits else "")
        if float(cell.value) in (float(cut), round(float(printed), digits)):
            return {
                "verdict": "exact to the scorer",
                "verdict_note": f"exact to {scorer['name']}, {printed}; the paper prints {cell.text}",
                "scorer_print": printed,
            }
    return {"verdict": "differs", "verdict_note": f"compared at {digits} decimals, as printed"}


def table_json(grid: Grid, entries: list[dict], jobs: list[dict]) -> dict:
    return {
        "table": grid.name,
        "title": grid.title,
        "legend": list(LEGEND),
        "rows": grid.rows,
        "columns": list(grid.columns),
        "data": grid.data,
        "rescored": grid.rescored,
        "overrides": grid.extra,
        "cells": entries,
        "jobs": jobs,
    }


def _number(value, digits: int) -> str:
    """``value`` at ``digits`` decimals; a value that rounds to zero prints without a sign (never ``-0.0``)."""
    if not isinstance(value, (int, float)):
        return ""
    text = f"{value:.{digits}f}"
    return text.lstrip("-") if float(text) == 0 else text


def digits_of(table: dict) -> int:
    """As many decimals as the paper prints (at most 4)."""
    printed = [e["published"] for e in table["cells"] if e.get("published")]
    return min(4, max((len(p.split(".")[1]) if "." in p else 1 for p in printed), default=3))


def interval_text(entry: dict, digits: int) -> str:
    """``[low, high]`` (with its method where it is not the default: ``[62.3, 100.0] cluster bootstrap, ...``),
    ``[interval n/a: one cluster]``, or "" without a value."""
    if "ci_low" in entry:
        method = entry.get("ci_method")
        label = "" if method in DEFAULT_METHODS else " " + METHOD_LABELS.get(method, method)
        return f"[{_number(entry['ci_low'], digits)}, {_number(entry['ci_high'], digits)}]{label}"
    return f"[{interval_na(entry['ci_note'])}]" if entry.get("ci_note") else ""


def cell_text(entry: dict, digits: int) -> str:
    """``published → ours [low, high] n=40 within`` (the verdict left out when the bracket says there is no interval)."""
    published = entry.get("published") or "–"
    if entry.get("ours") is None:
        return f"{published} → –"
    parts = [f"{published} → {_number(entry['ours'], digits)}", interval_text(entry, digits)]
    if entry.get("n") is not None:
        parts.append(f"n={entry['n']}")
    if entry.get("verdict") and entry["verdict"] != "no interval":
        parts.append(entry["verdict"])
    if entry.get("scorer_print"):
        parts.append(f"({entry['scorer_print']})")
    if entry.get("collapsed"):
        parts.append("(variants collapse: the query texts are generic's)")
    return " ".join(p for p in parts if p)


def md_escape(text) -> str:
    """Cell text safe inside a Markdown table: ``|`` escaped, line breaks as spaces."""
    return " ".join(str(text).replace("\\", "\\\\").replace("|", "\\|").split())


def md_table(header: list[str], rows: list[list]) -> list[str]:
    """A Markdown table, every cell escaped (md_escape), as lines."""
    lines = ["| " + " | ".join(md_escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in rows]
    return lines


def run_lines(run: dict) -> list[str]:
    """One job's provenance as Markdown list lines."""
    lines = [f"- job {run['job']}: `{run['command']}`"]
    if run.get("model"):
        lines.append(f"  - model {run['model']} ({run.get('model_source') or '?'}) on backend {run.get('backend')}")
    if run.get("data"):
        sha = run["data"].get("sha256")
        lines.append(f"  - data {run['data']['path']}" + (f" (sha256 {sha})" if sha else ""))
    if run.get("predictions"):
        scored = run["predictions"]
        known = [f"sha256 {scored['sha256']}"] if scored.get("sha256") else []
        known += [f"the registry's {scored['registry']}"] if scored.get("registry") else []
        lines.append(f"  - predictions scored {scored['path']}" + (f" ({'; '.join(known)})" if known else ""))
    for key, files in (run.get("published") or {}).items():
        lines += [f"  - {key}: the paper's {file}" for file in files or []]
    if "n" in run:
        lines.append(
            f"  - items asked n={run['n']} (dataset.limit={run.get('limit') or 'none'}, seed {run.get('seed')})"
        )
    if run.get("extra"):
        lines.append(f"  - overrides beyond the grid's: {' '.join(run['extra'])}")
    if run.get("kept"):
        lines.append(f"  - the grid's protocol kept for the model substituted: {' '.join(run['kept'])}")
    for change in run.get("substitutions") or []:
        lines.append(f"  - substituted: {change}")
    if run.get("run_dir"):
        lines.append(f"  - run folder {run['run_dir']}; MLflow run {run.get('run_id') or 'not found'}")
    if run.get("status") not in (None, "ok"):
        lines.append(f"  - {run['status']}")
    return lines


def why_text(entry: dict, numbers: dict[str, int]) -> str:
    """Where the published value was read, or why ours is missing: a pointer to the runs that say why when
    none of them ended ok (their reason is written once, under Runs)."""
    runs = entry.get("runs", [])
    if entry.get("why") and runs and all(r.get("status") not in (None, "ok") for r in runs):
        return "no value: see " + " ".join(f"[{numbers[r['job']]}]" for r in runs)
    return entry.get("why") or entry.get("source") or ""


def verdict_line(entry: dict, numbers: dict[str, int]) -> str:
    """The verdict and its reason; for ``not comparable`` a pointer to the runs that list the substitutions."""
    found = entry.get("verdict", "")
    if found == "not comparable":
        return f"{found}: substitutions under " + " ".join(f"[{numbers[r['job']]}]" for r in entry.get("runs", []))
    return found + (f": {entry['verdict_note']}" if entry.get("verdict_note") else "")


def to_markdown(table: dict) -> str:
    """The table in the paper's shape, every cell with its difference, n, verdict (and its reason), values
    beside, where it was read or why a value is missing, then each job's provenance."""
    digits = digits_of(table)
    by_key = {(e["row"], e["column"]): e for e in table["cells"]}
    lines = [f"## {table['title']}", "", *table.get("legend", LEGEND), ""]
    lines += md_table(
        ["", *table["columns"]],
        [[row, *(cell_text(by_key[(row, col)], digits) for col in table["columns"])] for row in table["rows"]],
    )
    numbers = {
        job: i + 1 for i, job in enumerate(dict.fromkeys(r["job"] for e in table["cells"] for r in e.get("runs", [])))
    }
    header = [
        "row",
        "column",
        "metric",
        "published",
        "ours",
        "95% interval",
        "n",
        "difference",
        "verdict",
        "beside",
        "source / why missing",
        "runs",
    ]
    rows = []
    for e in table["cells"]:
        verdict_text = verdict_line(e, numbers)
        shown = "; ".join(f"{label}: {_number(v, digits)}" for label, v in (e.get("beside") or {}).items())
        rows.append(
            [
                e["row"],
                e["column"],
                e.get("metric") or "",
                e.get("published") or "–",
                _number(e.get("ours"), digits),
                interval_text(e, digits),
                "" if e.get("n") is None else e["n"],
                _number(e.get("difference"), digits),
                verdict_text,
                shown,
                why_text(e, numbers),
                " ".join(f"[{numbers[r['job']]}]" for r in e.get("runs", [])),
            ]
        )
    lines += ["", *md_table(header, rows)]
    runs = {r["job"]: r for e in table["cells"] for r in e.get("runs", [])}
    if runs:
        lines += ["", "### Runs", ""]
        for job, number in numbers.items():
            lines.append(f"[{number}]")
            lines += run_lines(runs[job])
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
            found = entry.get("verdict")
            css = "mark-yes" if found in GOOD else "mark-no" if found in BAD else ""
            title = entry.get("verdict_note") or entry.get("why") or entry.get("source") or ""
            tds.append(f'<td class="num {css}" title="{escape(title)}">{escape(cell_text(entry, digits))}</td>')
        body.append(f"<tr><td>{escape(row)}</td>{''.join(tds)}</tr>")
    legend = " ".join(table.get("legend", LEGEND))
    return (
        f"<h3 id='paper-{escape(table['table'])}'>{escape(table['title'])}</h3>"
        f"<p class='note'>{escape(legend)} "
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
