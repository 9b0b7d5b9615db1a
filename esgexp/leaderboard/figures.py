"""The page's plotly figures, each from the runs of one dataset (None when the runs hold nothing to draw)."""

from __future__ import annotations

import math
import re
from collections import defaultdict

from esgexp.leaderboard.questions import QuestionMatrix
from esgexp.leaderboard.store import Run
from esgexp.tasks.kinds import kind_of

# Open-QA values drawn per question type, as the QA task names them (<qtype>/<value>).
QA_VALUES = ("f1", "em", "rougeL", "bertscore_f1", "accuracy", "numeric_accuracy")
LAYOUT = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 50, "b": 60}, "height": 420}


def label(run: Run, with_variant: bool = True) -> str:
    """model · strategy · scoring (retrieval: retriever · query; scoring a file: its name), the run's name on
    a figure; ``with_variant``: followed by what tells it apart from runs of the same name (``(limit=3)``)."""
    name = kind_of(run.tags.get("task")).run_label(run.tags, " · ") or run.run_id[:8]
    return f"{name} ({run.variant})" if with_variant and run.variant else name


def value(run: Run, name: str) -> float | None:
    found = run.metrics.get(name)
    return None if found is None or math.isnan(found) else found


def question_heatmap(matrix: QuestionMatrix, title: str):
    """Models (best on top) x questions (easiest left); green correct, red wrong, blank no record. The
    hover text is put together in the page from the matrix (see assets.PAGE_JS), each question once."""
    import plotly.graph_objects as go

    figure = go.Figure(
        go.Heatmap(
            z=matrix.correct,
            x=list(range(len(matrix.ids))),
            y=matrix.models,
            zmin=0,
            zmax=1,
            colorscale=[[0, "#d6604d"], [0.5, "#d6604d"], [0.5, "#4dac26"], [1, "#4dac26"]],
            showscale=False,
            hovertemplate="%{text}<extra></extra>",
            xgap=0,
            ygap=1,
        )
    )
    figure.update_layout(**{**LAYOUT, "height": 150 + 20 * len(matrix.models)}, title=title)
    figure.update_xaxes(
        title="questions, easiest first (by the share of models that miss it); green right, red wrong",
        showticklabels=False,
    )
    figure.update_yaxes(autorange="reversed", automargin=True)
    return figure


def framework_heatmap(runs: list[Run], title: str):
    """Run x framework accuracy (metrics ``accuracy/framework/<name>``)."""
    import plotly.graph_objects as go

    pattern = re.compile(r"^accuracy/framework/([^/]+)$")  # not the interval keys beside each
    frameworks = sorted({m.group(1) for run in runs for k in run.metrics if (m := pattern.match(k))})
    if not frameworks:
        return None
    names = [label(run) for run in runs]
    z = [[value(run, f"accuracy/framework/{name}") for name in frameworks] for run in runs]
    figure = go.Figure(
        go.Heatmap(
            z=z,
            x=frameworks,
            y=names,
            zmin=0,
            zmax=1,
            colorscale="Viridis",
            hovertemplate="%{y}<br>%{x}: %{z:.3f}<extra></extra>",
            colorbar={"title": "accuracy"},
        )
    )
    figure.update_layout(**{**LAYOUT, "height": max(300, 150 + 22 * len(runs))}, title=title)
    figure.update_yaxes(autorange="reversed", automargin=True)
    return figure


def size_accuracy(runs: list[Run], title: str):
    """Model size (billions, log axis) against accuracy, one colour per strategy; a line joins each
    model's zero-shot point to its context/RAG points (same scoring and backend)."""
    import plotly.graph_objects as go

    points = defaultdict(list)  # strategy -> (size, accuracy, model)
    for run in runs:
        size, accuracy = run.param("model.size_b"), value(run, "accuracy")
        if size is None or accuracy is None:
            continue
        points[run.tags.get("strategy", "")].append((float(size), accuracy, run))
    if not points:
        return None
    figure = go.Figure()
    base = {
        (r.tags.get("model"), r.tags.get("scoring"), r.tags.get("backend")): (s, a)
        for s, a, r in points.get("zero_shot", [])
    }
    xs, ys = [], []
    for strategy, found in points.items():
        if strategy == "zero_shot":
            continue
        for size, accuracy, run in found:
            start = base.get((run.tags.get("model"), run.tags.get("scoring"), run.tags.get("backend")))
            if start:
                xs += [start[0], size, None]
                ys += [start[1], accuracy, None]
    if xs:
        figure.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name="zero-shot → context/RAG",
                line={"color": "#999", "width": 1},
                hoverinfo="skip",
            )
        )
    for strategy, found in sorted(points.items()):
        bars = [error_bars(r, ["accuracy"]) for _, _, r in found]
        figure.add_trace(
            go.Scatter(
                x=[s for s, _, _ in found],
                y=[a for _, a, _ in found],
                mode="markers",
                name=strategy,
                error_y=None
                if None in bars
                else {
                    "type": "data",
                    "symmetric": False,
                    "array": [b["array"][0] for b in bars],
                    "arrayminus": [b["arrayminus"][0] for b in bars],
                    "thickness": 1,
                },
                text=[r.tags.get("model", "") for _, _, r in found],
                hovertemplate="%{text}<br>size %{x} B<br>accuracy %{y:.3f}<extra>" + strategy + "</extra>",
            )
        )
    figure.update_layout(**LAYOUT, title=title)
    figure.update_xaxes(type="log", title="model size (billion parameters)")
    figure.update_yaxes(title="accuracy", range=[0, 1])
    return figure


