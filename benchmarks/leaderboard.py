"""Size and load time of the HTML leaderboard for an ESGenius-sized board (50 models x 1,136 questions).

Writes a synthetic ESGenius-shaped CSV (1,136 questions: 20-60-word question, four 3-12-word options),
logs one finished MCQ run per model to a fresh sqlite MLflow store, shaped like a real job's (run folder
with config.yaml, metrics.json and predictions.jsonl; the tags and params the leaderboard reads; tests/
test_leaderboard.log_run), each model right with a seeded probability that falls with the question's
difficulty, then times ``esgexp.leaderboard.export(..., formats=("html",))`` (the paired comparisons
against the best run included) and opens the page from file:// in Debian's chromium (Playwright):
load time is navigation start to every figure drawn (``body[data-rendered=done]``), fastest and median
of the repeats, plus the time from a mouse move over a heatmap cell to its hover label. Goal: under
10 MB and 3 s.

    .venv/bin/python benchmarks/leaderboard.py                   # 50 models x 1,136 questions, 3 loads
    .venv/bin/python benchmarks/leaderboard.py --models 5 --questions 100 --repeats 1   # smoke run

Prints a Markdown table and writes benchmarks/leaderboard.json (--json PATH). Not a test.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "tests"))  # test_leaderboard.log_run: a finished run shaped like a job's

from test_leaderboard import log_run  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
DEFAULT_JSON = ROOT / "benchmarks" / "leaderboard.json"
WORDS = (
    "emissions scope carbon climate taxonomy aligned eligible capex opex turnover energy renewable water "
    "waste biodiversity governance board diversity employees safety supply chain risk transition disclosure "
    "report target reduction baseline tonnes company activity criteria objective sustainable framework "
    "policy strategy management assessment material impact standard requirement entity information"
).split()
TEMPLATE = "Question: {query}\nOptions:\nA: {A}\nB: {B}\nC: {C}\nD: {D}\nZ: Not sure\n\nAnswer:"


def sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(low, high))).capitalize()


def write_questions(path: Path, n: int, rng: random.Random) -> list[dict]:
    rows = []
    for index in range(n):
        row = {
            "query_id": str(10000 + index),
            "new_id": str(index + 1),
            "query": sentence(rng, 20, 60) + "?",
            "answer": rng.choice("ABCD"),
            "Z": "Not sure",
        }
        row.update({letter: sentence(rng, 3, 12) for letter in "ABCD"})
        rows.append(row)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["query_id", "new_id", "query", "answer", "A", "B", "C", "D", "Z"])
        writer.writeheader()
        writer.writerows(rows)
    return rows


def log_models(root: Path, questions: list[dict], n_models: int, rng: random.Random) -> str:
    """One finished zero-shot MCQ run per synthetic model; returns the store's URI."""
    from esgexp.eval.stats import wilson

    uri = f"sqlite:///{root}/mlruns/mlflow.db"
    dataset = {
        "_target_": "esgexp.data.esgenius.ESGeniusCSV",
        "name": "esgenius",
        "path": str(root / "esgenius.csv"),
        "hf_id": None,
        "split": "train",
        "limit": None,
        "seed": 42,
    }
    difficulty = [rng.gauss(0, 1.2) for _ in questions]
    for m in range(n_models):
        size = round(0.5 * 2 ** (m * 8 / max(n_models - 1, 1)), 2)  # 0.5 B .. 128 B
        skill = -1.0 + 3.0 * m / max(n_models - 1, 1) + rng.gauss(0, 0.3)
        records = []
        for q, hard in zip(questions, difficulty):
            right = rng.random() < 1 / (1 + math.exp(hard - skill))
            parsed = q["answer"] if right else rng.choice([x for x in "ABCDZ" if x != q["answer"]])
            records.append(
                {"id": q["query_id"], "gold": q["answer"], "output": parsed, "parsed": parsed, "correct": right}
            )
        hits = sum(r["correct"] for r in records)
        interval = wilson(hits, len(records))
        metrics = {
            "n_items": len(records),
            "accuracy": hits / len(records),
            "invalid_rate": 0.0,
            "accuracy/ci_low": interval.low,
            "accuracy/ci_high": interval.high,
            "accuracy/stderr": interval.stderr,
            "baseline/random": 0.25,
            "headline_metric": "accuracy",
            "higher_is_better": True,
        }
        model = f"model-{m:02d}"
        config = {
            "task": "mcq",
            "dataset": dataset,
            "model": {"name": model, "size_b": size},
            "strategy": {"name": "zero_shot"},
            "scoring": {"name": "generate"},
            "template": {"name": "esgenius", "text": TEMPLATE},
        }
        params = {
            "model.name": model,
            "model.family": "synthetic",
            "model.size_b": str(size),
            "strategy.name": "zero_shot",
            "scoring.name": "generate",
            "scoring.max_new_tokens": "16",
            "template.name": "esgenius",
            "template.text": TEMPLATE,
            "dataset.path": dataset["path"],
            "backend.name": "hf",
            "seed": "42",
        }
        tags = {
            "task": "mcq",
            "dataset": "esgenius",
            "model": model,
            "backend": "hf",
            "strategy": "zero_shot",
            "scoring": "generate",
            "headline_metric": "accuracy",
            "higher_is_better": "true",
        }
        files = {"config.yaml": json.dumps(config), "predictions.jsonl": "".join(json.dumps(r) + "\n" for r in records)}
        log_run(uri, root / "runs" / model, tags, params, metrics, files, experiment="esgenius")
    return uri


