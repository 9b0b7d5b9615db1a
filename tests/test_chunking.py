"""Chunkers: bounds, overlaps and exact page spans on pages with known text."""

import itertools
import re

import pytest
from helpers import composed
from hydra.utils import instantiate

from esgexp.data.chunking import CharChunker, MarkdownChunker, SentenceChunker, WindowChunker, sentence_spans
from esgexp.data.pdf import Page
from esgexp.errors import UserError


def numbered_sentences(start: int, count: int) -> list[str]:
    """Sentences of exactly 10 words, the first word naming the sentence: ``S7 w w ... w.``."""
    return [f"S{i} " + " ".join(["word"] * 8) + " end." for i in range(start, start + count)]


def filler(n_chars: int, tag: str) -> str:
    """Exactly ``n_chars`` characters of sentences (``Xx.`` words), starting with ``tag``."""
    text = tag + " " + " ".join(["Lorem ipsum dolor sit amet."] * (n_chars // 28 + 1))
    return text[:n_chars].rstrip(" ") + "x" * (n_chars - len(text[:n_chars].rstrip(" ")))


def spans(passages):
    return [p.page_span for p in passages]


# --- chars (ESGenius) ---------------------------------------------------------------------------


def test_chars_packs_whole_pages_up_to_max_chars():
    pages = [Page(1, filler(2000, "P1")), Page(2, filler(2000, "P2")), Page(3, filler(2000, "P3"))]
    passages = CharChunker().chunk("doc", pages)
    assert spans(passages) == ["1-2", "3"]
    assert passages[0].text == pages[0].text + "\n" + pages[1].text
    assert passages[1].text == pages[2].text
    assert [p.id for p in passages] == ["doc#0", "doc#1"]


def test_chars_a_short_page_merges_forward_taking_sentences_of_the_next():
    pages = [Page(1, filler(4400, "P1")), Page(2, filler(100, "P2")), Page(3, filler(4400, "P3"))]
    passages = CharChunker().chunk("doc", pages)
    assert spans(passages) == ["1", "2-3", "3"]
    # 100 + 1 + 30 characters are not yet 150: a second sentence (28) is borrowed, no more
    assert passages[1].text == pages[1].text + "\nP3 Lorem ipsum dolor sit amet. Lorem ipsum dolor sit amet."
    assert passages[1].text + " " + passages[2].text == pages[1].text + "\n" + pages[2].text
    assert all(150 <= len(p.text) <= 4500 for p in passages)


def test_chars_a_page_over_max_is_cut_at_sentence_ends():
    page = filler(10_000, "Big")
    passages = CharChunker().chunk("doc", [Page(7, page)])
    assert spans(passages) == ["7", "7", "7"]
    assert all(150 <= len(p.text) <= 4500 for p in passages)
    assert all(p.text.endswith(".") for p in passages[:-1])
    assert " ".join(p.text for p in passages) == page


def test_chars_text_without_spaces_is_cut_every_max_chars():
    passages = CharChunker(min_chars=10, max_chars=100).chunk("doc", [Page(1, "z" * 250)])
    assert [len(p.text) for p in passages] == [100, 100, 50]


def test_chars_empty_pages_are_skipped_but_spans_still_cover_them():
    pages = [Page(1, filler(300, "A")), Page(2, ""), Page(3, "   "), Page(4, filler(300, "B"))]
    (passage,) = CharChunker().chunk("doc", pages)
    assert passage.page_span == "1-4" and list(passage.page_indexes) == [0, 1, 2, 3]
    assert passage.text == pages[0].text + "\n" + pages[3].text


def test_chars_only_a_documents_last_passage_can_stay_under_min_chars():
    passages = CharChunker().chunk("doc", [Page(1, filler(4450, "A")), Page(2, filler(100, "B"))])
    assert [(p.page_span, len(p.text)) for p in passages] == [("1", 4450), ("2", 100)]


def test_chars_bounds_are_validated():
    with pytest.raises(UserError, match="min_chars < max_chars"):
        CharChunker(min_chars=500, max_chars=400)


# --- paragraphs (the ingest default: CharChunker at 200-800) ---------------------------------------


def test_ingest_defaults_to_paragraph_sized_passages():
    cfg = composed("ingest", overrides=["corpus.name=demo", "corpus.pdf_dir=/x"])
    assert cfg.chunker.name == "paragraphs"


def test_paragraphs_pack_whole_sentences_up_to_800_chars_and_cross_a_page_with_its_span():
    # 99-character sentences "S001 xxx...x.": 8 of them and 7 spaces are 799 characters, a ninth does not fit
    sentences = [f"S{i:03d} " + "x" * 93 + "." for i in range(60)]
    pages = [Page(1, " ".join(sentences[:30])), Page(2, " ".join(sentences[30:]))]
    passages = CharChunker(name="paragraphs", min_chars=200, max_chars=800).chunk("doc", pages)
    # page 1: 8, 8, 8 sentences, its last 6 take 2 of page 2 (6 * 100 + 2 * 100 - 1 = 799); page 2: 8, 8, 8, 4
    counts = [len(re.findall(r"S\d{3}", p.text)) for p in passages]
    assert counts == [8, 8, 8, 8, 8, 8, 8, 4]
    assert spans(passages) == ["1", "1", "1", "1-2", "2", "2", "2", "2"]
    assert [len(p.text) for p in passages] == [799] * 7 + [399]
    assert passages[3].text == " ".join(sentences[24:30]) + "\n" + " ".join(sentences[30:32])
    assert all(p.text.endswith(".") for p in passages)


# --- sentences (ClimRetrieve) ---------------------------------------------------------------------


def test_sentence_splitter_rules():
    text = "We cut here. And here! Why? e.g. not here, nor at 4,096.7 tonnes. Dr. Smith is cut.\n\nnew paragraph"
    parts = [text[a:b].strip() for a, b in sentence_spans(text, (0, len(text)))]
    assert parts == [
        "We cut here.",
        "And here!",
        "Why? e.g. not here, nor at 4,096.7 tonnes.",
        "Dr.",
        "Smith is cut.",
        "new paragraph",
    ]


def test_sentences_chunks_of_350_words_share_50_words_and_know_their_pages():
    sentences = numbered_sentences(0, 100)  # 1,000 words, 20 sentences (200 words) per page
    pages = [Page(n + 1, " ".join(sentences[20 * n : 20 * n + 20])) for n in range(5)]
    passages = SentenceChunker().chunk("doc", pages)
    first = [int(re.match(r"S(\d+)", p.text).group(1)) for p in passages]
    last = [int(re.findall(r"S(\d+)", p.text)[-1]) for p in passages]
    assert list(zip(first, last)) == [(0, 34), (30, 64), (60, 94), (90, 99)]
    assert [len(p.text.split()) for p in passages] == [350, 350, 350, 100]
    assert spans(passages) == ["1-2", "2-4", "4-5", "5"]
    for before, after in itertools.pairwise(passages):
        shared = before.text.split()[-50:]
        assert after.text.split()[:50] == shared and after.text.split()[50] != before.text.split()[-50]


def test_sentences_a_sentence_longer_than_the_chunk_is_cut_into_word_pieces():
    long = " ".join(f"w{i}" for i in range(800))
    passages = SentenceChunker(chunk_words=350, overlap=50).chunk("doc", [Page(3, long)])
    assert [len(p.text.split()) for p in passages] == [350, 350, 100]
    assert " ".join(p.text for p in passages) == long


def test_sentences_overlap_must_be_smaller_than_the_chunk():
    with pytest.raises(UserError, match="overlap < chunk_words"):
        SentenceChunker(chunk_words=50, overlap=50)


# --- window (ESGBench) ---------------------------------------------------------------------------


def test_window_of_1200_characters_overlapping_200_cut_at_whitespace():
    words = [f"w{i:03d}" for i in range(1000)]  # 5 characters with the following space
    pages = [Page(n + 1, " ".join(words[100 * n : 100 * n + 100])) for n in range(10)]
    passages = WindowChunker().chunk("doc", pages)
    firsts = [p.text.split()[0] for p in passages]
    assert firsts[:4] == ["w000", "w200", "w400", "w600"]
    assert passages[0].text.split() == words[:240] and len(passages[0].text) == 1199
    assert spans(passages)[:3] == ["1-3", "3-5", "5-7"]
    assert all(len(p.text) <= 1200 for p in passages)
    for before, after in itertools.pairwise(passages):
        shared = before.text[before.text.index(after.text.split()[0] + " ") :]
        assert after.text.startswith(shared) and len(shared) == 199
    assert passages[-1].text.split()[-1] == "w999"


def test_window_text_without_whitespace_is_cut_at_the_window_size():
    passages = WindowChunker(size=100, overlap=20).chunk("doc", [Page(1, "y" * 250)])
    assert [len(p.text) for p in passages] == [100, 100, 90]


def test_window_overlap_must_be_smaller_than_the_size():
    with pytest.raises(UserError, match="overlap < size"):
        WindowChunker(size=100, overlap=100)


# --- markdown --------------------------------------------------------------------------------------


MARKDOWN = """Intro line before any heading.

# Report
## Climate
Scope 1 fell. Scope 2 rose.

### Targets
Net zero by 2040.
#not a heading
####### seven hashes is no heading either
"""


def test_markdown_one_passage_per_section_and_a_bare_heading_joins_the_next():
    passages = MarkdownChunker().chunk("notes", [Page(1, MARKDOWN)])
    assert [p.text for p in passages] == [
        "Intro line before any heading.",
        "# Report\n## Climate\nScope 1 fell. Scope 2 rose.",
        "### Targets\nNet zero by 2040.\n#not a heading\n####### seven hashes is no heading either",
    ]
    assert spans(passages) == ["1", "1", "1"]


def test_markdown_an_oversized_section_is_cut_into_sentences_up_to_max_words():
    text = "## Big\n" + " ".join(numbered_sentences(0, 10))
    passages = MarkdownChunker(max_words=25).chunk("notes", [Page(1, text)])
    assert [len(p.text.split()) for p in passages] == [22, 20, 20, 20, 20]  # "## Big" + S0 + S1 = 22 words
    assert passages[0].text.startswith("## Big\nS0") and passages[1].text.startswith("S2 ")


def test_markdown_sections_crossing_pages_get_both_pages():
    pages = [Page(1, "# One\nfirst page text"), Page(2, "more of one\n# Two\nsecond")]
    assert spans(MarkdownChunker().chunk("d", pages)) == ["1-2", "2"]


# --- all -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, cls, params",
    [
        ("chars", CharChunker, {"min_chars": 150, "max_chars": 4500}),
        ("paragraphs", CharChunker, {"min_chars": 200, "max_chars": 800}),
        ("sentences", SentenceChunker, {"chunk_words": 350, "overlap": 50}),
        ("window", WindowChunker, {"size": 1200, "overlap": 200}),
        ("markdown", MarkdownChunker, {"max_words": 400}),
    ],
)
def test_chunker_configs_build_the_documented_chunkers(name, cls, params):
    cfg = composed(
        "ingest", overrides=[f"chunker={name}", "corpus.name=demo", "corpus.pdf_dir=/x", "paths.root_dir=/r"]
    )
    chunker = instantiate(cfg.chunker)
    assert type(chunker) is cls and chunker.name == name
    assert {key: getattr(chunker, key) for key in params} == params
    assert cfg.corpus.dir == f"/r/data/corpora/demo/{name}"
    assert chunker.config() == {"_target_": f"esgexp.data.chunking.{cls.__name__}", "name": name, **params}


@pytest.mark.parametrize(
    "chunker", [CharChunker(), SentenceChunker(), WindowChunker(), MarkdownChunker()], ids=lambda c: c.name
)
def test_every_chunker_gives_stable_ids_and_texts_found_on_their_pages(chunker):
    pages = [Page(n, " ".join(numbered_sentences(40 * n, 40))) for n in range(1, 6)] + [Page(6, "")]
    passages = chunker.chunk("rep", pages)
    assert passages == chunker.chunk("rep", pages)
    assert [p.id for p in passages] == [f"rep#{i}" for i in range(len(passages))]
    for passage in passages:
        first, last = re.findall(r"S(\d+)", passage.text)[0], re.findall(r"S(\d+)", passage.text)[-1]
        assert (passage.page_start, passage.page_end) == (int(first) // 40, int(last) // 40)
    assert chunker.chunk("rep", [Page(1, " \n ")]) == []
