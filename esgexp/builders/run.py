"""One build: corpus folder -> builder stages -> dataset folder, as one tracked MLflow run.

The build folder (``out``) holds the dataset file(s), ``build_report.json`` (counts per stage),
``provenance.json`` (corpus hash, builder config, model and backend identity, date),
``rejected.jsonl`` (every discarded item with its stage, reason and raw output) and ``config.yaml``.
Every request goes through the job's backend behind the request cache, so a build killed midway is
rerun with ``resume=true`` into the same folder and asks only what was not answered yet; rerunning a
finished build asks nothing.
"""

from __future__ import annotations

import datetime
import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from esgexp.builders.context import BuildContext
from esgexp.builders.generate import StructuredGenerator
from esgexp.builders.report import BuildReport
from esgexp.core import tracking
from esgexp.core.config import CONF_DIR
from esgexp.core.outputs import write_atomic, write_json
from esgexp.core.run_folder import LOCK_NAME
from esgexp.data.corpus import INGEST_HINT, Corpus
from esgexp.errors import UserError
from esgexp.jobs.lifecycle import Job, job_backend, package_versions, run_steps

log = logging.getLogger(__name__)

REPORT_FILE = "build_report.json"
PROVENANCE_FILE = "provenance.json"
REJECTED_FILE = "rejected.jsonl"


def run_build(cfg: DictConfig) -> Path:
    """Build the dataset ``cfg.builder`` describes from ``cfg.corpus``; returns the path ``dataset.path`` takes."""
    job = BuildJob(cfg)
    run_steps(job)
    return job.dataset


