"""Structured generation for the builders: prompts in, JSON objects matching a schema out.

Every request goes through the job's backend (behind the request cache) with the schema attached,
so the backend constrains decoding to it. An output that is not JSON, or breaks the schema, is asked
once more with the problem named in the prompt; a second failure is a rejection that keeps the raw
text. Rejections are appended to ``rejected.jsonl`` in the build folder as they happen. A stage whose
every output is rejected stops the build with a UserError (the model cannot produce the schema).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from esgexp.backends.base import Backend, GenerationRequest, Response, schema_text
from esgexp.builders.report import StageCounts
from esgexp.builders.schema import schema_problems
from esgexp.errors import UserError

# A builder's own test of a schema-valid object: None, or (reason, what is wrong) to retry and then discard it.
Check = Callable[[dict], "tuple[str, str] | None"]
RETRY_NOTE = (
    "\n\nYour previous answer was rejected ({problem}). Answer again with one JSON object that matches the schema."
)


@dataclass(frozen=True)
class Ask:
    """One structured request: its id, prompt and JSON Schema."""

    id: str
    prompt: str
    schema: dict


@dataclass(frozen=True)
class Rejection:
    """Why an output was not usable, with the raw text (None when the backend failed)."""

    id: str
    stage: str
    reason: str
    detail: str
    raw: str | None


class StructuredGenerator:
    """Asks ``backend`` for JSON; ``max_new_tokens`` per answer; rejections go to ``rejected_file``."""

    def __init__(self, backend: Backend, max_new_tokens: int, rejected_file: Path, progress: bool = True):
        self.backend = backend
        self.max_new_tokens = max_new_tokens
        self.rejected_file = Path(rejected_file)
        self.progress = progress

    def ask(
        self, stage: str, asks: Sequence[Ask], counts: StageCounts, required: bool = True, check: Check | None = None
    ) -> dict[str, dict]:
        """The valid objects by ask id (valid: JSON, fits the schema, passes ``check``); each retry counts as
        repaired, each final failure as discarded. A ``required`` stage with every output rejected raises a UserError."""
        by_id = {a.id: a for a in asks}
        counts.n_in += len(asks)
        answers, problems = self._run(stage, [self._request(a, a.prompt) for a in asks], by_id, check)
        retried = {i: p for i, p in problems.items() if p[0] != "backend_failed"}
        if retried:
            more, problems2 = self._run(
                f"{stage} (retry)",
                [
                    self._request(by_id[i], by_id[i].prompt + RETRY_NOTE.format(problem=p[1]))
                    for i, p in retried.items()
                ],
                by_id,
                check,
            )
            counts.n_repaired += len(more)
            answers.update(more)
            problems = {**{i: p for i, p in problems.items() if i not in retried}, **problems2}
        for item_id in (a.id for a in asks if a.id in problems):  # in ask order, however the answers arrived
            reason, detail, raw = problems[item_id]
            counts.discarded[reason] += 1
            self.reject(Rejection(item_id, stage, reason, detail, raw))
        counts.n_out += len(answers)
        if required and asks and not answers:
            reasons = ", ".join(f"{reason} {n}" for reason, n in counts.discarded.most_common())
            raise UserError(
                f"stage {stage}: every one of {len(asks)} outputs was rejected ({reasons}): the model cannot "
                f"produce the schema (raise builder.max_new_tokens, or choose another model); raw outputs in {self.rejected_file}"
            )
        return answers

    def reject(self, rejection: Rejection) -> None:
        """Append one rejection (of any stage) to the rejected file."""
        self.rejected_file.parent.mkdir(parents=True, exist_ok=True)
        with self.rejected_file.open("a", encoding="utf-8") as out:
            out.write(json.dumps(rejection.__dict__, ensure_ascii=False) + "\n")

    def _request(self, ask: Ask, prompt: str) -> GenerationRequest:
        return GenerationRequest(
            id=ask.id, prompt=prompt, max_new_tokens=self.max_new_tokens, json_schema=schema_text(ask.schema)
        )

    def _run(self, desc: str, requests: list[GenerationRequest], by_id: dict[str, Ask], check: Check | None):
        from tqdm.auto import tqdm

        answers: dict[str, dict] = {}
        problems: dict[str, tuple[str, str, str | None]] = {}
        with tqdm(total=len(requests), desc=desc, unit="item", disable=not self.progress) as bar:

            def take(responses: list[Response]) -> None:
                for response in responses:
                    value, problem = parse(response, by_id[response.id].schema)
                    if problem is None and check is not None and (found := check(value)):
                        problem = (*found, response.output)
                    if problem is None:
                        answers[response.id] = value
                    else:
                        problems[response.id] = problem
                bar.update(len(responses))

            if requests:
                self.backend.run(requests, take)
        return answers, problems


def parse(response: Response, schema: dict) -> tuple[dict | None, tuple[str, str, str | None] | None]:
    """The response's JSON object, or (reason, detail, raw text): ``backend_failed``, ``cut_off`` (a JSON text
    that stops before its end, as at ``max_new_tokens``), ``not_json`` or ``schema``."""
    if response.failed:
        return None, ("backend_failed", response.error or "", None)
    raw = response.output or ""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        if error.msg.startswith("Unterminated string") or error.pos >= len(raw.rstrip()):
            return None, ("cut_off", "cut off before the JSON object ended: give a shorter answer", raw)
        return None, ("not_json", f"not JSON: {error.msg} at character {error.pos}", raw)
    found = schema_problems(value, schema)
    if found:
        return None, ("schema", "; ".join(found[:3]), raw)
    return value, None
