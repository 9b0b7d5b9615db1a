"""One job: dataset -> prompts -> model -> parsed answers -> metrics -> run folder + MLflow run."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from esgexp import tracking
from esgexp.config import flatten
from esgexp.errors import UserError
from esgexp.eval.mcq import INVALID, mcq_metrics, parse_answer, strip_reasoning
from esgexp.models.loading import resolve_model_dir
from esgexp.outputs import PredictionLog, write_atomic, write_json
from esgexp.records import MCQItem

log = logging.getLogger(__name__)

# The config groups that decide a job's predictions: equal values make a run resumable from another.
IDENTITY_KEYS = ("dataset", "model", "strategy", "template", "scoring", "seed")


def run_job(cfg: DictConfig) -> dict:
    """Run one evaluation job end to end and return its metrics."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise UserError(f"Missing mandatory value: {', '.join(missing)} (set it on the command line, e.g. {missing[0]}=...)")
    output_dir = Path(cfg.paths.output_dir)
    loaded = instantiate(cfg.dataset).load()
    items = loaded.items
    prompter = instantiate(cfg.strategy, template=cfg.template.text)
    if prompter.context and not any(item.context for item in items):
        raise UserError(
            f"strategy={prompter.name} needs each question's source passage (column source_text), "
            f"and dataset {cfg.dataset.name!r} has none: use the _w_ref file or strategy=zero_shot"
        )
    prompts = {item.id: prompter.build(item) for item in items}

    predictions = PredictionLog(output_dir / "predictions.jsonl")
    done = {record["id"] for record in resume_predictions(cfg, output_dir, predictions)}
    write_atomic(output_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    if loaded.skipped:
        write_atomic(output_dir / "skipped_rows.txt", "\n".join(loaded.skipped) + "\n")

    tags = {
        "dataset": cfg.dataset.name,
        "model": cfg.model.name,
        "strategy": cfg.strategy.name,
        "scoring": cfg.scoring.name,
        "template": cfg.template.name,
        "task": "mcq",
        "config_hash": job_identity(cfg)[:16],
        "git_commit": tracking.git_commit(cfg.paths.root_dir),
        "run_dir": str(output_dir),
    }
    todo = [item for item in items if item.id not in done]
    # Find the weights before the run starts: a wrong model config fails here, not mid-run.
    model_source = resolve_model_dir(cfg.model, cfg.paths.cache_dir) if todo else None
    run_name = f"{cfg.model.name}/{cfg.strategy.name}/{cfg.scoring.name}"
    with tracking.mlflow_run(cfg.tracking, cfg.experiment_name, run_name, flatten(cfg), tags) as run:
        if todo:
            try:
                predict(cfg, model_source, todo, prompts, predictions)
            except (KeyboardInterrupt, SystemExit):
                kept = len(predictions.read())
                log.error("interrupted: %d predictions kept in %s; rerun with resume=true", kept, output_dir)
                raise
        records = latest_records(predictions, items)
        metrics = mcq_metrics(items, [r["parsed"] for r in records])
        metrics["n_failed"] = sum(1 for r in records if r.get("failed"))
        metrics["n_skipped_rows"] = len(loaded.skipped)
        metrics["n_resumed"] = len(done)
        write_json(output_dir / "metrics.json", metrics)
        files = ["config.yaml", "predictions.jsonl", "metrics.json", "skipped_rows.txt"]
        tracking.log_results(metrics, [output_dir / name for name in files])
        run_id = run.info.run_id
    print(summary(cfg, metrics, output_dir, run_id))
    return metrics


def predict(
    cfg: DictConfig, model_source: str, items: list[MCQItem], prompts: dict[str, str], predictions: PredictionLog
) -> None:
    """Load the model from ``model_source``, score ``items`` and append one record per item to ``predictions``."""
    import torch

    from esgexp.models.inference import PromptDataModule, run_inference
    from esgexp.models.loading import load_model_and_tokenizer
    from esgexp.models.scoring import make_scorer

    torch.manual_seed(cfg.seed)
    if cfg.trainer.accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise UserError(f"trainer.accelerator={cfg.trainer.accelerator} but no CUDA GPU is visible; use auto or cpu")
    on_gpu = cfg.trainer.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    model, tokenizer = load_model_and_tokenizer(model_source, cfg.model, on_gpu)
    texts = {item.id: model_input(prompts[item.id], tokenizer, cfg.model.chat_template) for item in items}
    ids = [item.id for item in items]
    inputs = [texts[i] for i in ids]
    data = PromptDataModule(ids, inputs, tokenizer, cfg.trainer.batch_size)
    scorer = make_scorer(cfg.scoring, tokenizer, inputs, [tokens for _, tokens in data.examples])
    by_id = {item.id: item for item in items}

    def write(results: list[dict]) -> None:
        predictions.append([to_record(r, by_id[r["id"]], texts[r["id"]], cfg.model.reasoning) for r in results])

    run_inference(model, scorer, data, write, cfg.trainer.accelerator, cfg.trainer.progress_bar)


def model_input(prompt: str, tokenizer, chat_template: bool) -> str:
    """The raw prompt, or the prompt as one user turn of the model's chat template."""
    if not chat_template:
        return prompt
    if not tokenizer.chat_template:
        raise UserError("model.chat_template=true but the tokenizer has no chat template")
    messages = [{"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def to_record(result: dict, item: MCQItem, text: str, reasoning: bool) -> dict:
    """A predictions.jsonl line: what went in (hash), what came out, the parse and the verdict."""
    record = {"id": item.id, "prompt_hash": hashlib.sha256(text.encode()).hexdigest()[:16], "gold": item.answer}
    if result.get("failed"):
        return {**record, "output": None, "parsed": INVALID, "correct": False, "failed": True, "error": result["error"]}
    output = result["output"]
    parsed = parse_answer(strip_reasoning(output) if reasoning else output)
    record.update(output=output, parsed=parsed, correct=parsed == item.answer)
    if "scores" in result:
        record["scores"] = result["scores"]
    return record


def latest_records(predictions: PredictionLog, items: list[MCQItem]) -> list[dict]:
    """One record per item in item order; for an id written twice (a retried failure) the last wins."""
    by_id = {r["id"]: r for r in predictions.read()}
    missing = [item.id for item in items if item.id not in by_id]
    if missing:
        raise RuntimeError(f"no prediction for {len(missing)} item(s), e.g. {missing[:3]}")
    return [by_id[item.id] for item in items]


def job_identity(cfg: DictConfig) -> str:
    """A hash of what decides the predictions (dataset, model, strategy, template, scoring, seed)."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    key = {name: resolved.get(name) for name in IDENTITY_KEYS}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def same_job(cfg: DictConfig, run_dir: Path) -> bool:
    config_file = run_dir / "config.yaml"
    return config_file.is_file() and job_identity(OmegaConf.load(config_file)) == job_identity(cfg)


def resume_predictions(cfg: DictConfig, output_dir: Path, predictions: PredictionLog) -> list[dict]:
    """With resume=true, keep the finished predictions of this folder, or else copy those of the latest
    earlier run of the same config; return them. Never mixes the predictions of two configs."""
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
    kept = [r for r in source.read() if not r.get("failed")]
    predictions.rewrite(kept)
    log.info("resuming from %s: %d predictions reused", source.path.parent, len(kept))
    return kept


def summary(cfg: DictConfig, metrics: dict, output_dir: Path, run_id: str) -> str:
    """The short table printed at the end of a job."""
    rows = [
        ("items", f"{metrics['n_items']}"),
        ("accuracy", f"{metrics['accuracy']:.3f}"),
        ("invalid rate", f"{metrics['invalid_rate']:.3f}"),
        ("abstention rate", f"{metrics['abstention_rate']:.3f}"),
        ("baseline: random", f"{metrics['baseline/random']:.3f}"),
        ("baseline: longest option", f"{metrics['baseline/longest_option']:.3f}"),
    ]
    for name, value in (("failed items", metrics["n_failed"]), ("skipped rows", metrics["n_skipped_rows"])):
        if value:
            rows.append((name, str(value)))
    title = f"{cfg.dataset.name} | {cfg.model.name} | {cfg.strategy.name} | {cfg.scoring.name}"
    width = max(len(name) for name, _ in rows)
    lines = [title, "-" * len(title)] + [f"{name:<{width}}  {value:>7}" for name, value in rows]
    lines += [f"run folder: {output_dir}", f"mlflow run: {run_id} ({cfg.tracking.uri})"]
    return "\n".join(lines)
