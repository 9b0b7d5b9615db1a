"""One job: ``run_job(cfg)`` makes the Job of ``cfg.task`` (its kind in esgexp/tasks/kinds.py) and runs its
steps (esgexp/jobs/lifecycle.py), or with ``dry_run=true`` prints its memory plan instead."""

from __future__ import annotations

from omegaconf import DictConfig

from esgexp.jobs.lifecycle import Job, run_steps


def run_job(cfg: DictConfig) -> dict:
    """Run one job end to end and return its metrics (with dry_run=true: its memory plan, nothing run)."""
    if cfg.get("dry_run"):
        from esgexp.memory.dry_run import dry_run

        return dry_run(cfg)
    return run_steps(make_job(cfg))


def make_job(cfg: DictConfig) -> Job:
    """The ``Job`` of ``cfg.task``, carrying its kind (esgexp/tasks/kinds.py) from here on."""
    from esgexp.tasks.kinds import kind_of

    kind = kind_of(cfg.task)
    return kind.job_class()(cfg, kind)


# The exit status of a job that ended with items never answered (0: complete, 2: a user error).
INCOMPLETE_EXIT = 3


def exit_if_incomplete(metrics: dict) -> dict:
    """``metrics`` back for a complete job; for one with items never answered (``n_failed``) or never judged
    (``judge/n_failed``), exit with INCOMPLETE_EXIT, except in a sweep's job (its end reports it,
    esgexp/core/sweep.py)."""
    from esgexp.core.sweep import in_multirun

    if (metrics.get("n_failed") or metrics.get("judge/n_failed")) and not in_multirun():
        raise SystemExit(INCOMPLETE_EXIT)
    return metrics
