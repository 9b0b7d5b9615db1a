"""Chunkers: one document's pages -> ``Passage``s with ids ``<doc_id>#<n>`` (n from 0) and exact page spans.

Every chunker works on the document's non-empty pages joined by a line break and cuts character spans
of that text, so a chunk crossing a page boundary gets the span of both pages (``12-13``). Each is a
small dataclass whose fields are its Hydra parameters (``conf/chunker/*.yaml``).
"""

from __future__ import annotations

import itertools
import re
from abc import ABC, abstractmethod
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from esgexp.core.records import Passage
from esgexp.data.pdf import Page
from esgexp.errors import UserError

Span = tuple[int, int]

# Sentence splitter: a sentence ends after ".", "!" or "?" (plus closing quotes or brackets) and
# whitespace when the next character is not a lowercase letter ("e.g. the" goes on; "4,096.7" has no
# space); a blank line (paragraph break) always ends one. No abbreviation list: "Dr. Smith" is cut.
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*\s+|\n\s*\n\s*")
_SPACE = re.compile(r"\s+")
_HEADING = re.compile(r"^#{1,6}[ \t]+\S", re.MULTILINE)


class _Text:
    """A document's non-empty pages joined by line breaks, mapping character offsets back to pages."""

    def __init__(self, pages: Sequence[Page]):
        kept = [page for page in pages if page.text.strip()]
        self.text = "\n".join(page.text for page in kept)
        self.numbers = [page.page for page in kept]
        self.starts: list[int] = []
        offset = 0
        for page in kept:
            self.starts.append(offset)
            offset += len(page.text) + 1

    def page_spans(self) -> list[Span]:
        """One span per page; consecutive spans touch (each holds its page's trailing line break)."""
        return list(zip(self.starts, [*self.starts[1:], len(self.text)]))

    def page_at(self, offset: int) -> int:
        return self.numbers[bisect_right(self.starts, offset) - 1]

    def length(self, span: Span) -> int:
        return len(self.text[span[0] : span[1]].strip())

    def passages(self, doc_id: str, spans: list[Span]) -> list[Passage]:
        """Spans -> passages numbered in order; whitespace at either end is trimmed, empty spans dropped."""
        passages = []
        for start, end in spans:
            chunk = self.text[start:end]
            text = chunk.strip()
            if not text:
                continue
            start += len(chunk) - len(chunk.lstrip())
            end = start + len(text)
            passages.append(
                Passage(f"{doc_id}#{len(passages)}", doc_id, text, self.page_at(start), self.page_at(end - 1))
            )
        return passages


def _cut(span: Span, boundaries: list[int]) -> list[Span]:
    """Cut ``span`` at the given offsets (those strictly inside it) into touching spans."""
    start, end = span
    points = [start, *(b for b in boundaries if start < b < end), end]
    return list(itertools.pairwise(points))


def sentence_spans(text: str, span: Span) -> list[Span]:
    """``span`` cut after every sentence end (see the splitter rule above)."""
    ends = []
    for match in _SENTENCE_END.finditer(text, span[0], span[1]):
        following = text[match.end() : match.end() + 1]
        if match.group().lstrip(".!?\"'”’)]").count("\n") >= 2 or not following.islower():
            ends.append(match.end())
    return _cut(span, ends)


def word_spans(text: str, span: Span) -> list[Span]:
    """``span`` cut after every run of whitespace: one word per span."""
    return _cut(span, [m.end() for m in _SPACE.finditer(text, span[0], span[1])])


def _words(text: str, span: Span) -> int:
    return len(text[span[0] : span[1]].split())


def _pack_words(text: str, units: list[Span], max_words: int, overlap: int) -> list[Span]:
    """Greedy chunks of whole units (sentences) up to ``max_words`` words; each next chunk repeats the
    longest run of trailing units of the previous one that has at most ``overlap`` words. A unit longer
    than ``max_words`` is first cut into pieces of ``max_words`` words."""
    pieces: list[tuple[Span, int]] = []
    for unit in units:
        count = _words(text, unit)
        if count <= max_words:
            pieces.append((unit, count))
            continue
        words = word_spans(text, unit)
        for i in range(0, len(words), max_words):
            group = words[i : i + max_words]
            pieces.append(((group[0][0], group[-1][1]), len(group)))
    chunks, i = [], 0
    while i < len(pieces):
        j, total = i, 0
        while j < len(pieces) and total + pieces[j][1] <= max_words:
            total += pieces[j][1]
            j += 1
        chunks.append((pieces[i][0][0], pieces[j - 1][0][1]))
        if j == len(pieces):
            break
        k, shared = j, 0
        while k - 1 > i and shared + pieces[k - 1][1] <= overlap:
            k -= 1
            shared += pieces[k][1]
        i = k
    return chunks


@dataclass
class Chunker(ABC):
    """Base: ``chunk`` builds the page-mapped text, ``spans`` (per chunker) cuts it."""

    name: str = "chunker"

    def chunk(self, doc_id: str, pages: Sequence[Page]) -> list[Passage]:
        text = _Text(pages)
        return text.passages(doc_id, self.spans(text)) if text.text else []

    @abstractmethod
    def spans(self, text: _Text) -> list[Span]:
        """Where this chunker cuts the document's text."""

    def config(self) -> dict:
        """The parameters and class, as recorded in the corpus report (a change re-chunks)."""
        return {"_target_": f"{type(self).__module__}.{type(self).__qualname__}", **asdict(self)}


