"""``leaderboard/index.html``: one self-contained page (plotly's bundle, style and script inline, nothing
fetched) with a sortable, filterable table per dataset and task, the model x question heatmaps, the
figures per dataset and a reproducibility card per run."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime, timezone
from html import escape

from esgexp.core.tracking import metric_name
from esgexp.eval.stats import interval_na, with_interval
from esgexp.leaderboard import figures
from esgexp.leaderboard.assets import PAGE_CSS, PAGE_JS
from esgexp.leaderboard.questions import question_matrix
from esgexp.leaderboard.significance import Mark
from esgexp.leaderboard.store import Run
from esgexp.leaderboard.table import headline, headline_values, interval_note, uses_model

MARK_TEXT = {"best": "best", "yes": "✓", "no": "✗", "incomplete": "incomplete", "": "–"}


def number(value, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, float) else ""


def cell(text: str, sort=None, css: str = "", title: str = "") -> str:
    attributes = "".join(
        f' {name}="{escape(str(v))}"'
        for name, v in (("data-sort", sort), ("class", css), ("title", title))
        if v not in (None, "")
    )
    return f"<td{attributes}>{text}</td>"


def headline_cell(run: Run, named: bool) -> str:
    """The headline value ± half the 95% interval [low, high]; ``named``: prefixed with the metric's name."""
    values = headline_values(run)
    if values["value"] == "":
        return cell("")
    text = (f"{values['headline']} " if named else "") + f"{values['value']:.3f}"
    if values["ci_low"] != "" and values["ci_high"] != "":
        half = (values["ci_high"] - values["ci_low"]) / 2
        text += f" ± {half:.3f} [{values['ci_low']:.3f}, {values['ci_high']:.3f}]"
    elif interval_note(run):
        text += f" [{interval_na(interval_note(run))}]"
    return cell(escape(text), sort=values["value"], css="num", title=f"{values['headline']}: 95% interval")


def judge_cells(run: Run) -> list[str]:
    """The judge's model and prompt version, and ``judge/accuracy`` with its interval (empty without a judge)."""
    if not run.tags.get("judge_model"):
        return [cell(""), cell("")]
    accuracy = run.metrics.get("judge/accuracy")
    return [
        cell(escape(f"{run.tags['judge_model']} ({run.tags.get('judge_prompt', '')})")),
        cell(escape(with_interval(run.metrics, "judge/accuracy")), sort=accuracy, css="num"),
    ]


def baselines(run: Run) -> str:
    """The run's baselines: ``baseline/*`` metrics and the random ranking's value of its headline."""
    found = {k.removeprefix("baseline/"): v for k, v in run.metrics.items() if k.startswith("baseline/")}
    declared = headline(run)
    if declared and f"random/{metric_name(declared[0])}" in run.metrics:
        found["random"] = run.metrics[f"random/{metric_name(declared[0])}"]
    return ", ".join(f"{name.replace('_', ' ')} {v:.3f}" for name, v in sorted(found.items()))


def answered_by(run: Run) -> str:
    """Who gave the run's answers: its model (with what tells the run apart, ``(limit=3)``); for a job
    without one, the retriever (and its encoder) or ``external``."""
    if uses_model(run) or run.tags.get("model") == "external":
        name = run.tags["model"]
    elif run.tags.get("retriever"):
        encoder = run.tags.get("encoder")
        name = f"{run.tags['retriever']} ({encoder})" if encoder else run.tags["retriever"]
    else:
        name = ""
    return f"{name} ({run.variant})" if name and run.variant else name


def mark_cell(mark: Mark | None) -> str:
    mark = mark or Mark("")
    title = mark.note or (f"Holm-adjusted p = {mark.p:.3g} against the best run" if mark.p is not None else "")
    return cell(MARK_TEXT[mark.status], sort=mark.status, css=f"mark-{mark.status}" if mark.status else "", title=title)


