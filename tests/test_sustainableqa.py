import json
import logging
from collections import Counter

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from esgexp.core.config import BUNDLED_DIR
from esgexp.data import make_sustainableqa_fixture
from esgexp.data.sustainableqa import SustainableQA
from esgexp.errors import UserError

BUNDLED = BUNDLED_DIR / "sustainableqa"


def bundled(split="test", **options):
    return SustainableQA(name="sustainableqa", path=str(BUNDLED), split=split, **options)


def chunk(paragraph="Alpha AG emits 5 tonnes.", classification="ESG", factoid=(), non_factoid=(), **metadata):
    return {
        "metadata": {
            "chunk_number": 1,
            "page_number": 3,
            "titles": [],
            "subtitles": [],
            "paragraph": paragraph,
            "classification": classification,
            "report_name": "Alpha AG",
            **metadata,
        },
        "spans": {"groups": []},
        "qa_pairs_factoid": {
            "qa_pairs": [{"question": q, "answer": a, "type": "Factoid", "tag": classification} for q, a in factoid]
        },
        "qa_pairs_non_factoid": {
            "qa_pairs": [
                {"question": q, "answer": a, "type": "Descriptive, non-factoid", "tag": classification}
                for q, a in non_factoid
            ]
        },
    }


def table(pairs, key="metadata", caption="KPIs 2023", paragraph="Turnover: 10, aligned: 4."):
    return {
        key: {
            "page_number": 7,
            "table_caption": caption,
            "paragraph": paragraph,
            "classification": "EU Taxonomy",
            "report_name": "Alpha AG",
        },
        "qa_pairs": [{"question": q, "answer": a} for q, a in pairs],
    }


def write(folder, data, split="test"):
    folder.mkdir(exist_ok=True)
    path = folder / f"{split}.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


QA = [("How much does Alpha AG emit?", "5 tonnes")]


@pytest.mark.parametrize(
    ("split", "per_type", "per_category"),
    [
        ("test", {"factoid": 21, "non_factoid": 13, "table": 9}, {"ESG": 12, "EU Taxonomy": 20, "Sustainability": 11}),
        (
            "validation",
            {"factoid": 20, "non_factoid": 13, "table": 7},
            {"ESG": 12, "EU Taxonomy": 16, "Sustainability": 12},
        ),
        (
            "train",
            {"factoid": 24, "non_factoid": 13, "table": 10},
            {"ESG": 12, "EU Taxonomy": 16, "Sustainability": 19},
        ),
    ],
)
def test_bundled_splits_have_known_counts(split, per_type, per_category):
    loaded = bundled(split).load()
    assert not loaded.skipped
    assert Counter(item.qtype for item in loaded.items) == per_type
    assert Counter(item.meta["category"] for item in loaded.items) == per_category
    assert len({item.id for item in loaded.items}) == len(loaded.items)
    assert all(item.id.startswith(f"{split}/") for item in loaded.items)


def test_bundled_factoid_answers_are_verbatim_spans_of_their_passage():
    items = [i for split in ("train", "validation", "test") for i in bundled(split, qtypes=["factoid"]).load().items]
    for item in items:
        for span in item.answers[0].split(", "):
            assert span.lower() in item.context[0].lower(), item.id
    assert sum("," in item.answers[0] and not item.answers[0][0].isdigit() for item in items) >= 10


def test_one_factoid_item_field_by_field():
    items = {item.id: item for item in bundled().load().items}
    item = items["test/c4/f1"]
    assert item.question == (
        "What emission threshold applies to cement manufacture in Hallberg Cement AG's taxonomy assessment?"
    )
    assert item.answers == ("0.469 tonnes of CO2 per tonne of cement",)
    assert item.qtype == "factoid"
    assert len(item.context) == 1
    assert item.context[0].startswith("Hallberg Cement AG reports cement manufacture as a taxonomy-eligible activity")
    assert item.context[0].endswith("through the group's human rights due diligence process.")
    assert item.meta == {
        "category": "EU Taxonomy",
        "report": "Hallberg Cement AG",
        "page": 57,
        "chunk": 4,
        "tag": "EU Taxonomy",
    }
    multi = items["test/c2/f3"]
    assert multi.answers == ("battery-electric, biogas vehicles",)
    assert items["test/c2/n1"].qtype == "non_factoid" and items["test/c2/n1"].context == multi.context


