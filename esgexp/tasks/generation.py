"""The generation job (task=mcq|qa): dataset -> prompts -> model -> parsed outputs -> metrics -> run folder
and MLflow run; each answer is written as it comes, so ``resume=true`` asks only the rest."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig

from esgexp.core.outputs import PredictionLog, write_json
from esgexp.core.records import DERIVED_FIELDS
from esgexp.errors import Interrupted, UserError
from esgexp.jobs.lifecycle import Job, job_backend, same_job

log = logging.getLogger(__name__)


def make_task(cfg: DictConfig):
    """The prompt-and-score object of a generation task (mcq, qa)."""
    from esgexp.tasks.kinds import kind_of

    return kind_of(cfg.task).prompts_class()(cfg)


def asked_items(cfg: DictConfig, task, loaded) -> list:
    """The items a job asks (MCQ with scoring.circular: one per option rotation), after the input checks of a
    run: the dataset has usable items and suits the task and strategy (``task.prepare``); else a UserError."""
    if not loaded.items:
        raise UserError(f"dataset {cfg.dataset.name!r} has no usable items (skipped: {len(loaded.skipped)})")
    return task.prepare(loaded.items)


class GenerationJob(Job):
    """task=mcq|qa: prompt a model with every item, keep each output as it comes, then score them all."""

    files = ("predictions.jsonl", "skipped_rows.txt", "calibration.json")

    def load(self) -> list[str]:
        cfg = self.cfg
        self.task = self.kind.prompts_class()(cfg)
        self.loaded = instantiate(cfg.dataset).load()
        self.items = asked_items(cfg, self.task, self.loaded)
        # The judge's config (judge=...) and then the model come before any retrieval index or answer: a wrong
        # model config fails in seconds. A judge's server is probed once the prompts are known, when new answers
        # will be asked (else the judge's run probes it, when a verdict is not in the request cache).
        self.judge, self.judge_probed = None, False
        if cfg.get("judge"):
            from esgexp.eval.judge import check_judge

            self.judge = check_judge(cfg)
        self.backend = job_backend(cfg, cfg.scoring.name)
        passages, self.retrieval = retrieve(cfg, self.items)
        self.prompts = {item.id: self.task.prompt(item, passages.get(item.id)) for item in self.items}
        self.fingerprints = {item.id: item_fingerprint(self.prompts[item.id], item) for item in self.items}
        self.predictions = PredictionLog(self.output_dir / "predictions.jsonl")
        resumed = resume_predictions(cfg, self.output_dir, self.predictions, self.fingerprints)
        self.done = {record["id"] for record in resumed}
        if self.judge is not None:
            from esgexp.eval.judge import probe_if_asked

            todo = make_requests(cfg, [item for item in self.items if item.id not in self.done], self.prompts)
            self.judge_probed = probe_if_asked(cfg, self.judge, self.backend, todo)
        return self.loaded.skipped

    def tags(self) -> dict:
        cfg = self.cfg
        tags = {
            "model": cfg.model.name,
            "backend": cfg.backend.name,
            "strategy": cfg.strategy.name,
            "scoring": cfg.scoring.name,
            "template": cfg.template.name,
            "retriever": cfg.retriever.name if cfg.strategy.name == "rag" else None,
        }
        if cfg.model.adapter:
            from esgexp.models.lora import adapter_tags

            tags.update(adapter_tags(cfg, *self.backend.adapter))
        return tags

    def work(self, run) -> tuple[dict, dict]:
        cfg, items, predictions = self.cfg, self.items, self.predictions
        todo = [item for item in items if item.id not in self.done]
        usage: dict[str, int] = {}
        try:
            if todo:
                usage = predict(
                    cfg, self.task, self.backend, todo, self.prompts, self.retrieval, predictions, self.fingerprints
                )
        except (KeyboardInterrupt, SystemExit):
            kept = len(predictions.read())
            raise Interrupted(f"{kept} answers kept in {self.output_dir}; resume=true continues") from None
        finally:
            self.backend.close()
        self.records, metrics, info = self.task.score(items, latest_records(predictions, items))
        if cfg.get("judge"):  # an LLM judge beside the string metrics (kinds with open answers: TaskKind.judged)
            from esgexp.eval.judge import run_judge

            metrics.update(run_judge(cfg, items, self.records, config=self.judge, probe=not self.judge_probed))
        predictions.rewrite(self.records)
        for name, report in self.task.reports.items():
            write_json(self.output_dir / name, report)
        if self.retrieval:
            from esgexp.strategies.rag import attribution_metrics

            metrics.update(attribution_metrics(self.records))
        metrics["n_failed"] = sum(1 for r in self.records if r.get("failed"))
        metrics["n_skipped_rows"] = len(self.loaded.skipped)
        metrics["n_resumed"] = len(self.done)
        metrics.update(self.backend.stats())
        metrics.update(usage_metrics(usage, cfg.model.get("price")))
        served = sorted({r["served_model"] for r in self.records if r.get("served_model")})
        if served:  # what the server says answered (a hosted alias's dated model id), for the paper tables
            metrics["served_model"] = ", ".join(served)
            info = {**info, "served_model": metrics["served_model"]}
        incomplete = metrics["n_failed"] or metrics.get("judge/n_failed")
        return metrics, {**info, "complete": "false" if incomplete else "true"}

    def finished(self, run, metrics: dict) -> None:
        from esgexp.backends.batch import PENDING

        failed = [r for r in self.records if r.get("failed")]
        if failed and all(str(r.get("error")).startswith(PENDING) for r in failed):
            return  # batch_wait=false: submitted as asked, collected by resume=true (an incomplete run, exit 3)
        if metrics["n_failed"] == len(self.items):
            # Kept on disk for a look, but a run with no answer at all must not reach the leaderboard.
            first = next(r.get("error") for r in self.records if r.get("failed"))
            again = "" if any(r.get("permanent") for r in self.records) else "; resume=true asks them again"
            raise UserError(
                f"every item failed (e.g. {first}; errors in {self.predictions.path}); the MLflow run is marked "
                f"FAILED{again}"
            )

    def summary(self, metrics: dict) -> tuple[str, list[tuple[str, str]]]:
        cfg = self.cfg
        rows = [("items", str(metrics["n_items"]))]
        if metrics["n_failed"]:
            rows.append(("never answered", f"{metrics['n_failed']} ({unanswered_advice(self.records)})"))
        rows += self.task.summary_rows(metrics)
        counts = (
            ("skipped rows", "n_skipped_rows"),
            ("answers from the cache", "n_cached"),
            ("retries", "n_retries"),
        )
        rows += [(name, str(metrics[key])) for name, key in counts if metrics.get(key)]
        title = f"{cfg.dataset.name} | {cfg.model.name} | {cfg.backend.name} | {cfg.strategy.name} | {cfg.scoring.name}"
        return title, rows

    def report(self, run, metrics: dict) -> None:
        super().report(run, metrics)
        if metrics["n_failed"]:
            failed = sorted((r for r in self.records if r.get("failed")), key=lambda r: not r.get("permanent"))
            log.warning(
                "incomplete run: %d of %d items were never answered (e.g. %s): they count as wrong in %s; %s",
                metrics["n_failed"],
                metrics["n_items"],
                failed[0].get("error"),
                metrics.get("headline_metric"),
                unanswered_advice(self.records),
            )


def unanswered_advice(records: list[dict]) -> str:
    """What finishes the items never answered: ``resume=true``, except those the server refused as sent
    (``permanent``: asking again cannot mend them; their error names what to change)."""
    failed = [r for r in records if r.get("failed")]
    refused = sum(1 for r in failed if r.get("permanent"))
    if not refused:
        return "resume=true finishes them"
    if refused == len(failed):
        return "the server refused them as sent: resume=true cannot finish them; change what their error names"
    other = len(failed) - refused
    return (
        f"the server refused {refused} as sent (change what their error names); resume=true finishes the other {other}"
    )


def retrieve(cfg: DictConfig, items: list) -> tuple[dict[str, list[str]], dict[str, dict]]:
    """For strategy=rag: each item's formatted passages and what was retrieved; else nothing."""
    if cfg.strategy.name != "rag":
        return {}, {}
    from esgexp.strategies.rag import retrieve_for_items

    return retrieve_for_items(cfg.strategy, cfg.retriever, cfg.paths.index_dir, items)


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
                if response.permanent:
                    record["permanent"] = True
            if response.usage:
                record["usage"] = response.usage
            if response.served_model:
                record["served_model"] = response.served_model
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
    """``usage/<kind>_tokens`` sums (``batch_<kind>_tokens``: answered by a batch) and, with the model's prices
    per million tokens, ``usage/cost``: batch tokens at ``price.batch_discount`` off the list price."""
    metrics = {f"usage/{key}": value for key, value in sorted(usage.items())}
    if price and usage:
        metrics["usage/cost"] = token_cost(usage, price)
    return metrics


