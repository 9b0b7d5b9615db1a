"""The command line as a user runs it: a multirun sweep, and clear one-line errors for mistakes."""

import json
import subprocess
import sys

import mlflow
import pytest


def esgexp(cwd, env, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "esgexp", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_multirun_sweep_gives_one_folder_and_one_mlflow_run_per_job(tmp_path, clean_env, tiny_model_dir):
    result = esgexp(
        tmp_path, clean_env, "-m", "model=local", f"model.path={tiny_model_dir}",
        "strategy=zero_shot,context", "scoring=generate,logprob", "dataset.limit=3",
        "model.generation.max_new_tokens=2", "trainer.progress_bar=false",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics_files = sorted((tmp_path / "runs" / "esg_sample").glob("*/*/*/metrics.json"))
    assert [p.parent.name for p in metrics_files] == ["0", "1", "2", "3"]
    assert all(json.loads(p.read_text())["n_items"] == 3 for p in metrics_files)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)
    combos = {(r.data.tags["strategy"], r.data.tags["scoring"]) for r in runs}
    assert combos == {(s, m) for s in ("zero_shot", "context") for m in ("generate", "logprob")}
    assert {r.data.tags["run_dir"] for r in runs} == {str(p.parent) for p in metrics_files}


@pytest.mark.parametrize(
    "args, message",
    [
        (["model=no-such-model"], "Could not find 'model/no-such-model'"),
        (["dataset=no-such-data"], "Could not find 'dataset/no-such-data'"),
        (["no_such_key=1"], "Could not override 'no_such_key'"),
        (["dataset.path=/no/such/file.csv"], "error: dataset file not found: /no/such/file.csv"),
        (["model=local"], "Missing mandatory value: model.path"),
        (["strategy.context=everything"], "strategy.context must be one of full, best_line or null"),
    ],
)
def test_user_mistakes_get_one_clear_message(tmp_path, clean_env, args, message):
    result = esgexp(tmp_path, clean_env, *args, timeout=120)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