def board_table(table_id: str, runs: list[Run], marks: dict[str, Mark]) -> str:
    """A sortable, filterable table of one (dataset, task, item set) group; a column no run fills is left out."""
    declared = {found[0] for found in map(headline, runs) if found}
    one = next(iter(declared)) if len(declared) == 1 else None  # runs of one group may declare different ones
    heads = [
        "model",
        "family",
        "size (B)",
        "fine-tuned from",
        "strategy",
        "scoring",
        "backend",
        "retriever",
        "query",
        "n",
        "never answered",
        f"{one or 'headline'} ± 95% CI",
        "invalid rate",
        "judge",
        "judge accuracy [95% CI]",
        "baselines",
        "not worse than best",
        "run",
    ]
    rows = []
    for run in runs:
        # A job without a model (retrieval, scoring a file) logs the default model's params: not shown.
        size = run.param("model.size_b") if uses_model(run) else None
        family = run.param("model.family") if uses_model(run) else None
        n = run.metrics.get("n_items", run.metrics.get("n_queries"))
        failed = run.metrics.get("n_failed")
        rows.append(
            [
                cell(escape(answered_by(run))),
                cell(escape(family or "")),
                cell(escape(size), sort=size, css="num") if size else cell(""),
                *(
                    cell(escape(run.tags.get(key, "")))
                    for key in ("finetuned_from", "strategy", "scoring", "backend", "retriever", "query")
                ),
                cell(str(int(n)) if n is not None else "", sort=n, css="num"),
                cell(str(int(failed)), sort=failed, css="num") if failed else cell(""),
                headline_cell(run, named=one is None),
                cell(number(run.metrics.get("invalid_rate")), sort=run.metrics.get("invalid_rate"), css="num"),
                *judge_cells(run),
                cell(escape(baselines(run))),
                mark_cell(marks.get(run.run_id)),
                cell(f'<a href="#card-{run.run_id}"><code>{run.run_id[:8]}</code></a>', sort=run.run_id),
            ]
        )
    shown = [i for i in range(len(heads)) if any(row[i] != "<td></td>" for row in rows)]
    header = "".join(f"<th>{escape(heads[i])}</th>" for i in shown)
    body = "".join("<tr>" + "".join(row[i] for i in shown) + "</tr>" for row in rows)
    return (
        f'<input class="filter" data-table="{table_id}" placeholder="filter rows (model, strategy, ...)">'
        f'<div class="scroll"><table class="board" id="{table_id}"><thead><tr>{header}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def json_block(block_id: str, data, figure_target: str | None = None, questions: str | None = None) -> str:
    """A ``<script type="application/json">`` block (``</`` escaped so the text cannot close it)."""
    attributes = f' id="{block_id}"'
    if figure_target:
        attributes += f' data-figure="{figure_target}"'
    if questions:
        attributes += f' data-questions="{questions}"'
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("</", "<\\/")
    return f'<script type="application/json"{attributes}>{text}</script>'


class Page:
    """Collects the page's sections and figure blocks in order."""

    def __init__(self):
        self.parts: list[str] = []
        self.blocks: list[str] = []

    def figure(self, figure, questions=None) -> None:
        if figure is None:
            return
        target = f"plot-{len(self.blocks)}"
        self.parts.append(f'<div class="plot" id="{target}"></div>')
        block = None
        if questions is not None:
            block = f"questions-{len(self.blocks)}"
            self.blocks.append(json_block(block, questions))
        self.blocks.append(json_block(f"figure-{len(self.blocks)}", figure.to_json(), target, block))


def card(run: Run) -> str:
    """The reproducibility card: what a reader needs to run it again or judge it."""

    def settings(*prefixes: str) -> str:
        found = {k: v for k, v in sorted(run.params.items()) if k.startswith(prefixes)}
        return "<br>".join(f"{escape(k)} = {escape(v)}" for k, v in found.items()) or "–"

    template = "\n\n".join(
        f"[{k}]\n{v}" if k != "template.text" else v
        for k, v in sorted(run.params.items())
        if k.startswith("template.") and k != "template.name"
    )
    entries = [
        ("run", f"{run.run_id} · {run.tags.get('mlflow.runName', '')}"),
        ("run folder", run.tags.get("run_dir", "")),
        ("dataset", f"{run.tags.get('dataset', '')} · {run.param('dataset.path') or run.param('dataset.hf_id') or ''}"),
        ("data file sha256", run.tags.get("data_sha256", "not recorded")),
        ("data provenance", run.tags.get("data_provenance", "not built by esgexp.build")),
        ("git commit", run.tags.get("git_commit", "")),
        ("package versions", run.tags.get("versions", "not recorded")),
        ("config hash", run.tags.get("config_hash", "")),
    ]
    html = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in entries)
    if uses_model(run):  # a job without a model logs the default one's prompt, decoding and backend: not shown
        html += f"<dt>prompt template ({escape(run.param('template.name') or 'none')})</dt><dd><pre>{escape(template) or '–'}</pre></dd>"
        html += f"<dt>decoding</dt><dd>{settings('scoring.', 'model.generation.', 'seed')}</dd>"
    html += f"<dt>retrieval</dt><dd>{settings('strategy.', 'retriever.', 'query.', 'retrieval.')}</dd>"
    if uses_model(run):
        html += f"<dt>backend</dt><dd>{settings('backend.', 'model.')}</dd>"
    title = " · ".join(x for x in (run.tags.get("dataset"), run.tags.get("task"), figures.label(run)) if x)
    return f'<details class="card" id="card-{run.run_id}"><summary>{escape(title)} <code>{run.run_id[:8]}</code></summary><dl>{html}</dl></details>'