def test_table_items_join_caption_and_paragraph_and_accept_meta_data():
    items = {item.id: item for item in bundled("validation").load().items}
    item = items["validation/t1/1"]  # this table spells its key "meta_data"
    assert item.question == "How much eligible OpEx relates to Oderbrück Chemie GmbH's hydrogen manufacture?"
    assert item.answers == ("EUR 14 million",)
    assert item.qtype == "table"
    assert item.context == (
        "Taxonomy-eligible OpEx by activity (EUR million)\nManufacture of hydrogen (3.10): 14 "
        "eligible, 0 aligned. Manufacture of organic basic chemicals (3.14): 37 eligible, 9 "
        "aligned. Manufacture of plastics in primary form (3.17): 12 eligible, 0 aligned. "
        "Total: 63 eligible, 9 aligned.",
    )
    assert item.meta == {
        "category": "EU Taxonomy",
        "report": "Oderbrück Chemie GmbH",
        "page": 49,
        "table": 1,
        "caption": "Taxonomy-eligible OpEx by activity (EUR million)",
    }


def test_qtypes_filter_accepts_hydra_lists_and_single_names():
    config = OmegaConf.create(
        {
            "_target_": "esgexp.data.sustainableqa.SustainableQA",
            "name": "sqa",
            "path": str(BUNDLED),
            "split": "test",
            "qtypes": ["table", "non_factoid"],
        }
    )
    loaded = instantiate(config).load()
    assert Counter(item.qtype for item in loaded.items) == {"non_factoid": 13, "table": 9}
    assert loaded.items[0].id == "test/c0/n0"  # file order, whatever order qtypes lists
    assert {item.qtype for item in bundled(qtypes="factoid").load().items} == {"factoid"}
    with pytest.raises(UserError, match=r"dataset.qtypes: tables - choose from factoid, non_factoid, table"):
        bundled(qtypes=["tables"]).load()


def test_limit_takes_a_seeded_shuffle():
    first = [item.id for item in bundled(limit=10, seed=42).load().items]
    again = [item.id for item in bundled(limit=10, seed=42).load().items]
    other = [item.id for item in bundled(limit=10, seed=7).load().items]
    everything = [item.id for item in bundled().load().items]
    assert first == again and len(first) == 10 and set(first) <= set(everything)
    assert first != everything[:10] and first != other


def test_load_split_reads_another_split_without_the_limit():
    dataset = bundled("test", qtypes=["factoid", "table"], limit=5)
    train = dataset.load_split("train")
    assert Counter(item.qtype for item in train.items) == {"factoid": 24, "table": 10}
    assert train.items[0].id == "train/c0/f0" and train.items[-1].id == "train/t2/2"
    assert train.items[-1].answers == ("2,900 thousand cubic metres",)
    assert len(dataset.load().items) == 5


def test_missing_split_file_names_path_and_lists_the_folder(tmp_path):
    write(tmp_path / "sqa", {"all_chunks_qas": [chunk(factoid=QA)], "all_table_qas": []})
    (tmp_path / "sqa" / "notes.txt").write_text("x")
    dataset = SustainableQA(name="x", path=str(tmp_path / "sqa"))
    assert len(dataset.load().items) == 1
    missing = r"split file not found: .*sqa/train\.json \(.*sqa holds: notes\.txt, test\.json\)"
    with pytest.raises(UserError, match=missing):
        dataset.load_split("train")
    with pytest.raises(UserError, match=r"dataset.path=.*nowhere: no such file or folder"):
        SustainableQA(name="x", path=str(tmp_path / "nowhere")).load()
    with pytest.raises(
        UserError, match=r"dataset.path=.*test.json is a file, not a folder: give the folder holding train"
    ):
        SustainableQA(name="x", path=str(tmp_path / "sqa" / "test.json")).load()


def test_missing_or_wrong_top_level_keys_are_fatal(tmp_path):
    folder = tmp_path / "sqa"
    write(folder, {"all_chunks_qas": [chunk(factoid=QA)]})
    with pytest.raises(UserError, match=r"test\.json: missing top-level key 'all_table_qas'"):
        SustainableQA(name="x", path=str(folder)).load()
    # a pass that is not needed is not made: passage questions alone still load
    assert len(SustainableQA(name="x", path=str(folder), qtypes=["factoid"]).load().items) == 1
    write(folder, {"all_chunks_qas": {"0": chunk(factoid=QA)}, "all_table_qas": []})
    with pytest.raises(UserError, match="top-level key 'all_chunks_qas' is not a list"):
        SustainableQA(name="x", path=str(folder)).load()
    write(folder, [chunk(factoid=QA)])
    with pytest.raises(UserError, match="the top level is not a JSON object"):
        SustainableQA(name="x", path=str(folder)).load()
    write(folder, {"all_chunks_qas": [], "all_table_qas": []})
    with pytest.raises(UserError, match=r"test\.json: no usable question of type\(s\) factoid, non_factoid, table"):
        SustainableQA(name="x", path=str(folder)).load()


