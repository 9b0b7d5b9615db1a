"""The paper grids follow each paper's own protocol (docs/papers.md, "Protocol differences"): ESGenius' decoding
budget and raw prompts, ClimRetrieve's every-row scoring and a random row that is one value across query texts."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

from cli import run_cli

from esgexp.papers.grid import load_grid
from esgexp.tasks.generation import make_requests


def paper_cfg(*overrides: str):
    from esgexp.cli.paper import compose_paper

    return compose_paper(list(overrides))


def test_esgenius_grid_decodes_as_the_papers_pipeline(tmp_path, monkeypatch, shared_samples):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    questions = shared_samples / "esgenius" / "ESGenius_1136q_sample40.csv"
    rows = "rows=['Qwen3 0.6B','DeepSeek-R1-Distill-Qwen 1.5B','Gemma-3 1B I-T',o3,GPT-4o]"
    grid = load_grid(
        paper_cfg("table=esgenius_table2", f"paths.root_dir={tmp_path}", f"data.esgenius={questions}", rows)
    )
    item = SimpleNamespace(id="q1")
    budgets = {}
    for job in grid.jobs:
        (request,) = make_requests(job.cfg, [item], {"q1": "Question: ...\n\nAnswer:"})
        budgets[job.row] = (request.max_new_tokens, bool(job.cfg.model.chat_template), bool(job.cfg.model.reasoning))
    # open models: a raw prompt and transformers' 20 new tokens, the reasoning ones too (Qwen3 had 2,048 and thought)
    for row in ("Qwen3 0.6B", "DeepSeek-R1-Distill-Qwen 1.5B", "Gemma-3 1B I-T"):
        assert budgets[row] == (20, False, False), row
    assert budgets["o3"] == (8192, True, True)  # an API reasoning model keeps its own budget
    assert budgets["GPT-4o"][0] == 20


def test_climretrieve_random_row_is_one_value_across_query_texts(tmp_path, shared_samples):
    sample = shared_samples / "climretrieve" / "report_level_sample.csv"
    core = shared_samples / "climretrieve" / "Core_Questions_with_Explanations.csv"
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    args = ["table=climretrieve_table_r1", "rows=[random]", "columns=[question,definition,concepts]"]
    args += [f"data.climretrieve={sample}", f"data.core_questions={core}", "overrides=['dataset.cluster_key=null']"]
    result = run_cli("esgexp.paper", *args, cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    table = json.loads((tmp_path / "papers" / "climretrieve_table_r1.json").read_text())
    ours = {cell["column"]: cell["ours"] for cell in table["cells"]}
    assert set(ours) == {"question", "definition", "concepts"}
    assert len(set(ours.values())) == 1  # seeded by the query text they were 0.099, 0.241 and 0.131
    assert all("dataset.merge_duplicates=false" in job["overrides"] for job in table["jobs"])
