from conftest import compose_config

from esgexp.core.records import MCQItem
from esgexp.strategies.mcq import NO_CONTEXT, MCQPrompter, best_line

ESGENIUS_TEMPLATE = (
    "You are an expert in ESG (Environmental, Social, Governance) and Sustainability related topics. "
    "Answer the question with a single letter based on authoritative knowledge. Each option content is "
    "case-sensitive.\n\nQuestion: {query}\nOptions:\nA: {A}\nB: {B}\nC: {C}\nD: {D}\nZ: Not sure\n\nAnswer:"
)

ITEM = MCQItem(
    id="1",
    question="Which GRI disclosure covers energy indirect (Scope 2) GHG emissions?",
    options={"A": "305-1", "B": "305-2", "C": "305-3", "D": "302-1"},
    answer="B",
    context=(
        "GRI 305 has seven disclosures.\n\nDisclosure 305-2 covers energy indirect (Scope 2) GHG emissions.\nIt asks for location-based figures.",
    ),
)


def test_esgenius_template_is_exact(tmp_path):
    cfg = compose_config(tmp_path)
    assert cfg.template.text == ESGENIUS_TEMPLATE


def test_zero_shot_prompt_text():
    prompt = MCQPrompter(template=ESGENIUS_TEMPLATE).build(ITEM)
    assert prompt.endswith(
        "\n\nQuestion: Which GRI disclosure covers energy indirect (Scope 2) GHG emissions?\n"
        "Options:\nA: 305-1\nB: 305-2\nC: 305-3\nD: 302-1\nZ: Not sure\n\nAnswer:"
    )
    assert prompt.startswith("You are an expert in ESG")


def test_full_context_prepends_whole_passage():
    prompter = MCQPrompter(template=ESGENIUS_TEMPLATE, name="context", context="full")
    zero = MCQPrompter(template=ESGENIUS_TEMPLATE).build(ITEM)
    assert prompter.build(ITEM) == f"Context: {ITEM.context[0]}\n\n{zero}"


def test_best_line_picks_largest_word_overlap():
    prompter = MCQPrompter(template=ESGENIUS_TEMPLATE, name="context", context="best_line")
    zero = MCQPrompter(template=ESGENIUS_TEMPLATE).build(ITEM)
    expected_line = "Disclosure 305-2 covers energy indirect (Scope 2) GHG emissions."
    assert prompter.build(ITEM) == f"Context:\n{expected_line}\n\n{zero}"


def test_best_line_overlap_is_on_lowercased_word_sets():
    # "the the the" counts once; "ENERGY" matches "energy"; ties go to the first line.
    passage = "the the the\nENERGY use\nenergy use"
    assert best_line(passage, "Energy use in the plant") == "ENERGY use"
    assert best_line("xyz\n\nqrs", "nothing shared") is None


def test_no_overlap_gives_no_context_marker():
    item = MCQItem(
        id="2", question="q?", options={"A": "a", "B": "b", "C": "c", "D": "d"}, answer="A", context=("zzz qqq",)
    )
    prompter = MCQPrompter(template="{query}", context="best_line")
    assert prompter.build(item) == NO_CONTEXT + "q?"


def test_user_template_from_config_without_code(tmp_path):
    cfg = compose_config(tmp_path, "template.text='Q: {query} | {A} / {B} / {C} / {D}'")
    prompter = MCQPrompter(template=cfg.template.text)
    assert (
        prompter.build(ITEM)
        == "Q: Which GRI disclosure covers energy indirect (Scope 2) GHG emissions? | 305-1 / 305-2 / 305-3 / 302-1"
    )
