"""The judge's prompts by version (``judge.prompt_version``; esgexp/eval/judge.py fills them in). A version's
text never changes once runs were made with it: a change is a new version. Text only, so the settings check
can list the versions without importing the judge; with the judge group's rules (``RULES``), which it collects."""

from esgexp.core.rules import Choice, Flag, Integer

ESG_JUDGE_V1 = """You grade answers to questions about company sustainability (ESG) reports.
Compare the candidate answer with the gold answer{evidence_note}. Judge what it says, not its wording.

Rubric:
- correct: it states the facts of the gold answer. A number must match in value, unit and year; other
  notations of the same value count (1,482,300 tCO2e = 1.48 million tCO2e; 18.6% = 18.6 percent), and so does
  rounding that keeps the figure recognisable. Extra detail is fine if it contradicts nothing.
- partially_correct: part of what the gold answer holds and nothing that contradicts it: some items of a
  list, the right number without its unit, the main point of a long answer with a detail missing.
- incorrect: another number, unit, year or entity; a wrong or missing key fact; several values offered
  as alternatives; an empty or off-topic answer; "not disclosed" or "unknown" when the gold answer gives
  the fact. When the gold answer says the information is not disclosed, only an answer saying so is correct.
Use only the gold answer{evidence_only}, not your own knowledge.

Question: {question}
Gold answer: {gold}
{evidence_block}Candidate answer: {answer}

Reply with a JSON object: first "reason", one short line on what in the candidate answer matches or differs
from the gold answer; then "verdict": correct, partially_correct or incorrect."""

PROMPTS = {"esg-judge-v1": ESG_JUDGE_V1}

JUDGE_BACKENDS = ("hf", "openai", "vllm")  # judge.backend: a conf/backend/ option for the judge model
# The judge group's settings (conf/judge/), checked before any job starts.
RULES = {
    "judge.backend": Choice(JUDGE_BACKENDS, optional=True),
    "judge.prompt_version": Choice(tuple(PROMPTS)),
    "judge.evidence": Flag(),
    "judge.max_new_tokens": Integer(1),
}
