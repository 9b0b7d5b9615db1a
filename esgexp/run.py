"""One job: dataset -> prompts -> model -> parsed outputs -> metrics -> run folder + MLflow run.

``task`` picks the job: ``mcq`` and ``qa`` generate with a model (this module);
``retrieval`` and ``esgbench_score`` run without one, ``finetune`` trains a LoRA adapter (their own modules).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig

from esgexp.errors import Interrupted, UserError
from esgexp.jobs import check_config, finish, job_backend, job_tags, same_job, save_inputs, summary_table, tracked_run
from esgexp.outputs import PredictionLog

log = logging.getLogger(__name__)


def run_job(cfg: DictConfig) -> dict:
    """Run one job end to end and return its metrics (with dry_run=true: its memory plan, nothing run)."""
    if cfg.get("dry_run"):
        from esgexp.dry_run import dry_run

        return dry_run(cfg)
    output_dir = check_config(cfg)
    if cfg.task == "retrieval":
        from esgexp.tasks.retrieval import run_retrieval

        return run_retrieval(cfg, output_dir)
    if cfg.task == "esgbench_score":
        from esgexp.tasks.esgbench_score import run_scoring

        return run_scoring(cfg, output_dir)
    if cfg.task == "finetune":
        from esgexp.tasks.finetune import run_finetune

        return run_finetune(cfg, output_dir)
    return run_generation(cfg, output_dir, make_task(cfg))


def make_task(cfg: DictConfig):
    if cfg.task == "mcq":
        from esgexp.tasks.mcq import MCQTask

        return MCQTask(cfg)
    from esgexp.tasks.qa import QATask

    return QATask(cfg)


def run_generation(cfg: DictConfig, output_dir: Path, task) -> dict:
    """Prompt a model with every item, keep each output as it comes, then score them all."""
    loaded = instantiate(cfg.dataset).load()
    items = loaded.items
    if not items:
        raise UserError(f"dataset {cfg.dataset.name!r} has no usable items (skipped: {len(loaded.skipped)})")
    items = task.prepare(items)  # the questions to ask (MCQ with scoring.circular: one per option rotation)
    # The model comes before any retrieval index: a wrong model config fails in seconds.
    backend = job_backend(cfg, cfg.scoring.name)
    passages, retrieval = retrieve(cfg, items)
    prompts = {item.id: task.prompt(item, passages.get(item.id)) for item in items}

    fingerprints = {item.id: item_fingerprint(prompts[item.id], item) for item in items}
    predictions = PredictionLog(output_dir / "predictions.jsonl")
    done = {record["id"] for record in resume_predictions(cfg, output_dir, predictions, fingerprints)}
    save_inputs(cfg, output_dir, loaded.skipped)
    tags = job_tags(
        cfg,
        output_dir,
        model=cfg.model.name,
        backend=cfg.backend.name,
        strategy=cfg.strategy.name,
        scoring=cfg.scoring.name,
        template=cfg.template.name,
        retriever=cfg.retriever.name if cfg.strategy.name == "rag" else None,
    )
    todo = [item for item in items if item.id not in done]
    if cfg.model.adapter:
        from esgexp.models.lora import adapter_tags

        tags.update(adapter_tags(cfg, *backend.adapter))
    run_name = f"{tags['model']}/{cfg.strategy.name}/{cfg.scoring.name}"
    with tracked_run(cfg, run_name, tags) as run:
        usage: dict[str, int] = {}
        try:
            if todo:
                usage = predict(cfg, task, backend, todo, prompts, retrieval, predictions, fingerprints)
        except (KeyboardInterrupt, SystemExit):
            kept = len(predictions.read())
            raise Interrupted(f"{kept} answers kept in {output_dir}; resume=true continues") from None
        finally:
            backend.close()
        records, metrics, info = task.score(items, latest_records(predictions, items))
        predictions.rewrite(records)
        if retrieval:
            from esgexp.strategies.rag import attribution_metrics

            metrics.update(attribution_metrics(records))
        metrics["n_failed"] = sum(1 for r in records if r.get("failed"))
        metrics["n_skipped_rows"] = len(loaded.skipped)
        metrics["n_resumed"] = len(done)
        metrics.update(backend.stats())
        metrics.update(usage_metrics(usage, cfg.model.get("price")))
        info = {**info, "complete": "false" if metrics["n_failed"] else "true"}
        finish(run, metrics, ["predictions.jsonl", "skipped_rows.txt", "calibration.json"], info)
        if metrics["n_failed"] == len(items):
            # Kept on disk for a look, but a run with no answer at all must not reach the leaderboard.
            raise UserError(
                f"every item failed (errors in {output_dir / 'predictions.jsonl'}); the MLflow run is marked FAILED"
            )
    rows = [("items", str(metrics["n_items"]))]
    if metrics["n_failed"]:
        rows.append(("never answered", f"{metrics['n_failed']} (resume=true finishes them)"))
    rows += task.summary_rows(metrics)
    counts = (
        ("skipped rows", "n_skipped_rows"),
        ("answers from the cache", "n_cached"),
        ("retries", "n_retries"),
    )
    rows += [(name, str(metrics[key])) for name, key in counts if metrics.get(key)]
    title = f"{cfg.dataset.name} | {tags['model']} | {cfg.backend.name} | {cfg.strategy.name} | {cfg.scoring.name}"
    print(summary_table(title, rows, run))
    if metrics["n_failed"]:
        error = next(r.get("error") for r in records if r.get("failed"))
        log.warning(
            "incomplete run: %d of %d items were never answered (retries ran out; e.g. %s): they count as wrong "
            "in %s; rerun the same command with resume=true to finish them",
            metrics["n_failed"],
            metrics["n_items"],
            error,
            metrics.get("headline_metric"),
        )
    return metrics


# The exit status of a job that ended with items never answered (0: complete, 2: a user error).
INCOMPLETE_EXIT = 3


def exit_if_incomplete(metrics: dict) -> dict:
    """``metrics`` back for a complete job; for one with items never answered (``n_failed``), exit with
    INCOMPLETE_EXIT, except in a sweep's job (its end reports it, esgexp/sweep.py)."""
    from esgexp.sweep import in_multirun

    if metrics.get("n_failed") and not in_multirun():
        raise SystemExit(INCOMPLETE_EXIT)
    return metrics


