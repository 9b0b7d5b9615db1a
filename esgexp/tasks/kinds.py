"""The task kinds (config key ``task``): what each kind is, declared once, asked by every other part.

A kind says, by concern: what its job does (``TaskKind``: its job class and, for generation kinds, its
prompt/scoring class as ``module:Name`` strings, imported only when used, so composing a config stays fast;
the tags its runs are labelled by; whether it asks a model or trains) and how its runs are scored
(``Scoring``: its per-item records file, the function behind its per-item scores, the settings that change
what a score means, whether it reaches the leaderboard). How its runs are shown is the leaderboard's
(``TASK_FIGURES`` in esgexp/leaderboard/page.py). run.py, compare, the leaderboard, the paper grid and
estimate, settings and dry_run ask ``kind_of(cfg.task)``; none of them switches on the task string. A new
kind is its module plus one ``register(TaskKind(...))`` line below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

from esgexp.errors import UserError


def always(cfg) -> bool:
    return True


def never(cfg) -> bool:
    return False


def explained_queries(cfg) -> bool:
    """A retrieval job asks a model only to write its query explanations (``query.mode=explanation``), and not
    for a retriever that ignores the query text (``retriever=random``)."""
    if (cfg.get("query") or {}).get("mode") != "explanation":
        return False
    from esgexp.retrieval.factory import reads_query

    return reads_query(cfg.retriever)


def no_inputs(cfg) -> tuple[str, ...]:
    return ()


def core_questions(cfg) -> tuple[str, ...]:
    """ClimRetrieve's definition and concept queries are read from the core questions file (only over a
    ClimRetrieve dataset: another refuses those query modes when it runs)."""
    climretrieve = str((cfg.get("dataset") or {}).get("_target_", "")).startswith("esgexp.data.climretrieve.")
    wanted = (cfg.get("query") or {}).get("mode") in ("definition", "concepts")
    return ("query.core_questions",) if climretrieve and wanted else ()


def predictions_file(cfg) -> tuple[str, ...]:
    return ("predictions",)


@dataclass(frozen=True)
class Scoring:
    """How a kind's runs are scored and compared."""

    records: str | None = None  # the per-item file in the run folder (compare, the leaderboard's question matrix)
    item_scores: str | None = None  # "module:function" (records, metric key, config) -> ItemScores | None
    scoring_keys: tuple[str, ...] = ()  # config keys that change what a per-item value means (compare)
    corpus_statistics: bool = False  # some metrics are corpus statistics, not means of the per-item values
    ranked: bool = True  # its runs are scored, so they reach the leaderboard

    def scores(self, records: list[dict], metric: str, config: Mapping):
        """The per-item values behind ``metric`` (``item_scores``); None when it has none."""
        return load(self.item_scores)(records, metric, config) if self.item_scores else None


@dataclass(frozen=True)
class TaskKind:
    """One value of ``task``: what its job does, and how its runs are scored (``scoring``)."""

    name: str
    job: str  # the Job class, "module:Class"
    label: tuple[str, ...]  # the tags a run's name is made of, in order (a run name, a compare or figure label)
    scoring: Scoring = Scoring()
    prompts: str | None = None  # the prompt-and-score class of a generation kind, "module:Class"
    prompt_style: str | None = None  # "mcq" | "qa": the prompt contexts it takes (strategy.context)
    uses_model: Callable = always  # cfg -> whether the job asks a language model
    retrieves: bool = False  # its job searches with ``retriever`` (the paper grid checks the retriever can run)
    trains: bool = False  # a training job: memory plan for training, trainer.max_steps|max_epochs required
    inputs: Callable = no_inputs  # cfg -> config keys of the input files it reads beside dataset.path
    without_model: str = ""  # what it does instead of asking a model, where ``uses_model`` can be False
    estimate: str | None = None  # "module:function" (cfg, loaded) -> Estimate where requests are not item prompts
    prefix: tuple[str, ...] = ()  # fixed words before the label's tags in a run name
    suffix: tuple[str, ...] = ()  # fixed words after them
    judged: bool = False  # its items are open answers an LLM judge can grade (judge=..., esgexp/eval/judge.py)

    def job_class(self):
        return load(self.job)

    def prompts_class(self):
        if self.prompts is None:
            raise UserError(f"task={self.name} does not prompt a model item by item")
        return load(self.prompts)

    def run_label(self, tags: Mapping, sep: str = "/") -> str:
        """The run's name from its tags: e.g. ``smollm2-135m/zero_shot/generate``, ``bm25/question``."""
        parts = [label_value(key, tags.get(key)) for key in self.label]
        return sep.join([*self.prefix, *(p for p in parts if p), *self.suffix])