class BuildJob(Job):
    """A build through the lifecycle every job has (esgexp/jobs/lifecycle.run_steps): the corpus and the builder
    loaded and checked, one tracked run, the build inside it with the job's backend; no task kind names it."""

    def load(self) -> list[str]:
        from hydra.utils import instantiate

        self.out_dir = self.output_dir.resolve()
        check_out_dir(self.out_dir, self.cfg.resume)
        self.corpus = load_corpus(self.cfg.corpus)
        self.builder = instantiate(self.cfg.builder, _convert_="all")
        return []

    def save(self, skipped: list[str]) -> None:
        """Nothing yet: config.yaml is written once the backend is ready, so a build that fails before it asks
        anything leaves no file behind."""

    def run_tags(self) -> dict[str, str]:
        return {
            "task": "build",
            "builder": self.cfg.builder.name,
            "corpus_hash": self.corpus.hash[:16],
            "git_commit": tracking.git_commit(self.cfg.paths.root_dir),
            "run_dir": str(self.out_dir),
        }

    def run_name(self, tags: dict) -> str:
        return f"build-{self.cfg.builder.name}-{self.cfg.model.name}"

    def work(self, run: tracking.TrackedRun) -> tuple[dict, dict]:
        cfg, out_dir, report = self.cfg, self.out_dir, BuildReport()
        with job_backend(cfg, "generate") as backend:
            write_atomic(out_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
            (out_dir / REJECTED_FILE).unlink(missing_ok=True)  # a resumed build writes its rejections anew
            generator = StructuredGenerator(backend, self.builder.max_new_tokens, out_dir / REJECTED_FILE, cfg.progress)
            solvers = Solvers(cfg)
            try:
                context = BuildContext(generator, report, out_dir, cfg.seed, solvers.get)
                self.dataset = dataset = self.builder.build(self.corpus, context)
            finally:
                write_json(out_dir / REPORT_FILE, {**report.to_dict(), "requests": backend.stats(), **solvers.stats()})
                solvers.close()
            n_items = report.n_items
            if not n_items:
                raise UserError(
                    f"no item survived the build (counts per stage in {out_dir / REPORT_FILE}, "
                    f"every discarded item with its reason in {out_dir / REJECTED_FILE})"
                )
            write_json(out_dir / PROVENANCE_FILE, provenance(cfg, self.corpus, backend, dataset, n_items))
            requests = {f"requests/{k}": v for k, v in backend.stats().items()}
        self.files = (REPORT_FILE, PROVENANCE_FILE, REJECTED_FILE, *dataset_files(out_dir, dataset))
        return {**report.metrics(), "n_items": n_items, **requests}, {"dataset_path": str(dataset)}

    def summary(self, metrics: dict) -> tuple[str, list[tuple[str, str]]]:
        return f"build {self.cfg.builder.name}", [("items", str(metrics["n_items"]))]

    def report(self, run: tracking.TrackedRun, metrics: dict) -> None:
        """Nothing: the command prints the dataset's path."""


class Solvers:
    """Backends for other models by config name (``conf/model/<name>.yaml``) on the build's backend node, each
    made once and behind the request cache; an unknown name is a UserError naming the key and the choices."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.backends: dict = {}

    def get(self, name: str):
        if name not in self.backends:
            from esgexp.backends import make_backend
            from esgexp.backends.base import RunContext

            path = CONF_DIR / "model" / f"{name}.yaml"
            if not path.is_file():
                known = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
                raise UserError(f"builder.solvers: no model config {name!r} (conf/model/{name}.yaml); known: {known}")
            model = OmegaConf.merge({"adapter": None, "load_in_4bit": False}, OmegaConf.load(path))
            model.pop("defaults", None)
            context = RunContext(
                cache_dir=self.cfg.paths.cache_dir, tracking_uri=self.cfg.tracking.uri, seed=self.cfg.seed
            )
            self.backends[name] = make_backend(
                self.cfg.backend, model, context, self.cfg.paths.request_cache, self.cfg.cache
            )
        return self.backends[name]

    def stats(self) -> dict:
        return (
            {"solver_requests": {name: backend.stats() for name, backend in self.backends.items()}}
            if self.backends
            else {}
        )

    def close(self) -> None:
        for backend in self.backends.values():
            backend.close()


def check_out_dir(out_dir: Path, resume: bool) -> None:
    """A new build needs an empty (or absent) folder; ``resume=true`` reuses one a build started, and only
    that: a folder of another kind (a job's run folder, anything else) is never written into."""
    if not out_dir.exists() or not any(p.name != LOCK_NAME for p in out_dir.iterdir()):  # the job's own lock
        out_dir.mkdir(parents=True, exist_ok=True)
        return
    kind = folder_kind(out_dir)
    if kind != "build":
        raise UserError(f"output folder {out_dir} is not empty and holds {kind}: set out=NEW_DIR")
    if not resume:
        held = "a finished build" if (out_dir / PROVENANCE_FILE).is_file() else "a build that did not finish"
        raise UserError(
            f"output folder {out_dir} holds {held}: resume=true continues it there, asking the model only what "
            "the request cache lacks, or set out=NEW_DIR"
        )


def folder_kind(folder: Path) -> str:
    """``"build"`` when ``folder``'s config.yaml is a build's (it names a builder), else what the folder holds,
    for a message: a job's run folder (its task), or no build."""
    import yaml

    try:
        config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        config = None
    if isinstance(config, dict) and "builder" in config:
        return "build"
    if isinstance(config, dict) and "task" in config:
        return f"a job's run folder (task={config['task']}), not a build"
    if (folder / "predictions.jsonl").is_file() or (folder / "metrics.json").is_file():
        return "a job's run folder, not a build"
    return "no build"


def load_corpus(path: str) -> Corpus:
    """The ingested corpus folder, which must exist and hold passages."""
    folder = Path(path)
    if not folder.is_dir():
        raise UserError(
            f"corpus folder not found: {folder} (corpus=PATH, the folder `python -m esgexp.ingest` printed); {INGEST_HINT}"
        )
    corpus = Corpus.load(folder)
    if not corpus.passages:
        raise UserError(f"corpus {folder} has no passages: its documents gave no text; {INGEST_HINT}")
    return corpus


def provenance(cfg: DictConfig, corpus: Corpus, backend, dataset: Path, n_items: int) -> dict:
    """The dataset's card: where it came from and what made it."""
    return {
        "dataset": str(dataset),
        "n_items": n_items,
        "builder": OmegaConf.to_container(cfg.builder, resolve=True),
        "corpus": {
            "path": str(Path(cfg.corpus).resolve()),
            "corpus_hash": corpus.hash,
            "n_documents": len(corpus.doc_ids),
            "n_passages": len(corpus.passages),
        },
        "model": cfg.model.name,
        "backend": cfg.backend.name,
        "backend_identity": backend.identity(),
        "seed": cfg.seed,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": tracking.git_commit(cfg.paths.root_dir),
        "versions": package_versions(OmegaConf.select(cfg, "backend._target_", default=None)),
    }


def dataset_files(out_dir: Path, dataset: Path) -> list[str]:
    """The dataset's file names in the build folder (the file itself, or a folder's files)."""
    if dataset.is_dir():
        return sorted(str(p.relative_to(out_dir)) for p in dataset.iterdir() if p.is_file())
    return [str(dataset.relative_to(out_dir))]
