import csv
from collections import Counter

import pytest
from hydra.utils import instantiate

from esgexp.core.config import BUNDLED_DIR
from esgexp.core.records import Passage, RetrievalQuery
from esgexp.data.climretrieve import (
    ClimRetrieveReportLevel,
    SourceAnnotation,
    SourceMatcher,
    annotations_to_queries,
    clean_concept,
    load_base_annotations,
    query_texts,
)
from esgexp.errors import UserError

BUNDLED = BUNDLED_DIR / "climretrieve"
MICROSOFT = "2022 Microsoft Environmental Sustainability Report"
REPORT_HEADER = [
    "",
    "paragraph",
    "report",
    "question",
    "relevant_text",
    "relevance",
    "relevant_text_sim",
    "sim_text_relevance",
]
BASE_HEADER = [
    "",
    "Document",
    "Question",
    "Context",
    "Relevant",
    "Page",
    "Source From",
    "Answer",
    "Source Relevance Score",
    "Unsure Flag",
    "Addressed Directly",
    "Core 16 Question",
]


def write_csv(path, header, rows):
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def report_row(paragraph, question, relevance, report="Acme Report 2022.pdf"):
    return ["0", paragraph, report, question, "", relevance, "0.5", "0"]


def base_row(relevant="Some source text.", page="4", score="2", document="Acme Report 2022.pdf", question="Q?"):
    return ["0", document, question, "", relevant, page, "text", "Yes.", score, "", "directly", "1"]


def grades(queries):
    return Counter(grade for query in queries for grade in query.relevance.values())


# --- report level: the real sample (hand-counted from its 40 rows) ---


def test_shared_report_level_sample_counts(shared_samples):
    data = ClimRetrieveReportLevel(
        "climretrieve", str(shared_samples / "climretrieve" / "report_level_sample.csv")
    ).load()
    assert not data.skipped
    # 40 rows of one report: 32 distinct paragraphs (8 appear for two or three questions), 6 questions.
    assert len(data.passages) == 32 and len(data.queries) == 6
    assert [p.id for p in data.passages] == [f"{MICROSOFT}#p{n}" for n in range(1, 33)]
    assert {p.doc_id for p in data.passages} == {MICROSOFT}
    assert {(p.page_start, p.page_end) for p in data.passages} == {(0, 0)}  # page unknown
    assert data.n_candidates == {f"{MICROSOFT}#q{n}": 32 for n in range(1, 7)}
    assert all(q.doc_scope == MICROSOFT and len(q.relevance) == 32 for q in data.queries)
    # rows: 20 graded 0, 16 graded 3, 4 graded 2; the other 6 x 32 - 40 = 152 pairs count as 0
    assert grades(data.queries) == {0: 20 + 152, 3: 16, 2: 4}


def test_shared_report_level_query_relevance(shared_samples):
    data = ClimRetrieveReportLevel(
        "climretrieve", str(shared_samples / "climretrieve" / "report_level_sample.csv")
    ).load()
    query = data.queries[0]
    assert query.id == f"{MICROSOFT}#q1"
    assert query.text == "Does the company identify any impacts of its business activities on the environment?"
    assert {k: query.meta[k] for k in ("report", "question")} == {"report": f"{MICROSOFT}.pdf", "question": query.text}
    assert all(grade >= 1 and text for grade, text in query.meta["annotations"])  # inf_3 / inf_all examples
    # rows 1, 2, 6 and 27 of the file (paragraphs 1, 2, 4 and 22 in order of appearance)
    assert {pid: g for pid, g in query.relevance.items() if g} == {
        f"{MICROSOFT}#p1": 2,
        f"{MICROSOFT}#p2": 2,
        f"{MICROSOFT}#p4": 3,
        f"{MICROSOFT}#p22": 3,
    }
    passages = {p.id: p.text for p in data.passages}
    assert passages[f"{MICROSOFT}#p1"].startswith("We made ambitious commitments in 2020")
    assert passages[f"{MICROSOFT}#p22"].startswith("46 | | | Protecting more land than we use")


