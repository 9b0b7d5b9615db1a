"""Read a report PDF into its page map: the cleaned text of every page with its page number."""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from esgexp.core.rules import Choice

log = logging.getLogger(__name__)

# Bump when the text cleaning changes: corpora ingested before are then read again.
CLEANING_VERSION = 2


class UnreadableDocument(Exception):
    """A file that cannot be opened, decrypted or read as text; the message is why it is skipped."""


@dataclass(frozen=True)
class Page:
    """One page's cleaned text; ``page`` is 1-based (as printed in citations)."""

    page: int
    text: str

    @property
    def page_index(self) -> int:
        """The 0-based index (ESGBench counts pages this way)."""
        return self.page - 1


# Format and invisible characters (soft hyphen, zero-width space, BOM), C0/C1 controls other than
# whitespace, and private-use glyphs (symbol-font bullets): dropped, except the common bullet U+F0B7.
_INVISIBLE = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f\u00ad\u200b-\u200f\u2060\ufeff\ue000-\uf8ff]")
_SYMBOL_BULLET = "\uf0b7"
# A soft hyphen (U+00AD) at a line end marks a word the typesetter broke there: joined whatever the case.
_SOFT_BREAK = re.compile(r"\u00ad[ \t]*\r?\n[ \t]*")
# A word broken at a line end: "sustain-\nability", or pypdf's "sus -\ntainability"; " - \n" is a dash.
# Each starts where no word character is before it: the same matches, found without trying every letter.
_HYPHEN_BREAK = re.compile(r"(?<!\w)(\w[\w-]*?)(?: -|-[ \t]*)\n[ \t]*(\w+)")
_COMPOUND = re.compile(r"(?<!\w)\w+(?:-\w+)+")


def hyphenated_words(text: str) -> frozenset[str]:
    """Lowercased hyphenated words written on one line (``co2-equivalent``): real hyphens to keep."""
    return frozenset(word.lower() for token in text.split() if "-" in token for word in _COMPOUND.findall(token))


def clean_text(
    text: str, keep_lines: bool = False, compounds: frozenset[str] = frozenset(), consulted: set[str] | None = None
) -> str:
    """Normalise extracted text for chunking and search.

    NFKC (ligatures, subscripts), invisible and control characters dropped, a word broken at a line
    end by a soft hyphen joined, one broken by a hyphen joined too (``sustain-\\nability`` ->
    ``sustainability``) unless a capital or digit is next to the hyphen or ``compounds`` holds the
    hyphenated form (then only the line break goes), spaces collapsed.
    Lines are joined into paragraphs separated by a blank line; ``keep_lines`` keeps every line break
    (for Markdown/plain text, where lines carry structure). ``consulted`` (when given) gets every lowercased
    hyphenated form whose fate ``compounds`` decided: the text depends on ``compounds`` only through these.
    """
    text = unicodedata.normalize("NFKC", text.replace(_SYMBOL_BULLET, "•"))
    text = _SOFT_BREAK.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = _INVISIBLE.sub("", text)

    def join(match: re.Match) -> str:
        head, tail = match.group(1), match.group(2)
        hyphenated = f"{head}-{tail}"
        if head[-1].islower() and tail[0].islower():
            if consulted is not None:
                consulted.add(hyphenated.lower())
            if hyphenated.lower() not in compounds:
                return head + tail
        return hyphenated

    text = _HYPHEN_BREAK.sub(join, text)
    text = "\n".join(" ".join(line.split()) for line in text.split("\n"))
    if keep_lines:
        return re.sub(r"\n{3,}", "\n\n", text).strip()
    paragraphs = re.split(r"\n{2,}", text.strip())
    return "\n\n".join(" ".join(p.split("\n")) for p in paragraphs if p.strip())


# The page-text readers: pdfium (PDFium through pypdfium2, 10-20x faster) and pypdf (pure Python).
READERS = ("pdfium", "pypdf")
RULES = {"corpus.reader": Choice(READERS)}  # python -m esgexp.ingest: the reader is a setting of the corpus


def read_pages(path: Path, reader: str = "pdfium") -> list[Page]:
    """The page map of one PDF read by ``reader``, every page kept (an empty page has empty text).

    An encrypted PDF is opened with the empty user password. Raises :class:`UnreadableDocument` for a
    file that is not a readable PDF, needs a password, or has no extractable text at all (a scan).
    """
    return join_ranges([read_range(path, reader)])


@dataclass(frozen=True)
class PageRange:
    """Some consecutive pages of one PDF, read and cleaned on their own (``read_range``): ``texts`` cleaned
    with the hyphenated words of these pages only (``compounds``); ``consulted`` per page, the hyphenated
    forms whose fate those words decided; ``raw``, the extracted text of each page with any (by position)."""

    first: int
    texts: list[str]
    compounds: frozenset[str]
    consulted: list[frozenset[str]]
    raw: dict[int, str]


def page_count(path: Path) -> int:
    """The number of pages of a PDF (PDFium); raises :class:`UnreadableDocument` when it cannot be opened."""
    document = _open_pdfium(path)
    try:
        return len(document)
    finally:
        document.close()


