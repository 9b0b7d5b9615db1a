"""Multiple-choice prompts: zero-shot, the item's linked passage first (ESGenius "RAG"), or retrieved passages."""

from __future__ import annotations

from dataclasses import dataclass

from esgexp.core.records import MCQItem
from esgexp.errors import UserError

NO_CONTEXT = "No relevant context found.\n\n"


def best_line(passage: str, prompt: str) -> str | None:
    """The passage line sharing the most distinct lower-cased words with the prompt (first on ties).

    None when no line shares a word.
    """
    prompt_words = set(prompt.lower().split())
    best, best_overlap = None, 0
    for line in passage.split("\n"):
        line = line.strip()
        if not line:
            continue
        overlap = len(set(line.lower().split()) & prompt_words)
        if overlap > best_overlap:
            best, best_overlap = line, overlap
    return best


@dataclass
class MCQPrompter:
    """Fills a template with an item's question and options; optionally puts its passage first."""

    template: str
    name: str = "zero_shot"
    context: str | None = None

    def build(self, item: MCQItem, passages: list[str] | None = None) -> str:
        """The prompt; with ``passages`` (retrieved, already formatted) they form the context."""
        prompt = self.fill(item)
        if passages is not None:
            joined = "\n".join(passages)
            return f"Context:\n{joined}\n\n{prompt}" if passages else NO_CONTEXT + prompt
        if self.context is None:
            return prompt
        passage = "\n".join(item.context).strip()
        if not passage:
            return NO_CONTEXT + prompt
        if self.context == "full":
            return f"Context: {passage}\n\n{prompt}"
        line = best_line(passage, prompt)
        return NO_CONTEXT + prompt if line is None else f"Context:\n{line}\n\n{prompt}"

    def fill(self, item: MCQItem) -> str:
        fields = {"query": item.question, "Z": "Not sure", **item.options}
        try:
            return self.template.format_map(fields)
        except (KeyError, IndexError, ValueError) as exc:
            raise UserError(
                f"template field {exc} is not available; templates may use {{query}} and "
                f"{{A}} {{B}} {{C}} {{D}} {{Z}} (write literal braces as {{{{ }}}})"
            ) from None
