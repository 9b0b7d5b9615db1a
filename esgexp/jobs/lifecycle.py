"""What every job shares: the config check, its identity, the run folder, one MLflow run, and the one
order of steps (``run_steps``) each job kind (a ``Job``) fills in."""

from __future__ import annotations

import hashlib
import json
import logging
from abc import ABC, abstractmethod
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from esgexp.core import tracking
from esgexp.core.config import flatten
from esgexp.core.outputs import write_atomic, write_json
from esgexp.core.run_folder import held_run_folder
from esgexp.errors import UserError
from esgexp.jobs.identity import job_identity

log = logging.getLogger(__name__)


class Job(ABC):
    """One job kind: what it loads, its tags (its run name is made of them, esgexp/tasks/kinds.py), its work inside the tracked run (asking, scoring)
    and its summary; ``run_steps`` calls these steps in one fixed order."""

    files: tuple[str, ...] = ()  # run-folder files logged beside config.yaml and metrics.json
    step_metric: str | None = None  # the metric whose value is the step the metrics are logged at
    writes = True  # False on a multi-process job's ranks other than 0: no file, no tracked run

    def __init__(self, cfg: DictConfig, kind=None):
        self.cfg = cfg
        self.kind = (
            kind  # its TaskKind (esgexp/tasks/kinds.py): run label, prompts class, records file; a build has none
        )

    @property
    def output_dir(self) -> Path:
        return Path(self.cfg.paths.output_dir)

    @abstractmethod
    def load(self) -> list[str]:
        """Load and check the inputs, before any file is written; return the skipped-row messages."""

    def save(self, skipped: list[str]) -> None:
        save_inputs(self.cfg, self.output_dir, skipped)

    def tags(self) -> dict:
        """The kind's own tags, beside those of ``job_tags``."""
        return {}

    def run_tags(self) -> dict[str, str]:
        """The tags of its tracked run: those every run carries (``job_tags``) and the kind's own."""
        return job_tags(self.cfg, self.output_dir, **self.tags())

    def run_name(self, tags: dict) -> str:
        """Its tracked run's name, made of its tags (the kind's run label)."""
        return self.kind.run_label(tags)

    @abstractmethod
    def work(self, run: tracking.TrackedRun | None) -> tuple[dict, dict] | None:
        """The job's work inside the tracked run (None where ``writes`` is False); its metrics and info tags."""

    def finished(self, run: tracking.TrackedRun, metrics: dict) -> None:  # noqa: B027 (an optional step)
        """After the metrics and files are logged, inside the tracked run (an error here marks it FAILED)."""

    @abstractmethod
    def summary(self, metrics: dict) -> tuple[str, list[tuple[str, str]]]:
        """The title and rows of the table printed at the end."""

    def report(self, run: tracking.TrackedRun, metrics: dict) -> None:
        print(summary_table(*self.summary(metrics), run))


def run_steps(job: Job) -> dict:
    """Check the config, load, save the inputs, open the tracked run, work, finish, print the summary;
    return the metrics ({} on a rank that does not write)."""
    check_config(job.cfg)
    check_input_files(job.cfg, job.kind)
    skipped = job.load()
    if not job.writes:
        job.work(None)
        return {}
    with held_run_folder(Path(job.cfg.paths.output_dir)):
        job.save(skipped)
        tags = job.run_tags()
        with tracked_run(job.cfg, job.run_name(tags), tags) as run:
            metrics, info = job.work(run)
            finish(run, metrics, list(job.files), info, metrics[job.step_metric] if job.step_metric else None)
            job.finished(run, metrics)
    job.report(run, metrics)
    return metrics


def check_config(cfg: DictConfig) -> Path:
    """Fail early on a mandatory value left unset, a bad setting (esgexp/jobs/settings.py), a setting that needs
    a GPU this machine lacks (before any weights are converted or loaded) or a tracking server that does not
    answer; return the run folder."""
    from esgexp.jobs.settings import check_device, check_settings

    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise UserError(
            f"Missing mandatory value: {', '.join(missing)} (set it on the command line, e.g. {missing[0]}=...)"
        )
    check_settings(cfg)
    check_device(cfg)
    tracking.check_tracking(cfg.tracking, offline_hint=True)
    return Path(cfg.paths.output_dir)


