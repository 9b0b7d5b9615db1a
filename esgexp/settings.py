"""Every numeric and enumerated setting a user sets, checked once before any work, each error naming its key.

``SCHEMA`` maps a dotted config key to its rule; a key the composed config lacks (another task's group,
an unset optional group) is not checked. ``check_settings(cfg)`` raises one UserError listing every bad
key as ``KEY must be EXPECTED, got VALUE``. The jobs then read these values without checking them again.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from omegaconf import DictConfig, ListConfig, OmegaConf

from esgexp.errors import UserError

TASKS = ("mcq", "qa", "retrieval", "esgbench_score", "finetune")
CACHE_MODES = ("read_write", "read_only", "refresh", "off")
OPENAI_APIS = ("chat", "completions")
MODEL_DTYPES = ("auto", "float32", "bfloat16", "float16")
VLLM_DTYPES = ("float16", "bfloat16", "auto")
PRECISIONS = ("auto", "16-mixed", "bf16-mixed", "32-true")
SCHEDULES = ("cosine", "linear", "constant")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda")
MCQ_CONTEXTS = ("full", "best_line")
QA_CONTEXTS = ("full",)
NUMERIC_RULES = ("unit_aware", "esgbench")  # metrics.numeric: esgbench_metrics.NUMERIC_RULES


@dataclass(frozen=True)
class Integer:
    """A whole number (not a bool, not ``3.0``) in ``[low, high]``; ``optional``: null allowed."""

    low: int | None = None
    high: int | None = None
    optional: bool = False

    def accepts(self, value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and _within(value, self.low, self.high)

    def expected(self) -> str:
        return "an integer" + _bounds(self.low, self.high)


@dataclass(frozen=True)
class Number:
    """An int or float in ``[low, high]`` (``above``: strictly greater than ``low``, ``below``: strictly less
    than ``high``); ``optional``: null allowed."""

    low: float | None = None
    high: float | None = None
    above: bool = False
    below: bool = False
    optional: bool = False

    def accepts(self, value) -> bool:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
            return False
        return (
            _within(value, self.low, self.high)
            and not (self.above and value == self.low)
            and not (self.below and value == self.high)
        )

    def expected(self) -> str:
        if not (self.above or self.below):
            return "a number" + _bounds(self.low, self.high)
        low = f" {'>' if self.above else '>='} {_number(self.low)}" if self.low is not None else ""
        high = f" {'<' if self.below else '<='} {_number(self.high)}" if self.high is not None else ""
        return "a number" + low + (" and" if low and high else "") + high


@dataclass(frozen=True)
class Choice:
    """One of ``values``; ``optional``: null allowed."""

    values: tuple
    optional: bool = False

    def accepts(self, value) -> bool:
        return value in self.values

    def expected(self) -> str:
        return "one of " + ", ".join(map(str, self.values))


@dataclass(frozen=True)
class Flag:
    """true or false."""

    optional: bool = False

    def accepts(self, value) -> bool:
        return isinstance(value, bool)

    def expected(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class Integers:
    """A non-empty list of integers >= ``low``."""

    low: int = 1
    optional: bool = False

    def accepts(self, value) -> bool:
        return (
            isinstance(value, Sequence)
            and not isinstance(value, str)
            and bool(value)
            and all(Integer(self.low).accepts(v) for v in value)
        )

    def expected(self) -> str:
        return f"a non-empty list of integers >= {self.low}"


@dataclass(frozen=True)
class Encoding:
    """The name of a text encoding Python knows (utf-8, cp1252, latin-1, ...)."""

    optional: bool = False

    def accepts(self, value) -> bool:
        try:
            return isinstance(value, str) and codecs.lookup(value) is not None
        except LookupError:
            return False

    def expected(self) -> str:
        return "a text encoding such as utf-8, cp1252 or latin-1"


@dataclass(frozen=True)
class URL:
    """A server URL with a scheme (``http://host:port/v1``)."""

    optional: bool = False

    def accepts(self, value) -> bool:
        return isinstance(value, str) and "://" in value

    def expected(self) -> str:
        return "a server URL such as http://127.0.0.1:8000/v1"


# MLflow's tracking stores: a folder path (no scheme), file:, a database (sqlite:///FILE, postgresql:, mysql:,
# mssql:, each also as DIALECT+DRIVER:), a server (http:, https:), Databricks.
STORE_SCHEMES = ("file", "sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks", "databricks-uc", "uc")


@dataclass(frozen=True)
class StoreURI:
    """An MLflow tracking store: a folder path, or a URI whose scheme MLflow knows (``sqlite:///FILE``, ...)."""

    optional: bool = False

    def accepts(self, value) -> bool:
        if not isinstance(value, str) or not value:
            return False
        scheme, colon, rest = value.partition(":")
        if not colon or len(scheme) == 1 or "/" in scheme:  # a path (C:\... on Windows)
            return True
        scheme = scheme.lower().split("+")[0]
        return scheme in STORE_SCHEMES and (scheme != "sqlite" or rest.startswith("///"))

    def expected(self) -> str:
        return (
            "a tracking store: a folder path, sqlite:///FILE.db, http(s)://HOST:PORT, or a URI with one of the "
            f"schemes {', '.join(s + ':' for s in STORE_SCHEMES)}"
        )


def _within(value, low, high) -> bool:
    return (low is None or value >= low) and (high is None or value <= high)


def _bounds(low, high) -> str:
    if low is not None and high is not None:
        return f" from {_number(low)} to {_number(high)}"
    if low is not None:
        return f" >= {_number(low)}"
    return f" <= {_number(high)}" if high is not None else ""


def _number(value) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


Rule = Integer | Number | Choice | Flag | Integers | Encoding | URL | StoreURI


def _context_rule(cfg: DictConfig) -> Rule | None:
    """strategy.context: MCQ prompts also take ``best_line``, open-QA and fine-tuning prompts ``full`` only;
    jobs without prompts do not read it."""
    if cfg.get("task") == "mcq":
        return Choice(MCQ_CONTEXTS, optional=True)
    return Choice(QA_CONTEXTS, optional=True) if cfg.get("task") in ("qa", "finetune") else None


def _examples_rule(cfg: DictConfig) -> Rule:
    """query.examples: how many other reports inform an explanation (an integer >= 1), ``all``, or null."""
    examples = cfg.query.get("examples")
    return Choice(("all",)) if isinstance(examples, str) else Integer(1, optional=True)


# retriever=bm25 (k1, b, stemmer, stopwords) | dense (batch_size, backend, device) | hybrid, which holds a
# bm25 and a dense node of its own (retriever.bm25.k1, ...).
RETRIEVER_RULES = {
    "k1": Number(0),
    "b": Number(0, 1),
    "stemmer": Choice(("english",), optional=True),
    "stopwords": Choice(("english",), optional=True),
    "batch_size": Integer(1),
    "backend": Choice(("numpy", "faiss")),
    "device": Choice(("auto", "cpu", "cuda")),
    "pooling": Choice(("cls", "mean", "max", "lasttoken", "weightedmean"), optional=True),
    "normalize": Flag(),
}

SCHEMA: dict[str, Rule | Callable[[DictConfig], Rule]] = {
    "task": Choice(TASKS),
    "seed": Integer(0, 2**32 - 1),
    "resume": Flag(),
    "skip_invalid_jobs": Flag(),
    "cache": Choice(CACHE_MODES),
    "dataset.limit": Integer(1, optional=True),
    "dataset.seed": Integer(0, 2**32 - 1),
    "dataset.encoding": Encoding(),
    "dataset.min_overlap": Number(0, 1, above=True),
    "dataset.core_only": Flag(),
    "dataset.merge_duplicates": Flag(),
    "scoring.max_new_tokens": Integer(1),
    "scoring.prefix_cache": Flag(),
    "scoring.circular": Flag(),
    "query.max_new_tokens": Integer(1),
    "query.with_question": Flag(),
    "query.words": Integer(1),
    "query.min_grade": Integer(1, 3),
    "query.examples": _examples_rule,
    "strategy.shots": Integer(0),
    "strategy.top_k": Integer(1),
    "strategy.context": _context_rule,
    "strategy.scope": Choice(("doc",), optional=True),
    "retrieval.ks": Integers(1),
    "retrieval.threshold": Integer(1, 3),
    "recall_k": Integer(1),
    "metrics.numeric": Choice(NUMERIC_RULES),
    **{f"retriever.{part}{key}": rule for part in ("", "bm25.", "dense.") for key, rule in RETRIEVER_RULES.items()},
    "retriever.rrf_k": Number(0),
    "retriever.depth": Integer(1),
    # colbertv2 (token budgets), random (seed), embeddings (the server and its client's knobs)
    "retriever.query_length": Integer(1, optional=True),
    "retriever.document_length": Integer(1, optional=True),
    "retriever.seed": Integer(0, 2**32 - 1),
    "retriever.base_url": URL(),
    "retriever.dimensions": Integer(1, optional=True),
    "retriever.cache_mode": Choice(CACHE_MODES),
    "retriever.timeout_s": Number(0, above=True),
    "retriever.connect_timeout_s": Number(0, above=True),
    "retriever.max_retries": Integer(0),
    "retriever.backoff_s": Number(0),
    "retriever.rerank_depth": Integer(1),
    "model.dtype": Choice(MODEL_DTYPES),
    "model.load_in_4bit": Flag(),
    "model.generation.max_new_tokens": Integer(1),
    "model.lora.r": Integer(1),
    "model.lora.alpha": Number(0, above=True),
    "model.lora.dropout": Number(0, 1),
    "trainer.accelerator": Choice(ACCELERATORS),
    "trainer.batch_size": Integer(1),
    "trainer.progress_bar": Flag(),
    "trainer.num_nodes": Integer(1),
    "trainer.precision": Choice(PRECISIONS),
    "trainer.max_steps": Integer(-1, optional=True),
    "trainer.max_epochs": Integer(1, optional=True),
    "trainer.accumulate_grad_batches": Integer(1),
    "trainer.gradient_clip_val": Number(0, optional=True),
    "trainer.log_every_n_steps": Integer(1),
    "trainer.gpu_memory_gb": Number(0, above=True, optional=True),
    "dry_run": Flag(),
    "train.train_limit": Integer(1, optional=True),
    "train.val_limit": Integer(1, optional=True),
    "train.batch_size": Integer(1),
    "train.max_seq_len": Integer(1),
    "train.packing": Flag(),
    "train.pad_to_multiple_of": Integer(1),
    "train.lr": Number(0, above=True),
    "train.weight_decay": Number(0),
    "train.warmup_steps": Integer(0),
    "train.schedule": Choice(SCHEDULES),
    "train.gradient_checkpointing": Flag(),
    "train.val_every_n_steps": Integer(1),
    "train.val_generate_items": Integer(0),
    "train.val_max_new_tokens": Integer(1),
    "train.early_stopping_patience": Integer(1, optional=True),
    "stats.bootstrap": Integer(100),  # fewer resamples leave a percentile interval's ends to chance
    "stats.seed": Integer(0, 2**32 - 1),
    "stats.confidence": Number(0.5, 1, below=True),
    "tracking.uri": StoreURI(),
    "tracking.offline": Flag(),
    "tracking.connect_timeout_s": Number(0, above=True),
    "tracking.http_timeout_s": Integer(1),
    "tracking.http_max_retries": Integer(0),
    # backend=hf | openai | vllm: each holds its own keys, so only the chosen backend's are present.
    "backend.batch_size": Integer(1),
    "backend.api": Choice(OPENAI_APIS),
    "backend.base_url": URL(),
    "backend.max_concurrency": Integer(1),
    "backend.timeout_s": Number(0, above=True),
    "backend.connect_timeout_s": Number(0, above=True),
    "backend.max_retries": Integer(0),
    "backend.backoff_s": Number(0),
    "backend.top_logprobs": Integer(1),
    "backend.dtype": Choice(VLLM_DTYPES),
    "backend.tensor_parallel_size": Integer(1),
    "backend.gpu_memory_utilization": Number(0, 1, above=True),
    "backend.max_model_len": Integer(1, optional=True),
    "backend.max_logprobs": Integer(1),
    # how a request's JSON Schema is sent: OpenAI's form (also vLLM serve, llama.cpp's llama-server), or the
    # {"type": "json_object", "schema": ...} form that llama-cpp-python's server (0.3.x) reads
    "backend.response_format": Choice(("json_schema", "json_object")),
}

_ABSENT = object()


def problems(cfg: DictConfig) -> list[str]:
    """One ``KEY must be EXPECTED, got VALUE`` line per setting of ``cfg`` that breaks its rule."""
    found = []
    for key, rule in SCHEMA.items():
        value = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False)
        if value is _ABSENT:
            continue
        rule = rule(cfg) if callable(rule) else rule
        if rule is None or _copies_another_key(cfg, key) or (value is None and rule.optional):
            continue
        if isinstance(value, ListConfig):
            value = OmegaConf.to_container(value, resolve=True)
        if not rule.accepts(value):
            expected = rule.expected() + (" or null" if rule.optional else "")
            found.append(f"{key} must be {expected}, got {'null' if value is None else repr(value)}")
    if (
        OmegaConf.select(cfg, "task") == "finetune"
        and not cfg.trainer.get("max_steps")
        and not cfg.trainer.get("max_epochs")
    ):
        found.append("trainer.max_steps or trainer.max_epochs must be set for fine-tuning")
    return found


def _copies_another_key(cfg: DictConfig, key: str) -> bool:
    """Whether ``key`` is an interpolation (``${trainer.batch_size}``): its source is checked instead."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    return isinstance(node, DictConfig) and OmegaConf.is_interpolation(node, leaf)


def check_settings(cfg: DictConfig) -> None:
    """Raise one UserError naming every bad setting (a key, what it must be, what it is)."""
    found = problems(cfg)
    if found:
        raise UserError("; ".join(found))
