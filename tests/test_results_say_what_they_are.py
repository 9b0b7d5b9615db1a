"""Results that say what they are (issue 19, items 5-8), each through the command line as a user runs it:
items never answered make a run incomplete (exit 3, marked on the leaderboard and in compare); the
leaderboard ranks only runs over the same items together and names the setting two runs of one model
differ in; retrieval and score-only rows show no language model; an interval from one cluster is shown
as not available, never as certainty."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from cli import run_cli
from conftest import REPO, SAMPLE_CSV

from esgexp.run import INCOMPLETE_EXIT

SHORT_TEMPLATE = "Question: {query}\nA: {A}\nB: {B}\nC: {C}\nD: {D}\nAnswer:"


def command(module: str, *args: str, cwd: Path, env: dict, timeout: int = 240) -> subprocess.CompletedProcess:
    return run_cli(module, *args, cwd=cwd, env=env, timeout=timeout)


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result


class Tables(HTMLParser):
    """The leaderboard page's tables: each ``<h3>`` title with its rows of cell texts (header row first)."""

    def __init__(self, text: str):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.title, self.row, self.cell, self.in_h3 = "", None, None, False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "h3":
            self.in_h3, self.title = True, ""
        elif tag == "tr":
            self.row = []
        elif tag in ("td", "th") and self.row is not None:
            self.cell = ""

    def handle_endtag(self, tag):
        if tag == "h3":
            self.in_h3 = False
        elif tag in ("td", "th") and self.cell is not None:
            self.row.append(self.cell.strip())
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.tables.setdefault(self.title, []).append(self.row)
            self.row = None

    def handle_data(self, data):
        if self.in_h3:
            self.title += data
        elif self.cell is not None:
            self.cell += data

    def rows(self, title: str) -> list[dict[str, str]]:
        header, *body = self.tables[title]
        return [dict(zip(header, row)) for row in body]


def one_cluster_csv(path: Path, n: int = 4) -> Path:
    """The first ``n`` questions of the bundled sample, all from one reference document."""
    with open(SAMPLE_CSV, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))[:n]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), quoting=csv.QUOTE_ALL)
        writer.writeheader()
        writer.writerows({**row, "ref_doc": "One report"} for row in rows)
    return path


def job(root: Path, name: str, *overrides: str) -> str:
    """A job of the project config run here (as ``python -m esgexp`` runs it), its folder under
    ``root/runs/name``; what it printed."""
    import contextlib
    import io

    from conftest import compose_config

    from esgexp.run import run_job

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run_job(compose_config(root, f"paths.output_dir={root}/runs/{name}", *overrides))
    return printed.getvalue()


@pytest.fixture(scope="module")
def store(tmp_path_factory, tiny_model_dir, empty_db):
    """One MLflow store with real jobs: the tiny Llama on 3 and on 6 sample questions and, on 6, again
    with another template; bm25 and dense retrieval; an external predictions file scored; two jobs on four
    questions of one report (one cluster). Then the leaderboard command. Returns (root, env, printed)."""
    import os

    root = tmp_path_factory.mktemp("honest")
    (root / "mlruns").mkdir()
    shutil.copy(empty_db, root / "mlruns" / "mlflow.db")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.pop("HYDRA_FULL_ERROR", None)
    tiny = ("model=local", f"model.path={tiny_model_dir}", "scoring=logprob")
    clim = ("experiment=climretrieve_retrieval", "dataset=climretrieve_sample")
    preds = REPO / "esgexp" / "data" / "bundled" / "esgbench" / "preds_sample.jsonl"
    one_report = one_cluster_csv(root / "one_report.csv")
    cluster = ("dataset.name=one_report", f"dataset.path={one_report}", "dataset.cluster_key=ref_doc")
    printed = {
        "three": job(root, "three", *tiny, "dataset.limit=3"),
        "six": job(root, "six", *tiny, "dataset.limit=6"),
        "short": job(
            root, "short", *tiny, "dataset.limit=6", "template.name=short", f"template.text='{SHORT_TEMPLATE}'"
        ),
        "bm25": job(root, "bm25", *clim, "retriever=bm25"),
        "dense": job(root, "dense", *clim, "retriever=dense"),
        "score": job(root, "score", "experiment=esgbench_score", "dataset=esgbench_sample", f"predictions={preds}"),
        "cluster_logprob": job(root, "cluster_logprob", *tiny, *cluster),
        "cluster_generate": job(root, "cluster_generate", *tiny[:2], *cluster, "model.generation.max_new_tokens=2"),
    }
    board = ok(command("esgexp.leaderboard", f"paths.root_dir={root}", "format=all", cwd=root, env=env))
    printed["board"] = board.stdout
    return root, env, printed