def input_files(cfg: DictConfig, kind=None) -> list[tuple[str, Path]]:
    """The data files a composed job reads, each with the setting that names it: ``dataset.path`` (for a folder
    dataset with splits, SustainableQA's, its ``<split>.json`` files: the evaluated split and the few-shot
    examples' split) and its task ``kind``'s inputs (predictions, core questions; a build has no kind)."""
    dataset = cfg.dataset.get("path") if not cfg.dataset.get("hf_id") else None
    found = [("dataset.path", Path(str(dataset)))] if dataset else []
    if dataset and cfg.dataset.get("split") and (Path(str(dataset)).is_dir() or not Path(str(dataset)).suffix):
        splits = dict.fromkeys(s for s in (cfg.dataset.split, (cfg.get("strategy") or {}).get("split")) if s)
        found = [("dataset.path", Path(str(dataset)) / f"{split}.json") for split in splits]
    keys = kind.inputs(cfg) if kind is not None else ()
    return found + [(key, Path(str(value))) for key in keys if (value := OmegaConf.select(cfg, key))]


def check_input_files(cfg: DictConfig, kind=None) -> None:
    """Registry files (conf/data/) the job reads and lacks: downloaded and verified with ``data.download=true``,
    else one error naming the ``esgexp-data get`` command; a Git LFS pointer given as data is refused
    (esgexp/data/fetch.py)."""
    from esgexp.data.fetch import FetchSettings, check_inputs

    if "data" in cfg:
        check_inputs(input_files(cfg, kind), FetchSettings.of(cfg))


def same_job(cfg: DictConfig, run_dir: Path) -> bool:
    config_file = run_dir / "config.yaml"
    return config_file.is_file() and job_identity(OmegaConf.load(config_file)) == job_identity(cfg)


def job_backend(cfg: DictConfig, kind: str):
    """The job's model backend (``backend`` node, for the ``model`` node) behind the request cache
    (``cache`` mode); refused here, before any work, when it cannot answer requests of ``kind``."""
    from esgexp.backends import make_backend
    from esgexp.backends.base import RunContext

    context = RunContext(
        cache_dir=cfg.paths.cache_dir, tracking_uri=cfg.tracking.uri, seed=cfg.seed, output_dir=cfg.paths.output_dir
    )
    backend = make_backend(cfg.backend, cfg.model, context, cfg.paths.request_cache, cfg.cache)
    if not backend.supports(kind):
        backend.close()
        raise UserError(f"backend={cfg.backend.name} cannot answer {kind} requests for model {cfg.model.name!r}")
    return backend


def job_tags(cfg: DictConfig, output_dir: Path, **extra: str) -> dict[str, str]:
    """Tags every run carries (the leaderboard reads them), plus the task's own."""
    tags = {
        "task": cfg.task,
        "dataset": cfg.dataset.name,
        "config_hash": job_identity(cfg)[:16],
        "git_commit": tracking.git_commit(cfg.paths.root_dir),
        "run_dir": str(output_dir),
        "versions": package_versions(OmegaConf.select(cfg, "backend._target_", default=None), cfg.get("retriever")),
    }
    digest = data_sha256(cfg.dataset.get("path"))
    if digest:
        tags["data_sha256"] = digest
    built = data_provenance(cfg.dataset.get("path"))
    if built:
        tags["data_provenance"] = built
    if cfg.get("judge"):  # judge=...: its model, backend and prompt version (leaderboard columns)
        from esgexp.eval.judge import judge_tags

        tags.update(judge_tags(cfg))
    tags.update({k: str(v) for k, v in extra.items() if v is not None})
    return tags


# The packages whose version can change any run's outputs (shown on the leaderboard's reproducibility card),
# beside those its backend and retriever declare (``packages`` of their classes). bm25s and
# sentence-transformers (the bm25 and dense retrievers') are named for every run, as they always were.
VERSIONED_PACKAGES = ("esgexp", "torch", "transformers", "peft", "lightning", "bm25s", "sentence-transformers")
TOOL_PACKAGES = ("mlflow", "hydra-core")


