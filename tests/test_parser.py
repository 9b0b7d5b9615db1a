import pytest

from esgexp.core.records import MCQItem
from esgexp.eval.mcq import INVALID, UNFINISHED_RATE, final_answer, mcq_metrics, parse_answer


@pytest.mark.parametrize(
    "raw, expected",
    [
        (None, INVALID),
        ("", INVALID),
        ("   \n ", INVALID),
        ("Z", "Z"),
        ("  Z \n", "Z"),
        ("B", "B"),
        ("DCB", "BCD"),
        ("AAB", "AB"),
        ("Answer: B", "B"),
        ("b", INVALID),
        ("C. A company must disclose", "AC"),
        ("A or Z", INVALID),
        ("(B)", "B"),
        ("B: Using both the location-based method", "B"),
        ("The answer is D.", "D"),
        ("I am not sure", INVALID),
        ("Z: Not sure", "Z"),
        ("GRI 305 says C", "C"),
        ("A, C", "AC"),
        ("ZZ", INVALID),
        ("Z Z", INVALID),
        ("Z A", INVALID),
        ("Z, Z: Not sure", INVALID),
        ("Answer: Z", "Z"),
        ("AZ", INVALID),
        ("BA", "AB"),
        ("A A", "A"),
        ("D, B and B", "BD"),
        ("E", INVALID),
        ("Option B\nExplanation: B is right", "B"),
    ],
)
def test_parse_answer_rules(raw, expected):
    assert parse_answer(raw) == expected


def test_reasoning_block_is_dropped_before_parsing():
    raw = "<think>A careful reading of Scope 2 rules... Option A fails.</think>\nC"
    assert parse_answer(raw) == "AC"  # the think block names A as well
    assert parse_answer(final_answer(raw)) == "C"
    assert final_answer("B") == "B"


@pytest.mark.parametrize(
    "raw, answer, parsed",
    [
        # the token budget ran out mid-thought: no answer, whatever letters the reasoning names
        ("<think>Option A seems plausible but let me check the", None, INVALID),
        ("<think>\nOkay, so the question is about Scope 3. I think D", None, INVALID),
        ("\n<think>\nB and C are both disclosures under", None, INVALID),
        # a chat template that opens the block in the prompt (DeepSeek-R1 distills): the output only closes it
        ("Okay, Scope 3 covers A... no, B.\n</think>\n\nD", "\n\nD", "D"),
        ("<think>\nA or C?\n</think>\n\nC", "\n\nC", "C"),
        ("<think>\n\n</think>\n\nAnswer: B", "\n\nAnswer: B", "B"),
        ("<think>A?</think>", "", INVALID),  # closed, then nothing: invalid, but not unfinished
    ],
)
def test_an_unclosed_reasoning_block_is_no_answer(raw, answer, parsed):
    assert final_answer(raw) == answer
    assert parse_answer(final_answer(raw)) == parsed


def test_unfinished_reasoning_is_counted_beside_the_invalid_rate():
    items = [MCQItem(str(i), "Which?", {"A": "a", "B": "b", "C": "c", "D": "d"}, "A") for i in range(4)]
    outputs = ["<think>A.</think>A", "<think>Option A seems", "<think>hm</think>", "<think>\nI think D"]
    answers = [final_answer(raw) for raw in outputs]
    metrics = mcq_metrics(items, [parse_answer(a) for a in answers], [a is None for a in answers])
    assert metrics["accuracy"] == 0.25 and metrics["invalid_rate"] == 0.75 and metrics[UNFINISHED_RATE] == 0.5
    assert UNFINISHED_RATE not in mcq_metrics(items, ["A"] * 4)  # not a reasoning model's run


def test_a_models_own_reasoning_delimiters_and_the_papers_whole_reply_reading():
    """A model config may name its own delimiters (model.reasoning_delimiters); <think> is caught either way.
    scoring.reasoning_block=keep (the ESGenius grid: its code parses the whole output) reads the letters of it all."""
    from omegaconf import OmegaConf

    from esgexp.eval.mcq import reply_answer

    own = ("<|begin_of_thought|>", "<|end_of_thought|>")
    assert final_answer("<|begin_of_thought|>Maybe A, but", own) is None
    assert final_answer("<|begin_of_thought|>A or B?<|end_of_thought|> B", own) == " B"
    assert final_answer("<think>A or", own) is None
    model = OmegaConf.create({"reasoning": False, "reasoning_delimiters": list(own)})
    cut = "<|begin_of_thought|>Option A seems"
    assert reply_answer(cut, model, OmegaConf.create({"reasoning_block": "drop"})) is None
    assert parse_answer(reply_answer(cut, model, OmegaConf.create({"reasoning_block": "keep"}))) == "A"