# --- report level: our bundled sample ---


def test_bundled_report_level_sample():
    data = ClimRetrieveReportLevel("climretrieve", str(BUNDLED / "report_level_sample.csv")).load()
    assert not data.skipped
    assert len(data.passages) == 24 and len(data.queries) == 6
    assert Counter(p.doc_id for p in data.passages) == {
        "Northwind Foods 2023 Sustainability Report": 12,
        "Halcyon Logistics Climate Report 2022": 12,
    }
    assert set(data.n_candidates.values()) == {12}
    assert grades(data.queries) == {0: 56, 3: 6, 2: 6, 1: 4}
    water = data.queries[0]
    assert water.id == "Northwind Foods 2023 Sustainability Report#q1"
    assert {pid.split("#")[1]: g for pid, g in water.relevance.items() if g} == {"p3": 3, "p4": 2, "p11": 1}


def test_limit_takes_seeded_queries_and_their_reports():
    path = str(BUNDLED / "report_level_sample.csv")
    first = ClimRetrieveReportLevel("x", path, limit=2, seed=42).load()
    again = ClimRetrieveReportLevel("x", path, limit=2, seed=42).load()
    assert [q.id for q in first.queries] == [q.id for q in again.queries]
    assert [q.id for q in first.queries] == [
        "Northwind Foods 2023 Sustainability Report#q2",
        "Halcyon Logistics Climate Report 2022#q1",
    ]
    assert len(first.passages) == 24 and set(first.n_candidates) == {q.id for q in first.queries}
    one = ClimRetrieveReportLevel("x", path, limit=1, seed=42).load()
    assert {p.doc_id for p in one.passages} == {one.queries[0].doc_scope} and len(one.passages) == 12


def test_report_level_bad_rows_are_listed_and_skipped(tmp_path):
    rows = [
        report_row("Para A.", "Q1?", "3"),
        report_row("Para B.", "Q1?", ""),
        report_row("Para B.", "Q1?", "5"),
        report_row("Para C.", "Q1?", "high"),
        report_row("", "Q1?", "1"),
        report_row("Para A.", "Q2?", "2.0"),
        report_row("  Para A.  ", "Q2?", "1"),  # same paragraph (stripped), same question: conflict, keep 2
        report_row("Para B.", "Q2?", "0"),
    ]
    path = write_csv(tmp_path / "rl.csv", REPORT_HEADER, rows)
    data = ClimRetrieveReportLevel("x", str(path)).load()
    assert data.skipped == [
        f"{path} line 3: field 'relevance': empty; row skipped",
        f"{path} line 4: field 'relevance': '5' is not a grade 0-3; row skipped",
        f"{path} line 5: field 'relevance': 'high' is not a number; row skipped",
        f"{path} line 6: field 'paragraph': empty; row skipped",
        f"{path} line 8: field 'relevance': grade 1 conflicts with grade 2 in line 7 for the same paragraph "
        "and question; kept 2",
    ]
    assert [p.text for p in data.passages] == ["Para A.", "Para B."]
    q1, q2 = data.queries
    assert q1.relevance == {"Acme Report 2022#p1": 3, "Acme Report 2022#p2": 0}  # Para B's Q1 rows were bad
    assert q2.relevance == {"Acme Report 2022#p1": 2, "Acme Report 2022#p2": 0}


