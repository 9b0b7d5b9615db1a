"""What a grid job would send, computed without sending anything (``dry_run=true``): the model requests
(one per asked item, as ``run.make_requests`` builds them), their prompt tokens and, with the model
config's list prices (``model.price``, US dollars per million tokens, as ``run.usage_metrics`` reads them),
the cost: prompt tokens at the prompt price plus every request's completion budget at the completion
price (an upper bound: answers are usually shorter).

Tokens are estimated at 4 characters per token (OpenAI's rule of thumb for English); a run records
the real counts (``usage/*`` in metrics.json)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from esgexp.errors import UserError

CHARS_PER_TOKEN = 4


@dataclass
class Estimate:
    """Model requests of one job, their estimated prompt tokens, completion budget and cost (None: no price)."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_budget: int = 0
    cost: float | None = None
    note: str = ""


def tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate(cfg: DictConfig, loaded_cache: dict) -> Estimate:
    """The requests a composed job would send (``loaded_cache`` keeps each dataset loaded once)."""
    if cfg.task == "esgbench_score":
        return Estimate(note="scores a predictions file: no model")
    if cfg.task == "retrieval":
        mode = cfg.query.get("mode")
        if mode in ("question", "definition", "concepts"):
            return Estimate(note="retrieval with fixed query texts: no model")
        return Estimate(
            note=f"query={mode}: one explanation per question by model {cfg.model.name} (cached per question)"
        )
    if cfg.task not in ("mcq", "qa"):
        return Estimate(note=f"task={cfg.task}: not estimated")
    if cfg.strategy.name == "rag":
        return Estimate(note="strategy=rag: prompts depend on retrieval, not estimated")
    from esgexp.run import make_requests, make_task

    key = json.dumps(OmegaConf.to_container(cfg.dataset, resolve=True), sort_keys=True, default=str)
    if key not in loaded_cache:
        loaded_cache[key] = instantiate(cfg.dataset).load().items
    try:
        task = make_task(cfg)
        items = task.prepare(list(loaded_cache[key]))
        prompts = {item.id: task.prompt(item, None) for item in items}
    except UserError as error:
        return Estimate(note=f"not estimated: {error}")
    requests = make_requests(cfg, items, prompts)
    prompt_tokens = sum(tokens(prompts[r.id]) for r in requests)
    budget = sum(getattr(r, "max_new_tokens", 1) for r in requests)
    price = cfg.model.get("price")
    cost = None
    if price:
        cost = prompt_tokens * float(price.prompt) / 1e6 + budget * float(price.get("completion", 0)) / 1e6
    return Estimate(len(requests), prompt_tokens, budget, cost)