def board_files(root: Path) -> tuple[dict[str, dict], Tables]:
    with open(root / "leaderboard" / "leaderboard.csv", newline="") as handle:
        rows = {row["run_id"]: row for row in csv.DictReader(handle)}
    return rows, Tables((root / "leaderboard" / "index.html").read_text(encoding="utf-8"))


def test_runs_over_other_items_are_ranked_apart_and_named_by_the_setting_they_differ_in(store):
    root, _, printed = store
    rows, page = board_files(root)
    mcq = [r for r in rows.values() if r["dataset"] == "esg_sample"]
    assert sorted(r["n"] for r in mcq) == ["3", "6", "6"]
    # The 3-question run is the best of its own table, never ranked above (nor tested against) the 6s.
    (few,) = [r for r in mcq if r["n"] == "3"]
    six = [r for r in mcq if r["n"] == "6"]
    assert few["items"] == "3 items · limit=3 (seed 42)" and few["not_worse"] == "best"
    assert {r["items"] for r in six} == {"6 items · limit=6 (seed 42)"}
    assert sorted(r["not_worse"] for r in six)[0] == "best" and len(six) == 2
    # Three runs of one model: named by the settings they differ in, not a config hash.
    assert sorted(r["variant"] for r in mcq) == [
        "limit=3, template=esgenius",
        "limit=6, template=esgenius",
        "limit=6, template=short",
    ]
    tables = [title for title in page.tables if title.startswith("esg_sample · mcq")]
    assert tables == [
        "esg_sample · mcq · 6 items · limit=6 (seed 42)",
        "esg_sample · mcq · 3 items · limit=3 (seed 42)",
    ]
    assert sorted(row["model"] for row in page.rows(tables[0])) == [
        "local (limit=6, template=esgenius)",
        "local (limit=6, template=short)",
    ]
    assert [row["model"] for row in page.rows(tables[1])] == ["local (limit=3, template=esgenius)"]
    assert "| 3 items · limit=3 (seed 42) |" in printed["board"]  # the Markdown table the command printed


def test_retrieval_and_scored_files_show_their_retriever_or_external_and_no_model(store):
    root, _, _ = store
    rows, page = board_files(root)
    retrieval = {r["retriever"]: r for r in rows.values() if r["task"] == "retrieval"}
    assert set(retrieval) == {"bm25", "dense"}
    assert retrieval["dense"]["encoder"] == "all-MiniLM-L6-v2" and retrieval["bm25"]["encoder"] == ""
    assert all(r["family"] == r["size_b"] == "" for r in rows.values() if r["task"] != "mcq")
    (title,) = [t for t in page.tables if t.startswith("climretrieve_sample")]
    shown = {row["retriever"]: row for row in page.rows(title)}
    assert shown["dense"]["model"] == "dense (all-MiniLM-L6-v2)" and shown["bm25"]["model"] == "bm25"
    assert all("SmolLM2" not in row.values() and "0.135" not in row.values() for row in shown.values())
    header = page.tables[title][0]
    assert "family" not in header and "size (B)" not in header, header
    (title,) = [t for t in page.tables if t.startswith("esgbench_sample")]
    (scored,) = page.rows(title)
    assert scored["model"] == "external" and "family" not in page.tables[title][0]
    html = (root / "leaderboard" / "index.html").read_text(encoding="utf-8")
    cards = re.findall(r'<details class="card".*?</details>', html, flags=re.DOTALL)
    no_model = [
        c for c in cards if "climretrieve_sample" in c.split("</summary>")[0] or "esgbench" in c.split("</summary>")[0]
    ]
    assert len(no_model) == 3 and not any("model.size_b" in c or "SmolLM2" in c for c in no_model)