def label_value(key: str, value) -> str | None:
    """A tag as it appears in a label: a predictions file by its name, not its path."""
    if value in (None, ""):
        return None
    return Path(str(value)).name if key == "predictions" else str(value)


def load(target: str):
    module, _, name = target.partition(":")
    return getattr(import_module(module), name)


KINDS: dict[str, TaskKind] = {}


def register(kind: TaskKind) -> TaskKind:
    KINDS[kind.name] = kind
    return kind


def kind_of(task: str | None) -> TaskKind:
    """The registered kind named ``task``; a UserError naming the kinds there are for any other."""
    if task not in KINDS:
        raise UserError(f"task={task} is not a task kind: choose one of {', '.join(KINDS)}")
    return KINDS[task]


GENERATION = "esgexp.tasks.generation:GenerationJob"
register(
    TaskKind(
        "mcq",
        GENERATION,
        label=("model", "strategy", "scoring"),
        scoring=Scoring(records="predictions.jsonl", item_scores="esgexp.tasks.mcq:item_scores"),
        prompts="esgexp.tasks.mcq:MCQTask",
        prompt_style="mcq",
    )
)
register(
    TaskKind(
        "qa",
        GENERATION,
        label=("model", "strategy", "scoring"),
        scoring=Scoring(
            records="predictions.jsonl",
            item_scores="esgexp.tasks.qa:item_scores",
            scoring_keys=("metrics",),
            corpus_statistics=True,
        ),
        prompts="esgexp.tasks.qa:QATask",
        prompt_style="qa",
        judged=True,
    )
)
register(
    TaskKind(
        "retrieval",
        "esgexp.tasks.retrieval:RetrievalJob",
        label=("retriever", "encoder", "query"),
        scoring=Scoring(
            records="rankings.jsonl",
            item_scores="esgexp.tasks.retrieval:item_scores",
            scoring_keys=("retrieval.threshold",),
        ),
        uses_model=explained_queries,
        retrieves=True,
        inputs=core_questions,
        without_model="retrieval with fixed query texts",
        estimate="esgexp.papers.estimate:explanation_estimate",
    )
)
register(
    TaskKind(
        "esgbench_score",
        "esgexp.tasks.esgbench_score:ScoringJob",
        label=("predictions",),
        prefix=("score",),
        scoring=Scoring(
            records="predictions.jsonl",
            item_scores="esgexp.tasks.esgbench_score:item_scores",
            scoring_keys=("recall_k", "metrics.numeric"),
        ),
        uses_model=never,
        inputs=predictions_file,
        without_model="scores a predictions file",
        judged=True,
    )
)
register(
    TaskKind(
        "climretrieve_score",
        "esgexp.tasks.climretrieve_score:RankingsScoringJob",
        label=("query", "k"),
        prefix=("score",),
        scoring=Scoring(records="rankings.jsonl", item_scores="esgexp.tasks.climretrieve_score:item_scores"),
        uses_model=never,
        without_model="scores a published run's rankings",
    )
)
register(
    TaskKind(
        "finetune",
        "esgexp.tasks.finetune:FinetuneJob",
        label=("model",),
        suffix=("lora",),
        prompt_style="qa",
        scoring=Scoring(ranked=False),
        trains=True,
    )
)
