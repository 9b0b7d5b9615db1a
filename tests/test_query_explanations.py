"""ClimRetrieve's explanation queries (generic, inf_3, inf_all) and SustainableQA as a retrieval task."""

from __future__ import annotations

import json

import pytest
from conftest import compose_config
from omegaconf import OmegaConf

from esgexp.core.config import BUNDLED_DIR
from esgexp.core.records import RetrievalQuery
from esgexp.data.climretrieve import ClimRetrieveReportLevel
from esgexp.retrieval.explain import other_reports_examples, prompt_for
from esgexp.run import run_job

CLIM = ("experiment=climretrieve_retrieval", "dataset=climretrieve_sample")
SQA = ("experiment=sustainableqa_retrieval", "dataset.path=${bundled:sustainableqa}")


def query_node(name: str, *overrides: str):
    return compose_config(BUNDLED_DIR, f"query={name}", *overrides).query


def annotated(doc: str, question: str, *annotations: tuple[int, str]) -> RetrievalQuery:
    return RetrievalQuery(f"{doc}#q", question, {}, doc, {"annotations": list(annotations)})


QUESTION = "Does the company disclose a water target?"
QUERIES = [
    annotated("a", QUESTION, (3, "a-high"), (1, "a-loose")),
    annotated("b", QUESTION, (2, "b-relevant")),
    annotated("c", QUESTION, (2, "c-relevant"), (3, "c-high")),
    annotated("d", QUESTION, (2, "d-relevant")),
    annotated("e", QUESTION, (1, "e-loose")),
    annotated("a", "Another question?", (3, "other-question")),
]


def test_inf_all_takes_every_other_report_and_never_the_searched_one():
    node = query_node("inf_all")
    examples = other_reports_examples(node, QUERIES[0], QUERIES, seed=0)
    assert examples == ["b-relevant", "c-relevant", "c-high", "d-relevant"]  # grade >= 2, reports b-d, not a
    assert all(not text.startswith("a-") for text in examples)
    assert other_reports_examples(node, QUERIES[1], QUERIES, seed=0) == ["a-high", "c-relevant", "c-high", "d-relevant"]


def test_inf_3_draws_three_other_reports_with_the_seed():
    node = query_node("inf_3", "query.examples=2")
    drawn = {tuple(other_reports_examples(node, QUERIES[3], QUERIES, seed=s)) for s in range(20)}
    assert all(len({text[0] for text in texts}) == 2 and not any(t.startswith("d-") for t in texts) for texts in drawn)
    assert len(drawn) > 1  # the seed changes which reports
    assert other_reports_examples(node, QUERIES[3], QUERIES, seed=7) == other_reports_examples(
        node, QUERIES[3], QUERIES, seed=7
    )


def test_the_papers_prompts_fill_question_length_examples_and_start():
    generic, informed = prompt_for(query_node("generic"), QUERIES[0], QUERIES, 0)
    assert not informed and "create a short 60 word explanation" in generic
    assert "The <QUESTION> is:\n" + QUESTION in generic
    assert generic.rstrip().endswith(
        "Start the answer with 'We search for details on'. Don't mention the question itself in the text.\nYour answer:"
    )
    with_question, _ = prompt_for(
        query_node("generic", "query.with_question=true", "query.words=150"), QUERIES[0], [], 0
    )
    assert f"Start the answer with 'The question \"{QUESTION}\" is asking for details on...'." in with_question
    assert "short 150 word" in with_question
    inf_all, informed = prompt_for(query_node("inf_all"), QUERIES[0], QUERIES, 0)
    assert informed and "Passage 0: b-relevant\nPassage 1: c-relevant" in inf_all and "a-high" not in inf_all
    inf_3, _ = prompt_for(query_node("inf_3"), QUERIES[0], QUERIES, 0)
    assert "Example 0: " in inf_3 and "some reports" in inf_3
    # no other report annotates the question: the generic prompt
    lonely, informed = prompt_for(query_node("inf_3"), QUERIES[5], QUERIES, 0)
    assert not informed and lonely == prompt_for(query_node("generic"), QUERIES[5], QUERIES, 0)[0]


def test_report_level_rows_carry_their_annotated_texts():
    sample = ClimRetrieveReportLevel("s", str(BUNDLED_DIR / "climretrieve" / "report_level_sample.csv")).load()
    query = next(q for q in sample.queries if q.meta["annotations"])
    grades = {grade for grade, _ in query.meta["annotations"]}
    assert grades <= {1, 2, 3} and all(text for _, text in query.meta["annotations"])


def test_an_informed_query_job_leaves_its_report_out_and_reruns_from_the_cache(tiny_cfg, tmp_path):
    import mlflow

    common = (*CLIM, "query=inf_all", "query.max_new_tokens=4")
    first = run_job(tiny_cfg(*common, f"paths.output_dir={tmp_path}/a"))
    again = run_job(tiny_cfg(*common, "retriever=dense", f"paths.output_dir={tmp_path}/b"))
    # our sample: 2 reports x 3 questions; each question is annotated in the other report, so 6 distinct prompts
    assert (first["n_requests"], first["n_cached"], first["query/n_uninformed"]) == (6, 0, 0)
    assert (again["n_requests"], again["n_cached"]) == (0, 6)
    config = OmegaConf.load(tmp_path / "a" / "config.yaml")
    assert config.query.name == "inf_all"
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    tags = mlflow.search_runs(search_all_experiments=True, output_format="list")[-1].data.tags
    assert tags["query"] == "inf_all" and "left out" in tags["query_examples"]


def test_sustainableqa_retrieval_searches_each_questions_passage(make_cfg, tmp_path):
    oracle = run_job(make_cfg(*SQA, "retriever=oracle", f"paths.output_dir={tmp_path}/o"))
    assert oracle["mrr"] == 1.0 and oracle["recall@1"] == 1.0 and oracle["factoid/ndcg@5"] == 1.0
    bm25 = run_job(make_cfg(*SQA, "retriever=bm25", f"paths.output_dir={tmp_path}/b"))
    rankings = [json.loads(line) for line in (tmp_path / "b" / "rankings.jsonl").read_text().splitlines()]
    n_passages = len({hit["id"] for r in rankings for hit in r["retrieved"]})
    assert bm25["n_queries"] == len(rankings) == bm25["factoid/n_queries"] + bm25["non_factoid/n_queries"]
    # one relevant passage among the split's passages: random Recall@1 is 1 / (number of passages)
    assert bm25["random/recall@1"] == pytest.approx(1 / n_passages)
    assert bm25["recall@1"] <= bm25["recall@5"] <= bm25["recall@10"] and bm25["recall@1"] > bm25["random/recall@1"]
    scoped = run_job(make_cfg(*SQA, "retriever=bm25", "dataset.scope=report", f"paths.output_dir={tmp_path}/r"))
    assert scoped["random/recall@1"] > bm25["random/recall@1"]  # fewer candidates within one report


def test_sustainableqa_retrieval_refuses_table_questions(make_cfg):
    from esgexp.errors import UserError

    with pytest.raises(UserError, match="table questions have no passage"):
        run_job(make_cfg(*SQA, "dataset.qtypes=[table]"))
