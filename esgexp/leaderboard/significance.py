"""The "not significantly worse than the best" mark: every run of a (dataset, task, item set) against its
best run, paired over shared items (esgexp.analysis.compare), Holm-corrected over the group. An incomplete run
(items never answered) is neither ranked nor tested: its mark says so."""

from __future__ import annotations

import math
from dataclasses import dataclass

from esgexp.errors import UserError
from esgexp.leaderboard.store import Run
from esgexp.leaderboard.table import n_unanswered, signed_value


@dataclass(frozen=True)
class Mark:
    """``status``: best | yes (not significantly worse) | no | incomplete (items never answered: not
    ranked) | "" (not compared: ``note`` says why); ``p``: the Holm-adjusted p-value against the best run."""

    status: str
    p: float | None = None
    note: str = ""


def run_ref(run: Run) -> str:
    """What esgexp.analysis.compare.load_run reads: the run folder, or the folder of the run's files downloaded for
    the page (fetched once); the MLflow run id when a file is missing (load_run then names it)."""
    folder = run.folder()
    return str(folder) if folder else run.run_id


def group_marks(group: list[Run], alpha: float = 0.05) -> dict[str, Mark]:
    """Marks for one (dataset, task, item set) group, best run first (as :func:`board_groups` orders it);
    a run without a headline value gets none, an incomplete run ``incomplete``."""
    marks = {run.run_id: incomplete_mark(run) for run in group if n_unanswered(run)}
    group = [run for run in group if signed_value(run) > -math.inf and not n_unanswered(run)]
    if not group:
        return marks
    from esgexp.analysis.compare import compare_pair, load_run
    from esgexp.eval.stats import holm

    best, others = group[0], group[1:]
    marks[best.run_id] = Mark("best")
    if not others:
        return marks
    try:
        best_data = load_run(run_ref(best))
    except UserError as error:
        return {**marks, **{run.run_id: Mark("", note=f"best run unreadable: {error}") for run in others}}
    compared, p_values = [], []
    for run in others:
        try:
            p_values.append(float(compare_pair(best_data, load_run(run_ref(run)))["p_value"]))
            compared.append(run)
        except UserError as error:  # a different item set, or no per-item records
            marks[run.run_id] = Mark("", note=str(error))
    for run, p in zip(compared, holm(p_values)):
        marks[run.run_id] = (
            Mark("yes" if p >= alpha else "no", p) if p == p else Mark("", note="no p-value (no shared item differs)")
        )
    return marks


def incomplete_mark(run: Run) -> Mark:
    n = run.metrics.get("n_items")
    total = f" of {int(n)}" if n is not None else ""
    return Mark(
        "incomplete",
        note=f"{n_unanswered(run)}{total} items never answered (counted wrong): not ranked; "
        "rerun the job with resume=true to finish it",
    )