@dataclass
class CharChunker(Chunker):
    """Whole pages packed while the passage stays within ``max_chars``; a passage under
    ``min_chars`` that cannot take the next page whole borrows its first sentences (then words) until it
    reaches ``min_chars``; a page over ``max_chars`` is cut at sentence ends, then at whitespace, then
    every ``max_chars``. A passage stays under ``min_chars`` only at a document's end or before text
    with no place to cut. The defaults are ESGenius's page-sized passages (``chunker=chars``);
    ``chunker=paragraphs`` (200-800, the ingest default) gives paragraph-sized ones."""

    name: str = "chars"
    min_chars: int = 150
    max_chars: int = 4500

    def __post_init__(self):
        if not 0 <= self.min_chars < self.max_chars:
            raise UserError(
                f"chunker {self.name}: need 0 <= min_chars < max_chars, got {self.min_chars} and {self.max_chars}"
            )

    def spans(self, text: _Text) -> list[Span]:
        atoms, out, current = deque(text.page_spans()), [], None
        while atoms:
            atom = atoms.popleft()
            if text.length(atom) > self.max_chars:
                atoms.extendleft(reversed(self._finer(text.text, atom)))
                continue
            if current is None:
                current = atom
            elif text.length((current[0], atom[1])) <= self.max_chars:
                current = (current[0], atom[1])
            elif text.length(current) < self.min_chars and len(finer := self._finer(text.text, atom)) > 1:
                atoms.extendleft([(finer[1][0], atom[1]), finer[0]])  # borrow one piece, keep the rest whole
            else:
                out.append(current)
                current = atom
        if current is not None:
            out.append(current)
        return out

    def _finer(self, text: str, span: Span) -> list[Span]:
        """The next finer cut of a span: sentences, else words, else pieces of ``max_chars``."""
        for cut in (sentence_spans, word_spans):
            parts = cut(text, span)
            if len(parts) > 1:
                return parts
        return _cut(span, list(range(span[0] + self.max_chars, span[1], self.max_chars)))


@dataclass
class SentenceChunker(Chunker):
    """ClimRetrieve: whole sentences up to ``chunk_words`` words, consecutive chunks sharing trailing
    sentences of at most ``overlap`` words (a sentence over ``chunk_words`` is cut into word pieces)."""

    name: str = "sentences"
    chunk_words: int = 350
    overlap: int = 50

    def __post_init__(self):
        if not 0 <= self.overlap < self.chunk_words:
            raise UserError(
                f"chunker {self.name}: need 0 <= overlap < chunk_words, got {self.overlap} and {self.chunk_words}"
            )

    def spans(self, text: _Text) -> list[Span]:
        units = sentence_spans(text.text, (0, len(text.text)))
        return _pack_words(text.text, units, self.chunk_words, self.overlap)


@dataclass
class WindowChunker(Chunker):
    """ESGBench: windows of at most ``size`` characters, each next one starting ``overlap`` characters
    before the previous end. A window ends at the last whitespace in its second half (else at ``size``)
    and the next starts at the first word start in the last ``overlap`` characters (else exactly there),
    so the shared text is at most ``overlap`` characters."""

    name: str = "window"
    size: int = 1200
    overlap: int = 200

    def __post_init__(self):
        if not 0 <= self.overlap < self.size:
            raise UserError(f"chunker {self.name}: need 0 <= overlap < size, got {self.overlap} and {self.size}")

    def spans(self, text: _Text) -> list[Span]:
        body, spans = text.text, []
        start = len(body) - len(body.lstrip())
        while start < len(body):
            end = min(start + self.size, len(body))
            if end < len(body):
                end = next((i for i in range(end, start + self.size // 2, -1) if body[i].isspace()), end)
            spans.append((start, end))
            if not body[end:].strip():
                break
            back = max(end - self.overlap, start + 1)
            word = next((i for i in range(back, end) if body[i - 1].isspace() and not body[i].isspace()), None)
            start = word if word is not None else back
            while body[start].isspace():
                start += 1
        return spans


@dataclass
class MarkdownChunker(Chunker):
    """Text with Markdown headings (``#`` to ``######`` at a line start): one passage per section, a
    heading with no text of its own joining the next section; a section over ``max_words`` words is
    cut into whole sentences of up to ``max_words`` words. Headings inside code blocks are not told apart."""

    name: str = "markdown"
    max_words: int = 400

    def __post_init__(self):
        if self.max_words < 1:
            raise UserError(f"chunker {self.name}: max_words must be at least 1, got {self.max_words}")

    def spans(self, text: _Text) -> list[Span]:
        body, sections = text.text, []
        for section in _cut((0, len(body)), [m.start() for m in _HEADING.finditer(body)]):
            if sections and _heading_only(body, sections[-1]):
                section = (sections.pop()[0], section[1])
            sections.append(section)
        spans = []
        for section in sections:
            if _words(body, section) <= self.max_words:
                spans.append(section)
            else:
                spans += _pack_words(body, sentence_spans(body, section), self.max_words, 0)
        return spans


def _heading_only(text: str, span: Span) -> bool:
    lines = text[span[0] : span[1]].strip().splitlines()
    return all(_HEADING.match(line) for line in lines)
