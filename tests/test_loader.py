import csv

import pytest
from conftest import REPO, SAMPLE_CSV
from omegaconf import OmegaConf

from esgexp.data.esgenius import ESGeniusCSV
from esgexp.errors import UserError
from esgexp.strategies.mcq import MCQPrompter

HEADER = ["query_id", "new_id", "query", "answer", "A", "B", "C", "D", "Z"]


def write_csv(path, rows, header=HEADER):
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, quoting=csv.QUOTE_ALL)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def row(qid, answer="A", **options):
    texts = {letter: options.get(letter, f"option {letter}") for letter in "ABCD"}
    return [qid, qid, f"Question {qid}?", answer, texts["A"], texts["B"], texts["C"], texts["D"], "Not sure"]


def test_bundled_sample_is_ours_and_complete():
    loaded = ESGeniusCSV(name="esg_sample", path=str(SAMPLE_CSV)).load()
    assert len(loaded.items) >= 40 and not loaded.skipped
    answers = [item.answer for item in loaded.items]
    assert set(answers) == set("ABCD")
    assert answers[:8] != list("ABCDABCD")  # shuffled positions, not the ESGenius cycle
    assert all(item.context and item.meta["ref_doc"] for item in loaded.items)


def test_shared_esgenius_sample_loads(shared_samples):
    loaded = ESGeniusCSV(name="esgenius", path=str(shared_samples / "esgenius" / "ESGenius_1136q_sample40.csv")).load()
    assert len(loaded.items) == 40 and not loaded.skipped
    first = loaded.items[0]
    assert first.id == "1119" and first.answer == "B" and first.meta["new_id"] == "6"
    assert first.context == ()  # this file has no source_text column


def test_full_esgenius_file_loads_with_cycling_answers(shared_samples):
    loaded = ESGeniusCSV(name="esgenius", path=str(shared_samples / "esgenius" / "ESGenius_1136q.csv")).load()
    assert len(loaded.items) == 1136 and not loaded.skipped
    assert "".join(item.answer for item in loaded.items[:8]) == "ABCDABCD"


def test_fields_are_kept_as_published(tmp_path):
    # ESGenius id 50224 ends its question with "EXCEPT: ": the prompt carries that space, as the authors' does
    question = "Organizations should consider all of the following EXCEPT: "
    path = write_csv(tmp_path / "q.csv", [["50224", "531", question, " c ", " lead", "b ", "c", "d", "Not sure"]])
    item = ESGeniusCSV(name="x", path=str(path)).load().items[0]
    assert item.question == question and item.options["A"] == " lead" and item.options["B"] == "b "
    assert item.answer == "C" and item.id == "50224"
    prompt = MCQPrompter(template=OmegaConf.load(REPO / "conf/template/esgenius.yaml").text).build(item)
    assert (
        "Question: Organizations should consider all of the following EXCEPT: \nOptions:\nA:  lead\nB: b \n" in prompt
    )


def test_a_field_of_spaces_is_empty(tmp_path):
    path = write_csv(tmp_path / "q.csv", [row("1"), ["2", "2", "  ", "A", "a", "b", "c", "d", "Not sure"]])
    loaded = ESGeniusCSV(name="x", path=str(path)).load()
    assert [item.id for item in loaded.items] == ["1"]
    assert "field 'query': empty question (id 2)" in loaded.skipped[0]


def test_published_question_50224_keeps_its_trailing_space(shared_samples):
    loaded = ESGeniusCSV(name="esgenius", path=str(shared_samples / "esgenius" / "ESGenius_1136q.csv")).load()
    item = next(item for item in loaded.items if item.id == "50224")
    assert item.question.endswith("should consider all of the following EXCEPT: ")


def test_w_ref_columns_become_context_and_meta(tmp_path):
    header = [*HEADER, "ref_page", "ref_doc", "source_text"]
    path = write_csv(
        tmp_path / "w_ref.csv", [[*row("7"), "12", "GRI 305: Emissions 2016", "line one\nline two"]], header
    )
    item = ESGeniusCSV(name="x", path=str(path)).load().items[0]
    assert item.context == ("line one\nline two",)
    assert item.meta == {"new_id": "7", "ref_doc": "GRI 305: Emissions 2016", "ref_page": "12"}