def test_malformed_json_names_the_file(tmp_path):
    text = json.dumps({"all_chunks_qas": [chunk(factoid=QA)] * 3, "all_table_qas": []}, indent=1)
    write(tmp_path / "sqa", text[: len(text) // 2], split="validation")
    with pytest.raises(UserError, match=r"sqa/validation\.json: not valid JSON"):
        SustainableQA(name="x", path=str(tmp_path / "sqa"), split="validation").load()


def test_bad_records_are_skipped_and_listed_with_their_path(tmp_path):
    broken_table = table(QA)
    del broken_table["metadata"]
    data = {
        "all_chunks_qas": [
            chunk(factoid=[QA[0], ("Which gas?", "  "), ("", "CO2")], non_factoid=[("Why?", "Because.")]),
            chunk(paragraph="", factoid=QA, non_factoid=QA),
            {"metadata": {"paragraph": "Unclassified text."}, "qa_pairs_factoid": None, "qa_pairs_non_factoid": None},
            {**chunk(factoid=QA), "qa_pairs_non_factoid": {"error": "generation failed"}},
            "not a chunk",
        ],
        "all_table_qas": [table([QA[0], ("Answer is a number?", 4)]), broken_table, table([])],
    }
    write(tmp_path / "sqa", data)
    loaded = SustainableQA(name="x", path=str(tmp_path / "sqa")).load()
    assert [item.id for item in loaded.items] == ["test/c0/f0", "test/c0/n0", "test/c3/f0", "test/t0/0"]
    assert loaded.skipped == [
        "test.json all_chunks_qas[0].qa_pairs_factoid.qa_pairs[1]: field 'answer' is empty",
        "test.json all_chunks_qas[0].qa_pairs_factoid.qa_pairs[2]: field 'question' is empty",
        "test.json all_chunks_qas[1]: field 'metadata.paragraph' is empty; 2 QA pair(s) skipped",
        "test.json all_chunks_qas[3].qa_pairs_non_factoid: field 'qa_pairs' is missing or not a list",
        "test.json all_chunks_qas[4]: not a JSON object",
        "test.json all_table_qas[0].qa_pairs[1]: field 'answer' is not text (int)",
        "test.json all_table_qas[1]: field 'metadata' is missing or not an object; 1 QA pair(s) skipped",
    ]


def test_unknown_classification_is_kept_and_logged_and_odd_pages_become_none(tmp_path, caplog):
    data = {
        "all_chunks_qas": [
            chunk(classification="Governance", factoid=QA, page_number="N/A"),
            chunk(factoid=QA, page_number="12"),
        ],
        "all_table_qas": [table(QA, key="meta_data", caption="")],
    }
    write(tmp_path / "sqa", data)
    with caplog.at_level(logging.WARNING, logger="esgexp.data.sustainableqa"):
        items = SustainableQA(name="x", path=str(tmp_path / "sqa")).load().items
    assert [(item.meta["category"], item.meta["page"]) for item in items] == [
        ("Governance", None),
        ("ESG", 12),
        ("EU Taxonomy", 7),
    ]
    assert "classification 'Governance' is not one of ESG, EU Taxonomy, Sustainability" in caplog.text
    assert items[2].context == ("Turnover: 10, aligned: 4.",) and items[2].meta["caption"] == ""


def test_generated_fixture_loads_with_expected_counts(tmp_path, capsys):
    make_sustainableqa_fixture.main([str(tmp_path / "a"), "--chunks", "4", "--tables", "2", "--seed", "3"])
    make_sustainableqa_fixture.main(
        [str(tmp_path / "b"), "--chunks", "4", "--tables", "2", "--seed", "3", "--splits", "test"]
    )
    make_sustainableqa_fixture.main([str(tmp_path / "c"), "--chunks", "4", "--tables", "2", "--seed", "4"])
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["test.json", "train.json", "validation.json"]
    assert (tmp_path / "a" / "test.json").read_bytes() == (tmp_path / "b" / "test.json").read_bytes()
    assert (tmp_path / "a" / "test.json").read_bytes() != (tmp_path / "c" / "test.json").read_bytes()
    dataset = SustainableQA(name="synthetic", path=str(tmp_path / "a"))
    for split in ("train", "validation", "test"):
        loaded = dataset.load_split(split)
        assert not loaded.skipped
        assert Counter(item.qtype for item in loaded.items) == {"factoid": 44, "non_factoid": 52, "table": 36}
        assert Counter(item.meta["category"] for item in loaded.items if item.qtype == "factoid") == {
            "ESG": 22,
            "EU Taxonomy": 11,
            "Sustainability": 11,
        }
        assert len({item.id for item in loaded.items}) == 132
    for item in dataset.load().items:
        if item.qtype == "factoid":
            assert all(span in item.context[0] for span in item.answers[0].split(", "))
