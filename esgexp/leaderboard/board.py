"""Every finished MLflow evaluation run as a CSV and a Markdown table
and one self-contained HTML page (``format=all``, or ``csv``, ``md``, ``html``, or a list).

One row per run: its headline metric with the 95% interval, the "not significantly worse than the best"
mark within its dataset, task and item set (runs over other items, e.g. another ``dataset.limit``, are
ranked apart: column ``items``), and MCQ, open-QA and retrieval values side by side; a model evaluated
with a LoRA adapter names its base in ``finetuned_from``; runs of one model that differ in a setting name
it in ``variant``; an incomplete run (items never answered) is marked, not ranked. Training runs are left out."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from esgexp.core.outputs import make_folder, write_atomic
from esgexp.errors import UserError
from esgexp.leaderboard.store import check_store

FORMATS = ("csv", "md", "html")
FILES = {"csv": "leaderboard.csv", "md": "leaderboard.md", "html": "index.html"}


def collect(tracking_uri: str, latest_only: bool = True, alpha: float = 0.05, download_dir: Path | None = None):
    """(groups, marks): the finished runs per (dataset, task, item set), best first, and each run's mark."""
    from esgexp.leaderboard.significance import group_marks
    from esgexp.leaderboard.store import finished_runs
    from esgexp.leaderboard.table import board_groups

    groups = board_groups(finished_runs(tracking_uri, latest_only, download_dir))
    marks = {}
    for runs in groups.values():
        marks.update(group_marks(runs, alpha))
    return groups, marks


def rows_of(groups: dict, marks: dict) -> list[dict]:
    from esgexp.leaderboard.table import run_row

    rows = []
    for runs in groups.values():
        for run in runs:
            row = run_row(run)
            mark = marks.get(run.run_id)
            if mark is not None:
                row.update(not_worse=mark.status, p_vs_best=mark.p if mark.p is not None else "")
            rows.append(row)
    return rows


def collect_rows(tracking_uri: str, latest_only: bool = True) -> list[dict]:
    """One row per finished evaluation run, best headline first within each dataset and task."""
    return rows_of(*collect(tracking_uri, latest_only))


def export(
    tracking_uri: str,
    out_dir: Path,
    latest_only: bool = True,
    formats=("csv", "md"),
    alpha: float = 0.05,
    paper_sections: list[str] = (),
) -> str:
    """Write the chosen ``formats`` (csv, md, html) into ``out_dir``; return the Markdown table. The page also
    shows ``paper_sections``, the paper tables ``python -m esgexp.paper`` wrote (papers/report.leaderboard_sections)."""
    from esgexp.leaderboard.table import to_csv, to_markdown

    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise UserError(f"format must be one of {', '.join(FORMATS)} or all, got {', '.join(unknown)}")
    check_store(tracking_uri)
    # out_dir is checked before any run is read, and left as it was when no run is found.
    created = first_missing(Path(out_dir))
    out_dir = make_folder(Path(out_dir), "set out_dir to a folder you can write to")
    with tempfile.TemporaryDirectory(prefix="esgexp-leaderboard-") as downloads:
        try:
            groups, marks = collect(tracking_uri, latest_only, alpha, Path(downloads))
        except BaseException:
            if created is not None:
                shutil.rmtree(created, ignore_errors=True)
            raise
        rows = rows_of(groups, marks)
        markdown = to_markdown(rows)
        if "csv" in formats:
            write_atomic(out_dir / FILES["csv"], to_csv(rows))
        if "md" in formats:
            write_atomic(out_dir / FILES["md"], markdown)
        if "html" in formats:
            from esgexp.leaderboard.page import render

            page = render(groups, marks, tracking_uri, list(paper_sections))
            write_atomic(out_dir / FILES["html"], page)
    return markdown


def first_missing(folder: Path) -> Path | None:
    """The outermost folder on the way to ``folder`` that does not exist yet (None when ``folder`` exists)."""
    missing = None
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            break
        missing = candidate
    return missing
