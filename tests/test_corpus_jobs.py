"""Jobs over an ingested PDF corpus: ESGBench page recall and RAG with page-level gold."""

from __future__ import annotations

import json
import shutil

import pytest
from pdf_factory import pdf_bytes

from esgexp.core.config import BUNDLED_DIR
from esgexp.data.chunking import WindowChunker
from esgexp.data.corpus import ingest
from esgexp.data.esgbench import ESGBenchGold
from esgexp.run import run_job

GOLD = BUNDLED_DIR / "esgbench" / "gold_sample.jsonl"


@pytest.fixture(autouse=True)
def store(tmp_path, empty_db):
    """Each test's jobs log to one MLflow store under ``tmp_path`` (make_cfg's paths.mlruns_dir), its tables made."""
    (tmp_path / "mlruns").mkdir()
    shutil.copy(empty_db, tmp_path / "mlruns" / "mlflow.db")


@pytest.fixture(scope="module")
def esgbench_corpus(tmp_path_factory):
    """One PDF per report of our ESGBench sample: each evidence text on its gold page (0-based), filler elsewhere."""
    root = tmp_path_factory.mktemp("esgbench")
    evidence: dict[str, dict[int, str]] = {}
    for line in GOLD.read_text().splitlines():
        row = json.loads(line)
        for item in row["evidence"]:
            evidence.setdefault(row["doc_name"], {})[item["evidence_page_num"]] = item["evidence_text"]
    pdfs = root / "pdfs"
    pdfs.mkdir()
    filler = "Section {} lists office addresses, telephone numbers and opening hours for visitors."
    for doc, pages in evidence.items():
        # Pages longer than a 1,200-character window, so a chunk covers one page or two.
        content = [[pages.get(i, filler.format(i))] + [filler.format(i)] * 15 for i in range(max(pages) + 2)]
        (pdfs / f"{doc}.pdf").write_bytes(pdf_bytes(content))
    out = root / "corpus"
    ingest(pdfs, out, WindowChunker(), progress=False)
    return out


def test_esgbench_retrieval_finds_each_gold_page_first(make_cfg, tmp_path, esgbench_corpus):
    metrics = run_job(
        make_cfg("experiment=esgbench_retrieval", "dataset=esgbench_sample", f"retrieval.corpus={esgbench_corpus}")
    )
    assert metrics["n_queries"] == 13 and metrics["n_missing_reports"] == 0
    # Each evidence page shares the question's key terms and the filler pages share none, except one:
    # the injury-rate evidence says only "LTIFR", so BM25 ranks the kiln page ("rate ... in 2024") first.
    assert metrics["recall@1"] == pytest.approx(12 / 13) and metrics["recall@3"] == 1.0
    rankings = [json.loads(line) for line in (tmp_path / "run" / "rankings.jsonl").read_text().splitlines()]
    first_hit = [set(r["gold_pages"]) <= set(r["retrieved"][0]["pages"]) for r in rankings]
    assert [r["query"] for r, hit in zip(rankings, first_hit) if not hit] == [
        "What was the employee Lost Time Injury Frequency Rate in 2024?"
    ]
    assert all(len(r["retrieved"][0]["pages"]) <= 2 for r in rankings)


def test_rag_over_the_corpus_cites_pages_and_judges_retrieval_by_gold_page(tiny_cfg, tmp_path, esgbench_corpus):
    metrics = run_job(
        tiny_cfg(
            "experiment=esgbench",
            "dataset=esgbench_sample",
            "strategy=rag",
            f"strategy.corpus={esgbench_corpus}",
            "strategy.scope=doc",
            "strategy.top_k=1",
            "scoring.max_new_tokens=2",
        )
    )
    records = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert metrics["rag/n_with_gold"] == 13 and metrics["rag/gold_retrieved_rate"] == pytest.approx(12 / 13)
    # Citations are 1-based: a retrieved gold page with ESGBench index i is cited as p.(i+1).
    items = {item.id: item for item in ESGBenchGold("g", str(GOLD)).load().items}
    for record in records:
        if record["retrieval"]["gold_retrieved"]:
            span = [int(p) for p in record["retrieval"]["passages"][0]["pages"].split("-")]
            assert span[0] <= items[record["id"]].meta["evidence_pages"][0] + 1 <= span[-1]
    missed = [r for r in records if not r["retrieval"]["gold_retrieved"]]
    assert len(missed) == 1 and metrics["rag/retrieval_miss_rate"] == pytest.approx((not missed[0]["correct"]) / 13)


def test_a_report_missing_from_the_corpus_is_reported(make_cfg, tiny_cfg, tmp_path, esgbench_corpus):
    lines = GOLD.read_text().splitlines()
    moved = json.loads(lines[0]) | {"doc_name": "UNKNOWN_CO_2024"}
    gold = tmp_path / "gold.jsonl"
    gold.write_text("\n".join([json.dumps(moved), *lines[1:]]) + "\n")
    metrics = run_job(
        make_cfg("experiment=esgbench_retrieval", f"dataset.path={gold}", f"retrieval.corpus={esgbench_corpus}")
    )
    assert metrics["n_queries"] == 12 and metrics["n_missing_reports"] == 1
    # RAG goes on: that question gets no passage (and says so), the others are retrieved as usual.
    rag = run_job(
        tiny_cfg(
            "experiment=esgbench",
            f"dataset.path={gold}",
            "strategy=rag",
            "strategy.scope=doc",
            f"strategy.corpus={esgbench_corpus}",
            "scoring.max_new_tokens=2",
            f"paths.output_dir={tmp_path}/rag",
        )
    )
    assert rag["rag/n_missing_report"] == 1 and rag["rag/n_with_gold"] == 12 and rag["n_items"] == 13
    records = [json.loads(line) for line in (tmp_path / "rag" / "predictions.jsonl").read_text().splitlines()]
    (lost,) = [r for r in records if r["retrieval"]["passages"] == []]
    assert lost["retrieval"]["missing_report"] == "UNKNOWN_CO_2024"


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


