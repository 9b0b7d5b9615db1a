"""The command line as a user runs it: a multirun sweep, and clear one-line errors for mistakes."""

import json

import mlflow
import pytest
from cli import run_cli


def esgexp(cwd, env, *args, timeout=300):
    return run_cli("esgexp", *args, cwd=cwd, env=env, timeout=timeout)


def test_multirun_sweep_gives_one_folder_and_one_mlflow_run_per_job(tmp_path, clean_env, tiny_model_dir):
    result = esgexp(
        tmp_path,
        clean_env,
        "-m",
        "model=local",
        f"model.path={tiny_model_dir}",
        "strategy=zero_shot,context",
        "scoring=generate,logprob",
        "dataset.limit=3",
        "model.generation.max_new_tokens=2",
        "trainer.progress_bar=false",
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
        (["no_such_key=1"], "error: no_such_key is not a setting: check its spelling (the settings at the top level: "),
        (
            ["dataset.path=/no/such/file.csv"],
            "error: dataset.path=/no/such/file.csv: no such file or folder: the folder /no does not exist",
        ),
        (["model=local"], "Missing mandatory value: model.path"),
        (["strategy.context=everything"], "strategy.context must be one of full, best_line or null"),
    ],
)
def test_user_mistakes_get_one_clear_message(tmp_path, clean_env, args, message):
    result = esgexp(tmp_path, clean_env, *args, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr and result.stderr.count("error: ") == 1
    assert "Traceback" not in result.stderr and "HYDRA_FULL_ERROR" not in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["dataset.limit=0"], "dataset.limit must be an integer >= 1 or null, got 0"),
        (
            ["dataset.path=/no/such/file.csv"],
            "dataset.path=/no/such/file.csv: no such file or folder: the folder /no does not exist",
        ),
    ],
)
def test_a_user_error_is_printed_once_and_kept_in_the_run_log(tmp_path, clean_env, args, message):
    """One ``error:`` line on stderr, nothing on stdout, and the message in the run folder's esgexp.log."""
    result = esgexp(tmp_path, clean_env, *args, timeout=120)
    assert result.returncode == 2
    assert (result.stdout + result.stderr).count(message) == 1 and f"error: {message}" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    (log_file,) = (tmp_path / "runs").glob("*/*/*/esgexp.log")
    assert f"[ERROR] - {message}" in log_file.read_text()


@pytest.mark.parametrize(
    "module, args, message",
    [
        (
            "esgexp.ingest",
            ["corpus.pdf_dir=/no/such/dir", "corpus.name=x"],
            "corpus.pdf_dir=/no/such/dir: no such file or folder: the folder /no does not exist",
        ),
        (
            "esgexp.export_adapter",
            ["model=local", "model.path=/no/such/model", "model.adapter=/no/such/adapter"],
            "model.path=/no/such/model is not a model folder",
        ),
    ],
)
def test_other_entry_points_print_a_user_error_once(tmp_path, clean_env, module, args, message):
    result = run_cli(module, *args, cwd=tmp_path, env=clean_env)
    assert result.returncode == 2
    assert (result.stdout + result.stderr).count(message) == 1 and "error: " in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