def retrieve(cfg: DictConfig, items: list) -> tuple[dict[str, list[str]], dict[str, dict]]:
    """For strategy=rag: each item's formatted passages and what was retrieved; else nothing."""
    if cfg.strategy.name != "rag":
        return {}, {}
    from esgexp.strategies.rag import retrieve_for_items

    return retrieve_for_items(cfg, items)


def make_requests(cfg: DictConfig, items: list, prompts: dict) -> list:
    """One request per item: letter log-probabilities (scoring=logprob) or a generation (scoring=generate)."""
    from esgexp.backends.base import GenerationRequest, LetterRequest

    scoring = cfg.scoring
    if scoring.name == "logprob":
        if cfg.model.reasoning:
            log.warning(
                "scoring=logprob with reasoning model %r: letter log-probabilities skip the reasoning it needs "
                "to answer; scoring=generate is its protocol",
                cfg.model.name,
            )
        return [LetterRequest(item.id, prompts[item.id], letters=tuple(scoring.letters)) for item in items]
    max_new_tokens = scoring.max_new_tokens
    if cfg.model.reasoning:
        # A reasoning model thinks before it answers: a short-answer limit would cut it off mid-thought.
        max_new_tokens = max(max_new_tokens, cfg.model.generation.max_new_tokens)
    # Stop strings go to the model, except for a reasoning model (they would end its thinking).
    stop = () if cfg.model.reasoning else tuple(scoring.get("stop") or ())
    return [GenerationRequest(item.id, prompts[item.id], max_new_tokens=max_new_tokens, stop=stop) for item in items]


