"""Write synthetic SustainableQA splits (same schema, template text) for scale tests and benchmarks.

    python -m esgexp.data.make_sustainableqa_fixture OUT_DIR --chunks N --tables M --seed S

Each split file gets N chunks (classifications cycling ESG, EU Taxonomy, Sustainability) with
11 factoid and 13 non-factoid QA pairs, and M EU Taxonomy tables with 18 QA pairs: the per-passage
averages of the published dataset. Output is deterministic for a seed and written record by record.
About 6,800 chunks and 100 tables make a file the size of the real train.json (85 MB).
"""

from __future__ import annotations

import argparse
import json
import random
import textwrap
from collections.abc import Callable
from pathlib import Path

from esgexp.data.sustainableqa import CATEGORIES, CHUNKS, TABLES

FACTOIDS_PER_CHUNK = 11
NON_FACTOIDS_PER_CHUNK = 13
ROWS_PER_TABLE = 4
QAS_PER_TABLE = 4 * ROWS_PER_TABLE + 2  # 18
SPLITS = ("train", "validation", "test")

NAME_PARTS = ("Nord", "Alp", "Vel", "Kar", "Bren", "Sol", "Mar", "Tor", "Lin", "Ost", "Ried", "Cal")
NAME_ENDS = ("ana", "mark", "holm", "wick", "berg", "ora", "vale", "stad")
COMPANY_FORMS = ("AG", "SE", "plc", "ASA", "Oy", "S.A.", "N.V.", "GmbH")
SOURCES = ("solar", "wind", "hydro", "biomass", "geothermal", "biogas")
COMMITTEES = ("Sustainability Committee", "Audit and ESG Committee", "Risk Committee", "Supervisory Board")
STANDARDS = ("GRI 305", "ESRS E1", "ESRS S1", "TCFD", "SASB", "ISSB S2", "CDP")
SEGMENTS = (
    "Nordic",
    "Baltic",
    "Iberian",
    "Alpine",
    "Benelux",
    "Central European",
    "Eastern European",
    "British",
    "North American",
    "Latin American",
    "Asian",
    "African",
    "Middle Eastern",
    "Australian",
)
TOPICS = ("climate change", "water use", "worker safety", "biodiversity", "circular materials", "supplier conduct")
ACTIVITIES = (
    ("Manufacture of cement", "3.7"),
    ("Electricity generation using solar photovoltaic technology", "4.1"),
    ("Electricity generation from wind power", "4.3"),
    ("Construction of new buildings", "7.1"),
    ("Renovation of existing buildings", "7.2"),
    ("Freight rail transport", "6.2"),
    ("Manufacture of hydrogen", "3.10"),
    ("Data processing, hosting and related activities", "8.1"),
)


def company(rng: random.Random) -> str:
    return f"{rng.choice(NAME_PARTS)}{rng.choice(NAME_ENDS)} {rng.choice(COMPANY_FORMS)}"


def number(rng: random.Random, low: int, high: int) -> str:
    return f"{rng.randint(low, high):,}"


# Each fact: (sentence, question, answer, span-group label) about one business segment of a company.
Fact = Callable[[random.Random, str, int], tuple[str, str, str, str]]


def _emissions(rng, unit, year):
    tonnes = number(rng, 1_000, 900_000)
    return (
        f"{unit} reported Scope 1 emissions of {tonnes} tonnes CO2e in {year}.",
        f"What were the Scope 1 emissions of {unit} in {year}?",
        f"{tonnes} tonnes CO2e",
        "Individual",
    )


def _aligned(rng, unit, year):
    share, kpi = f"{rng.randint(1, 99)}%", rng.choice(("turnover", "CapEx", "OpEx"))
    return (
        f"In {year}, {share} of the {kpi} of {unit} was taxonomy-aligned.",
        f"What share of the {year} {kpi} of {unit} was taxonomy-aligned?",
        share,
        "Individual",
    )


def _workforce(rng, unit, year):
    people = number(rng, 50, 90_000)
    return (
        f"{unit} employed {people} people at the end of {year}.",
        f"How many people did {unit} employ at the end of {year}?",
        people,
        "Individual",
    )


def _sources(rng, unit, year):
    picked = rng.sample(SOURCES, 3)
    return (
        f"{unit} buys electricity from {picked[0]}, {picked[1]} and {picked[2]} plants.",
        f"From which kinds of plants does {unit} buy electricity?",
        ", ".join(picked),
        "Electricity Sources",
    )


def _oversight(rng, unit, year):
    body = rng.choice(COMMITTEES)
    return (
        f"Sustainability at {unit} is overseen by the {body}.",
        f"Which body oversees sustainability at {unit}?",
        body,
        "Individual",
    )


def _net_zero(rng, unit, year):
    target = str(rng.randint(year + 5, 2050))
    return (
        f"{unit} has committed to net zero across its value chain by {target}.",
        f"By which year has {unit} committed to net zero across its value chain?",
        target,
        "Individual",
    )


def _waste(rng, unit, year):
    tonnes = f"{number(rng, 10, 20_000)} tonnes"
    return (
        f"Waste sent to landfill by {unit} fell to {tonnes} in {year}.",
        f"How much waste did {unit} send to landfill in {year}?",
        tonnes,
        "Individual",
    )


def _standards(rng, unit, year):
    picked = rng.sample(STANDARDS, 2)
    return (
        f"{unit} reports in line with {picked[0]} and {picked[1]}.",
        f"Which reporting standards does {unit} follow?",
        ", ".join(picked),
        "Reporting Standards",
    )


FACTS: tuple[Fact, ...] = (_emissions, _aligned, _workforce, _sources, _oversight, _net_zero, _waste, _standards)


