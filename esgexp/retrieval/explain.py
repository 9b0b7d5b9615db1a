"""The ``explanation`` query formulation: an LLM explains each question; the explanation is the query.

The explanations are generated through the job's backend, so the request cache keeps them: a sweep
over retrievers or query settings generates each once per model and prompt.
"""

from __future__ import annotations

from collections.abc import Sequence

from omegaconf import DictConfig

from esgexp.errors import UserError
from esgexp.records import RetrievalQuery


def explanation_queries(cfg: DictConfig, queries: Sequence[RetrievalQuery]) -> tuple[dict[str, str], dict[str, int]]:
    """Query id -> search text: the question's explanation (after the question when ``with_question``);
    and the backend's counts (requests sent, answers from the cache)."""
    from esgexp.backends.base import GenerationRequest
    from esgexp.jobs import job_backend

    if "{question}" not in cfg.query.prompt:
        raise UserError("query.prompt must contain {question}")
    questions = sorted({q.text for q in queries})
    requests = [
        GenerationRequest(str(i), cfg.query.prompt.replace("{question}", text), max_new_tokens=cfg.query.max_new_tokens)
        for i, text in enumerate(questions)
    ]
    explained: dict[str, str] = {}

    def keep(responses: list) -> None:
        for response in responses:
            if response.failed:
                raise UserError(f"the explanation of question {questions[int(response.id)]!r} failed: {response.error}")
            explained[questions[int(response.id)]] = response.output.strip()

    with job_backend(cfg, "generate") as backend:
        backend.run(requests, keep)
        stats = backend.stats()
    if cfg.query.with_question:
        return {q.id: f"{q.text}\n{explained[q.text]}" for q in queries}, stats
    return {q.id: explained[q.text] for q in queries}, stats
