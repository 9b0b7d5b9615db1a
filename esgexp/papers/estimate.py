"""What a grid job would send, computed without sending anything (``dry_run=true``): the model requests
(one per asked item, as ``run.make_requests`` builds them), their prompt tokens and, with the model
config's list prices (``model.price``, US dollars per million tokens, as ``run.usage_metrics`` reads them),
the cost: prompt tokens at the prompt price plus every request's completion budget at the completion
price (an upper bound: answers are usually shorter). With ``model.price.batch_discount`` (the share a
provider's Batch API takes off, 0.5 at OpenAI) the same requests are also priced as a batch
(``backend.batch=true``).

Tokens are estimated at 4 characters per token (OpenAI's rule of thumb for English); a run records
the real counts (``usage/*`` in metrics.json)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from esgexp.errors import UserError
from esgexp.tasks.kinds import kind_of, load

CHARS_PER_TOKEN = 4


@dataclass
class Estimate:
    """Model requests of one job, their estimated prompt tokens, completion budget and cost (None: no price)."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_budget: int = 0
    cost: float | None = None
    note: str = ""
    batch_cost: float | None = None  # the cost through the provider's Batch API (None: no batch price)
    prompt_cost: float | None = None
    judge: Estimate | None = None  # the judge's requests (judge=...), priced at the judge model's prices


def dollars(value: float) -> str:
    """``$1.23``, or ``$0.0123`` below ten cents."""
    return f"${value:.2f}" if value >= 0.1 else f"${value:.4f}"


def tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate(cfg: DictConfig, loaded_cache: dict) -> Estimate:
    """The model requests a composed job would send (``loaded_cache`` keeps each dataset loaded once)."""
    kind = kind_of(cfg.task)
    if not kind.uses_model(cfg):
        return Estimate(note=f"{kind.without_model}: no model")
    if kind.estimate:
        return load(kind.estimate)(cfg, loaded(cfg, loaded_cache))
    if not kind.prompts:
        return Estimate(note=f"task={cfg.task}: not estimated")
    if cfg.strategy.name == "rag":
        return Estimate(note="strategy=rag: prompts depend on retrieval, not estimated")
    from esgexp.tasks.generation import asked_items, make_requests, make_task

    try:
        task = make_task(cfg)
        items = asked_items(cfg, task, loaded(cfg, loaded_cache))
        prompts = {item.id: task.prompt(item, None) for item in items}
    except UserError as error:
        return Estimate(note=f"not estimated: {error}")
    requests = make_requests(cfg, items, prompts)
    budget = sum(getattr(r, "max_new_tokens", 1) for r in requests)
    found = priced(cfg, len(requests), sum(tokens(prompts[r.id]) for r in requests), budget)
    if cfg.get("judge"):
        found.judge = judge_estimate(cfg, items, requests)
    return found


def judge_estimate(cfg: DictConfig, items: list, requests: list) -> Estimate:
    """The judge's requests (``judge=...``): one per item, its prompt holding an answer as long as the answer's
    token budget (an upper bound), priced at the judge model's prices."""
    from esgexp.eval.judge import judge_model_config, judge_prompt

    spec = cfg.judge
    _, judge_model = judge_model_config(cfg)
    budgets = {r.id: getattr(r, "max_new_tokens", 1) for r in requests}
    prompt_tokens = 0
    for item in items:
        evidence = item.context if spec.evidence else ()
        prompt_tokens += tokens(judge_prompt(spec.prompt_version, item.question, item.answers, "", evidence))
        prompt_tokens += budgets[item.id]
    found = priced(
        OmegaConf.create({"model": judge_model}), len(items), prompt_tokens, len(items) * int(spec.max_new_tokens)
    )
    found.note = f"judge {spec.model}"
    return found


def loaded(cfg: DictConfig, cache: dict):
    """The job's dataset, loaded once per distinct dataset node."""
    key = json.dumps(OmegaConf.to_container(cfg.dataset, resolve=True), sort_keys=True, default=str)
    if key not in cache:
        cache[key] = instantiate(cfg.dataset).load()
    return cache[key]


def explanation_estimate(cfg: DictConfig, data) -> Estimate:
    """LLM-written queries (ClimRetrieve generic / inf_*): one request per distinct prompt, as the job sends them."""
    from esgexp.retrieval.explain import prompt_for

    prompts = {prompt_for(cfg.query, item, data.queries, cfg.seed)[0] for item in data.queries}
    found = priced(cfg, len(prompts), sum(map(tokens, prompts)), len(prompts) * int(cfg.query.max_new_tokens))
    found.note = f"query={cfg.query.name}: explanations by model {cfg.model.name}"
    return found


def priced(cfg: DictConfig, requests: int, prompt_tokens: int, budget: int) -> Estimate:
    """The estimate with its cost at the model's list prices, and at its batch price where it has one (None
    without prices)."""
    from esgexp.tasks.generation import token_cost

    found = Estimate(requests, prompt_tokens, budget)
    price = cfg.model.get("price")
    if price:
        found.cost = token_cost({"prompt_tokens": prompt_tokens, "completion_tokens": budget}, price)
        found.prompt_cost = token_cost({"prompt_tokens": prompt_tokens}, price)
        if price.get("batch_discount") is not None:
            found.batch_cost = token_cost(
                {"batch_prompt_tokens": prompt_tokens, "batch_completion_tokens": budget}, price
            )
    return found