def test_an_interval_from_one_cluster_is_not_available_everywhere(store):
    root, env, printed = store
    summary = printed["cluster_logprob"]
    assert re.search(r"accuracy +\d\.\d{3} \[interval n/a: one cluster\]", summary), summary
    folders = [root / "runs" / name / "metrics.json" for name in ("cluster_logprob", "cluster_generate")]
    metrics = json.loads(folders[0].read_text())
    assert metrics["stats/n_clusters"] == 1 and metrics["accuracy/ci_low"] is None
    assert metrics["accuracy/ci_high"] is None and metrics["accuracy/ci_note"] == "one cluster"
    compared = ok(
        command("esgexp.compare", *(str(p.parent) for p in folders), f"out_dir={root}/cmp", cwd=root, env=env)
    )
    assert "interval n/a: one cluster" in compared.stdout and "[0.0000, 0.0000]" not in compared.stdout
    report = json.loads((root / "cmp" / "compare.json").read_text())
    (pair,) = report["comparisons"]
    assert pair["ci_low"] is None and pair["p_value"] is None and pair["ci_note"] == "one cluster"
    rows, page = board_files(root)
    (title,) = [t for t in page.tables if t.startswith("one_report")]
    cells = [row["accuracy ± 95% CI"] for row in page.rows(title)]
    assert all(cell.endswith("[interval n/a: one cluster]") and "±" not in cell for cell in cells), cells
    assert {r["ci_note"] for r in rows.values() if r["dataset"] == "one_report"} == {"one cluster"}


def test_items_never_answered_make_the_run_incomplete(fault_proxy, llama_server, tmp_path, clean_env, empty_db):
    """A question whose every request gets HTTP 500: the job exits 3, its summary gives the count and
    resume=true; metrics.json keeps accuracy over the answered items apart; the leaderboard marks the run
    incomplete and ranks it after a complete run; compare leaves its unanswered item out and says so."""
    from conftest import compose_config
    from hydra.utils import instantiate

    from esgexp.cli.compare import main as compare
    from esgexp.cli.leaderboard import main as leaderboard

    (tmp_path / "mlruns").mkdir()
    shutil.copy(empty_db, tmp_path / "mlruns" / "mlflow.db")
    settings = ("backend=openai", "backend.backoff_s=0.05", "backend.max_retries=1", "dataset.limit=4")
    items = instantiate(compose_config(tmp_path, "dataset.limit=4").dataset).load().items
    question = json.dumps(items[0].question)[1:-1]
    fault_proxy.fail_when(lambda request: question in json.dumps(request.json()), "500")
    job_args = (*settings, f"backend.base_url={fault_proxy.base_url}", f"paths.root_dir={tmp_path}", "cache=off")
    # its own process: the exit status is what a user's shell sees
    first = run_cli("esgexp", *job_args, "trainer.progress_bar=false", cwd=tmp_path, env=clean_env, timeout=240)
    assert first.returncode == INCOMPLETE_EXIT == 3, first.stderr[-3000:]
    assert "Traceback" not in first.stderr
    assert re.search(r"never answered +1 \(resume=true finishes them\)", first.stdout), first.stdout
    assert "accuracy (unanswered = wrong)" in first.stdout and "accuracy over answered items" in first.stdout
    said = first.stdout + first.stderr
    assert "incomplete run: 1 of 4 items were never answered" in said and "HTTP 500" in said, said
    (incomplete,) = [p.parent for p in tmp_path.glob("runs/**/metrics.json")]
    metrics = json.loads((incomplete / "metrics.json").read_text())
    records = [json.loads(line) for line in (incomplete / "predictions.jsonl").read_text().splitlines()]
    assert metrics["n_failed"] == 1 and [r["id"] for r in records if r.get("failed")] == [items[0].id]
    assert metrics["invalid_rate"] * 4 == sum(r["parsed"] == "INVALID" and not r.get("failed") for r in records)
    assert metrics["accuracy"] == pytest.approx(metrics["accuracy/answered"] * 3 / 4)

    complete = tmp_path / "runs" / "complete"
    job(tmp_path, "complete", *settings, f"backend.base_url={llama_server}")
    assert json.loads((complete / "metrics.json").read_text())["n_failed"] == 0

    leaderboard([f"paths.root_dir={tmp_path}", "format=[csv,html]"])
    rows, page = board_files(tmp_path)
    by_folder = {Path(r["run_id"]): r for r in rows.values()}
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    folders = {
        run.info.run_id: Path(run.data.tags["run_dir"])
        for run in mlflow.search_runs(search_all_experiments=True, output_format="list")
    }
    by_folder = {folders[run_id]: row for run_id, row in rows.items()}
    assert by_folder[incomplete]["not_worse"] == "incomplete" and by_folder[incomplete]["unanswered"] == "1"
    assert by_folder[complete]["not_worse"] == "best" and by_folder[complete]["unanswered"] == "0"
    (title,) = list(page.tables)
    shown = page.rows(title)
    assert [row["not worse than best"] for row in shown] == ["best", "incomplete"]  # not ranked: last
    assert [row["never answered"] for row in shown] == ["", "1"]
    # One model on two servers: each named by its base URL.
    assert [row["model"] for row in shown] == [
        f"smollm2-135m (base_url={url})" for url in (llama_server, fault_proxy.base_url)
    ]

    compare([str(complete), str(incomplete), f"out_dir={tmp_path}/cmp"])
    (pair,) = json.loads((tmp_path / "cmp" / "compare.json").read_text())["comparisons"]
    assert pair["n_shared"] == 3 and (pair["n_unanswered_a"], pair["n_unanswered_b"]) == (0, 1)
    assert "(`" + str(incomplete) + "`) never answered 1 items" in (tmp_path / "cmp" / "compare.md").read_text()