def test_repeated_paragraphs_merged_or_one_passage_per_row(tmp_path):
    rows = [
        report_row("Header.", "Q1?", "0"),
        report_row("Para A.", "Q1?", "2"),
        report_row("Header.", "Q1?", "3"),  # the same text again in the same question
        report_row("Header.", "Q2?", "1"),
        report_row("Para A.", "Q2?", "0"),
        report_row("Header.", "Q2?", "0"),
    ]
    path = write_csv(tmp_path / "rl.csv", REPORT_HEADER, rows)
    merged = ClimRetrieveReportLevel("x", str(path)).load()
    assert [p.text for p in merged.passages] == ["Header.", "Para A."]
    assert [q.relevance for q in merged.queries] == [
        {"Acme Report 2022#p1": 3, "Acme Report 2022#p2": 2},
        {"Acme Report 2022#p1": 1, "Acme Report 2022#p2": 0},
    ]
    assert len(merged.skipped) == 2  # each repeat's grade conflicts with its first row's
    rows_kept = ClimRetrieveReportLevel("x", str(path), merge_duplicates=False).load()
    assert [p.text for p in rows_kept.passages] == ["Header.", "Para A.", "Header."]
    assert [q.relevance for q in rows_kept.queries] == [
        {"Acme Report 2022#p1": 0, "Acme Report 2022#p2": 2, "Acme Report 2022#p3": 3},
        {"Acme Report 2022#p1": 1, "Acme Report 2022#p2": 0, "Acme Report 2022#p3": 0},
    ]
    assert rows_kept.skipped == [] and set(rows_kept.n_candidates.values()) == {3}


def test_report_level_missing_file_or_column(tmp_path):
    with pytest.raises(UserError, match=r"dataset.path=.*nope.csv: no such file or folder"):
        ClimRetrieveReportLevel("x", str(tmp_path / "nope.csv")).load()
    path = write_csv(tmp_path / "rl.csv", ["", "paragraph", "report", "question"], [["0", "P.", "R.pdf", "Q?"]])
    with pytest.raises(UserError, match=r"rl\.csv: missing column\(s\) relevance; found paragraph, report, question"):
        ClimRetrieveReportLevel("x", str(path)).load()


# --- base annotations ---


def test_shared_base_sample_annotations(shared_samples):
    path = shared_samples / "climretrieve" / "ClimRetrieve_base_sample.csv"
    loaded = load_base_annotations(path)
    # 49 rows: 6 without source text, 2 more without a score
    assert len(loaded.items) == 41
    assert loaded.skipped == [
        f"{path} line {n}: field '{field}': empty; row skipped"  # the file line each record starts on
        for n, field in [
            (20, "Source Relevance Score"),
            (31, "Relevant"),
            (38, "Relevant"),
            (82, "Relevant"),
            (91, "Source Relevance Score"),
            (92, "Relevant"),
            (96, "Relevant"),
            (110, "Relevant"),
        ]
    ]
    items = loaded.items
    assert Counter(a.relevance for a in items) == {3: 16, 2: 16, 1: 9}
    assert Counter(a.source for a in items) == {"text": 34, "table": 6, "graph": 1}
    assert sum(a.core for a in items) == 38
    assert [a.where for a in items if a.page is None] == [f"{path} line 2"]  # kept: matched by text only
    lloyds = items[1]
    assert (lloyds.document, lloyds.page, lloyds.relevance, lloyds.source, lloyds.core) == (
        "2023 Lloyds sustainability report.pdf",
        99,
        3,
        "table",
        True,
    )
    assert lloyds.relevant.startswith("Short term (2024-5): \nFocus on achieving our legacy commitment")
    assert min(a.page for a in items if a.page) == 4  # no page 0 (the smallest, 2, is in skipped line 20): 1-based


def test_base_bad_rows_and_missing_column(tmp_path):
    rows = [
        base_row(),
        base_row(page="p. 12"),
        base_row(score=""),
        base_row(score="4"),
        base_row(page="12.0"),
        base_row(relevant="  "),
        base_row(page=""),
    ]
    path = write_csv(tmp_path / "base.csv", BASE_HEADER, rows)
    loaded = load_base_annotations(path)
    assert loaded.skipped == [
        f"{path} line 3: field 'Page': 'p. 12' is not a number; row skipped",
        f"{path} line 4: field 'Source Relevance Score': empty; row skipped",
        f"{path} line 5: field 'Source Relevance Score': '4' is not a score 1-3; row skipped",
        f"{path} line 7: field 'Relevant': empty; row skipped",
    ]
    assert [a.page for a in loaded.items] == [4, 12, None]
    header = [name for name in BASE_HEADER if name != "Page"]
    path = write_csv(tmp_path / "nopage.csv", header, [[c for i, c in enumerate(base_row()) if i != 5]])
    with pytest.raises(UserError, match=r"nopage\.csv: missing column\(s\) Page"):
        load_base_annotations(path)