def browser_times(page_file: Path, repeats: int, n_models: int, n_questions: int) -> dict:
    from playwright.sync_api import sync_playwright

    loads, hovers, errors, requests, marks = [], [], [], [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for _ in range(repeats):
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda message: message.type == "error" and errors.append(message.text))
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("request", lambda request: requests.append(request.url))
            start = time.perf_counter()
            page.goto(page_file.as_uri())
            page.wait_for_selector("body[data-rendered=done]", timeout=60000)
            loads.append(time.perf_counter() - start)
            marks.append(
                page.evaluate(
                    "() => Object.fromEntries(performance.getEntriesByType('mark').map(m => [m.name, m.startTime / 1000]))"
                )
            )
            plot = page.query_selector("div.plot")
            plot.evaluate("e => e.scrollIntoView({block: 'start'})")
            box = plot.query_selector(".nsewdrag").bounding_box()
            start = time.perf_counter()
            page.mouse.move(
                box["x"] + box["width"] * (n_questions - 0.5) / n_questions, box["y"] + box["height"] * 0.5 / n_models
            )
            label = plot.wait_for_selector(".hoverlayer .hovertext", timeout=10000)
            hovers.append(time.perf_counter() - start)
            hover_text = label.text_content()
            page.close()
        browser.close()
    return {
        "load_s": loads,
        "hover_s": hovers,
        "script_s": [m["esgexp:script"] for m in marks],
        "draw_s": [m["esgexp:rendered"] - m["esgexp:script"] for m in marks],
        "console_errors": errors,
        "non_file_requests": [url for url in requests if not url.startswith("file://")],
        "hover_text": hover_text,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=50)
    parser.add_argument("--questions", type=int, default=1136)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()
    if not Path(CHROMIUM).is_file():
        sys.exit(f"no chromium at {CHROMIUM}: make installs Debian's package")

    from esgexp.leaderboard.board import export

    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        questions = write_questions(root / "esgenius.csv", args.questions, rng)
        start = time.perf_counter()
        uri = log_models(root, questions, args.models, rng)
        log_s = time.perf_counter() - start
        start = time.perf_counter()
        export(uri, root / "board", formats=("html",))
        build_s = time.perf_counter() - start
        page_file = root / "board" / "index.html"
        size_mb = page_file.stat().st_size / 1e6
        from plotly.offline import get_plotlyjs

        plotly_mb = len(get_plotlyjs().encode()) / 1e6
        times = browser_times(page_file, args.repeats, args.models, args.questions)

    result = {
        "date": datetime.date.today().isoformat(),
        "machine": platform.processor() or platform.machine(),
        "models": args.models,
        "questions": args.questions,
        "repeats": args.repeats,
        "page_mb": round(size_mb, 3),
        "plotly_js_mb": round(plotly_mb, 3),
        "data_mb": round(size_mb - plotly_mb, 3),
        "log_runs_s": round(log_s, 2),
        "build_page_s": round(build_s, 2),
        "load_s_fastest": round(min(times["load_s"]), 3),
        "load_s_median": round(statistics.median(times["load_s"]), 3),
        "hover_s_median": round(statistics.median(times["hover_s"]), 3),
        "plotly_js_ready_s_median": round(statistics.median(times["script_s"]), 3),
        "figures_drawn_s_median": round(statistics.median(times["draw_s"]), 3),
        "load_average_1min": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
        "console_errors": times["console_errors"],
        "non_file_requests": times["non_file_requests"],
        "goal": {"page_mb": 10, "load_s": 3},
    }
    rows = [
        ("page size (MB)", f"{size_mb:.2f}"),
        ("  of which plotly.js (MB)", f"{plotly_mb:.2f}"),
        ("build page (s, incl. paired tests)", f"{build_s:.2f}"),
        ("load + render in chromium, fastest (s)", f"{min(times['load_s']):.2f}"),
        ("load + render, median (s)", f"{statistics.median(times['load_s']):.2f}"),
        ("  navigation to plotly.js evaluated, median (s)", f"{statistics.median(times['script_s']):.2f}"),
        ("  figures drawn (hover texts built), median (s)", f"{statistics.median(times['draw_s']):.2f}"),
        ("hover label after mouse move, median (s)", f"{statistics.median(times['hover_s']):.3f}"),
        ("console errors / non-file requests", f"{len(times['console_errors'])} / {len(times['non_file_requests'])}"),
    ]
    print(
        f"HTML leaderboard: {args.models} models x {args.questions} questions ({args.repeats} loads, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)\n"
    )
    print("| measure | value |\n|---|---|")
    print("\n".join(f"| {name} | {value} |" for name, value in rows))
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