def token_cost(usage: dict[str, int], price) -> float:
    """US dollars for ``usage``'s prompt and completion tokens, live and batch, at ``price`` (per million)."""
    batch_share = 1.0 - float(price.get("batch_discount") or 0.0)
    cost = 0.0
    for kind in ("prompt", "completion"):
        per_token = float(price.get(kind) or 0.0) / 1e6
        cost += (
            usage.get(f"{kind}_tokens", 0) * per_token + usage.get(f"batch_{kind}_tokens", 0) * per_token * batch_share
        )
    return cost


def latest_records(predictions: PredictionLog, items: list) -> list[dict]:
    """One record per item in item order; for an id written twice (a retried failure) the last wins."""
    by_id = {r["id"]: r for r in predictions.read()}
    missing = [item.id for item in items if item.id not in by_id]
    if missing:
        raise RuntimeError(f"no prediction for {len(missing)} item(s), e.g. {missing[:3]}")
    return [by_id[item.id] for item in items]


def item_fingerprint(prompt: str, item) -> str:
    """A hash of an item's prompt and gold: a resumed prediction counts only if both are unchanged."""
    fields = {k: v for k, v in dataclasses.asdict(item).items() if k not in DERIVED_FIELDS}
    key = json.dumps([prompt, fields], sort_keys=True, default=str)
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
