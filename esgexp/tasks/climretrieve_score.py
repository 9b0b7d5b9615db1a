"""Score a published ClimRetrieve run's rankings with the paper's metric, without a model.

The file (``Experiments/Embedding_Search_Results/<embedding>__<K>.csv`` in tobischimanski/ClimRetrieve) flags,
per (paragraph, question) row, whether one query setup retrieved the paragraph among its top K. As the paper's
``analyse_results.py`` (``allMetrics_allThreholds``) does, every flagged row is a positive prediction, every row
graded >= 2 a relevant one, and precision, recall and F1 are pooled over all rows: ``climretrieve/precision@K``,
``recall@K`` and ``f1@K`` (eval/retrieval_metrics.py), each with a bootstrap interval over queries (or reports).
"""

from __future__ import annotations

from hydra.utils import instantiate

from esgexp.core.outputs import PredictionLog
from esgexp.eval.retrieval_metrics import PAPER_PREFIX, PAPER_THRESHOLD, pooled_climretrieve
from esgexp.eval.stats import ItemScores, StatsSettings, cluster_records, record_clusters, scored, with_interval
from esgexp.jobs.lifecycle import Job
from esgexp.tasks import retrieval


class RankingsScoringJob(Job):
    """Count each query's retrieved, relevant and retrieved-relevant rows; pool them into the paper's P/R/F1@K."""

    files = ("rankings.jsonl", "skipped_rows.txt")

    def load(self) -> list[str]:
        self.stats = StatsSettings.from_node(self.cfg.stats)
        self.loaded = instantiate(self.cfg.dataset).load()
        return self.loaded.skipped

    def tags(self) -> dict:
        return {"model": "external", "retriever": "external", "query": self.loaded.column, "k": str(self.loaded.k)}

    def work(self, run) -> tuple[dict, dict]:
        loaded, k = self.loaded, self.loaded.k
        cluster_key = self.cfg.dataset.get("cluster_key")
        records = cluster_records([query_record(q, k) for q in loaded.queries], loaded.queries, cluster_key)
        counts = [
            [r["metrics"][f"tp@{k}"], r["metrics"][f"retrieved@{k}"], r["metrics"]["n_relevant"]] for r in records
        ]
        metrics = {
            "n_queries": len(records),
            "n_rows": sum(len(q.rows) for q in loaded.queries),
            "n_rows_without_flag": loaded.n_unflagged,
            "n_skipped_rows": len(loaded.skipped),
            **pooled_climretrieve(counts, record_clusters(records), self.stats, (k,)),
        }
        tags = scored(metrics, {}, records, cluster_key, f"{PAPER_PREFIX}f1@{k}")
        PredictionLog(self.output_dir / "rankings.jsonl").rewrite(records)
        return metrics, tags

    def summary(self, metrics: dict) -> tuple[str, list[tuple[str, str]]]:
        k = self.loaded.k
        rows = [("queries", str(metrics["n_queries"])), ("rows", str(metrics["n_rows"]))]
        rows += [
            (f"{PAPER_PREFIX}{m}@{k}", with_interval(metrics, f"{PAPER_PREFIX}{m}@{k}"))
            for m in ("precision", "recall", "f1")
        ]
        rows += [
            (key.replace("_", " "), str(metrics[key]))
            for key in ("n_rows_without_flag", "n_skipped_rows")
            if metrics[key]
        ]
        return f"{self.cfg.dataset.name} | {self.loaded.column} | K={k}", rows


def query_record(query, k: int) -> dict:
    """One query's line of rankings.jsonl: its counts in the layout of the retrieval job's records."""
    relevant = [grade >= PAPER_THRESHOLD for grade, _ in query.rows]
    flags = [flag for _, flag in query.rows]
    return {
        "id": query.id,
        "doc": query.report,
        "query": query.question,
        "metrics": {
            f"tp@{k}": sum(f and r for f, r in zip(flags, relevant)),
            f"retrieved@{k}": sum(flags),
            "n_relevant": sum(relevant),
        },
    }


def item_scores(records: list[dict], key: str, config=None) -> ItemScores | None:
    """The per-query values behind ``climretrieve/precision@K`` and ``recall@K`` (hits over retrieved or relevant
    rows, a ratio of sums, as the retrieval job's pooled ones); None for any other key (F1, counts)."""
    name = key.removeprefix(PAPER_PREFIX)
    if name == key or not name.startswith(("precision@", "recall@")):
        return None
    return retrieval.item_scores(records, name, config)