def test_a_sweep_reports_a_job_with_items_never_answered_as_incomplete(tmp_path):
    from esgexp.core.sweep import job_status, sweep_table

    for number, failed in (("0", 0), ("1", 2)):
        (tmp_path / number).mkdir()
        (tmp_path / number / "metrics.json").write_text(json.dumps({"n_items": 4, "n_failed": failed}))
    assert job_status(tmp_path / "0") == ("ok", "")
    assert job_status(tmp_path / "1") == ("incomplete", "2 items never answered: rerun the job with resume=true")
    table, bad = sweep_table(tmp_path, {"0": "dataset.limit=4", "1": "dataset.limit=4 backend.base_url=x"})
    assert bad == 1 and "   1  incomplete    dataset.limit=4 backend.base_url=x  (2 items never answered" in table


def test_open_questions_never_answered_count_as_empty_and_are_kept_apart(make_cfg):
    """QA: a failed item scores as an empty answer in ``factoid/f1``; ``factoid/f1/answered`` is the mean
    over the answered ones, with its interval; a complete run has no such key."""
    from hydra.utils import instantiate

    from esgexp.tasks.qa import QATask

    cfg = make_cfg("experiment=sustainableqa_factoid", "dataset=sustainableqa_sample", "dataset.limit=4")
    task = QATask(cfg)
    items = task.prepare(instantiate(cfg.dataset).load().items)

    def answer(item):
        return {"id": item.id, **task.to_record({"output": item.answers[0]}, item)}

    failed = {"id": items[0].id, **task.to_record({"failed": True}, items[0]), "failed": True}
    _, metrics, _ = task.score(items, [failed, *map(answer, items[1:])])
    assert metrics["factoid/f1"] == pytest.approx(3 / 4) and metrics["factoid/f1/answered"] == 1.0
    assert "factoid/f1/answered/ci_low" in metrics
    assert "factoid/f1/answered" in dict(task.summary_rows(metrics))
    _, complete, _ = task.score(items, list(map(answer, items)))
    assert complete["factoid/f1"] == 1.0 and not any(key.endswith("/answered") for key in complete)
