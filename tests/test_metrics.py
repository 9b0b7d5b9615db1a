import pytest

from esgexp.core.records import MCQItem
from esgexp.eval.mcq import INVALID, detect_framework, item_framework, longest_option, mcq_metrics


def item(qid, answer, question="Plain question?", ref_doc="", options=None):
    options = options or {"A": "aa", "B": "b", "C": "cccc", "D": "dd"}
    return MCQItem(
        id=qid, question=question, options=options, answer=answer, meta={"ref_doc": ref_doc} if ref_doc else {}
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        ("According to the Consolidated Set of the GRI Standards 2021, ...", "GRI"),
        ("Under IFRS S2 Climate-related Disclosures, which ...", "IFRS/ISSB"),
        ("The ISSB requires ...", "IFRS/ISSB"),
        ("In the SASB Standards for oil and gas ...", "SASB"),
        ("The TCFD recommendations ask ...", "TCFD"),
        ("Task Force on Climate-related Financial Disclosures guidance", "TCFD"),
        ("In the CDP questionnaire ...", "CDP"),
        ("As implied by the Climate Change 2023 — Synthesis Report ...", "IPCC"),
        ("IPCC AR6 WGIII finds ...", "IPCC"),
        ("Which SDG target ...", "SDG"),
        ("Sustainable Development Goal 13 ...", "SDG"),
        ("Under IFRS S2, which TCFD pillar ...", "IFRS/ISSB"),  # the framework named first wins
        ("According to ISO 14064-1 ...", "other"),
        ("The GRIP on emissions", "other"),
        ("IFRS_S2_Climate-related_Disclosures.pdf", "IFRS/ISSB"),
        ("gri-305-emissions-2016.pdf", "GRI"),
        ("SDGs report", "SDG"),
        ("as outlined in the Coal Operations – Sustainability Accounting Standard?", "SASB"),
        ("described in The Ocean and Cryosphere in a Changing Climate: A Special Report", "IPCC"),
        ("according to the Intergovernmental Panel on Climate Change", "IPCC"),
        ("in the SUSTAINABLE DEVELOPMENTAL GOALS Briefing Book 2023", "SDG"),
        ("as outlined in the Progress on Corporate Climate-related Disclosures—2024 Report", "IFRS/ISSB"),
        ("according to the implications in the text?", "other"),
    ],
)
def test_detect_framework(text, expected):
    assert detect_framework(text) == expected


def test_framework_prefers_ref_doc_then_question():
    assert item_framework(item("1", "A", question="Under IFRS S2 ...", ref_doc="GRI 305: Emissions 2016")) == "GRI"
    assert item_framework(item("2", "A", question="Under IFRS S2 ...", ref_doc="Some handbook")) == "IFRS/ISSB"


def test_longest_option_ties_go_to_earliest_letter():
    assert longest_option({"A": "aa", "B": "b", "C": "cccc", "D": "dd"}) == "C"
    assert longest_option({"A": "xx", "B": "yyy", "C": "zzz", "D": "w"}) == "B"


def test_mcq_metrics_known_values():
    items = [
        item("1", "A", "GRI 2-7 ..."),
        item("2", "C", "GRI 3-3 ..."),
        item("3", "B", "TCFD ..."),
        item("4", "D", "no framework"),
        item("5", "AC", "no framework"),
    ]
    metrics = mcq_metrics(items, ["A", "B", "Z", INVALID, "AC"])
    assert metrics["n_items"] == 5
    assert metrics["accuracy"] == pytest.approx(2 / 5)
    assert metrics["invalid_rate"] == pytest.approx(1 / 5)
    assert metrics["abstention_rate"] == pytest.approx(1 / 5)
    assert metrics["baseline/random"] == pytest.approx(0.25)
    assert metrics["baseline/longest_option"] == pytest.approx(1 / 5)  # C is longest; only item 2 has gold C
    assert metrics["accuracy/framework/GRI"] == pytest.approx(0.5)
    assert metrics["accuracy/framework/TCFD"] == 0.0
    assert metrics["accuracy/framework/other"] == pytest.approx(0.5)
    assert metrics["n_items/framework/GRI"] == 2


def test_abstaining_is_never_correct_even_for_gold_z():
    assert mcq_metrics([item("1", "Z")], ["Z"])["accuracy"] == 0.0


def test_random_baseline_counts_only_present_options():
    three = item("1", "A", options={"A": "x", "B": "y", "C": "z"})
    assert mcq_metrics([three, item("2", "A")], ["A", "A"])["baseline/random"] == pytest.approx((1 / 3 + 1 / 4) / 2)