# --- annotations -> graded passages of ingested PDFs ---


def annotation(relevant, page, relevance=2, document="Acme Report 2022.pdf", question="Does Acme cut water use?"):
    return SourceAnnotation(document, question, relevant, page, relevance, "text", True, f"base.csv, row {page}")


PASSAGES = [
    Passage(
        "acme#1", "Acme Report 2022", "Intro. We will CUT water use\nby 30 %  by 2030 at ‘all’ plants. More.", 3, 3
    ),
    Passage("acme#2", "Acme Report 2022", "Plants reuse cooling water; water use down 12 percent.", 5, 6),
    Passage("acme#3", "Acme Report 2022", "Plants reuse cooling water; water use down 12 percent.", 7, 7),
    Passage("acme#4", "Acme Report 2022", "Plants reuse nothing.", 5, 5),
    Passage("other#1", "Other Co", "We will cut water use by 30 % by 2030 at 'all' plants.", 3, 3),
]


def test_matching_rule_on_hand_made_passages():
    match = SourceMatcher(0.5)
    contained = annotation("We will cut water use by 30 % by 2030 at 'all' plants.", page=40)
    # containment after lower-casing, collapsing whitespace and straightening quotes; page not needed
    assert [match(contained, p) for p in PASSAGES[:4]] == [True, False, False, False]
    # 6 distinct words: cooling, water, use, fell, 12, percent; passages 2-3 hold 5 of them, passage 4 none
    overlap = annotation("Cooling water use fell 12 percent.", page=6)
    assert [match(overlap, p) for p in PASSAGES[:4]] == [False, True, False, False]  # only the page-6 span
    assert not match(annotation("Cooling water use fell 12 percent.", page=None), PASSAGES[1])
    assert not SourceMatcher(0.9)(overlap, PASSAGES[1])  # 5/6 < 0.9
    with pytest.raises(UserError, match=r"min_overlap must be a fraction in \(0, 1\], got 0"):
        SourceMatcher(0)


def test_annotations_to_queries_grades_skips_and_reports():
    annotations = [
        annotation("We will cut water use by 30 % by 2030 at 'all' plants.", page=3, relevance=3),
        annotation("Cooling water use fell 12 percent.", page=5, relevance=1),
        annotation("Cooling water is reused at plants.", page=5, relevance=2),  # 3 of 6 words in acme#2: keeps 2
        annotation("Nothing like this anywhere.", page=3),
        annotation("Text.", page=1, document="Missing Co Report.pdf"),
        annotation("Text.", page=2, document="Missing Co Report.pdf"),
        annotation("Nothing like this anywhere.", page=3, question="Another question?"),
        annotation(
            "Plants reuse nothing.", page=5, relevance=1, question="  does ACME cut water use? "
        ),  # same question
    ]
    data = annotations_to_queries(annotations, PASSAGES, min_overlap=0.5)
    assert [q.id for q in data.queries] == ["Acme Report 2022#q1"]
    query = data.queries[0]
    assert query.relevance == {"acme#1": 3, "acme#2": 2, "acme#4": 1}
    assert (query.doc_scope, query.text) == ("Acme Report 2022", "Does Acme cut water use?")
    annotations = query.meta.pop("annotations")
    assert query.meta == {"document": "Acme Report 2022.pdf", "core": True, "sources": 5}
    assert len(annotations) <= 5 and all(grade >= 1 for grade, _ in annotations)
    assert data.n_candidates == {"Acme Report 2022#q1": 4}
    assert data.skipped == [  # by kind
        "base.csv, row 3: field 'Relevant': no passage of 'Acme Report 2022' holds the annotated text; annotation unused",
        "base.csv, row 3: field 'Relevant': no passage of 'Acme Report 2022' holds the annotated text; annotation unused",
        "base.csv, row 1: document 'Missing Co Report.pdf' is not in the corpus (2 docs); "
        "question 'Does Acme cut water use?' skipped (2 annotation row(s))",
        "base.csv, row 3: question 'Another question?' of 'Acme Report 2022.pdf' has no matching passage; query skipped",
    ]


