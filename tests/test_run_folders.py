"""One run folder per job (esgexp/core/run_folder.py, conf/hydra/default.yaml): two jobs started at the same
instant never share one, for single runs and sweeps (joblib, submitit), and a drawn name that exists is
drawn again."""

import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

from cli import run_cli, start_cli
from helpers import composed
from mlflow import MlflowClient
from omegaconf import OmegaConf

from esgexp.core.run_folder import claim_folder

STAMP = re.compile(r"\d{2}-\d{2}-\d{2}\.\d{3}-[0-9a-f]{4}")

TESTS = Path(__file__).resolve().parent


def start_at_once(tmp_path: Path, env: dict, jobs: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """Run each job's ``python -m esgexp`` arguments, all let go at one instant, once their config is
    composed and just before their run folder is made (tests/at_once.py), just after a second begins:
    before the fix they all made the same ``HH-MM-SS`` folder. Each job runs in its own process
    (tests/cli.py), let go by a thread of this one."""
    env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))}
    go = tmp_path / "go"
    commands = []
    for number, args in enumerate(jobs):
        ready = tmp_path / f"ready-{number}"
        barrier = [
            "+hydra.callbacks.at_once._target_=at_once.AtOnce",
            f"+hydra.callbacks.at_once.ready={ready}",
            f"+hydra.callbacks.at_once.go={go}",
        ]
        commands.append((ready, [*args, *barrier]))
    processes = [start_cli("esgexp", *args, cwd=tmp_path, env=env) for _, args in commands[:-1]]
    here_done, problems = threading.Event(), []

    def let_go() -> None:
        deadline = time.time() + 240
        while not all(ready.exists() for ready, _ in commands):
            if time.time() > deadline or here_done.is_set() or any(p.poll() is not None for p in processes):
                problems.append("a job did not start")
                break
            time.sleep(0.02)
        else:
            time.sleep(1 - time.time() % 1 + 0.02)
        go.touch()

    releaser = threading.Thread(target=let_go, daemon=True)
    releaser.start()
    try:
        here = run_cli("esgexp", *commands[-1][1], cwd=tmp_path, env=env, timeout=300)
    finally:
        here_done.set()
        releaser.join(timeout=300)
    results = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=300)
        results.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    assert not problems, [*problems, *(r.stderr[-2000:] for r in [*results, here])]
    return [*results, here]


def tiny_job(tmp_path: Path, tiny_model_dir: Path, *args: str) -> list[str]:
    return [
        "model=local",
        f"model.path={tiny_model_dir}",
        "model.generation.max_new_tokens=2",
        "trainer.progress_bar=false",
        f"paths.root_dir={tmp_path}",
        f"paths.request_cache={tmp_path}/requests.sqlite",
        *args,
    ]


def assert_own_folder(folder: Path, limit: int) -> None:
    """``folder`` holds one job's files, all of the job with ``dataset.limit=limit``."""
    saved = OmegaConf.load(folder / "config.yaml")
    assert saved.dataset.limit == limit
    assert f"dataset.limit={limit}" in OmegaConf.load(folder / ".hydra" / "overrides.yaml")
    assert json.loads((folder / "metrics.json").read_text())["n_items"] == limit
    assert len((folder / "predictions.jsonl").read_text().splitlines()) == limit


def test_two_jobs_started_in_the_same_second_get_a_folder_each(tmp_path, clean_env, tiny_model_dir, empty_db):
    env = {**clean_env, "OMP_NUM_THREADS": "1"}
    (tmp_path / "mlruns").mkdir()
    shutil.copy(empty_db, tmp_path / "mlruns" / "mlflow.db")  # one store for both, its tables made already
    results = start_at_once(tmp_path, env, [tiny_job(tmp_path, tiny_model_dir, f"dataset.limit={n}") for n in (2, 3)])
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
    folders = {}
    for result in results:
        (line,) = [line for line in result.stdout.splitlines() if line.startswith("run folder: ")]
        folders[Path(line.removeprefix("run folder: "))] = result
    assert len(folders) == 2, f"both jobs ran in {set(folders)}"
    for folder, limit in zip(folders, (2, 3)):
        assert_own_folder(folder, limit)
        assert STAMP.fullmatch(folder.name) and folder.parent.parent == tmp_path / "runs" / "esg_sample", folder
    # Names sort in time order: a name's HH-MM-SS.mmm is when its job drew it.
    assert sorted(folders) == sorted(folders, key=lambda p: p.name[:12])
    # Each MLflow run points at its own folder.
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert sorted(r.data.tags["run_dir"] for r in runs) == sorted(str(p) for p in folders)