def error_bars(run: Run, names: list[str]) -> dict | None:
    """plotly ``error_y`` from the 95% intervals (``<name>/ci_low``, ``/ci_high``) of ``names``; None
    when none of them has one."""
    lows = [value(run, f"{name}/ci_low") for name in names]
    highs = [value(run, f"{name}/ci_high") for name in names]
    if all(low is None for low in lows):
        return None
    points = [value(run, name) for name in names]
    return {
        "type": "data",
        "symmetric": False,
        "array": [h - v if h is not None else 0 for h, v in zip(highs, points)],
        "arrayminus": [v - lo if lo is not None else 0 for lo, v in zip(lows, points)],
    }


def grouped_bars(runs: list[Run], keys: dict[str, str], title: str, y_title: str):
    """One bar group per x label (``keys``: metric name -> x label), one bar per run, with its 95%
    interval where the run logged one."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for run in runs:
        shown = [name for name in keys if value(run, name) is not None]
        if shown:
            figure.add_trace(
                go.Bar(
                    x=[keys[name] for name in shown],
                    y=[value(run, name) for name in shown],
                    name=label(run),
                    error_y=error_bars(run, shown),
                )
            )
    if not figure.data:
        return None
    figure.update_layout(**LAYOUT, title=title, barmode="group", showlegend=True)
    figure.update_yaxes(title=y_title)
    return figure


def qa_by_type(runs: list[Run], title: str):
    """Open-QA values per question type (``<qtype>/<value>``, e.g. factoid/f1, table/rougeL)."""
    pattern = re.compile(rf"^([a-z_]+)/({'|'.join(QA_VALUES)})$")
    keys = sorted({k for run in runs for k in run.metrics if pattern.match(k)})
    return grouped_bars(runs, {k: k.replace("/", " ") for k in keys}, title, "score")


def qa_by_spans(runs: list[Run], title: str):
    """Factoid F1 by number of gold spans (``<qtype>/by_spans/<bucket>/f1``)."""
    pattern = re.compile(r"^([a-z_]+)/by_spans/([^/]+)/f1$")
    keys = sorted(
        {k for run in runs for k in run.metrics if pattern.match(k)}, key=lambda k: (k.split("/")[0], k.split("/")[2])
    )
    return grouped_bars(runs, {k: f"{k.split('/')[0]}: {k.split('/')[2]} span(s)" for k in keys}, title, "F1")


def recall_curves(runs: list[Run], title: str):
    """Pooled recall@K against K (with its 95% intervals), one line per retriever and query formulation."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for run in runs:
        ks = sorted(int(m.group(1)) for k in run.metrics if (m := re.fullmatch(r"recall_at_(\d+)", k)))
        if ks:
            names = [f"recall_at_{k}" for k in ks]
            figure.add_trace(
                go.Scatter(
                    x=ks,
                    y=[run.metrics[n] for n in names],
                    mode="lines+markers",
                    name=label(run),
                    error_y=error_bars(run, names),
                )
            )
    if not figure.data:
        return None
    figure.update_layout(**LAYOUT, title=title, showlegend=True)
    figure.update_xaxes(title="K (passages retrieved)", type="log")
    figure.update_yaxes(title="recall@K", range=[0, 1])
    return figure


def category_accuracy(runs: list[Run], title: str):
    """Accuracy per report category (``[<qtype>/]category/<name>/accuracy``: ESGBench)."""
    pattern = re.compile(r"^(?:[a-z_]+/)?category/(.+)/accuracy$")
    keys = sorted({k for run in runs for k in run.metrics if pattern.match(k)})
    return grouped_bars(runs, {k: pattern.match(k).group(1) for k in keys}, title, "accuracy")


def calibration(runs: list[Run], title: str):
    """Reliability (accuracy against confidence, 15 bins) and accuracy against coverage for each run
    that wrote calibration.json (logprob scoring)."""
    import json

    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figure = make_subplots(rows=1, cols=2, subplot_titles=("reliability", "abstention below a confidence threshold"))
    for run in runs:
        path = run.file("calibration.json")
        if path is None:
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        bins = [b for b in data.get("bins", []) if b.get("count")]
        group = {"legendgroup": run.run_id, "name": label(run)}
        figure.add_trace(
            go.Scatter(
                x=[b["confidence"] for b in bins],
                y=[b["accuracy"] for b in bins],
                mode="lines+markers",
                text=[f"{b['count']} answers" for b in bins],
                **group,
            ),
            row=1,
            col=1,
        )
        coverage = data.get("coverage", [])
        figure.add_trace(
            go.Scatter(
                x=[c["coverage"] for c in coverage],
                y=[c["accuracy"] for c in coverage],
                mode="lines",
                text=[f"threshold {c['threshold']}" for c in coverage],
                showlegend=False,
                **group,
            ),
            row=1,
            col=2,
        )
    if not figure.data:
        return None
    figure.add_trace(
        go.Scatter(x=[0, 1], y=[0, 1], mode="lines", line={"dash": "dot", "color": "#999"}, name="perfect"),
        row=1,
        col=1,
    )
    figure.update_layout(**LAYOUT, title=title)
    figure.update_xaxes(title="confidence", range=[0, 1], row=1, col=1)
    figure.update_xaxes(title="coverage (share answered)", range=[0, 1], row=1, col=2)
    figure.update_yaxes(title="accuracy", range=[0, 1])
    return figure