def test_questions_of_reports_not_in_the_corpus_are_one_warning_with_a_count(caplog):
    """A corpus holding some of the reports: one line for all the questions whose report is absent."""
    annotations = [
        annotation("Text.", page=1, document=f"Missing {n} Report.pdf", question=f"Question {n}?") for n in range(30)
    ]
    annotations.append(annotation("We will cut water use by 30 % by 2030 at 'all' plants.", page=3, relevance=3))
    with caplog.at_level("WARNING", logger="esgexp.data.climretrieve"):
        data = annotations_to_queries(annotations, PASSAGES, min_overlap=0.5)
    assert len(data.queries) == 1 and len(data.skipped) == 30
    (line,) = [record.getMessage() for record in caplog.records]
    assert line.startswith("30 question(s) skipped: their report is not in the corpus (e.g. base.csv, row 1: ")
    assert line.endswith("each is listed in the run folder's skipped_rows.txt")


# --- query formulations ---

RISK_QUESTION = "Does the company have a specific process in place to identify risks arising from climate change?"


def test_shared_core_questions_give_all_three_query_texts(shared_samples):
    table = shared_samples / "climretrieve" / "Core_Questions_with_Explanations.csv"
    queries = [RetrievalQuery("r#q1", RISK_QUESTION, {})]
    assert query_texts(queries, "question") == {"r#q1": RISK_QUESTION}
    # "Refined Definition" (it adds "or if the process is well-known and specified"), whitespace collapsed
    assert query_texts(queries, "definition", table) == {
        "r#q1": RISK_QUESTION + "\n"
        "Risks arising from climate change are defined as potential hazards influenced by climate change that may "
        'have a negative impact on the company. Answer "Yes" only if a specific process is described or if the '
        "process is well-known and specified."
    }
    assert query_texts(queries, "concepts", table) == {
        "r#q1": RISK_QUESTION + "\n"
        "Company Process: Series of steps or actions followed by a company to achieve a particular goal or outcome.\n"
        "Climate Change Risk: Risks faced by a company as a result of climate change. These can be physical (e.g. "
        "rising sea levels, extreme weather events like floods and droughts) or transition risks (risks arising "
        "from the transition to a low-carbon economy)."
    }


def test_shared_core_table_covers_the_report_level_questions(shared_samples):
    folder = shared_samples / "climretrieve"
    queries = ClimRetrieveReportLevel("x", str(folder / "report_level_sample.csv")).load().queries
    texts = query_texts(queries, "concepts", folder / "Core_Questions_with_Explanations.csv")
    assert len(texts) == 6
    assert texts[f"{MICROSOFT}#q5"].splitlines()[:2] == [
        "Does the company have a strategy on waste management?",
        "Waste Minimization: Implementing measures to reduce the generation of waste at the source, such as "
        "optimizing production processes, redesigning products to minimize packaging, and promoting sustainable "
        "consumption habits among consumers.",
    ]


def test_bundled_core_questions_and_definition_fallback():
    queries = ClimRetrieveReportLevel("x", str(BUNDLED / "report_level_sample.csv")).load().queries
    table = BUNDLED / "core_questions_sample.csv"
    definitions = query_texts(queries, "definition", table)
    concepts = query_texts(queries, "concepts", table)
    assert len(definitions) == len(concepts) == 6
    risk = "Northwind Foods 2023 Sustainability Report#q2"
    # this row has no Refined Definition: the Definition is used
    assert definitions[risk] == (
        "Does the company assess physical climate risks to its own sites?\nPhysical climate risks are hazards such "
        "as floods, heat, storms or drought that can damage or disrupt the company's own facilities."
    )
    assert concepts[risk].splitlines()[1:] == [
        "Physical Risk: Damage or disruption caused by acute events (floods, storms, heatwaves) or chronic shifts "
        "(rising temperatures, sea level, water scarcity).",
        "Site Assessment: A screening of named facilities against climate hazards, often under one or more warming "
        "scenarios.",
        "Adaptation Measure: A change to a site or its operations that lowers its exposure or vulnerability.",
    ]


