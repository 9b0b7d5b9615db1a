"""An LLM judge for open answers (``judge=default``, task=qa): a judge model grades each answer against the
gold answer (and the gold evidence) with a fixed, versioned rubric, replying through structured output with
``{"verdict": "correct" | "partially_correct" | "incorrect", "reason": "..."}``.

What goes in and comes out:

- ``judge_request(item, answer, spec)``: one ``GenerationRequest`` for one answered item (its prompt is
  ``PROMPTS[spec.prompt_version]`` filled in; its ``json_schema`` is :data:`SCHEMA`).
- ``parse_verdict(text)``: the judge's reply -> ``(verdict, reason)``, or ``(None, why)`` when it is not
  JSON of the schema (counted as ``judge/n_invalid``, scored as incorrect).
- ``judge_metrics(records, stats)``: the records, each with ``record["judge"]`` -> ``judge/accuracy``,
  ``judge/credit`` with intervals, ``<qtype>/judge_accuracy`` and ``<qtype>/judge_credit``, counts, and
  ``judge/agree/...``: where the judge and the string metrics (token F1, ROUGE-L, EM) disagree.
- ``run_judge(cfg, items, records)``: all of it for a generation job: asks the judge model (built from
  ``cfg.judge`` through the request cache) about every answered item, writes the verdicts into the records
  and returns the metrics.
- ``check_judge(cfg)`` before anything runs (its config, packages and key), and ``probe_if_asked``: a judge on a
  server is sent one known judge request only when something will be asked (a new answer to judge, a verdict
  not in the request cache), so a rerun answered wholly from the cache needs no judge server.

The prompt text of a version never changes once runs were made with it: a change is a new version.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from omegaconf import DictConfig, OmegaConf

from esgexp.errors import UserError
from esgexp.eval.judge_prompts import PROMPTS
from esgexp.eval.stats import ItemScores, StatsSettings, record_clusters

log = logging.getLogger(__name__)

VERDICTS = ("correct", "partially_correct", "incorrect")
CREDIT = {"correct": 1.0, "partially_correct": 0.5, "incorrect": 0.0}
SCHEMA = {
    "type": "object",
    "properties": {
        "reason": {"type": "string"},
        "verdict": {"type": "string", "enum": list(VERDICTS)},
    },
    "required": ["reason", "verdict"],
    "additionalProperties": False,
}
# Per-item values each judged record gets in record["metrics"] (0/1 and 0/0.5/1): the QA task's
# item_scores reads them for ``<qtype>/judge_accuracy`` and ``judge/accuracy`` (compare, intervals).
ITEM_ACCURACY = "judge_accuracy"
ITEM_CREDIT = "judge_credit"
# The string metrics compared with the verdicts, by the per-item value's name, and the level that counts as high.
STRING_METRICS = {"f1": 0.5, "rougeL": 0.5}

# The evidence shown to the judge is cut to this many characters (part of the prompt version).
EVIDENCE_CHARS = 2000


def judge_prompt(version: str, question: str, gold: Sequence[str], answer: str, evidence: Sequence[str]) -> str:
    """The judge's prompt of ``version`` for one answer; ``evidence`` (the gold passages, may be empty) is cut
    to EVIDENCE_CHARS."""
    if version not in PROMPTS:
        raise UserError(f"judge.prompt_version must be one of {', '.join(PROMPTS)}, got {version!r}")
    text = " ".join(" ".join(passage.split()) for passage in evidence)
    if len(text) > EVIDENCE_CHARS:
        text = text[:EVIDENCE_CHARS].rstrip() + " ..."
    return PROMPTS[version].format(
        evidence_note=" and the evidence from the report" if text else "",
        evidence_only=" and the evidence" if text else "",
        question=question.strip(),
        gold=" | ".join(g.strip() for g in gold),
        evidence_block=f"Evidence: {text}\n" if text else "",
        answer=answer.strip(),
    )


def judge_request(item, answer: str, spec: DictConfig):
    """The structured-output request that asks the judge about ``answer`` to ``item`` (a QAItem)."""
    from esgexp.backends.base import GenerationRequest, schema_text

    evidence = item.context if spec.evidence else ()
    prompt = judge_prompt(spec.prompt_version, item.question, item.answers, answer, evidence)
    return GenerationRequest(item.id, prompt, max_new_tokens=int(spec.max_new_tokens), json_schema=schema_text(SCHEMA))


def parse_verdict(text: str | None) -> tuple[str | None, str]:
    """``(verdict, reason)`` from the judge's reply; ``(None, why)`` when it is not a JSON object with a
    ``verdict`` among VERDICTS and a string ``reason`` (a reply cut off by judge.max_new_tokens included)."""
    if not text:
        return None, "empty reply"
    try:
        value = json.loads(text)
    except ValueError:
        return None, "not JSON (cut off by judge.max_new_tokens?)" if text.lstrip().startswith("{") else "not JSON"
    if not isinstance(value, dict):
        return None, "not a JSON object"
    verdict, reason = value.get("verdict"), value.get("reason")
    if verdict not in VERDICTS:
        return None, f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}"
    if not isinstance(reason, str):
        return None, "no reason given"
    return verdict, " ".join(reason.split())


def not_asked(record: dict) -> str | None:
    """Why the judge is not asked about ``record`` (it counts as incorrect): never answered, or an empty
    answer; None when it is asked."""
    if record.get("failed"):
        return "never answered"
    if not (record.get("answer") or "").strip():
        return "empty answer"
    return None


def set_verdict(record: dict, verdict: str | None, reason: str, **extra) -> None:
    """``record["judge"]`` and the per-item values; no verdict (an invalid reply) scores as incorrect."""
    record["judge"] = {"verdict": verdict or "incorrect", "reason": reason, **extra}
    record.setdefault("metrics", {})
    record["metrics"][ITEM_ACCURACY] = float(verdict == "correct")
    record["metrics"][ITEM_CREDIT] = CREDIT.get(verdict or "incorrect", 0.0)


def kappa(a: Sequence[bool], b: Sequence[bool]) -> float | None:
    """Cohen's kappa of two 0/1 labelings of the same items; None when chance agreement is 1 (one label only)."""
    n = len(a)
    if not n:
        return None
    observed = sum(x == y for x, y in zip(a, b)) / n
    pa, pb = sum(a) / n, sum(b) / n
    chance = pa * pb + (1 - pa) * (1 - pb)
    return None if chance >= 1 else (observed - chance) / (1 - chance) + 0.0  # + 0.0: never -0.0


