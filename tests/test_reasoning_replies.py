"""Replies that carry a reasoning block, and the model a hosted API says served them: an unfinished
``<think>`` is caught from the reply itself, whatever the model config says; the response's ``model`` is
recorded. Against the stand-in OpenAI-compatible API on 127.0.0.1 (tests/openai_server.py)."""

import json
import os
from pathlib import Path

from cli import run_cli
from openai_server import FakeOpenAI

CUT_OFF = "<think>Option A seems plausible but let me check the"


def test_an_unclosed_think_is_invalid_under_any_model_config(tmp_path, clean_env):
    """The README's ``backend=openai backend.base_url=... backend.model=NAME`` keeps ``model=smollm2-135m``
    (``reasoning: false``); a server whose replies open a ``<think>`` and run out of tokens (finish_reason
    length) mid-thought: no reply is read as the letter it was weighing, every one is invalid and counted."""
    with FakeOpenAI(answer=CUT_OFF, model="thinker-7b") as server:
        result = run_cli(
            "esgexp",
            "dataset.limit=12",
            "backend=openai",
            f"backend.base_url={server.base_url}",
            "backend.model=thinker-7b",
            "tracking.offline=true",
            "trainer.progress_bar=false",
            f"paths.request_cache={tmp_path}/requests.sqlite",
            f"hydra.run.dir={tmp_path}/run",
            cwd=tmp_path,
            env=clean_env,
            timeout=120,
        )
        budgets = {body["max_tokens"] for body in server.bodies if "max_tokens" in body}
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert max(budgets) == 16  # model.reasoning=false still decides the budget: the short answer's (1: the probe)
    records = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 12 and all(r["output"].startswith("<think>Option A") for r in records)
    assert {r["parsed"] for r in records} == {"INVALID"} and all(r["unfinished_reasoning"] for r in records)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["accuracy"] == 0.0 and metrics["invalid_rate"] == 1.0
    assert metrics["invalid/unfinished_reasoning"] == 1.0


def test_a_cell_run_through_a_moving_alias_is_not_comparable_unless_a_reply_names_the_dated_model(
    tmp_path, monkeypatch, shared_samples
):
    """deepseek-reasoner is moved to newer models by its provider: the run records the `model` each reply names,
    and the cell says it is not comparable, with what the alias served when the paper ran; a reply naming one of
    the config's dated ids would lift that."""
    from omegaconf import OmegaConf

    from esgexp.papers.provenance import moving_alias

    questions = shared_samples / "esgenius" / "ESGenius_1136q_sample40.csv"
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-local-test")
    with FakeOpenAI(answer="A", model="deepseek-reasoner") as server:
        result = run_cli(
            "esgexp.paper",
            "table=esgenius_table2",
            "rows=[DeepSeek-R1]",
            "columns=[Zero-Shot]",
            f"data.esgenius={questions}",
            f"overrides=['backend.base_url={server.base_url}','dataset.limit=4']",
            cwd=tmp_path,
            env=dict(os.environ, HF_HUB_OFFLINE="1"),
            timeout=180,
        )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (cell,) = json.loads((tmp_path / "papers" / "esgenius_table2.json").read_text())["cells"]
    (run,) = cell["runs"]
    assert run["served_model"] == "deepseek-reasoner" and cell["verdict"] == "not comparable"
    assert (
        "model deepseek-r1 ran through the moving alias deepseek-reasoner (the replies name deepseek-reasoner, "
        "not a dated id of the paper's model); when the paper ran it served DeepSeek-R1 of 2025-01-20"
    ) in cell["verdict_note"]
    ran = OmegaConf.load(Path(run["run_dir"]) / "config.yaml")
    ran.model.alias.dated_ids = ["deepseek-r1-20250120"]
    assert moving_alias(ran, {"served_model": "deepseek-r1-20250120"}) == ""
    assert "no reply named the model that served it" in moving_alias(ran, {})
    assert json.loads((Path(run["run_dir"]) / "metrics.json").read_text())["served_model"] == "deepseek-reasoner"
