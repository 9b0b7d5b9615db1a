"""The ``explanation`` query formulation: an LLM explains each question; the explanation is the query.

Explanations are cached on disk per (model config, prompt, length) and question, so a sweep over retrievers
generates them once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from esgexp.errors import UserError
from esgexp.outputs import write_json
from esgexp.records import RetrievalQuery


def cache_file(cfg: DictConfig) -> Path:
    model = OmegaConf.to_container(cfg.model, resolve=True)
    key = json.dumps([model, cfg.query.prompt, cfg.query.max_new_tokens], sort_keys=True, default=str)
    return Path(cfg.paths.cache_dir) / "explanations" / f"{cfg.model.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def explanation_queries(cfg: DictConfig, queries: Sequence[RetrievalQuery]) -> dict[str, str]:
    """Query id -> search text: the question's explanation (after the question when ``with_question``)."""
    from esgexp.models.generation import generate_texts

    if "{question}" not in cfg.query.prompt:
        raise UserError("query.prompt must contain {question}")
    path = cache_file(cfg)
    cached: dict[str, str] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    questions = sorted({q.text for q in queries} - set(cached))
    if questions:
        prompts = {str(i): cfg.query.prompt.replace("{question}", text) for i, text in enumerate(questions)}
        outputs = generate_texts(cfg, prompts, cfg.query.max_new_tokens)
        cached.update({text: outputs[str(i)].strip() for i, text in enumerate(questions)})
        write_json(path, cached)
    if cfg.query.with_question:
        return {q.id: f"{q.text}\n{cached[q.text]}" for q in queries}
    return {q.id: cached[q.text] for q in queries}
