"""kill -9 in the middle of a job that writes its results as it goes, then resume: no item lost or
done twice, and the final metrics equal those of a run that was never interrupted.

Each job runs as a user runs it (``python -m esgexp``, the tiny random Llama); it is SIGKILLed once some
results are on disk, then resumed with ``resume=true`` (MCQ, open QA) or ``ckpt_path=last`` (fine-tuning)
and compared with the same config run straight through (both in this process: the imports are paid once). Retrieval is not here: it writes
rankings.jsonl once, at the end, so there is nothing half-written to resume.
"""

import signal
import time

import pytest
from cli import start_cli
from conftest import REPO, compose_config
from helpers import read_jsonl, read_jsonl_lenient

from esgexp.run import run_job

# The run folder is the subject here, not MLflow: each run keeps what it would log in its folder.
OFFLINE = ("tracking.offline=true",)
# Values that describe how a run went rather than what it computed.
RUN_FACTS = {"n_resumed", "n_cached", "n_requested", "train/seconds", "train/tokens_per_s"}


def kill_when(command, env, ready, timeout=240):
    """Start ``command`` (a module and its arguments); SIGKILL it as soon as ``ready()`` returns a path;
    return that path."""
    process = start_cli(*command, cwd=REPO, env=env)
    deadline, found = time.monotonic() + timeout, None
    while time.monotonic() < deadline and found is None and process.poll() is None:
        found = ready()
        time.sleep(0.02)
    process.kill()
    _, stderr = process.communicate()
    assert found is not None, f"nothing to resume from (exit {process.returncode}): {stderr[-2000:]}"
    assert process.returncode == -signal.SIGKILL, "the job ended before the kill: nothing was interrupted"
    return found


def cli(root, *overrides):
    return [
        "esgexp",
        *overrides,
        f"paths.root_dir={root}",
        f"paths.request_cache={root}/requests.sqlite",
        "trainer.progress_bar=false",
    ]


def predictions_with(root, lines):
    def ready():
        for path in root.glob("runs/**/predictions.jsonl"):
            if len(path.read_bytes().split(b"\n")) > lines:
                return path
        return None

    return ready


@pytest.mark.parametrize(
    "overrides, n_items",
    [
        (("dataset.limit=24",), 24),  # enough items that the kill lands before the last
        (("experiment=sustainableqa_factoid", "dataset=sustainableqa_sample", "dataset.limit=9"), 9),
    ],
    ids=["mcq", "qa"],
)
def test_kill_9_then_resume_equals_an_uninterrupted_run(tmp_path, clean_env, tiny_model_dir, overrides, n_items):
    job = (
        "model=local",
        f"model.path={tiny_model_dir}",
        "trainer.batch_size=1",
        "scoring.max_new_tokens=8",
        "cache=off",
        *OFFLINE,
        *overrides,
    )
    killed = kill_when(cli(tmp_path, *job), clean_env, predictions_with(tmp_path, 3))
    kept = read_jsonl_lenient(killed)
    assert 3 <= len(kept) < n_items

    resumed = run_job(compose_config(tmp_path, *job, "resume=true"))
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert sorted(r["id"] for r in records) == sorted({r["id"] for r in records}) and len(records) == n_items
    assert resumed["n_resumed"] == len(kept)  # the finished answers were reused, not asked again

    straight = run_job(compose_config(tmp_path / "straight", *job))
    assert {k: v for k, v in resumed.items() if k not in RUN_FACTS} == {
        k: v for k, v in straight.items() if k not in RUN_FACTS
    }
    again = {r["id"]: r["output"] for r in read_jsonl(tmp_path / "straight" / "run" / "predictions.jsonl")}
    assert {r["id"]: r["output"] for r in records} == again


def test_kill_9_during_fine_tuning_then_ckpt_path_last_equals_an_uninterrupted_run(tmp_path, clean_env, tiny_model_dir):
    """Two optimiser steps per epoch and a checkpoint every two steps: each checkpoint is at an epoch end,
    where a resumed run continues exactly (esgexp/training/trainer.py)."""
    import torch

    job = (
        "experiment=finetune_sustainableqa",
        "dataset=sustainableqa_sample",
        "model=local",
        f"model.path={tiny_model_dir}",
        "trainer.max_steps=20",
        "train.train_limit=4",
        "train.batch_size=2",
        "train.val_limit=2",
        "train.val_every_n_steps=2",
        "train.val_generate_items=0",
        "train.lr=0.01",
        "model.lora.dropout=0",
        "trainer.precision=32-true",
        *OFFLINE,
    )

    def checkpoint_saved():
        for path in tmp_path.glob("runs/**/checkpoints/last.ckpt"):
            try:  # written in full (a step is quick: the file is rewritten every few tenths of a second)
                torch.load(path, weights_only=False)
            except Exception:
                return None
            return path
        return None

    first = kill_when(cli(tmp_path, *job), clean_env, checkpoint_saved)
    step_at_kill = torch.load(first, weights_only=False)["global_step"]
    assert step_at_kill in range(2, 20, 2)  # a checkpoint before the last step (kill_when: the job was killed)

    resumed = run_job(compose_config(tmp_path, *job, "ckpt_path=last"))
    assert resumed["train/steps"] == 20
    resumed_dir = tmp_path / "run"

    straight = run_job(compose_config(tmp_path / "straight", *job))
    assert {k: v for k, v in resumed.items() if k not in RUN_FACTS} == pytest.approx(
        {k: v for k, v in straight.items() if k not in RUN_FACTS}
    )
    weights = torch.load(resumed_dir / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    reference = torch.load(tmp_path / "straight" / "run" / "checkpoints" / "last.ckpt", weights_only=False)[
        "state_dict"
    ]
    assert weights.keys() == reference.keys() and all(torch.equal(weights[k], reference[k]) for k in weights)