@pytest.fixture(scope="module")
def base_annotations(tmp_path_factory):
    """Two fictional reports as PDFs, ingested, and expert annotations pointing at text on known pages."""
    import pandas as pd

    root = tmp_path_factory.mktemp("climbase")
    pdfs = root / "pdfs"
    pdfs.mkdir()
    filler = "This page lists the addresses of our regional offices and their opening hours."
    (pdfs / "Fabrikam 2023 Report.pdf").write_bytes(
        pdf_bytes(
            [
                [filler] * 12,
                ["Our flood risk study covers all twelve plants near rivers."] + [filler] * 12,
                ["Scope 3 emissions from purchased goods fell by nine percent."] + [filler] * 12,
            ]
        )
    )
    (pdfs / "Contoso 2023 Report.pdf").write_bytes(
        pdf_bytes(
            [
                ["Heat stress assessments were run for every warehouse site."] + [filler] * 12,
                [filler] * 12,
            ]
        )
    )
    corpus = root / "corpus"
    ingest(pdfs, corpus, WindowChunker(), progress=False)
    rows = [
        [
            "0",
            "Fabrikam 2023 Report.pdf",
            "Does the company assess physical climate risks?",
            "",
            "Our flood risk study covers all twelve plants near rivers.",
            "2",
            "text",
            "Yes",
            "3",
            "",
            "",
            "1",
        ],
        [
            "1",
            "Fabrikam 2023 Report.pdf",
            "Does the company report Scope 3 emissions?",
            "",
            "Scope 3 emissions from purchased goods fell by nine percent.",
            "3",
            "text",
            "Yes",
            "2",
            "",
            "",
            "1",
        ],
        [
            "2",
            "Contoso 2023 Report.pdf",
            "Does the company assess physical climate risks?",
            "",
            "Heat stress assessments were run for every warehouse site.",
            "1",
            "text",
            "Yes",
            "3",
            "",
            "",
            "1",
        ],
        [
            "3",
            "Missing 2023 Report.pdf",
            "Does the company assess physical climate risks?",
            "",
            "Anything.",
            "1",
            "text",
            "Yes",
            "3",
            "",
            "",
            "1",
        ],
    ]
    frame = pd.DataFrame(rows, columns=BASE_HEADER)
    frame.to_csv(root / "base.csv", index=False)
    frame.to_excel(root / "base.xlsx", index=False)
    return root, corpus


@pytest.mark.parametrize("suffix", ["csv", "xlsx"])
def test_climretrieve_base_grades_corpus_passages_from_expert_sources(
    make_cfg, tmp_path, base_annotations, suffix, caplog
):
    root, corpus = base_annotations
    common = (
        "experiment=climretrieve_retrieval",
        "dataset=climretrieve_base",
        f"dataset.path={root}/base.{suffix}",
        f"dataset.corpus={corpus}",
    )
    with caplog.at_level("INFO"):
        oracle = run_job(make_cfg(*common, "retriever=oracle", f"paths.output_dir={tmp_path}/oracle"))
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" or "skipped" in r.getMessage()]
    assert said[0].startswith("1 question(s) skipped: their report is not in the corpus (e.g. ")
    assert f"1 skipped row(s) or item(s), each with why: {tmp_path / 'oracle' / 'skipped_rows.txt'}" in said
    bm25 = run_job(make_cfg(*common, "retriever=bm25", "retrieval.ks=[1]", f"paths.output_dir={tmp_path}/bm25"))
    # Three queries (the fourth names a report that is not in the corpus: skipped and listed).
    assert oracle["n_queries"] == 3 and oracle["n_skipped_rows"] == 1 and oracle["mrr"] == 1.0
    assert "'Missing 2023 Report.pdf' is not in the corpus" in (tmp_path / "oracle" / "skipped_rows.txt").read_text()
    # Each annotated sentence shares its question's words; the filler pages share none.
    assert bm25["recall@1"] == 1.0


def test_oracle_and_query_rules_for_esgbench_page_retrieval(make_cfg, tmp_path, esgbench_corpus):
    from esgexp.errors import UserError

    oracle = run_job(
        make_cfg(
            "experiment=esgbench_retrieval",
            "dataset=esgbench_sample",
            f"retrieval.corpus={esgbench_corpus}",
            "retriever=oracle",
        )
    )
    assert oracle["recall@1"] == 1.0
    with pytest.raises(UserError, match="ESGBench retrieval searches with the question"):
        run_job(
            make_cfg(
                "experiment=esgbench_retrieval",
                "dataset=esgbench_sample",
                f"retrieval.corpus={esgbench_corpus}",
                "query=concepts",
                f"paths.output_dir={tmp_path}/q",
            )
        )