def agreement_metrics(records: list[dict]) -> dict:
    """Where the verdicts and the string metrics disagree, over the records that have both:

    - ``judge/agree/<m>_high_judged_incorrect``: of the items whose per-item ``<m>`` (f1, rougeL) is at least
      its STRING_METRICS level, the share the judge calls incorrect; ``<m>_low_judged_correct``: of those
      below it, the share judged correct; ``n_<m>_high`` / ``n_<m>_low``: how many items each share is of;
    - ``judge/agree/em_rate``: the share of items where EM = 1 exactly when the verdict is correct, and
      ``judge/agree/em_kappa``: Cohen's kappa of the two (absent when either says one thing of every item)."""
    out: dict = {}
    for name, level in STRING_METRICS.items():
        scored = [r for r in records if isinstance(r.get("metrics", {}).get(name), (int, float))]
        if not scored:
            continue
        high = [r for r in scored if r["metrics"][name] >= level]
        low = [r for r in scored if r["metrics"][name] < level]
        prefix = f"judge/agree/{name}"
        out[f"judge/agree/n_{name}_high"] = len(high)
        out[f"judge/agree/n_{name}_low"] = len(low)
        if high:
            out[f"{prefix}_high_judged_incorrect"] = sum(r["judge"]["verdict"] == "incorrect" for r in high) / len(high)
        if low:
            out[f"{prefix}_low_judged_correct"] = sum(r["judge"]["verdict"] == "correct" for r in low) / len(low)
    with_em = [r for r in records if isinstance(r.get("metrics", {}).get("em"), (int, float))]
    if with_em:
        em = [bool(r["metrics"]["em"]) for r in with_em]
        judged = [r["judge"]["verdict"] == "correct" for r in with_em]
        out["judge/agree/n_em"] = len(with_em)
        out["judge/agree/em_rate"] = sum(x == y for x, y in zip(em, judged)) / len(with_em)
        found = kappa(em, judged)
        if found is not None:
            out["judge/agree/em_kappa"] = found
    return out


