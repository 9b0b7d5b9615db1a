"""Jobs over an ingested PDF corpus: ESGBench page recall and RAG with page-level gold."""

from __future__ import annotations

import json

import pytest

from esgexp.config import BUNDLED_DIR
from esgexp.data.chunking import WindowChunker
from esgexp.data.corpus import ingest
from esgexp.data.esgbench import ESGBenchGold
from esgexp.run import run_job
from tests.pdf_factory import pdf_bytes

GOLD = BUNDLED_DIR / "esgbench" / "gold_sample.jsonl"


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
    metrics = run_job(make_cfg("experiment=esgbench_retrieval", "dataset=esgbench_sample", f"retrieval.corpus={esgbench_corpus}"))
    assert metrics["n_queries"] == 13 and metrics["n_missing_reports"] == 0
    # Each evidence page shares the question's key terms and the filler pages share none, except one:
    # the injury-rate evidence says only "LTIFR", so BM25 ranks the kiln page ("rate ... in 2024") first.
    assert metrics["recall@1"] == pytest.approx(12 / 13) and metrics["recall@3"] == 1.0
    rankings = [json.loads(line) for line in (tmp_path / "run" / "rankings.jsonl").read_text().splitlines()]
    first_hit = [set(r["gold_pages"]) <= set(r["retrieved"][0]["pages"]) for r in rankings]
    assert [r["query"] for r, hit in zip(rankings, first_hit) if not hit] == ["What was the employee Lost Time Injury Frequency Rate in 2024?"]
    assert all(len(r["retrieved"][0]["pages"]) <= 2 for r in rankings)


def test_rag_over_the_corpus_cites_pages_and_judges_retrieval_by_gold_page(tiny_cfg, tmp_path, esgbench_corpus):
    metrics = run_job(tiny_cfg("experiment=esgbench", "dataset=esgbench_sample", "strategy=rag", f"strategy.corpus={esgbench_corpus}",
                               "strategy.scope=doc", "strategy.top_k=1", "scoring.max_new_tokens=2"))
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
    from esgexp.errors import UserError

    lines = GOLD.read_text().splitlines()
    moved = json.loads(lines[0]) | {"doc_name": "UNKNOWN_CO_2024"}
    gold = tmp_path / "gold.jsonl"
    gold.write_text("\n".join([json.dumps(moved), *lines[1:]]) + "\n")
    metrics = run_job(make_cfg("experiment=esgbench_retrieval", f"dataset.path={gold}", f"retrieval.corpus={esgbench_corpus}"))
    assert metrics["n_queries"] == 12 and metrics["n_missing_reports"] == 1
    with pytest.raises(UserError, match="UNKNOWN_CO_2024 not in the corpus"):
        run_job(tiny_cfg("experiment=esgbench", f"dataset.path={gold}", "strategy=rag", "strategy.scope=doc",
                         f"strategy.corpus={esgbench_corpus}", f"paths.output_dir={tmp_path}/rag"))
