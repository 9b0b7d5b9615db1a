"""A paper table's grid: ``conf/paper/<name>.yaml`` -> the ordinary esgexp jobs that fill its cells.

A grid file has ``cells`` (the published cells, esgexp/papers/tables/), ``scale`` (published = ours × scale;
a column may set its own), ``data`` (the table's data files: ``about``, ``candidates``, and optionally ``items``,
the item count of the paper's own file, and ``sha256``, digests of files that are the paper's besides the
registry's). The default of ``data.<key>`` is the registry's file for it (conf/data/: the files that serve
``<table> data.<key>`` at the first candidate's place) when it is there or ``data.download=true`` gets it, else
the first candidate that exists. ``base`` (overrides of every job), ``rows`` (row label -> overrides),
``columns`` (column label -> ``overrides``, or ``variants``: several override lists whose values the cell
averages, ``scale``), ``rescored`` (true: the jobs re-score the paper's own predictions), ``scorer`` (for a re-scored
table: the paper's own scorer's ``name``, the ``digits`` it prints and the ``metrics`` it prints, glob patterns) and
``beside`` (label -> metrics key prefix shown next to each cell's metric). A job is base + row + one column variant; columns with
equal overrides share it. Jobs that serve only cells the paper does not publish are left out unless ``rows=`` or
``columns=`` name them.

Each job is composed (as ``python -m esgexp`` would) and checked: its configs exist, its data files and the
run's input checks on them, model weights (in the Hugging Face cache), API keys; a job that cannot run here says
why and the rest run. A model the command's ``overrides=`` substitute keeps the grid job's PROTOCOL settings
unless those overrides name them; an override no job takes is a UserError.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from esgexp.core.config import CONF_DIR
from esgexp.data.fetch import SETTINGS, FetchSettings, fetch, get_command
from esgexp.data.registry import RegistryFile, serving
from esgexp.errors import UserError
from esgexp.papers.cells import Cell, load_cells
from esgexp.tasks.kinds import kind_of

DATA_REF = re.compile(r"\$\{data\.(\w+)\}")
PLAIN_VALUE = re.compile(r"^[\w/.\-+@:~]*$")
# The model settings that are the grid's protocol, not the model's own: how the prompt is sent (raw or as a turn of
# the chat template), whether a <think> turn is expected and its budget. A model that ``overrides=[model=...]``
# substitutes runs with the grid's values of these unless the override names them.
PROTOCOL = ("model.chat_template", "model.reasoning", "model.generation.max_new_tokens")


@dataclass(eq=False)
class Job:
    """One esgexp job of the grid: ``overrides`` (data paths filled in), the cells it serves as
    ``(row, column)`` pairs, why it cannot run here (``problems``) and its composed config."""

    id: str
    row: str
    overrides: list[str]
    cells: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    cfg: DictConfig | None = None
    shown: list[str] = field(default_factory=list)  # overrides as listed: a missing data file stays ${data.KEY}
    data_keys: list[str] = field(default_factory=list)  # the table's data files the job reads
    missing_data: list[str] = field(default_factory=list)  # the data problems among ``problems``
    grid_cfg: DictConfig | None = None  # composed without the user's overrides: what the paper's cell asks for
    unusable_data: list[str] = field(default_factory=list)  # data there that fails the run's input checks
    refused: str = ""  # why the job does not compose with the command's overrides (Hydra's message)
    kept: list[str] = field(default_factory=list)  # the grid's PROTOCOL settings a substituted model is given

    @property
    def runnable(self) -> bool:
        return not self.problems

    @property
    def experiment(self) -> str:
        return str(self.cfg.experiment_name) if self.cfg is not None else "paper"


@dataclass
class Column:
    label: str
    variants: list[list[str]]
    scale: float


@dataclass
class Grid:
    """The table's published cells, its columns and jobs, and the data files chosen."""

    name: str
    title: str
    cells: list[Cell]
    rows: list[str]
    columns: dict[str, Column]
    jobs: list[Job]
    data: dict[str, str | None]
    data_spec: dict = field(default_factory=dict)  # the grid's ``data`` entries (about, candidates, items, sha256)
    data_hints: dict[str, str] = field(default_factory=dict)  # key -> the command that gets the paper's file
    extra: list[str] = field(default_factory=list)  # the user's overrides of every job
    rescored: bool = False
    scorer: dict = field(default_factory=dict)  # the paper's own scorer: name, digits printed, metrics printed
    beside: dict[str, str] = field(default_factory=dict)
    left_out: dict[tuple[str, str], str] = field(default_factory=dict)  # (row, column) -> why no job serves it

    def jobs_of(self, row: str, column: str) -> list[Job]:
        """The jobs whose results make the cell (one, or one per variant)."""
        return [job for job in self.jobs if (row, column) in job.cells]