def judge_metrics(records: list[dict], stats: StatsSettings) -> dict:
    """Run-level values of the judged ``records`` (each with ``record["judge"]``): ``judge/accuracy``
    (share judged correct, Wilson interval) and ``judge/credit`` (correct 1, partially 0.5; bootstrap
    interval) over all items and per question type (``<qtype>/judge_accuracy``, ``<qtype>/judge_credit``),
    the count of each verdict and the agreement with the string metrics."""
    out: dict = {}
    groups = {"judge": records}
    for record in records:
        groups.setdefault(record.get("qtype") or "unknown", []).append(record)
    for group, chosen in groups.items():
        for name, item_key, kind in (("accuracy", ITEM_ACCURACY, "proportion"), ("credit", ITEM_CREDIT, "mean")):
            key = f"judge/{name}" if group == "judge" else f"{group}/judge_{name}"
            values = [r["metrics"][item_key] for r in chosen]
            out[key] = sum(values) / len(values)
            scores = ItemScores([r["id"] for r in chosen], values, kind, clusters=record_clusters(chosen))
            out.update(scores.interval(stats).as_metrics(key))
    for verdict in VERDICTS:
        out[f"judge/n_{verdict}"] = sum(r["judge"]["verdict"] == verdict for r in records)
    out["judge/n_not_asked"] = sum(1 for r in records if r["judge"].get("not_asked"))
    out["judge/n_invalid"] = sum(1 for r in records if r["judge"].get("invalid"))
    out["judge/n_failed"] = sum(1 for r in records if r["judge"].get("failed"))
    out.update(agreement_metrics(records))
    return out


def judge_model_config(cfg: DictConfig) -> tuple[DictConfig, DictConfig]:
    """The judge's (backend node, model node): ``conf/model/<judge.model>.yaml`` composed on its own (with the
    backend its YAML picks, or ``judge.backend``), resolved, ``judge.backend_overrides`` merged on the backend;
    the run's trainer settings (device, batch size, progress bar) are the judge's too."""
    from esgexp.core.config import CONF_DIR, compose_config

    spec = cfg.judge
    path = CONF_DIR / "model" / f"{spec.model}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise UserError(f"judge.model: no model config {spec.model!r} (conf/model/{spec.model}.yaml); known: {known}")
    overrides = [f"model={spec.model}"]
    if spec.get("backend"):
        overrides.append(f"backend={spec.backend}")
    trainer = cfg.get("trainer") or {}
    for key in ("accelerator", "batch_size", "progress_bar"):
        if trainer.get(key) is not None:
            overrides.append(f"trainer.{key}={trainer[key]}")
    composed = compose_config("config", overrides)
    backend = OmegaConf.create(OmegaConf.to_container(composed.backend, resolve=True))
    extra = spec.get("backend_overrides")
    if extra:
        backend = OmegaConf.merge(backend, OmegaConf.to_container(extra, resolve=True))
    model = OmegaConf.create(OmegaConf.to_container(composed.model, resolve=True))
    return backend, model


def check_judge(cfg: DictConfig) -> tuple[DictConfig, DictConfig]:
    """The judge's (backend node, model node), checked before a run asks anything: its model config exists,
    its backend's optional packages are installed, its key is set (``preflight``); a UserError names what is
    wrong. A judge on a server is probed later, when something will be asked (``probe_if_asked``)."""
    from esgexp.backends import backend_class

    backend_cfg, model_cfg = judge_model_config(cfg)
    cls = backend_class(backend_cfg._target_)
    problems = cls.missing_requirements() or cls.preflight(backend_cfg, model_cfg, cfg.paths.cache_dir)
    if problems:
        raise UserError(f"judge: {problems[0]} (judge.model={cfg.judge.model})")
    return backend_cfg, model_cfg


def probe_if_asked(cfg: DictConfig, config: tuple[DictConfig, DictConfig], backend, requests: list) -> bool:
    """``probe_judge`` for a judge on a server when ``backend`` will send some of ``requests`` to its model
    (the run's model: new answers to judge; the judge's own backend: verdicts not in the request cache);
    whether it did. An answer or verdict that every request finds in the cache asks the judge's server nothing."""
    if config[0].name != "openai" or not backend.to_ask(requests):
        return False
    probe_judge(cfg, config)
    return True


def probe_judge(cfg: DictConfig, config: tuple[DictConfig, DictConfig]) -> None:
    """One judge request (a known question and answer) to a judge on a server, past the request cache, before
    the first thing it is asked: a server that is down, refuses the model or the structured output's form is
    one UserError now, not after every answer was generated. A reply that is not a verdict is a warning."""
    from esgexp.backends.base import GenerationRequest, schema_text

    backend = make_judge_backend(cfg, config)
    server = getattr(backend, "inner", backend)
    prompt = judge_prompt(cfg.judge.prompt_version, "What is 2 + 2?", ["4"], "4", ())
    request = GenerationRequest(
        "judge-probe", prompt, max_new_tokens=int(cfg.judge.max_new_tokens), json_schema=schema_text(SCHEMA)
    )
    replies: list = []
    try:
        server.run_live([request], replies.extend)  # live even for a judge in batch mode: one answer, now
    except UserError as error:
        raise UserError(f"judge {cfg.judge.model}: {error}{format_hint(config[0], str(error))}") from None
    finally:
        backend.close()
    reply = replies[0] if replies else None
    if reply is None or reply.failed:
        error = getattr(reply, "error", "no reply")
        raise UserError(
            f"judge {cfg.judge.model} on {server.base_url}: a first judge request failed ({error}){format_hint(config[0], error)}"
        )
    verdict, why = parse_verdict(reply.output)
    if verdict is None:
        log.warning(
            "judge %s: its reply to a first judge request is not a verdict (%s): %r", cfg.judge.model, why, reply.output
        )