def predict(
    cfg: DictConfig,
    task,
    backend,
    items: list,
    prompts: dict,
    retrieval: dict,
    predictions: PredictionLog,
    fingerprints: dict,
) -> None:
    """Send one request per item to ``backend``, append one record per answer to ``predictions``;
    return the token usage of the answers that were not cached."""
    requests = {r.id: r for r in make_requests(cfg, items, prompts)}
    by_id = {item.id: item for item in items}
    usage: dict[str, int] = {}

    def write(responses: list) -> None:
        records = []
        for response in responses:
            item_id = response.id
            record = {
                "id": item_id,
                "prompt_hash": hashlib.sha256(backend.rendered(requests[item_id]).encode()).hexdigest()[:16],
                "item_hash": fingerprints[item_id],
            }
            record.update(task.to_record(response.to_result(), by_id[item_id]))
            if response.failed:
                record.update(failed=True, error=response.error)
            if response.usage:
                record["usage"] = response.usage
            if response.cached:
                record["cached"] = True
            else:
                for key, value in response.usage.items():
                    usage[key] = usage.get(key, 0) + value
            if item_id in retrieval:
                record["retrieval"] = retrieval[item_id]
            records.append(record)
        predictions.append(records)

    backend.run(list(requests.values()), write)
    return usage


def usage_metrics(usage: dict[str, int], price) -> dict[str, float]:
    """``usage/<kind>_tokens`` sums and, with the model's prices per million tokens, ``usage/cost``."""
    metrics = {f"usage/{key}": value for key, value in sorted(usage.items())}
    if price and usage:
        metrics["usage/cost"] = sum(
            usage.get(f"{kind}_tokens", 0) * float(per_million) / 1e6 for kind, per_million in price.items()
        )
    return metrics


def latest_records(predictions: PredictionLog, items: list) -> list[dict]:
    """One record per item in item order; for an id written twice (a retried failure) the last wins."""
    by_id = {r["id"]: r for r in predictions.read()}
    missing = [item.id for item in items if item.id not in by_id]
    if missing:
        raise RuntimeError(f"no prediction for {len(missing)} item(s), e.g. {missing[:3]}")
    return [by_id[item.id] for item in items]


def item_fingerprint(prompt: str, item) -> str:
    """A hash of an item's prompt and gold: a resumed prediction counts only if both are unchanged."""
    key = json.dumps([prompt, dataclasses.asdict(item)], sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def resume_predictions(
    cfg: DictConfig, output_dir: Path, predictions: PredictionLog, fingerprints: dict[str, str]
) -> list[dict]:
    """With resume=true, keep the finished predictions of this folder, or else copy those of the latest
    earlier run of the same config; return them. Never mixes the predictions of two configs, and drops
    a prediction whose item (prompt or gold) changed since, e.g. in an edited data file."""
    if predictions.path.exists():
        if not cfg.resume or not same_job(cfg, output_dir):
            raise UserError(
                f"run folder {output_dir} already holds predictions.jsonl"
                + (" of another config" if cfg.resume else ": pass resume=true to continue it")
            )
        source = predictions
    elif cfg.resume:
        runs_root = Path(cfg.paths.runs_dir) / cfg.experiment_name
        candidates = sorted(runs_root.glob("**/predictions.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
        earlier = [PredictionLog(p) for p in candidates if same_job(cfg, p.parent)]
        if not earlier:
            log.info("resume=true but no earlier run of this config under %s: starting from scratch", runs_root)
            return []
        source = earlier[0]
    else:
        return []
    finished = [r for r in source.read() if not r.get("failed")]
    kept = [r for r in finished if r.get("item_hash") == fingerprints.get(r["id"])]
    predictions.rewrite(kept)
    log.info("resuming from %s: %d predictions reused", source.path.parent, len(kept))
    if len(kept) < len(finished):
        log.warning(
            "%d earlier predictions are for items that changed (prompt or gold) or are gone: redone",
            len(finished) - len(kept),
        )
    return kept
