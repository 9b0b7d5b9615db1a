"""What ran for each job of a paper table: its run folder (matched by the run's composed config, never by
override strings), the model, backend and data actually used (each data file the paper's only when its hash is
the registry's: its source, revision and hash recorded), the predictions file a scoring job scored (its sha256,
and its registry entry when it is one), the items asked, what was substituted for the paper's
setup (another model, a ``dataset.limit``, data that is not the paper's), the MLflow run and the command that
reruns it."""

from __future__ import annotations

import json
import shlex
from functools import lru_cache
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from esgexp.core.tracking import PENDING_FILE
from esgexp.data.hashing import file_hashes
from esgexp.data.registry import identify, published_as, serving
from esgexp.jobs.identity import identity
from esgexp.jobs.lifecycle import data_sha256
from esgexp.papers.grid import PROTOCOL, Grid, Job
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
    overrides), e.g. ``model smollm2-135m instead of qwen2.5-0.5b-instruct`` and, where the run did not keep the
    grid's PROTOCOL settings, each one (``model.chat_template=true instead of false``); ``items``: the paper's
    item count. The model and backend of a job that asks no model (retriever=random with LLM-written queries)
    are none."""
    want, got = identity(asked), identity(ran)
    unused = () if job_uses_model(ran) else ("model", "backend")
    found = []
    for key in sorted(dict.fromkeys([*want, *got]), key=lambda k: k not in ("task", "dataset")):
        a, b = want.get(key), got.get(key)
        if a == b or key in unused:
            continue
        if isinstance(a, dict) and isinstance(b, dict) and a.get("name") != b.get("name"):
            found.append(f"{key} {b.get('name')} instead of {a.get('name')}")
            # another model's own settings aside, each grid protocol setting it does not keep is named too
            found += [leaf_change(n, was, now, got, items) for n, was, now in leaf_diff(a, b, key) if n in PROTOCOL]
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
    """The job's data files that are not the paper's. A file is the paper's only by its bytes (``published``),
    never by its name or place: our bundled samples, copies of them, subsets and one's own files never are."""
    found = []
    for key in job.data_keys:
        path = grid.data.get(key)
        if path and published(path, grid, key) is None:
            found.append(
                f"data.{key}: {path} is not the paper's data (a sample, a copy or one's own file: its hash is not "
                f"the registry's, conf/data/; esgexp-data get fetches the paper's)"
            )
    return found


def data_files(path: Path) -> list[Path]:
    """The file at ``path``, or the files of the folder there (not hidden ones, not its sub-folders)."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")) if path.is_dir() else []


def published(path: str, grid: Grid, key: str) -> list[str] | None:
    """How the data at ``path`` (a file, or a folder's files) is the paper's for ``data.<key>``: each file's
    registry entry, source, revision and hash (conf/data/: the files that serve ``<table> data.<key>``), or its
    digest in the grid's own ``sha256`` list; None when any file is neither (or there is none)."""
    known = serving(f"{grid.name} data.{key}")
    digests = (grid.data_spec.get(key) or {}).get("sha256") or []
    digests = [digests] if isinstance(digests, str) else list(digests)
    found = []
    for file in data_files(Path(path)):
        hashes = file_hashes(file)
        entry = identify(hashes, known)
        if entry is not None:
            found.append(entry.described)
        elif hashes.sha256 in digests:
            found.append(f"{file.name}: sha256 {hashes.sha256}, in the grid's own list")
        else:
            return None
    return found or None


def command_line(job: Job, grid: Grid) -> str:
    """The command that reruns the job alone (its overrides, a missing data file as ``${data.KEY}``, the user's,
    and the grid's protocol settings the user's model substitution keeps)."""
    return shlex.join(["python", "-m", "esgexp", *(job.shown or job.overrides), *grid.extra, *job.kept])


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
        "kept": job.kept,
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
        published={f"data.{k}": published(grid.data[k], grid, k) for k in job.data_keys if grid.data.get(k)},
    )
    scored = scored_file(ran)
    if scored:
        out["predictions"] = scored
    fallback = generic_fallback(metrics)
    if fallback:
        out.update(generic_fallback=fallback, collapsed=metrics["query/n_uninformed"] == metrics.get("n_queries"))
    if metrics and metrics.get("served_model"):
        out["served_model"] = metrics["served_model"]
    unpinned = moving_alias(ran, metrics) if job_uses_model(ran) else ""
    out["substitutions"] = changed + data_substitutions(job, grid) + [text for text in (fallback, unpinned) if text]
    return out


def scored_file(ran: DictConfig) -> dict | None:
    """The predictions file a scoring job scored (``predictions``, its kind's input): its path, sha256 and, when
    its bytes are a registry file's, that entry (``registry``); None for a job that scores none."""
    path = ran.get("predictions") if "predictions" in kind_of(ran.task).inputs(ran) else None
    if not path:
        return None
    return {"path": str(path), "sha256": digest(str(path)), "registry": published_as(str(path))}


def moving_alias(ran: DictConfig, metrics: dict | None) -> str:
    """For a model reached through a provider's moving alias (``model.alias.moving``: deepseek-reasoner): why the
    run need not be the paper's model, unless every reply named one of the alias's ``dated_ids``; "" otherwise."""
    alias = ran.model.get("alias") or {}
    if not alias.get("moving"):
        return ""
    served = [name for name in str((metrics or {}).get("served_model") or "").split(", ") if name]
    if served and set(served) <= set(alias.get("dated_ids") or []):
        return ""
    name = ran.backend.get("model") or ran.model.get("hub_id") or ran.model.name
    said = f"the replies name {', '.join(served)}" if served else "no reply named the model that served it"
    return (
        f"model {ran.model.name} ran through the moving alias {name} ({said}, not a dated id of the paper's model); "
        f"when the paper ran it served {alias.get('when_paper_ran') or 'a model not recorded'}"
    )


def generic_fallback(metrics: dict | None) -> str:
    """For an informed ClimRetrieve query (inf_3, inf_all): the queries whose explanation is the generic one, no
    other report having an annotated passage for their question (a file with one report: all of them, so the cell
    is generic's); "" when there are none."""
    uninformed = (metrics or {}).get("query/n_uninformed")
    if not uninformed:
        return ""
    total = metrics.get("n_queries")
    if uninformed == total:
        return (
            f"all {total} queries have the generic explanation (no other report has an annotated passage for their "
            "question): the query texts are generic's, the variants collapse"
        )
    return f"{uninformed} of {total} queries have the generic explanation (no other report has an annotated passage)"


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
