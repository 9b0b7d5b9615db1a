"""Replies that carry a reasoning block, and the model a hosted API says served them: an unfinished
``<think>`` is caught from the reply itself, whatever the model config says; the response's ``model`` is
recorded. Against the stand-in OpenAI-compatible API on 127.0.0.1 (tests/openai_server.py)."""

import json

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
