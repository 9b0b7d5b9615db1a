"""Throughput of the open-QA metrics (esgexp.eval.qa_metrics, esgexp.eval.text_metrics).

Scores N synthetic (prediction, reference) pairs with each metric and reports items per second.
The pairs are generated deterministically (seeded): factoid answers of 1-6 comma-separated spans
for SpanMatch, 15-40-word answers for the text metrics; each prediction is its reference with
words dropped, replaced and spans lost or added, so scores are neither all 0 nor all 1.

Each metric is first run on 16 pairs (loading WordNet or the BERTScore model: "setup s"),
then timed on the N pairs. Run from the repository root, offline:

    .venv/bin/python benchmarks/metrics.py                      # N = 10,000 for every metric
    .venv/bin/python benchmarks/metrics.py --bertscore-n 2000   # fewer pairs for BERTScore

Prints a Markdown table and writes benchmarks/metrics.json (--json PATH). Not a test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from esgexp.eval.qa_metrics import SpanMatch  # noqa: E402
from esgexp.eval.text_metrics import BERTScore, Bleu, Meteor, RougeL  # noqa: E402

DEFAULT_JSON = ROOT / "benchmarks" / "metrics.json"
WARMUP = 16
WORDS = (
    "emissions scope carbon climate taxonomy aligned eligible capex opex turnover revenue energy "
    "renewable solar wind hydro water waste recycling biodiversity governance board diversity "
    "employees safety supply chain risk transition mitigation adaptation disclosure report target "
    "reduction baseline tonnes percent million euro company group activity criteria objective "
    "sustainable green bond framework policy strategy management assessment material impact the of "
    "and to in for by with on from increased decreased compared previous year"
).split()


def factoid_pair(rng: random.Random) -> tuple[str, str]:
    """A reference of 1-6 spans and a prediction that keeps, loses, alters or adds spans."""
    spans = [" ".join(rng.choices(WORDS, k=rng.randint(1, 3))) for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4, 5, 6)))]
    predicted = [span for span in spans if rng.random() < 0.8]
    if predicted and rng.random() < 0.3:
        predicted[0] = f"{predicted[0]} {rng.choice(WORDS)}"
    if rng.random() < 0.2:
        predicted.append(rng.choice(WORDS))
    return ", ".join(predicted), ", ".join(spans)


def text_pair(rng: random.Random) -> tuple[str, str]:
    """A 15-40-word reference and a prediction with about a third of its words dropped or replaced."""
    reference = rng.choices(WORDS, k=rng.randint(15, 40))
    prediction = []
    for word in reference:
        roll = rng.random()
        if roll < 0.15:
            continue
        prediction.append(rng.choice(WORDS) if roll < 0.35 else word)
    return " ".join(prediction), " ".join(reference)


def make_pairs(kind: str, n: int, seed: int) -> tuple[list[str], list[tuple[str, ...]]]:
    rng = random.Random(f"{seed}-{kind}")
    make = factoid_pair if kind == "factoid" else text_pair
    pairs = [make(rng) for _ in range(n)]
    return [prediction for prediction, _ in pairs], [(reference,) for _, reference in pairs]


def machine_info() -> dict:
    versions = {}
    for package in ("torch", "transformers", "nltk", "rouge-score", "sacrebleu", "bert-score", "esgexp"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    cpu = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        cpu = next(
            (
                line.split(":", 1)[1].strip()
                for line in cpuinfo.read_text().splitlines()
                if line.startswith("model name")
            ),
            cpu,
        )
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "versions": versions,
    }


def measure(metric, kind: str, n: int, seed: int) -> dict:
    """Warm the metric up (setup), then time one ``score`` call over ``n`` pairs."""
    predictions, references = make_pairs(kind, n, seed)
    start = time.perf_counter()
    metric.score(predictions[:WARMUP], references[:WARMUP])
    setup = time.perf_counter() - start
    start = time.perf_counter()
    result = metric.score(predictions, references)
    seconds = time.perf_counter() - start
    return {
        "metric": type(metric).__name__,
        "n": n,
        "setup_seconds": round(setup, 3),
        "seconds": round(seconds, 3),
        "items_per_s": round(n / seconds, 1),
        "summary": {key: round(value, 4) for key, value in result.summary.items() if "/" not in key},
        "info": result.info,
    }


def table(rows: list[dict]) -> str:
    lines = ["| metric | n | setup s | seconds | items/s | summary |", "|---|---|---|---|---|---|"]
    for row in rows:
        summary = ", ".join(f"{key} {value:g}" for key, value in row["summary"].items())
        lines.append(
            f"| {row['metric']} | {row['n']:,} | {row['setup_seconds']:.2f} | {row['seconds']:.2f} | {row['items_per_s']:,.1f} | {summary} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="pairs per metric (default 10,000)")
    parser.add_argument("--bertscore-n", type=int, default=None, help="pairs for BERTScore (default: --n)")
    parser.add_argument("--batch-size", type=int, default=64, help="BERTScore batch size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()

    started = datetime.datetime.now(datetime.timezone.utc)
    machine = machine_info()
    bertscore = BERTScore(batch_size=args.batch_size)
    runs = [
        (SpanMatch(), "factoid", args.n),
        (RougeL(), "text", args.n),
        (Bleu(), "text", args.n),
        (Meteor(), "text", args.n),
        (bertscore, "text", args.bertscore_n or args.n),
    ]
    rows = []
    for metric, kind, n in runs:
        rows.append(measure(metric, kind, n, args.seed))
        print(f"{type(metric).__name__}: {rows[-1]['items_per_s']:,.1f} items/s", file=sys.stderr)
    import torch

    machine["torch_threads"] = torch.get_num_threads()
    machine["load_average_at_end"] = os.getloadavg()
    report = {
        "date": started.isoformat(timespec="seconds"),
        "command": sys.argv[1:],
        "settings": {
            "n": args.n,
            "bertscore_n": args.bertscore_n or args.n,
            "batch_size": args.batch_size,
            "seed": args.seed,
            "warmup": WARMUP,
        },
        "machine": machine,
        "metrics": rows,
    }
    args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(table(rows))
    print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
