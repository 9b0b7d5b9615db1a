"""Read a report PDF into its page map: the cleaned text of every page with its page number."""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Bump when the text cleaning changes: corpora ingested before are then read again.
CLEANING_VERSION = 1


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
# A word broken at a line end: "sustain-\nability", or pypdf's "sus -\ntainability"; " - \n" is a dash.
_HYPHEN_BREAK = re.compile(r"(\w[\w-]*?)(?: -|-[ \t]*)\n[ \t]*(\w+)")
_COMPOUND = re.compile(r"\w+(?:-\w+)+")


def hyphenated_words(text: str) -> frozenset[str]:
    """Lowercased hyphenated words written on one line (``co2-equivalent``): real hyphens to keep."""
    return frozenset(word.lower() for word in _COMPOUND.findall(text))


def clean_text(text: str, keep_lines: bool = False, compounds: frozenset[str] = frozenset()) -> str:
    """Normalise extracted text for chunking and search.

    NFKC (ligatures, subscripts), invisible and control characters dropped, a word broken at a line
    end joined (``sustain-\\nability`` -> ``sustainability``) unless a capital or digit is next to the
    hyphen or ``compounds`` holds the hyphenated form (then only the line break goes), spaces collapsed.
    Lines are joined into paragraphs separated by a blank line; ``keep_lines`` keeps every line break
    (for Markdown/plain text, where lines carry structure).
    """
    text = unicodedata.normalize("NFKC", text.replace(_SYMBOL_BULLET, "•"))
    text = _INVISIBLE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))

    def join(match: re.Match) -> str:
        head, tail = match.group(1), match.group(2)
        hyphenated = f"{head}-{tail}"
        if head[-1].islower() and tail[0].islower() and hyphenated.lower() not in compounds:
            return head + tail
        return hyphenated

    text = _HYPHEN_BREAK.sub(join, text)
    text = re.sub(r"[^\S\n]+", " ", text)
    text = re.sub(r" ?\n ?", "\n", text)
    if keep_lines:
        return re.sub(r"\n{3,}", "\n\n", text).strip()
    paragraphs = re.split(r"\n{2,}", text.strip())
    return "\n\n".join(" ".join(p.split("\n")) for p in paragraphs if p.strip())


def read_pages(path: Path) -> list[Page]:
    """The page map of one PDF, every page kept (an empty page has empty text).

    An encrypted PDF is opened with the empty user password. Raises :class:`UnreadableDocument` for a
    file that is not a readable PDF, needs a password, or has no extractable text at all (a scan).
    """
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            raise UnreadableDocument("encrypted and the empty password does not open it (needs a password)")
        raw = [_extract(page, path, number) for number, page in enumerate(reader.pages, start=1)]
    except UnreadableDocument:
        raise
    except DependencyError as error:
        raise UnreadableDocument(f"cannot decrypt: {error}") from error
    # pypdf raises many exception types on a damaged file (PdfReadError, ValueError, KeyError, ...).
    except Exception as error:
        raise UnreadableDocument(f"not a readable PDF ({type(error).__name__}: {error})") from error
    if not raw:
        raise UnreadableDocument("the PDF has no pages")
    compounds = hyphenated_words("\n".join(raw))
    pages = [Page(number, clean_text(text, compounds=compounds)) for number, text in enumerate(raw, start=1)]
    if not any(page.text for page in pages):
        raise UnreadableDocument("no extractable text (a scanned PDF?); OCR not supported")
    return pages


def _extract(page, path: Path, number: int) -> str:
    """One page's raw text; a page pypdf cannot read is logged and kept empty."""
    try:
        return page.extract_text() or ""
    except Exception as error:  # a broken content stream: lose the page, not the document
        log.warning(
            "%s page %d: text extraction failed (%s: %s); page left empty", path, number, type(error).__name__, error
        )
        return ""
