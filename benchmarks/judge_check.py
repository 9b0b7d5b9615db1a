"""The judge (judge=..., esgexp/eval/judge.py) against known verdicts: 20 answers to questions of our bundled
ESGBench and SustainableQA samples, each written by hand with the verdict the rubric gives it (the gold answer
in another notation, a wrong year, a wrong unit or scale, part of a list, a number without its unit, a
"not disclosed", a clearly wrong answer).

Each answer is graded by the judge as a run grades it (the item's question, gold answer and evidence, through
the request cache) and scored by ESGBench's token F1 and EM. Prints one row per answer and the agreement of
the judge, and of "token F1 >= 0.5" as a stand-in judge, with the known verdicts (exact, and correct vs not
with Cohen's kappa); writes benchmarks/judge_check.json (--json PATH). Not a test. Run from the repository root:

    .venv/bin/python benchmarks/judge_check.py                           # the default judge, SmolLM2-135M
    .venv/bin/python benchmarks/judge_check.py judge.model=gpt-4o         # any judge setting, as on a run
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_JSON = ROOT / "benchmarks" / "judge_check.json"

# (dataset, question as in the sample, candidate answer, the verdict the rubric gives it, what it tests)
CASES = [
    ("esgbench", "What were Northwind's gross Scope 1 emissions in 2024?", "1.48 million tCO2e", "correct", "notation"),
    ("esgbench", "What were Northwind's gross Scope 1 emissions in 2024?", "1,530,900 tCO2e", "incorrect", "year"),
    ("esgbench", "What share of kiln thermal energy came from alternative fuels in 2024?", "18.6 percent", "correct", "notation"),
    ("esgbench", "What share of kiln thermal energy came from alternative fuels in 2024?", "15.2%", "incorrect", "year"),
    ("esgbench", "How much water did Northwind withdraw across its plants in 2024?", "2,350 cubic metres", "incorrect", "unit"),
    ("esgbench", "How much water did Northwind withdraw across its plants in 2024?", "2,350", "partially_correct", "no unit"),
    ("esgbench", "What was the employee Lost Time Injury Frequency Rate in 2024?", "0.41", "correct", "same"),
    ("esgbench", "How much renewable electricity did Aurora Grid generate in 2024?", "3,100 GWh", "correct", "unit conversion"),
    ("esgbench", "What were Aurora Grid's location-based Scope 2 emissions?", "412 tCO2e", "incorrect", "scale"),
    ("esgbench", "What percentage of Aurora Grid's workforce were women at year end?", "This is not disclosed in the report.", "incorrect", "not disclosed"),
    ("esgbench", "Which board committee oversees climate-related risks at Aurora Grid?", "The Audit Committee", "incorrect", "entity"),
    ("esgbench", "Does Kestrel have a whistleblowing policy?", "Yes, it has a Speak Up policy that covers the whole group.", "correct", "paraphrase"),
    ("esgbench", "How much did Kestrel invest in community programmes in 2024?", "USD 1.2 billion", "incorrect", "scale"),
    ("sustainableqa", "Which reporting standards does Norrvik Energi AB follow for its workforce disclosures?", "ESRS S1", "partially_correct", "part of a list"),
    ("sustainableqa", "Which electricity generation activities of Norrvik Energi AB were found to be taxonomy-aligned?", "wind, solar PV and hydro", "correct", "list paraphrase"),
    ("sustainableqa", "Which electricity generation activities of Norrvik Energi AB were found to be taxonomy-aligned?", "wind power and hydropower", "partially_correct", "part of a list"),
    ("sustainableqa", "By which year does Castellane Logistics SE aim to reach net zero in its own operations?", "2050", "incorrect", "year"),
    ("sustainableqa", "How did Norrvik Energi AB's safety performance change between 2022 and 2023?", "It improved: the lost-time injury frequency rate fell from 3.4 to 2.1 per million hours worked.", "correct", "long answer"),
    ("sustainableqa", "How did Norrvik Energi AB's safety performance change between 2022 and 2023?", "It improved.", "partially_correct", "direction only"),
    ("sustainableqa", "What was Norrvik Energi AB's total turnover in 2023?", "SEK 12.84 billion", "correct", "notation"),
]  # fmt: skip


def load_items() -> dict[str, object]:
    """The bundled samples' QA items by question (every question type of SustainableQA)."""
    from hydra.utils import instantiate

    from esgexp.core.config import compose_config

    found = {}
    for overrides in (
        ["experiment=esgbench", "dataset=esgbench_sample"],
        [
            "experiment=sustainableqa_factoid",
            "dataset=sustainableqa_sample",
            "dataset.qtypes=[factoid,non_factoid,table]",
        ],
    ):
        for item in instantiate(compose_config("config", overrides).dataset).load().items:
            found.setdefault(item.question, item)
    return found