def test_concept_markup_variants_are_cleaned():
    assert (
        clean_concept("[[C1]] ||Co|| 1. **Definitions**: Explicit statements.") == "Definitions: Explicit statements."
    )
    assert clean_concept("[[C2]]  | | La | | 2. ** Shared Risk**: Joint work.") == "Shared Risk: Joint work."
    assert clean_concept("[[C2]] | | Co| | 5.  **Waste**:  Handling.") == "Waste: Handling."
    assert clean_concept("[[C3]] ||La|| 13. **Networking and Forums:** Forums.") == "Networking and Forums: Forums."
    assert (
        clean_concept("[[C2]] ||La|| 14. Continuous Monitoring: Reassessment.")
        == "Continuous Monitoring: Reassessment."
    )
    assert clean_concept("Cost of Landfill: Fees.") == "Cost of Landfill: Fees."  # no markup: nothing eaten


def test_query_text_errors(tmp_path):
    table = BUNDLED / "core_questions_sample.csv"
    queries = [
        RetrievalQuery("a#q1", "Does the company have a strategy on waste management?", {}),
        RetrievalQuery("a#q2", "What are Scope 1 emissions?", {}),
    ]
    with pytest.raises(
        UserError,
        match=r"2 question\(s\) not in the core-questions table, which query mode "
        r"'definition' needs: 'Does the company .*'; 'What are Scope 1 emissions\?'",
    ):
        query_texts(queries, "definition", table)
    with pytest.raises(UserError, match="query mode 'explanation' is not one of question, definition, concepts"):
        query_texts(queries, "explanation", table)
    with pytest.raises(UserError, match="query mode 'concepts' needs the core-questions table"):
        query_texts(queries, "concepts")
    with pytest.raises(UserError, match=r"query.core_questions=.*nope.csv: no such file or folder"):
        query_texts(queries, "concepts", table.with_name("nope.csv"))
    blank = write_csv(
        tmp_path / "core.csv",
        ["question", "Definition", "Refined Definition", "Information Retrieval Background"],
        [[queries[1].text, " ", "", "x"]],
    )
    assert query_texts(queries[1:], "concepts", blank) == {"a#q2": "What are Scope 1 emissions?\nx"}
    with pytest.raises(
        UserError,
        match=r"core\.csv line 2: 'Refined Definition' and 'Definition' empty for "
        r"'What are Scope 1 emissions\?'; query mode 'definition' needs it",
    ):
        query_texts(queries[1:], "definition", blank)


# --- configs ---


@pytest.mark.parametrize("mode", ["question", "definition", "concepts"])
def test_configs_compose_and_build_the_bundled_sample(make_cfg, mode):
    cfg = make_cfg(
        "dataset=climretrieve",
        f"query={mode}",
        "dataset.limit=3",
        "dataset.path=${bundled:climretrieve/report_level_sample.csv}",
        "query.core_questions=${bundled:climretrieve/core_questions_sample.csv}",
    )
    assert cfg.query.mode == mode and cfg.dataset.seed == 42
    assert make_cfg("dataset=climretrieve").dataset.path.endswith("/data/climretrieve/ClimRetrieve_ReportLevel_V1.csv")
    assert make_cfg("query=concepts").query.core_questions.endswith(
        "/data/climretrieve/Core_Questions_with_Explanations.xlsx"
    )
    data = instantiate(cfg.dataset).load()
    assert len(data.queries) == 3
    texts = query_texts(data.queries, cfg.query.mode, cfg.query.core_questions)
    assert all(text.startswith(query.text) for query, text in zip(data.queries, texts.values()))
