"""SustainableQA as retrieval (the paper's Table 5): each question searches for its own passage.

The passages are the split's chunks that hold a factoid or non-factoid QA pair (id ``<split>/c<n>``, the
chunk's index in the file); each question of ``qtypes`` is a query whose one relevant passage (grade 1) is
its chunk. ``scope=split`` searches every passage of the split, ``scope=report`` only those of the
question's report (``metadata.report_name``).
"""

from __future__ import annotations

from dataclasses import dataclass

from esgexp.core.records import Passage, QAItem, RetrievalQuery
from esgexp.data.climretrieve import RetrievalDataset
from esgexp.data.sustainableqa import CHUNK_SECTIONS, SustainableQA, read_split, split_file
from esgexp.errors import UserError

SCOPES = ("split", "report")


@dataclass
class SustainableQARetrieval(SustainableQA):
    """Loads one split as passages and queries (``limit`` draws that many questions with the seed)."""

    scope: str = "split"

    def load(self) -> RetrievalDataset:
        if self.scope not in SCOPES:
            raise UserError(f"dataset.scope: {self.scope!r} - choose from {', '.join(SCOPES)}")
        if "table" in self._qtypes():
            raise UserError("dataset.qtypes: table questions have no passage to retrieve; use factoid, non_factoid")
        pool = read_split(split_file(self.path, self.split), self.split, tuple(CHUNK_SECTIONS), self.encoding)
        passages = {passage_id(item): passage_of(item) for item in pool.items}
        questions = super().load()
        queries = [query_of(item, self.scope) for item in questions.items]
        in_scope = {}
        for passage in passages.values():
            in_scope[passage.doc_id] = in_scope.get(passage.doc_id, 0) + 1
        return RetrievalDataset(
            passages=list(passages.values()),
            queries=queries,
            n_candidates={q.id: len(passages) if q.doc_scope is None else in_scope[q.doc_scope] for q in queries},
            skipped=questions.skipped,
        )


def passage_id(item: QAItem) -> str:
    return f"{item.id.split('/')[0]}/c{item.meta['chunk']}"


def passage_of(item: QAItem) -> Passage:
    """The chunk an item was asked on, as a passage of its report (page as the file gives it, else 0)."""
    page = item.meta.get("page") or 0
    return Passage(passage_id(item), str(item.meta.get("report")), item.context[0], page, page)


def query_of(item: QAItem, scope: str) -> RetrievalQuery:
    return RetrievalQuery(
        id=item.id,
        text=item.question,
        relevance={passage_id(item): 1},
        doc_scope=str(item.meta.get("report")) if scope == "report" else None,
        meta={"qtype": item.qtype, "category": item.meta.get("category"), "report": item.meta.get("report")},
    )
