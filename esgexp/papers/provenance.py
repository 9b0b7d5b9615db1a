"""What ran for each job of a paper table: its run folder (matched by the run's composed config, never by
override strings), the model, backend and data actually used, the items asked, what was substituted for the
paper's setup (another model, a ``dataset.limit``, a sample instead of the paper's file), the MLflow run and the
command that reruns it."""

from __future__ import annotations

import json
import shlex
from functools import lru_cache
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from esgexp.core.config import BUNDLED_DIR
from esgexp.core.tracking import PENDING_FILE
from esgexp.jobs.identity import identity
from esgexp.jobs.lifecycle import data_sha256
from esgexp.papers.grid import Grid, Job
from esgexp.tasks.kinds import kind_of

# Settings that change how a value's interval is computed, not the value itself.
NOT_SUBSTITUTIONS = ("dataset.cluster_key",)


def identity_key(cfg: DictConfig) -> str:
    return json.dumps(identity(cfg), sort_keys=True, default=str)


def run_config(folder: Path) -> DictConfig | None:
    """The config a run folder's job ran with: its resolved ``config.yaml``, else Hydra's ``.hydra/config.yaml``
    (written before the job starts, so a job that failed early has it too); None without either."""
    for path in (folder / "config.yaml", folder / ".hydra" / "config.yaml"):
        if path.is_file():
            return OmegaConf.load(path)
    return None


def match_folders(jobs: list[Job], sweep_dir: Path) -> dict[Job, Path | None]:
    """Each job's run folder in ``sweep_dir``: the numbered folder whose config has the job's identity."""
    by_identity = {}
    for folder in sorted((p for p in sweep_dir.glob("*") if p.name.isdigit()), key=lambda p: int(p.name)):
        ran = run_config(folder)
        if ran is not None:
            by_identity[identity_key(ran)] = folder
    return {job: by_identity.get(identity_key(job.cfg)) for job in jobs}


def substitutions(asked: DictConfig, ran: DictConfig, items: int | None = None) -> list[str]:
    """How the run differs from what the paper's cell asks for (``asked``: the grid job without the user's
    overrides), e.g. ``model smollm2-135m instead of qwen2.5-0.5b-instruct``; ``items``: the paper's item count."""
    want, got = identity(asked), identity(ran)
    found = []
    for key in sorted(dict.fromkeys([*want, *got]), key=lambda k: k not in ("task", "dataset")):
        a, b = want.get(key), got.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict) and a.get("name") != b.get("name"):
            found.append(f"{key} {b.get('name')} instead of {a.get('name')}")
            continue
        found += [leaf_change(name, was, now, got, items) for name, was, now in leaf_diff(a, b, key)]
    return [text for text in found if text]