def read_range(path: Path, reader: str = "pdfium", pages: range | None = None) -> PageRange:
    """The 0-based ``pages`` of a PDF (all when None) read by ``reader`` and cleaned (``PageRange``)."""
    raw = pdfium_texts(path, pages) if reader == "pdfium" else pypdf_texts(path, pages)
    compounds = hyphenated_words("\n".join(raw))
    texts, consulted = [], []
    for text in raw:
        forms: set[str] = set()
        texts.append(clean_text(text, compounds=compounds, consulted=forms))
        consulted.append(frozenset(forms))
    raw_kept = {index: text for index, text in enumerate(raw) if consulted[index]}
    return PageRange(1 + (0 if pages is None else pages.start), texts, compounds, consulted, raw_kept)


def join_ranges(parts: list[PageRange]) -> list[Page]:
    """The page map of a PDF from its ranges in page order, the same as ``read_pages`` gives: a page whose text
    depended on a hyphenated word written on another range's page is cleaned again with the whole PDF's words.
    Raises :class:`UnreadableDocument` for no pages or no text at all."""
    compounds = frozenset().union(*(part.compounds for part in parts))
    pages = []
    for part in parts:
        missed = compounds - part.compounds
        for index, text in enumerate(part.texts):
            if part.consulted[index] & missed:
                text = clean_text(part.raw[index], compounds=compounds)
            pages.append(Page(part.first + index, text))
    if not pages:
        raise UnreadableDocument("the PDF has no pages")
    if not any(page.text for page in pages):
        raise UnreadableDocument("no extractable text (a scanned PDF?); OCR not supported")
    return pages


# PDFium marks a word hyphenated at a line end with U+FFFE in place of the hyphen and the line break (older
# builds: U+0002, then the line break).
_PDFIUM_LINE_HYPHEN = re.compile(r"[\ufffe\x02](?:\r?\n)?")
# PDFium breaks the line after a lowered subscript: "CO2\r\ne", "CO2 -neutral" for CO₂e, CO₂-neutral.
_SUBSCRIPT_GAP = re.compile(r"\b((?:CO|CH|N|SF|NF|HFC|PFC)[\d\u2080-\u2089]+)(?:\r?\n| )(?=e\b|-\w)")


def _open_pdfium(path: Path):
    """A PDFium document (the empty password tried); UnreadableDocument when it cannot be opened."""
    import pypdfium2 as pdfium

    try:
        return pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as error:
        if "password" in str(error).lower():
            raise UnreadableDocument("encrypted and the empty password does not open it (needs a password)") from error
        raise UnreadableDocument(f"not a readable PDF ({error})") from error


def pdfium_texts(path: Path, pages: range | None = None) -> list[str]:
    """Each page's raw text (of the 0-based ``pages``; all when None) as PDFium extracts it, its line-end hyphens written as pypdf writes them (``-``
    and a line break) and no space after a greenhouse-gas formula's subscript, so one cleaning serves both
    readers."""
    document = _open_pdfium(path)
    try:
        texts = [_pdfium_page(document, index, path) for index in (range(len(document)) if pages is None else pages)]
    finally:
        document.close()
    return [formula_subscripts(_PDFIUM_LINE_HYPHEN.sub("-\n", text)) for text in texts]


def formula_subscripts(text: str) -> str:
    """``text`` without the break PDFium puts after a greenhouse-gas formula's lowered subscript
    (``CO2 e`` -> ``CO2e``)."""
    return _SUBSCRIPT_GAP.sub(r"\1", text)


def _pdfium_page(document, index: int, path: Path) -> str:
    """One page's raw text; a page PDFium cannot read is logged and kept empty."""
    try:
        page = document[index]
        try:
            text_page = page.get_textpage()
            try:
                return text_page.get_text_range()
            finally:
                text_page.close()
        finally:
            page.close()
    except Exception as error:  # a broken page: lose the page, not the document
        log.warning(
            "%s page %d: text extraction failed (%s: %s); page left empty", path, index + 1, type(error).__name__, error
        )
        return ""


def pypdf_texts(path: Path, pages: range | None = None) -> list[str]:
    """Each page's raw text (of the 0-based ``pages``; all when None) as pypdf extracts it."""
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            raise UnreadableDocument("encrypted and the empty password does not open it (needs a password)")
        return [
            _extract(reader.pages[index], path, index + 1)
            for index in (range(len(reader.pages)) if pages is None else pages)
        ]
    except UnreadableDocument:
        raise
    except DependencyError as error:
        raise UnreadableDocument(f"cannot decrypt: {error}") from error
    # pypdf raises many exception types on a damaged file (PdfReadError, ValueError, KeyError, ...).
    except Exception as error:
        raise UnreadableDocument(f"not a readable PDF ({type(error).__name__}: {error})") from error


def _extract(page, path: Path, number: int) -> str:
    """One page's raw text; a page pypdf cannot read is logged and kept empty."""
    try:
        return page.extract_text() or ""
    except Exception as error:  # a broken content stream: lose the page, not the document
        log.warning(
            "%s page %d: text extraction failed (%s: %s); page left empty", path, number, type(error).__name__, error
        )
        return ""
