import pytest

from esgexp.eval.mcq import INVALID, parse_answer, strip_reasoning


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
    assert parse_answer(strip_reasoning(raw)) == "C"
    assert strip_reasoning("B") == "B"
