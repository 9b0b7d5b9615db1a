"""PDF -> page map: page numbers, text cleaning, encryption, damaged and text-less files, the two real reports."""

import random
from functools import cache
from pathlib import Path

import pytest
from pdf_factory import encrypted, pdf_bytes, write_pdf

from esgexp.data.pdf import Page, UnreadableDocument, clean_text, hyphenated_words, read_pages


def test_pages_are_numbered_from_one_with_their_own_text(tmp_path):
    path = write_pdf(tmp_path / "r.pdf", [["Alpha one", "Alpha two"], ["Beta (in brackets)"], ["Gamma"]])
    pages = read_pages(path)
    assert [(p.page, p.page_index, p.text) for p in pages] == [
        (1, 0, "Alpha one Alpha two"),
        (2, 1, "Beta (in brackets)"),
        (3, 2, "Gamma"),
    ]


def test_a_blank_page_is_kept_empty_and_later_pages_keep_their_numbers(tmp_path):
    pages = read_pages(write_pdf(tmp_path / "r.pdf", [["First"], [], ["Third"]]))
    assert [(p.page, p.text) for p in pages] == [(1, "First"), (2, ""), (3, "Third")]


def test_words_broken_at_line_ends_are_joined_and_real_hyphens_kept(tmp_path):
    lines = ["Our sustain-", "ability report covers CO2-", "equivalent emissions and Baden-", "Wuerttemberg sites."]
    (page,) = read_pages(write_pdf(tmp_path / "r.pdf", [lines]))
    assert page.text == "Our sustainability report covers CO2-equivalent emissions and Baden-Wuerttemberg sites."


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("sus -\ntainability", "sustainability"),  # pypdf's spacing before a line-end hyphen
        ("Standards - \nin August", "Standards - in August"),  # a dash, not a broken word
        ("a  b\t\tc\u00a0d", "a b c d"),
        ("zero\u200bwidth soft\u00adhyphen ctrl\x00\x07chars", "zerowidth softhyphen ctrlchars"),
        ("line one\nline two\n\n\nnext paragraph", "line one line two\n\nnext paragraph"),
        ("\uf0b7 bullet \uf020x", "• bullet x"),
        ("ﬁnance CO₂", "finance CO2"),
        (
            "sustain\u00ad\r\nability, Deutsche\u00ad \nWohnen",
            "sustainability, DeutscheWohnen",
        ),  # soft hyphen at a line end
        ("Windows\r\nline ends\rand old Mac ones", "Windows line ends and old Mac ones"),
    ],
)
def test_clean_text(raw, expected):
    assert clean_text(raw) == expected


def test_a_hyphenated_word_seen_elsewhere_in_the_document_keeps_its_hyphen():
    raw = "state-of-the-art here and a state-of-the-\nart there; decarbon-\nisation"
    assert (
        clean_text(raw, compounds=hyphenated_words(raw))
        == "state-of-the-art here and a state-of-the-art there; decarbonisation"
    )


def test_keep_lines_keeps_line_structure_for_markdown():
    assert (
        clean_text("# Title  \nfirst\nsecond\n\n\n\n## Next\x00\ntext", keep_lines=True)
        == "# Title\nfirst\nsecond\n\n## Next\ntext"
    )


@pytest.mark.parametrize("algorithm", ["RC4-128", "AES-128", "AES-256"])
def test_an_empty_user_password_is_tried(tmp_path, algorithm):
    path = tmp_path / "locked.pdf"
    path.write_bytes(encrypted(pdf_bytes([["Secret page one"], ["Page two"]]), "", algorithm))
    assert [(p.page, p.text) for p in read_pages(path)] == [(1, "Secret page one"), (2, "Page two")]


def test_a_pdf_needing_a_real_password_is_unreadable_with_the_reason(tmp_path):
    path = tmp_path / "locked.pdf"
    path.write_bytes(encrypted(pdf_bytes([["Secret"]]), "hunter2"))
    with pytest.raises(UnreadableDocument, match="encrypted and the empty password does not open it"):
        read_pages(path)


@pytest.mark.parametrize(
    "data",
    [random.Random(0).randbytes(3000), b"%PDF-1.4\nthis is not really a pdf", pdf_bytes([["Cut short"]])[:150]],
    ids=["random-bytes", "fake-header", "truncated"],
)
def test_a_damaged_file_is_unreadable(tmp_path, data):
    path = tmp_path / "broken.pdf"
    path.write_bytes(data)
    with pytest.raises(UnreadableDocument, match="not a readable PDF"):
        read_pages(path)


def test_a_pdf_without_any_text_is_reported_as_needing_ocr(tmp_path):
    with pytest.raises(UnreadableDocument, match=r"no extractable text .*OCR not supported"):
        read_pages(write_pdf(tmp_path / "scan.pdf", [[], []]))


@cache
def real_pages(path: Path) -> list[Page]:
    return read_pages(path)


@pytest.mark.parametrize(
    "name, n_pages, page, phrase",
    [
        # the encrypted one (empty user password, AES)
        ("1_1_AG.pdf", 64, 2, "Number of confirmed incidents of corruption 0 0 0"),
        # "sus -\ntainability" in the extracted text, joined
        ("1_1_AG.pdf", 64, 9, "the risk management of sustainability risks"),
        ("MAX_AUTOMATION_SE.pdf", 35, 11, "2,630 photovoltaic modules were installed"),
    ],
)
def test_real_reports_put_a_known_phrase_on_its_page(shared_samples, name, n_pages, page, phrase):
    pages = real_pages(shared_samples / "pdfs" / name)
    assert len(pages) == n_pages
    assert [p.page for p in pages] == list(range(1, n_pages + 1))
    assert [p.page for p in pages if phrase in p.text] == [page]