#: The figures of a dataset, in the page's order, each with its title (after "<dataset>: "); a task kind names
#: those its runs are drawn in (``figures`` in esgexp/tasks/kinds.py). question_heatmap: one per setting.
FIGURES = {
    "question_heatmap": "models × questions",
    "framework_heatmap": "accuracy per framework",
    "size_accuracy": "model size against accuracy (zero-shot → context/RAG)",
    "calibration": "calibration (logprob scoring)",
    "qa_by_type": "open QA per question type",
    "qa_by_spans": "open QA by number of gold spans",
    "recall_curves": "recall@K per retriever and query",
    "category_accuracy": "accuracy per category",
}
# The figures a task kind's runs are drawn in (a kind not named here: none).
TASK_FIGURES = {
    "mcq": ("question_heatmap", "framework_heatmap", "size_accuracy", "calibration"),
    "qa": ("qa_by_type", "qa_by_spans", "category_accuracy"),
    "retrieval": ("recall_curves",),
    "esgbench_score": ("category_accuracy",),
}


def dataset_figures(page: Page, dataset: str, runs: list[Run], cache: dict) -> None:
    """The figures one dataset's runs hold: each run in the figures of its task kind (TASK_FIGURES)."""
    drawn: dict[str, list[Run]] = {name: [] for name in FIGURES}
    for run in runs:
        for name in TASK_FIGURES.get(run.tags.get("task", ""), ()):
            drawn[name].append(run)
    settings: dict[tuple[str, str], list[Run]] = {}
    for run in drawn["question_heatmap"]:
        settings.setdefault((run.tags.get("strategy", ""), run.tags.get("scoring", "")), []).append(run)
    for (strategy, scoring), group in sorted(settings.items()):
        matrix = question_matrix(group, cache)
        if matrix is not None:
            title = (
                f"{dataset}: {FIGURES['question_heatmap']} ({strategy}, {scoring}; {len(matrix.models)} models, "
                f"{len(matrix.ids)} questions)"
            )
            page.figure(figures.question_heatmap(matrix, title), questions=asdict(matrix))
    for name, title in list(FIGURES.items())[1:]:
        page.figure(getattr(figures, name)(drawn[name], f"{dataset}: {title}"))


def render(
    groups: dict[tuple[str, str, str], list[Run]], marks: dict[str, Mark], source: str, sections: list[str] | tuple = ()
) -> str:
    """The whole page for the (dataset, task, item set) groups of runs (each best first)."""
    from plotly.offline import get_plotlyjs

    page = Page()
    page.parts.append(
        "<h2 id='tables'>Leaderboards</h2><p class='note'>Click a column header to sort, type to filter. "
        "“Not worse than best”: a paired test against the group's best run (Holm-corrected, p ≥ 0.05). "
        "A table ranks runs over the same items; “incomplete”: items never answered, not ranked.</p>"
    )
    for index, ((dataset, task, items), runs) in enumerate(groups.items()):
        title = " · ".join(part for part in (dataset, task, items) if part)
        page.parts.append(f"<h3>{escape(title)}</h3>")
        page.parts.append(board_table(f"board-{index}", runs, marks))
    page.parts += sections  # e.g. the paper tables (esgexp/papers/report.py)
    page.parts.append("<h2 id='figures'>Figures</h2>")
    by_dataset: dict[str, list[Run]] = {}
    for (dataset, _, _), runs in groups.items():
        by_dataset.setdefault(dataset, []).extend(runs)
    cache: dict = {}
    for dataset, runs in by_dataset.items():
        page.parts.append(f"<h3>{escape(dataset)}</h3>")
        dataset_figures(page, dataset, runs, cache)
    page.parts.append("<h2 id='cards'>Reproducibility cards</h2>")
    page.parts += [card(run) for runs in groups.values() for run in runs]
    n_runs = sum(len(runs) for runs in groups.values())
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            "<title>esgexp leaderboard</title>",
            f"<style>{PAGE_CSS}</style>",
            f"<script>{get_plotlyjs()}</script>",
            "</head><body>",
            f"<h1>esgexp leaderboard</h1><p class='note'>{n_runs} finished runs from {escape(source)} · {made}</p>",
            "<nav><a href='#tables'>leaderboards</a><a href='#figures'>figures</a><a href='#cards'>reproducibility cards</a></nav>",
            *page.parts,
            *page.blocks,
            f"<script>{PAGE_JS}</script>",
            "</body></html>",
        ]
    )