def test_limit_takes_a_seeded_shuffle(tmp_path):
    path = write_csv(tmp_path / "q.csv", [row(str(i)) for i in range(1, 21)])
    first = [i.id for i in ESGeniusCSV(name="x", path=str(path), limit=5, seed=42).load().items]
    again = [i.id for i in ESGeniusCSV(name="x", path=str(path), limit=5, seed=42).load().items]
    other = [i.id for i in ESGeniusCSV(name="x", path=str(path), limit=5, seed=7).load().items]
    assert first == again and len(first) == 5
    assert first != ["1", "2", "3", "4", "5"] and first != other


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(UserError, match=r"dataset.path=.*nope.csv: no such file or folder"):
        ESGeniusCSV(name="x", path=str(tmp_path / "nope.csv")).load()


def test_missing_column_names_file_and_column(tmp_path):
    path = write_csv(
        tmp_path / "q.csv",
        [["1", "1", "q", "A", "a", "b", "c", "Not sure"]],
        header=["query_id", "new_id", "query", "answer", "A", "B", "C", "Z"],
    )
    with pytest.raises(UserError, match=r"q\.csv: missing column\(s\) D"):
        ESGeniusCSV(name="x", path=str(path)).load()


def test_bad_rows_are_listed_and_skipped(tmp_path):
    rows = [row("1"), row("2", B=""), row("3", answer="E"), row("4", answer="AZ"), row("5", answer="b"), row("1")]
    loaded = ESGeniusCSV(name="x", path=str(write_csv(tmp_path / "q.csv", rows))).load()
    assert [i.id for i in loaded.items] == ["1", "5"]
    assert loaded.items[1].answer == "B"  # lower-case gold letters are normalised
    assert len(loaded.skipped) == 4
    # file lines: the header is line 1
    assert "q.csv line 3: field 'B': empty option (id 2)" in loaded.skipped[0]
    assert "line 4: field 'answer': 'E'" in loaded.skipped[1]
    assert "line 5: field 'answer'" in loaded.skipped[2]
    assert "line 7: field 'query_id': duplicate id '1'" in loaded.skipped[3]


def test_file_without_any_usable_row_is_an_error(tmp_path):
    path = write_csv(tmp_path / "q.csv", [row("1", A="")])
    with pytest.raises(UserError, match="no usable question"):
        ESGeniusCSV(name="x", path=str(path)).load()


def test_hub_id_offline_fails_at_once_with_advice(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match=r"could not load hub dataset 'someone/ESGenius'.*HF_HUB_OFFLINE=0"):
        ESGeniusCSV(name="x", hf_id="someone/ESGenius").load()


def test_real_esgenius_questions_name_their_framework(shared_samples):
    from collections import Counter

    from esgexp.eval.mcq import item_framework

    items = ESGeniusCSV(name="esgenius", path=str(shared_samples / "esgenius" / "ESGenius_1136q.csv")).load().items
    counts = Counter(item_framework(item) for item in items)
    assert set(counts) == {"GRI", "SASB", "IFRS/ISSB", "TCFD", "CDP", "IPCC", "SDG", "other"}
    assert counts["other"] <= 10  # only questions that name no source ("... in the text?")


def test_hf_id_loads_through_datasets(tmp_path):
    # A local folder stands in for the hub: the same datasets.load_dataset path, no network.
    folder = tmp_path / "esgenius_hub_copy"
    folder.mkdir()
    write_csv(folder / "train.csv", [row("11", answer="C"), row("12", answer="D")])
    loaded = ESGeniusCSV(name="x", hf_id=str(folder), split="train").load()
    assert [(i.id, i.answer) for i in loaded.items] == [("11", "C"), ("12", "D")]
    with pytest.raises(UserError, match="split 'test'"):
        ESGeniusCSV(name="x", hf_id=str(folder), split="test").load()