def kappa_of(truth: list[bool], said: list[bool]) -> float | None:
    from esgexp.eval.judge import kappa

    return kappa(truth, said)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="judge settings as on a run, e.g. judge.model=gpt-4o")
    parser.add_argument(
        "--cases", type=int, default=len(CASES), help=f"the first N cases only (default all {len(CASES)})"
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()

    import dataclasses

    from hydra.utils import instantiate

    from esgexp.core.config import compose_config
    from esgexp.eval.judge import run_judge

    items = load_items()
    out_dir = tempfile.mkdtemp(prefix="judge-check-")
    cfg = compose_config(
        "config",
        [
            "experiment=esgbench",
            "judge=default",
            f"paths.output_dir={out_dir}",
            "trainer.progress_bar=false",
            *args.overrides,
        ],
    )
    scorer = instantiate(cfg.metrics.scorers.esgbench)
    cases, records = [], []
    for index, (dataset, question, answer, expected, kind) in enumerate(CASES[: args.cases]):
        item = dataclasses.replace(items[question], id=f"case{index:02d}")
        values = scorer.score([answer], [item.answers]).per_item[0]
        cases.append((item, expected, kind, dataset))
        records.append(
            {"id": item.id, "qtype": item.qtype, "answer": answer, "metrics": {"em": values["em"], "f1": values["f1"]}}
        )
    metrics = run_judge(cfg, [item for item, *_ in cases], records)

    rows = []
    print(f"judge {cfg.judge.model} ({cfg.judge.prompt_version}) on {len(cases)} answers with known verdicts\n")
    print(f"| case | tests | gold | answer | known | judge | F1 | EM | judge agrees |\n|{'---|' * 9}")
    for (item, expected, kind, dataset), record in zip(cases, records):
        verdict = record["judge"]["verdict"]
        row = {
            "case": item.id,
            "dataset": dataset,
            "tests": kind,
            "question": item.question,
            "gold": item.answers[0],
            "answer": record["answer"],
            "known": expected,
            "judge": verdict,
            "invalid": bool(record["judge"].get("invalid")),
            "reason": record["judge"]["reason"],
            "f1": round(record["metrics"]["f1"], 3),
            "em": record["metrics"]["em"],
        }
        rows.append(row)
        print(
            f"| {item.id} | {kind} | {row['gold'][:30]} | {row['answer'][:40]} | {expected} | {verdict}"
            f"{' (invalid)' if row['invalid'] else ''} | {row['f1']:.2f} | {row['em']} | {'yes' if verdict == expected else 'no'} |"
        )
    n = len(rows)
    truth = [r["known"] == "correct" for r in rows]
    judged = [r["judge"] == "correct" for r in rows]
    by_f1 = [r["f1"] >= 0.5 for r in rows]
    summary = {
        "judge_exact_agreement": sum(r["judge"] == r["known"] for r in rows) / n,
        "judge_correct_agreement": sum(a == b for a, b in zip(truth, judged)) / n,
        "judge_correct_kappa": kappa_of(truth, judged),
        "f1_ge_0.5_correct_agreement": sum(a == b for a, b in zip(truth, by_f1)) / n,
        "f1_ge_0.5_correct_kappa": kappa_of(truth, by_f1),
        "em_correct_agreement": sum(a == bool(r["em"]) for a, r in zip(truth, rows)) / n,
        "judge_verdicts": {
            v: sum(r["judge"] == v for r in rows) for v in ("correct", "partially_correct", "incorrect")
        },
        "known_verdicts": {
            v: sum(r["known"] == v for r in rows) for v in ("correct", "partially_correct", "incorrect")
        },
        "n_invalid": metrics["judge/n_invalid"],
    }
    print()
    for key, value in summary.items():
        print(f"{key}: {value if not isinstance(value, float) else round(value, 3)}")
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "judge": {k: v for k, v in dict(cfg.judge).items() if k != "backend_overrides"},
        "summary": summary,
        "rows": rows,
    }
    args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