def package_versions(backend_target: str | None = None, retriever=None) -> str:
    """``python 3.11.2, torch 2.13.0, ...`` for Python and each installed package of VERSIONED_PACKAGES, the
    backend's ``packages``, those of the classes of a ``retriever`` node, and TOOL_PACKAGES."""
    import platform
    from importlib import metadata

    from esgexp.backends import backend_class

    backend = backend_class(backend_target).packages if backend_target else ()
    if retriever:
        from esgexp.retrieval.factory import packages

        backend += packages(retriever)
    versions = [f"python {platform.python_version()}"]
    for name in dict.fromkeys(VERSIONED_PACKAGES + backend + TOOL_PACKAGES):
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join(versions)


def data_sha256(path: str | None) -> str | None:
    """SHA-256 of the data file at ``path`` (a folder: its files' relative names and bytes, in name
    order); None when there is nothing on disk there (a hub dataset)."""
    if not path:
        return None
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root] if root.is_file() else []
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        if file != root:
            digest.update(str(file.relative_to(root)).encode() + b"\0")
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def data_provenance(path: str | None) -> str | None:
    """One line from the ``provenance.json`` that ``python -m esgexp.build`` wrote beside the dataset at
    ``path`` (builder, corpus hash, model, backend, date, commit); None for a dataset it did not build."""
    if not path:
        return None
    card = Path(path).resolve().parent / "provenance.json"
    try:
        built = json.loads(card.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(built, dict) or built.get("dataset") != str(Path(path).resolve()):
        return None
    corpus = built.get("corpus") or {}
    return (
        f"built by esgexp.build builder={(built.get('builder') or {}).get('name')} from corpus "
        f"{str(corpus.get('corpus_hash', ''))[:16]} ({corpus.get('path')}) with model {built.get('model')} on "
        f"backend {built.get('backend')}, {built.get('created')}, git {str(built.get('git_commit', ''))[:12]}"
    )


def save_inputs(cfg: DictConfig, output_dir: Path, skipped: list[str]) -> None:
    """config.yaml (resolved) and, when rows were skipped, skipped_rows.txt."""
    write_atomic(output_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    if skipped:
        write_atomic(output_dir / "skipped_rows.txt", "\n".join(skipped) + "\n")
        log.info("%d skipped row(s) or item(s), each with why: %s", len(skipped), output_dir / "skipped_rows.txt")


@contextmanager
def tracked_run(cfg: DictConfig, run_name: str, tags: dict):
    """The job's ``tracking.TrackedRun``, with the flattened resolved config as params: an MLflow run, or
    (offline, or once the server stops answering) its record in the run folder for ``python -m esgexp.sync``."""
    run = tracking.TrackedRun(cfg.tracking, Path(cfg.paths.output_dir), cfg.experiment_name, run_name)
    with run.open(flatten(cfg), tags):
        yield run


def finish(
    run: tracking.TrackedRun, metrics: dict, files: list[str], info: dict | None = None, step: int | None = None
) -> None:
    """Write metrics.json in the run folder, then log metrics (at ``step``), ``info`` tags and the run-folder files to ``run``."""
    write_json(run.run_dir / "metrics.json", metrics)
    run.log_metrics(metrics, step)
    run.set_tags(info or {})
    for name in ["config.yaml", "metrics.json", *files]:
        run.log_artifact(run.run_dir / name)


def summary_table(title: str, rows: list[tuple[str, str]], run: tracking.TrackedRun) -> str:
    """The short table printed at the end of a job, with its run folder and where it is tracked (or not yet)."""
    width = max(len(name) for name, _ in rows)
    lines = [title, "-" * len(title)] + [f"{name:<{width}}  {value:>7}" for name, value in rows]
    lines += [f"run folder: {run.run_dir}", run.summary_line()]
    return "\n".join(lines)


def rate(value: float) -> str:
    return f"{value:.3f}"