def span_groups(facts: list[tuple[str, str, str, str]]) -> list[dict]:
    """The spans behind the factoid answers: one group per multi-span answer, the rest as ``Individual``."""
    groups = [{"label": label, "spans": answer.split(", ")} for _, _, answer, label in facts if label != "Individual"]
    single = [answer for _, _, answer, label in facts if label == "Individual"]
    return [*groups, {"label": "Individual", "spans": single}]


def make_chunk(rng: random.Random, index: int) -> dict:
    """One chunk record with its paragraph, spans and QA pairs."""
    name, year = company(rng), rng.randint(2019, 2024)
    category = CATEGORIES[index % len(CATEGORIES)]
    units = [f"the {segment} business of {name}" for segment in rng.sample(SEGMENTS, FACTOIDS_PER_CHUNK)]
    facts = [rng.choice(FACTS)(rng, unit, year) for unit in units]
    sentences = [(sentence[0].upper() + sentence[1:]) for sentence, *_ in facts]
    factoids = [{"question": q, "answer": a, "type": "Factoid", "tag": category} for _, q, a, _ in facts]
    non_factoids = []
    for _ in range(NON_FACTOIDS_PER_CHUNK):
        topic = rng.choice(TOPICS)
        evidence = " ".join(rng.sample(sentences, 2))
        non_factoids.append(
            {
                "question": f"How does {name} describe its approach to {topic} in the {year} report?",
                "answer": f"{name} links its work on {topic} to measurable results. {evidence} "
                f"The report presents these figures as evidence that {topic} is managed at group level.",
                "type": "Descriptive, non-factoid",
                "tag": category,
            }
        )
    return {
        "metadata": {
            "chunk_number": index + 1,
            "page_number": rng.randint(1, 250),
            "titles": [f"{name} Sustainability Report {year}"],
            "subtitles": [rng.choice(TOPICS).capitalize()],
            "paragraph": " ".join(sentences),
            "classification": category,
            "report_name": name,
        },
        "spans": {"groups": span_groups(facts)},
        "qa_pairs_factoid": {"qa_pairs": factoids},
        "qa_pairs_non_factoid": {"qa_pairs": non_factoids},
    }


def make_table(rng: random.Random, index: int) -> dict:
    """One EU Taxonomy KPI table record: rows as a paragraph, four questions per row and two on the totals."""
    name, year, kpi = company(rng), rng.randint(2019, 2024), rng.choice(("turnover", "CapEx", "OpEx"))
    rows = []
    for activity, code in rng.sample(ACTIVITIES, ROWS_PER_TABLE):
        eligible = rng.randint(5, 900)
        rows.append((activity, code, eligible, rng.randint(0, eligible)))
    paragraph = " ".join(f"{a} ({c}): {e} eligible, {al} aligned." for a, c, e, al in rows)
    total_eligible, total_aligned = sum(r[2] for r in rows), sum(r[3] for r in rows)
    paragraph += f" Total: {total_eligible} eligible, {total_aligned} aligned."
    pairs = []
    for activity, code, eligible, aligned in rows:
        what = f"{activity.lower()} ({code}) at {name}"
        pairs += [
            (f"How much taxonomy-eligible {kpi} relates to {what}?", f"EUR {eligible} million"),
            (f"How much taxonomy-aligned {kpi} relates to {what}?", f"EUR {aligned} million"),
            (
                f"How much eligible {kpi} of {what} is not aligned?",
                f"EUR {eligible - aligned} million of the EUR {eligible} million eligible {kpi} is not aligned.",
            ),
            (f"What share of the eligible {kpi} of {what} is aligned?", f"{100 * aligned / eligible:.1f}%"),
        ]
    pairs += [
        (f"What is {name}'s total taxonomy-eligible {kpi} in {year}?", f"EUR {total_eligible} million"),
        (f"What is {name}'s total taxonomy-aligned {kpi} in {year}?", f"EUR {total_aligned} million"),
    ]
    return {
        "metadata": {
            "page_number": rng.randint(1, 250),
            "table_caption": f"Taxonomy-eligible and aligned {kpi} by activity, {year} (EUR million)",
            "paragraph": paragraph,
            "classification": "EU Taxonomy",
            "report_name": name,
        },
        "qa_pairs": [{"question": q, "answer": a} for q, a in pairs],
    }


def write_split(path: Path, chunks: int, tables: int, rng: random.Random) -> None:
    """Write one split file, record by record (pretty-printed, never held whole)."""
    with path.open("w", encoding="utf-8") as handle:
        for key, count, make, last in ((CHUNKS, chunks, make_chunk, False), (TABLES, tables, make_table, True)):
            handle.write(f'{{\n  "{key}": [' if key == CHUNKS else f'  "{key}": [')
            for index in range(count):
                record = json.dumps(make(rng, index), indent=2, ensure_ascii=False)
                handle.write(("\n" if index == 0 else ",\n") + textwrap.indent(record, "    "))
            handle.write(("\n  ]" if count else "]") + ("\n}\n" if last else ",\n"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--chunks", type=int, default=60, help="chunks per split file")
    parser.add_argument("--tables", type=int, default=4, help="tables per split file")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--splits", nargs="+", default=list(SPLITS), choices=SPLITS)
    args = parser.parse_args(argv)
    if args.chunks < 0 or args.tables < 0:
        parser.error("--chunks and --tables must be 0 or more")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for split in args.splits:
        write_split(args.out_dir / f"{split}.json", args.chunks, args.tables, random.Random(f"{args.seed}/{split}"))
        print(args.out_dir / f"{split}.json")


if __name__ == "__main__":
    main()