def leaf_diff(a, b, prefix: str) -> list[tuple[str, object, object]]:
    """(dotted key, value in ``a``, value in ``b``) for every leaf where two nested dicts differ."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return [] if a == b else [(prefix, a, b)]
    out = []
    for key in dict.fromkeys([*a, *b]):
        out += leaf_diff(a.get(key), b.get(key), f"{prefix}.{key}")
    return out


def leaf_change(name: str, was, now, ran: dict, items: int | None) -> str:
    """One changed setting in words; "" for one that does not change the value (NOT_SUBSTITUTIONS)."""
    if name in NOT_SUBSTITUTIONS:
        return ""
    if name == "dataset.limit" and now is not None:
        seed = (ran.get("dataset") or {}).get("seed")
        whole = f"the paper's {items:,}" if items else "all"
        return f"dataset.limit={now}: at most {now} items drawn at random (seed {seed}) instead of {whole}"
    return f"{name}={json.dumps(now, default=str)} instead of {json.dumps(was, default=str)}"


@lru_cache(maxsize=64)
def digest(path: str) -> str | None:
    return data_sha256(path)


def data_substitutions(job: Job, grid: Grid) -> list[str]:
    """The job's data files that are not the paper's: our bundled samples, and files whose name is not one of the
    grid's ``data.<key>.paper_file`` names (a name or a list) or whose digest differs from the one ``sha256`` (file
    name -> digest) gives for that name."""
    found = []
    for key in job.data_keys:
        path, spec = grid.data.get(key), grid.data_spec.get(key) or {}
        if not path:
            continue
        name = Path(path).name
        names = spec.get("paper_file") or []
        names = [names] if isinstance(names, str) else list(names)
        known = (spec.get("sha256") or {}).get(name)
        if Path(path).resolve().is_relative_to(BUNDLED_DIR.resolve()):
            found.append(f"data.{key}: {name} is our bundled sample, not the paper's data")
        elif names and name not in names:
            found.append(f"data.{key}: {name}, not the paper's {' or '.join(names)}")
        elif known and digest(path) != known:
            found.append(f"data.{key}: {name} is not the paper's file of that name (sha256 differs)")
    return found


def command_line(job: Job, grid: Grid) -> str:
    """The command that reruns the job alone (its overrides, a missing data file as ``${data.KEY}``, and the
    user's)."""
    return shlex.join(["python", "-m", "esgexp", *(job.shown or job.overrides), *grid.extra])


def mlflow_run_ids(uri: str, sweep_dir: Path) -> dict[str, str]:
    """{run folder: MLflow run id} of the runs in the store at ``uri`` whose ``run_dir`` tag lies in ``sweep_dir``;
    {} when a local store is not there (reading it would create it)."""
    from esgexp.leaderboard.store import local_store_path

    store = local_store_path(uri)
    if store is not None and not store.exists():
        return {}
    import mlflow

    client = mlflow.MlflowClient(uri)
    prefix = str(sweep_dir).replace("'", "''")
    found = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        filter_string=f"tags.run_dir LIKE '{prefix}%'",
        max_results=50000,
    )
    return {run.data.tags["run_dir"]: run.info.run_id for run in found}


def run_provenance(job: Job, grid: Grid, folder: Path | None, metrics: dict | None, run_id: str | None) -> dict:
    """What reruns and explains one job of the table: model, backend and data used, items asked (``n``, limit,
    seed), overrides (the grid's and the user's), run folder, MLflow run id, command and substitutions."""
    out = {
        "job": job.id,
        "row": job.row,
        "overrides": job.overrides,
        "extra": grid.extra,
        "command": command_line(job, grid),
        "run_dir": str(folder) if folder else "",
    }
    ran = run_config(folder) if folder else None
    if ran is None:
        return out
    data_path = ran.dataset.get("path") if "dataset" in ran else None
    items = next((grid.data_spec[k].get("items") for k in job.data_keys if grid.data_spec[k].get("items")), None)
    changed = substitutions(job.grid_cfg or job.cfg, ran, items) if job.cfg is not None else []
    out.update(
        model=ran.model.get("name") if "model" in ran and job_uses_model(ran) else None,
        model_source=model_source(ran) if "model" in ran and job_uses_model(ran) else None,
        backend=ran.backend.get("name") if "backend" in ran and job_uses_model(ran) else None,
        data={"path": str(data_path), "sha256": digest(str(data_path)) if data_path else None},
        n=(metrics or {}).get("n_items", (metrics or {}).get("n_queries")),
        limit=ran.dataset.get("limit"),
        seed=ran.dataset.get("seed", ran.get("seed")),
        run_id=run_id or pending_note(folder),
        substitutions=changed + data_substitutions(job, grid),
    )
    return out


def job_uses_model(cfg: DictConfig) -> bool:
    """Whether the job asks a language model (a scoring job or a retrieval with fixed query texts does not)."""
    return kind_of(cfg.task).uses_model(cfg)


def model_source(cfg: DictConfig) -> str | None:
    """Where the model's weights come from: its hub id, folder, packaged GGUF, or API model name."""
    model = cfg.model
    if model.get("gguf"):
        return f"{model.gguf.package}:{model.gguf.file}"
    return next((str(model[k]) for k in ("path", "hub_id") if model.get(k)), None)


def pending_note(folder: Path) -> str | None:
    """For a run kept offline: how to log it; else None."""
    if (folder / PENDING_FILE).is_file():
        return f"not yet tracked: python -m esgexp.sync {folder}"
    return None
