"""Every numeric and enumerated setting a user sets, checked once before any work, each error naming its key.

``SCHEMA`` maps a dotted config key to its rule: the rules of the settings no component owns, and those the
components declare beside what they check (``RULES`` of core/tracking.py, backends/cache.py, data/pdf.py,
eval/judge_prompts.py); ``component_rules`` adds those of the chosen dataset, backend and retriever classes.
A key the composed config lacks (another task's group, an unset optional group) is not checked. ``check_settings(cfg)`` raises one UserError listing every bad
key as ``KEY must be EXPECTED, got VALUE``. The jobs then read these values without checking them again.
"""

from __future__ import annotations

from collections.abc import Callable

from omegaconf import DictConfig, OmegaConf

from esgexp.backends.cache import RULES as CACHE_RULES
from esgexp.core.rules import URL, Choice, Flag, Integer, Integers, Number, Rule, broken, declared_rules
from esgexp.core.tracking import TRACKING_RULES
from esgexp.data.pdf import RULES as READER_RULES
from esgexp.errors import UserError
from esgexp.eval.judge_prompts import RULES as JUDGE_RULES
from esgexp.tasks.kinds import KINDS

TASKS = tuple(KINDS)  # the registered task kinds (esgexp/tasks/kinds.py)
MODEL_DTYPES = ("auto", "float32", "bfloat16", "float16")
PRECISIONS = ("auto", "16-mixed", "bf16-mixed", "32-true")
SCHEDULES = ("cosine", "linear", "constant")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda")
MCQ_CONTEXTS = ("full", "best_line")
QA_CONTEXTS = ("full",)
NUMERIC_RULES = ("unit_aware", "esgbench")  # metrics.numeric: esgbench_metrics.NUMERIC_RULES


def _context_rule(cfg: DictConfig) -> Rule | None:
    """strategy.context: MCQ prompts also take ``best_line``, open-QA and fine-tuning prompts ``full`` only;
    jobs without prompts do not read it."""
    kind = KINDS.get(cfg.get("task"))
    contexts = {"mcq": MCQ_CONTEXTS, "qa": QA_CONTEXTS}.get(kind.prompt_style) if kind else None
    return Choice(contexts, optional=True) if contexts else None


def _examples_rule(cfg: DictConfig) -> Rule:
    """query.examples: how many other reports inform an explanation (an integer >= 1), ``all``, or null."""
    examples = cfg.query.get("examples")
    return Choice(("all",)) if isinstance(examples, str) else Integer(1, optional=True)


SCHEMA: dict[str, Rule | Callable[[DictConfig], Rule]] = {
    "task": Choice(TASKS),
    "seed": Integer(0, 2**32 - 1),
    "resume": Flag(),
    "skip_invalid_jobs": Flag(),
    **CACHE_RULES,
    "data.download": Flag(),
    "data.retries": Integer(0),
    "data.hosts.github": URL(),
    "data.hosts.github_lfs": URL(),
    "data.hosts.huggingface": URL(),
    "scoring.max_new_tokens": Integer(1),
    "scoring.prefix_cache": Flag(),
    "scoring.circular": Flag(),
    "scoring.reasoning_block": Choice(("drop", "keep")),
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
    **JUDGE_RULES,
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
    **TRACKING_RULES,
    **READER_RULES,
    "workers": Integer(1, optional=True),  # ingest: files read at once; null: every CPU
}


def component_rules(cfg: DictConfig) -> dict[str, Rule]:
    """The rules the chosen components' classes declare (``dataset.<key>``, ``backend.<key>``, ``retriever.<key>``,
    a hybrid's ``retriever.bm25.<key>``, a second stage's ``retriever.rerank_depth``)."""
    from esgexp.retrieval.factory import retriever_rules

    retriever = cfg.get("retriever")
    return {
        **declared_rules(cfg.get("dataset"), "dataset."),
        **declared_rules(cfg.get("backend"), "backend."),
        **(retriever_rules(retriever) if isinstance(retriever, DictConfig) else {}),
    }


def problems(cfg: DictConfig) -> list[str]:
    """One ``KEY must be EXPECTED, got VALUE`` line per setting of ``cfg`` that breaks its rule (SCHEMA's, and
    those of its components)."""
    found = broken(cfg, {**SCHEMA, **component_rules(cfg)})
    if trains(OmegaConf.select(cfg, "task")) and not cfg.trainer.get("max_steps") and not cfg.trainer.get("max_epochs"):
        found.append("trainer.max_steps or trainer.max_epochs must be set for fine-tuning")
    task = OmegaConf.select(cfg, "task")
    if cfg.get("judge") is not None and task in KINDS and not KINDS[task].judged:
        judged = "|".join(name for name, kind in KINDS.items() if kind.judged)
        found.append(
            f"judge grades open answers (task={judged}); task={task} has none: drop judge=... (or set judge=null)"
        )
    return found


def check_settings(cfg: DictConfig) -> None:
    """Raise one UserError naming every bad setting (a key, what it must be, what it is)."""
    found = problems(cfg)
    if found:
        raise UserError("; ".join(found))


def check_device(cfg: DictConfig) -> None:
    """Settings that need a CUDA GPU (``trainer.accelerator=gpu|cuda``, ``model.load_in_4bit=true``) for a
    job that loads its model here (fine-tuning, or a backend on this machine: one with an ``accelerator``),
    on a machine without one: one UserError before any weights are found, converted or loaded. Not part of
    ``check_settings``: ``dry_run=true`` plans a GPU job on any machine."""
    kind = KINDS.get(OmegaConf.select(cfg, "task"))
    backend = OmegaConf.select(cfg, "backend.accelerator")
    if kind is None or not (kind.trains or (backend is not None and kind.uses_model(cfg))):
        return
    # backend.accelerator is ${trainer.accelerator} unless set apart: name the setting the user gave
    own = not kind.trains and str(backend) != str(cfg.trainer.accelerator)
    key = "backend.accelerator" if own else "trainer.accelerator"
    accelerator = str(backend if own else cfg.trainer.accelerator)
    needs, fixes = [], []
    if accelerator in ("gpu", "cuda"):
        needs.append(f"{key}={accelerator}")
        fixes.append(f"{key}=cpu (or auto)")
    if OmegaConf.select(cfg, "model.load_in_4bit"):
        needs.append("model.load_in_4bit=true (QLoRA)")
        fixes.append("model.load_in_4bit=false (bitsandbytes 4-bit weights do not run on the CPU)")
    if not needs:
        return
    import torch

    if not torch.cuda.is_available():
        raise UserError(
            f"{' and '.join(needs)} {'needs' if len(needs) == 1 else 'need'} a CUDA GPU, but no CUDA GPU is "
            f"visible here; nothing was loaded: run it on a GPU machine, or set {' and '.join(fixes)}"
        )


def trains(task: str | None) -> bool:
    """Whether ``task`` names a training kind (an unknown name is refused by its own rule, not here)."""
    return task in KINDS and KINDS[task].trains