def grid_file(name: str) -> Path:
    path = CONF_DIR / "paper" / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in (CONF_DIR / "paper").glob("*.yaml")))
        raise UserError(f"table={name}: no grid conf/paper/{name}.yaml (tables: {known})")
    return path


def quote(value: str) -> str:
    """``value`` as a Hydra override value: quoted when it holds a space, a quote or another special character."""
    if PLAIN_VALUE.match(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def choose_data(spec: DictConfig, given: dict, table: str, settings: FetchSettings) -> tuple[dict, dict]:
    """``data.<key>`` as given; else the registry's file(s) for it at the first candidate's place (present, or
    downloaded and verified when ``settings.download`` or a mirror is set); else the first candidate that
    exists (None: none does). Also, for each key the registry serves, how to get the paper's file."""
    known = dict(spec.get("data") or {})
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise UserError(f"data.{unknown[0]} is not a data file of this table (its data files: {', '.join(known)})")
    chosen, hints = {}, {}
    for key, about in known.items():
        candidates = [os.path.normpath(str(c)) for c in (about.get("candidates") or [])]
        published = registry_files(table, key, candidates, settings.data_dir)
        if published:
            url = published[0].sources[0].location(dict(settings.hosts))
            hints[key] = f"`{get_command(published, settings.named_dir)}` (from {url}) or data.download=true"
        if given.get(key):
            chosen[key] = str(given[key])
            continue
        if published and (settings.download or settings.mirror):
            try:
                for file in published:
                    fetch(file, settings)
            except UserError as error:  # the jobs that read it cannot run, and say why
                hints[key] += f" (the download failed: {error})"
        chosen[key] = next((c for c in candidates if Path(c).exists()), None)
    return chosen, hints


def registry_files(table: str, key: str, candidates: list[str], data_dir: Path) -> list[RegistryFile]:
    """The registry's files for ``data.<key>`` of ``table`` at the first candidate's place: that file, or the
    files in that folder (SustainableQA's splits)."""
    place = Path(candidates[0]).absolute() if candidates else None
    found = serving(f"{table} data.{key}")
    return [f for f in found if place in (f.local(data_dir).absolute(), f.local(data_dir).absolute().parent)]


def load_grid(cfg: DictConfig, check: bool = True) -> Grid:
    """The grid of ``cfg.table`` (the paper command's config) with its jobs composed and checked (``check=False``:
    only the job list, its data and config files checked; composing takes about 0.2-1 s a job)."""
    name = str(cfg.table)
    spec = OmegaConf.load(grid_file(name))
    root = cfg.copy()
    OmegaConf.set_struct(root, False)
    root.grid = spec
    given = {k: v for k, v in (OmegaConf.to_container(cfg.data) or {}).items() if k not in SETTINGS}
    settings = FetchSettings.of(cfg)
    data, hints = choose_data(root.grid, given, name, settings)
    for key, value in data.items():
        root.data[key] = quote(value) if value else "null"  # a job that reads it is listed as not runnable
    raw = OmegaConf.to_container(spec)  # overrides as written (${data.KEY} unresolved): a job's identity
    resolved = OmegaConf.to_container(root.grid, resolve=True)
    columns = {
        label: Column(
            label,
            [list(v) for v in (col.get("variants") or [col.get("overrides") or []])],
            float(col.get("scale", resolved.get("scale", 1))),
        )
        for label, col in (resolved.get("columns") or {}).items()
    }
    rows = chosen(cfg.rows, list(resolved.get("rows") or {}), "rows", name)
    columns = {label: columns[label] for label in chosen(cfg.columns, list(columns), "columns", name)}
    grid = Grid(
        name,
        str(spec.get("title", name)),
        load_cells(str(spec.cells)),
        rows,
        columns,
        [],
        data,
        data_spec=resolved.get("data") or {},
        data_hints=hints,
        extra=[str(o) for o in cfg.overrides if not str(o).startswith("hydra")],
        rescored=bool(spec.get("rescored", False)),
        scorer=OmegaConf.to_container(spec.scorer) if spec.get("scorer") else {},
        beside={str(k): str(v) for k, v in (spec.get("beside") or {}).items()},
    )
    grid.jobs = grid_jobs(grid, raw, resolved)
    if cfg.rows is None and cfg.columns is None:
        leave_out_unpublished(grid)
    if not check:
        for job in grid.jobs:
            job.problems += missing_configs(job.overrides)
        return grid
    paths = []
    if Path(cfg.paths.root_dir).resolve() != Path.cwd().resolve():  # the jobs run there (esgexp/cli/paper.py)
        paths.append(f"paths.root_dir={quote(str(cfg.paths.root_dir))}")
    compose_jobs(grid.jobs, [*grid.extra, *paths], paths if grid.extra else None)
    refused_overrides(grid)
    return grid


def grid_jobs(grid: Grid, raw: dict, resolved: dict) -> list[Job]:
    """The jobs of the chosen rows and columns (base + row + column variant; equal overrides share a job),
    ``raw`` and ``resolved`` being the grid file as written and with its data paths filled in."""
    raw_columns = {
        label: [list(v) for v in (col.get("variants") or [col.get("overrides") or []])]
        for label, col in (raw.get("columns") or {}).items()
    }
    jobs: dict[str, Job] = {}
    for row in grid.rows:
        for label, column in grid.columns.items():
            for variant, raw_variant in zip(column.variants, raw_columns[label]):
                symbolic = [*raw.get("base", []), *raw["rows"][row], *raw_variant]
                job_id = "j" + hashlib.sha256(json.dumps(symbolic).encode()).hexdigest()[:10]
                if job_id not in jobs:
                    jobs[job_id] = new_job(
                        job_id, row, symbolic, [*resolved.get("base", []), *resolved["rows"][row], *variant], grid
                    )
                jobs[job_id].cells.append((row, label))
    return list(jobs.values())


def new_job(job_id: str, row: str, symbolic: list[str], overrides: list[str], grid: Grid) -> Job:
    """A job with the data files its ``symbolic`` overrides read; one that is missing is its problem."""
    keys = list(dict.fromkeys(key for text in symbolic for key in DATA_REF.findall(text)))
    missing = [key for key in keys if not grid.data.get(key)]
    shown = [
        DATA_REF.sub(lambda m: quote(grid.data[m.group(1)]) if grid.data.get(m.group(1)) else m.group(0), text)
        for text in symbolic
    ]
    job = Job(job_id, row, overrides, shown=shown, data_keys=keys)
    job.missing_data = [data_problem(key, grid.data_spec[key], grid.data_hints.get(key)) for key in missing]
    job.problems += job.missing_data
    return job


def leave_out_unpublished(grid: Grid) -> None:
    """Drop the jobs whose every cell the paper leaves empty (ESGenius's API models under RAG: "–"), so a run
    does not pay for them; each such cell says why."""
    published = {(c.row, c.column) for c in grid.cells}
    kept = []
    for job in grid.jobs:
        if any(cell in published for cell in job.cells):
            kept.append(job)
            continue
        for cell in job.cells:
            grid.left_out[cell] = "left out: the paper publishes no value here (name it in rows= or columns= to run it)"
    grid.jobs = kept


def chosen(wanted, labels: list[str], what: str, table: str) -> list[str]:
    """The ``wanted`` labels (all when None), in the paper's order; an unknown one is a UserError."""
    if wanted is None:
        return labels
    wanted = [str(w) for w in ([wanted] if isinstance(wanted, str) else wanted)]
    unknown = [w for w in wanted if w not in labels]
    if unknown:
        raise UserError(f"{what}: {unknown[0]!r} is not one of the {what} of {table} ({', '.join(labels)})")
    return [label for label in labels if label in wanted]


def data_problem(key: str, resolved: dict, hint: str | None) -> str:
    tried = ", ".join(resolved.get("candidates") or []) or "no default"
    got = f"get the paper's with {hint}, or " if hint else ""
    return f"data.{key} not found: {got}pass data.{key}=PATH ({resolved.get('about', '')}; looked at: {tried})"


def compose_jobs(jobs: list[Job], extra: list[str], plain: list[str] | None = None) -> None:
    """Compose each job's config as ``python -m esgexp`` would (with ``extra``) and record why it cannot run
    here; with ``plain`` (the overrides that change nothing the cell measures) also its ``grid_cfg``, and the
    command's overrides (``extra`` less ``plain``) that a job cannot take are its ``refused``."""
    from hydra import compose, initialize_config_dir

    loaded: dict = {}  # each dataset read once for the input checks
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        for job in jobs:
            missing = missing_configs(job.overrides)
            if missing:
                job.problems += missing
                continue
            try:
                job.grid_cfg = compose("config", overrides=[*job.overrides, *(extra if plain is None else plain)])
            except Exception as error:  # a bad override of the grid's: Hydra's message names it
                job.problems.append(f"config: {str(error).splitlines()[0]}")
                continue
            try:
                job.cfg = job.grid_cfg if plain is None else compose("config", overrides=[*job.overrides, *extra])
                kept = kept_protocol(job.grid_cfg, job.cfg, extra)
                if kept:  # the substituted model under the grid's protocol: these join the job's overrides
                    job.overrides, job.kept = [*job.overrides, *kept], kept
                    job.cfg = compose("config", overrides=[*job.overrides, *extra])
            except Exception as error:  # one of the command's overrides does not fit this job
                job.cfg, job.refused = None, hydra_message(error)
                job.problems.append(f"config: {job.refused}")
                continue
            if not job.problems:
                found = missing_files(job.cfg)
                job.missing_data += found
                job.problems += found
            if not job.problems:
                job.unusable_data = input_problems(job.cfg, loaded)
                job.problems += job.unusable_data + job_problems(job.cfg)


def hydra_message(error: Exception) -> str:
    """Hydra's composition error in one line, with its cause (``Could not override 'dataset.limt' (Key 'limt'
    is not in struct)``)."""
    text = str(error).splitlines()[0].rstrip(".")
    cause = str(error.__cause__).splitlines()[0] if error.__cause__ else ""
    return f"{text} ({cause})" if cause else text


def refused_overrides(grid: Grid) -> None:
    """A UserError when no job of the table takes the command's ``overrides=`` (a misspelt key, an option
    that is not there) though some compose without them; whether the table's data is there or not."""
    tried = [job for job in grid.jobs if job.grid_cfg is not None or job.refused]
    if grid.extra and tried and all(job.refused for job in tried):
        raise UserError(
            f"overrides=[{', '.join(grid.extra)}]: no job of table {grid.name} takes them: {tried[0].refused}"
        )


def input_problems(cfg: DictConfig, loaded: dict) -> list[str]:
    """Why the job's data, though there, cannot serve it: the input checks its run makes before it asks
    anything (the dataset reads; a generation job's items suit its task and strategy, esgexp/tasks/generation.py
    ``asked_items``); ``loaded`` keeps each dataset read once."""
    from esgexp.papers.estimate import loaded as load_dataset

    kind = kind_of(cfg.task)
    try:
        data = load_dataset(cfg, loaded)
        if kind.prompts:
            from esgexp.tasks.generation import asked_items, make_task

            asked_items(cfg, make_task(cfg), data)
    except UserError as error:
        return [f"inputs: {error}"]
    return []


def kept_protocol(asked: DictConfig, cfg: DictConfig, extra: list[str]) -> list[str]:
    """The overrides that give ``cfg`` (the job with the command's ``extra`` overrides) the PROTOCOL settings of
    ``asked`` (the grid's job) where ``extra`` changed them without naming them (``model=smollm2-135m`` brings
    its own ``chat_template: true``); none for a job that asks no model."""
    if not kind_of(cfg.task).uses_model(cfg):
        return []
    named = [o.lstrip("+~").partition("=")[0] for o in extra]
    named = [key for key in named if not (CONF_DIR / key).is_dir()]  # a group choice (model=...) names no setting
    kept = []
    for key in PROTOCOL:
        want = OmegaConf.select(asked, key)
        if want != OmegaConf.select(cfg, key) and not any(key == n or key.startswith(n + ".") for n in named):
            kept.append(f"{key}={json.dumps(want)}")
    return kept


def missing_configs(overrides: list[str]) -> list[str]:
    """``conf/<group>/<option>.yaml`` files that an override ``group=option`` names and that do not exist."""
    found = []
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if "." in key or not value or not (CONF_DIR / key).is_dir():
            continue
        if not (CONF_DIR / key / f"{value}.yaml").is_file():
            found.append(f"no config conf/{key}/{value}.yaml ({key}={value} is not written yet)")
    return found


def missing_files(cfg: DictConfig) -> list[str]:
    """The data files a composed job reads that are not there, each named (esgexp/jobs/lifecycle.input_files)."""
    from esgexp.jobs.lifecycle import input_files

    return [f"{key}: {path} does not exist" for key, path in input_files(cfg, kind_of(cfg.task)) if not path.exists()]


def job_problems(cfg: DictConfig) -> list[str]:
    """Why a composed job cannot run on this machine (its data files aside): model weights or API key, retriever."""
    problems = []
    kind = kind_of(cfg.task)
    if kind.uses_model(cfg):
        problems += model_problems(cfg)
    if kind.retrieves:
        from esgexp.retrieval.factory import preflight

        problems += preflight(cfg.retriever)
    return problems


def model_problems(cfg: DictConfig) -> list[str]:
    """Why the job's backend could not answer for its model here (its class's optional modules and
    ``preflight``: weights, a key)."""
    from esgexp.backends import backend_class

    backend = backend_class(cfg.backend._target_)
    return backend.missing_requirements() + backend.preflight(cfg.backend, cfg.model, cfg.paths.cache_dir)


def sweeps(jobs: list[Job]) -> list[tuple[list[Job], list[str], list[str]]]:
    """The runnable jobs as Hydra multiruns: [(jobs, overrides, swept keys)]. Jobs with the same experiment and
    override keys whose values form a full product are one sweep over every varying key (``key=v1,v2``);
    otherwise each sweep varies one key, the others shared. Together the sweeps run exactly these jobs."""
    groups: dict[tuple, list[Job]] = {}
    for job in jobs:
        keys = tuple(o.partition("=")[0] for o in job.overrides)
        groups.setdefault((job.experiment, keys), []).append(job)
    out = []
    for (_, keys), members in groups.items():
        values = [[o.partition("=")[2] for o in job.overrides] for job in members]
        distinct = [list(dict.fromkeys(v[i] for v in values)) for i in range(len(keys))]
        varying = [i for i in range(len(keys)) if len(distinct[i]) > 1]
        if math.prod(len(distinct[i]) for i in varying) == len(members):
            out.append((members, _sweep_overrides(keys, distinct, varying), [keys[i] for i in varying]))
            continue
        # the key to sweep: the one that leaves the fewest groups of equal other values
        sweep_at = min(varying, key=lambda i: len({tuple(v[:i] + v[i + 1 :]) for v in values}))
        by_rest: dict[tuple, list[Job]] = {}
        for job, vals in zip(members, values):
            by_rest.setdefault(tuple(v for i, v in enumerate(vals) if i != sweep_at), []).append(job)
        for group in by_rest.values():
            chosen = [[o.partition("=")[2]] for o in group[0].overrides]
            chosen[sweep_at] = [job.overrides[sweep_at].partition("=")[2] for job in group]
            out.append((group, _sweep_overrides(keys, chosen, [sweep_at]), [keys[sweep_at]]))
    return out


def _sweep_overrides(keys: tuple, values: list[list[str]], swept: list[int]) -> list[str]:
    fixed = [f"{keys[i]}={values[i][0]}" for i in range(len(keys)) if i not in swept]
    return fixed + [f"{keys[i]}={','.join(values[i])}" for i in swept]