def test_sweeps_started_in_the_same_second_get_a_folder_each_with_joblib_and_submitit(tmp_path, clean_env):
    # Jobs that stop at once (their data file is missing) leave what every job leaves: .hydra/ and FAILED.
    launchers = [
        ["hydra/launcher=joblib", "hydra.launcher.n_jobs=1"],
        ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=2"],
    ]
    jobs = [
        ["-m", f"paths.root_dir={tmp_path}", f"dataset.path=/no/{name}.csv", *launcher]
        for name, launcher in zip(("a", "b"), launchers)
    ]
    for result in start_at_once(tmp_path, clean_env, jobs):
        assert result.returncode == 1 and "1 failed or not finished, of 1 jobs" in result.stderr, result.stderr[-3000:]
    sweeps = sorted((tmp_path / "runs" / "esg_sample").glob("*/*"))
    assert len(sweeps) == 2 and all(STAMP.fullmatch(p.name) for p in sweeps)
    # Each job's folder is in its own sweep's folder (submitit's job, run in a new process, too).
    found = set()
    for sweep in sweeps:
        assert [p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")] == ["0"]
        (override,) = [o for o in OmegaConf.load(sweep / "0" / ".hydra" / "overrides.yaml") if "dataset.path" in o]
        missing = override.split("=", 1)[1]
        assert (sweep / "0" / "FAILED").read_text().startswith(f"dataset.path={missing}: no such file or folder")
        found.add(missing)
    assert found == {"/no/a.csv", "/no/b.csv"}


def hydra_config(*overrides: str):
    return composed("config", overrides=list(overrides), return_hydra_config=True)


def test_a_drawn_name_that_exists_is_drawn_again(tmp_path):
    for key in ("run", "sweep"):
        cfg = hydra_config(f"paths.root_dir={tmp_path}")
        taken = Path(OmegaConf.select(cfg, f"hydra.{key}.dir"))
        taken.mkdir(parents=True)
        (taken / "predictions.jsonl").write_text("another job's\n")
        claimed = claim_folder(cfg, key)
        assert claimed != taken and claimed.parent == taken.parent and STAMP.fullmatch(claimed.name)
        assert claimed.is_dir() and not any(claimed.iterdir())
        assert Path(OmegaConf.select(cfg, f"hydra.{key}.dir")) == claimed  # what Hydra then runs in
        assert (taken / "predictions.jsonl").read_text() == "another job's\n"


def test_a_folder_the_user_names_is_used_as_it_is(tmp_path):
    named = tmp_path / "mine"
    named.mkdir()
    cfg = hydra_config(f"paths.root_dir={tmp_path}", f"hydra.run.dir={named}")
    assert claim_folder(cfg, "run") is None  # resume=true continues a run there
    assert OmegaConf.select(cfg, "hydra.run.dir") == str(named)


def test_the_name_is_fixed_once_per_config(tmp_path):
    cfg = hydra_config(f"paths.root_dir={tmp_path}")
    first = OmegaConf.select(cfg, "hydra.run.dir")
    time.sleep(0.01)
    assert OmegaConf.select(cfg, "hydra.run.dir") == first
    other = hydra_config(f"paths.root_dir={tmp_path}")
    assert OmegaConf.select(other, "hydra.run.dir") != first
    assert os.path.dirname(first).endswith(time.strftime("%Y-%m-%d"))