def format_hint(backend_cfg: DictConfig, error: str) -> str:
    """For a server that fails a request sent with response_format json_schema: the other form to try."""
    if backend_cfg.get("response_format") != "json_schema" or not any(
        code in error for code in ("HTTP 500", "HTTP 400", "HTTP 422")
    ):
        return ""
    return (
        "; llama-cpp-python's server rejects response_format json_schema: for it, "
        "+judge.backend_overrides.response_format=json_object"
    )


def make_judge_backend(cfg: DictConfig, config: tuple[DictConfig, DictConfig] | None = None):
    """The judge model's backend (``config``: what :func:`check_judge` returned), behind the run's request cache."""
    from esgexp.backends import make_backend
    from esgexp.backends.base import RunContext

    backend_cfg, model_cfg = config or judge_model_config(cfg)
    context = RunContext(
        cache_dir=cfg.paths.cache_dir, tracking_uri=cfg.tracking.uri, seed=cfg.seed, output_dir=cfg.paths.output_dir
    )
    backend = make_backend(backend_cfg, model_cfg, context, cfg.paths.request_cache, cfg.cache)
    if not backend.supports("generate"):
        backend.close()
        raise UserError(f"judge: backend {backend_cfg.name} cannot generate for judge.model={cfg.judge.model!r}")
    return backend


def judge_tags(cfg: DictConfig) -> dict[str, str]:
    """The run's judge tags (leaderboard columns): its model, backend and prompt version."""
    backend = cfg.judge.get("backend") or "(the model's)"
    return {"judge_model": cfg.judge.model, "judge_backend": backend, "judge_prompt": cfg.judge.prompt_version}


def run_judge(
    cfg: DictConfig, items: list, records: list[dict], backend=None, config=None, probe: bool = False
) -> dict:
    """Ask the judge about every answered item of ``records`` (one per item of ``items``, in order), write
    each verdict into its record (``record["judge"]``, ``record["metrics"]["judge_accuracy"|"judge_credit"]``)
    and return the judge metrics with the judge backend's counts (``judge/n_cached``, ``judge/n_requests``).
    ``backend``: the judge's backend (made from ``config``, :func:`check_judge`'s, or else from ``cfg.judge``
    when None; closed here either way). ``probe``: a judge on a server not probed yet is, first, when some
    verdict is not in the request cache (``probe_if_asked``)."""
    by_id = {item.id: item for item in items}
    asked = {}
    for record in records:
        why = not_asked(record)
        if why:
            set_verdict(record, "incorrect", why, not_asked=True)
        else:
            asked[record["id"]] = judge_request(by_id[record["id"]], record["answer"], cfg.judge)
    replies: dict = {}
    backend = backend or (make_judge_backend(cfg, config) if asked else None)
    try:
        if asked and probe:
            probe_if_asked(cfg, config or judge_model_config(cfg), backend, list(asked.values()))
        if asked:
            log.info("judge %s grades %d answers", cfg.judge.model, len(asked))
            backend.run(list(asked.values()), lambda responses: replies.update({r.id: r for r in responses}))
        stats = backend.stats() if backend else {}
    finally:
        if backend:
            backend.close()
    for record in records:
        if record["id"] not in asked:
            continue
        reply = replies.get(record["id"])
        if reply is None or reply.failed:
            set_verdict(record, None, f"judge request failed: {getattr(reply, 'error', 'no reply')}", failed=True)
            continue
        verdict, reason = parse_verdict(reply.output)
        if verdict is None:
            set_verdict(record, None, f"invalid judge reply ({reason})", invalid=True, raw=reply.output)
        else:
            set_verdict(record, verdict, reason)
    metrics = judge_metrics(records, StatsSettings.from_node(cfg.stats))
    metrics["judge/n_asked"] = len(asked)
    for key in ("n_cached", "n_requests"):
        if key in stats:
            metrics[f"judge/{key}"] = stats[key]
    if metrics["judge/n_invalid"] or metrics["judge/n_failed"]:
        log.warning(
            "judge %s: %d invalid replies and %d failed requests, scored as incorrect (record['judge'] says why)%s",
            cfg.judge.model,
            metrics["judge/n_invalid"],
            metrics["judge/n_failed"],
            "; the run is incomplete: resume=true asks the judge again" if metrics["judge/n_failed"] else "",
        )
    return metrics
