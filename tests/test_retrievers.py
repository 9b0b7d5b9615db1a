"""Retrievers on a six-passage corpus of distinct ESG topics: ranking, scoping, fusion, oracle, cache."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO, compose_config
from helpers import assert_rankings_agree
from omegaconf import OmegaConf

from esgexp.core.records import Passage, passages_hash
from esgexp.errors import UserError
from esgexp.retrieval import IndexCache, build_retriever, rrf
from esgexp.retrieval.base import top_k
from esgexp.retrieval.bm25 import BM25Retriever
from esgexp.retrieval.dense import DenseRetriever
from esgexp.retrieval.hybrid import HybridRetriever
from esgexp.retrieval.oracle import OracleRetriever

TEXTS = {
    "water": (
        "acme",
        "Water withdrawal in water-stressed regions fell by 12 percent after recycling cooling water at our plants.",
    ),
    "scope3": (
        "acme",
        "Scope 3 emissions from purchased goods and services make up most of our carbon footprint across the value chain.",
    ),
    "board": (
        "acme",
        "Women hold four of the eleven board seats, and the nomination committee reviews board diversity every year.",
    ),
    "waste": (
        "globex",
        "Hazardous waste sent to landfill was halved; the remaining waste is incinerated with energy recovery.",
    ),
    "safety": (
        "globex",
        "The lost-time injury frequency rate for employees and contractors rose after two serious accidents.",
    ),
    "bribery": (
        "globex",
        "All managers completed anti-bribery and corruption training under the code of business conduct.",
    ),
}
PASSAGES = [Passage(pid, doc, text, n, n) for n, (pid, (doc, text)) in enumerate(TEXTS.items(), start=1)]
BM25_CFG = {"_target_": "esgexp.retrieval.bm25.BM25Retriever", "name": "bm25", "k1": 1.5, "b": 0.75}
DENSE_CFG = {"_target_": "esgexp.retrieval.dense.DenseRetriever", "name": "dense"}
# Three queries and the passage each is about (its top hit in every precision, by a wide margin).
QUERIES = ["garbage disposal", "workplace accidents", "female representation among directors"]
LABELLED = ["waste", "safety", "board"]


def ids(hits):
    return [h.passage_id for h in hits]


@pytest.fixture(scope="module")
def bm25():
    retriever = BM25Retriever()
    retriever.index(PASSAGES)
    return retriever


@pytest.fixture(scope="module")
def dense():
    retriever = DenseRetriever(device="cpu")
    retriever.index(PASSAGES)
    return retriever


def test_top_k_is_best_first_and_breaks_ties_by_position():
    scores = np.array([1.0, 3.0, 3.0, 2.0, 3.0])
    assert top_k(scores, 2).tolist() == [1, 2]
    assert top_k(scores, 4).tolist() == [1, 2, 4, 3]
    assert top_k(scores, 9).tolist() == [1, 2, 4, 3, 0]


def test_bm25_finds_the_topical_passage(bm25):
    queries = [
        "How much water do the plants withdraw?",
        "scope 3 purchased goods",
        "board diversity of women",
        "injury rate of contractors",
    ]
    assert [ids(hits)[0] for hits in bm25.search(queries, k=3)] == ["water", "scope3", "board", "safety"]
    assert all(len(hits) == 3 and hits[0].score > hits[1].score >= hits[2].score for hits in bm25.search(queries, k=3))


def test_bm25_lucene_score_by_hand():
    corpus = [
        Passage("a", "d", "water water energy", 1, 1),
        Passage("b", "d", "energy waste", 1, 1),
        Passage("c", "d", "board seats", 1, 1),
    ]
    retriever = BM25Retriever(k1=1.5, b=0.75)
    retriever.index(corpus)
    ((top, *rest),) = retriever.search(["water"], k=3)
    # N=3, df=1: idf = ln(1 + (3 - 1 + 0.5) / (1 + 0.5)) = ln(8/3) = 0.980829
    # passage a: tf=2, dl=3, avgdl=7/3: 2 / (2 + 1.5 * (0.25 + 0.75 * 3 / (7/3))) = 2 / 3.821429 = 0.523364
    assert top.passage_id == "a" and top.score == pytest.approx(
        math.log(8 / 3) * 2 / (2 + 1.5 * (0.25 + 0.75 * 9 / 7)), rel=1e-6
    )
    assert top.score == pytest.approx(0.513329, rel=1e-5)
    assert [(h.passage_id, h.score) for h in rest] == [("b", 0.0), ("c", 0.0)]  # zeros keep index order


def test_bm25_stemming_on_and_off():
    query = ["withdrawals recycled"]  # the passage says "withdrawal ... recycling"
    stemmed, plain = BM25Retriever(stemmer="english"), BM25Retriever(stemmer=None)
    stemmed.index(PASSAGES)
    plain.index(PASSAGES)
    assert ids(stemmed.search(query, 1)[0]) == ["water"] and stemmed.search(query, 1)[0][0].score > 0
    assert [h.score for h in plain.search(query, 6)[0]] == [0.0] * 6
    assert plain.search(["withdrawal recycling"], 1)[0][0].passage_id == "water"


def test_bm25_stop_words_on_and_off():
    query = ["the"]  # in every passage but water
    removed, kept = BM25Retriever(stopwords="english"), BM25Retriever(stopwords=None)
    removed.index(PASSAGES)
    kept.index(PASSAGES)
    assert all(h.score == 0.0 for h in removed.search(query, 6)[0])
    hits = kept.search(query, 6)[0]
    assert hits[4].score > 0 == hits[5].score and hits[5].passage_id == "water"


def test_bm25_doc_scope_restricts_and_keeps_corpus_statistics(bm25):
    unscoped, acme_only, globex_only = bm25.search(["recovery of hazardous waste"] * 3, 5, [None, "acme", "globex"])
    assert unscoped[0].passage_id == "waste"
    assert set(ids(acme_only)) == {"water", "scope3", "board"}  # 3 passages in scope, fewer than k
    assert globex_only[0] == unscoped[0]  # same score: scoring uses the whole corpus's statistics


def test_dense_matches_meaning_without_shared_words(dense):
    queries = [
        "How much freshwater do the factories consume?",
        "greenhouse gases in the supply chain",
        "female representation among directors",
        "workplace accidents",
        "garbage disposal",
        "ethics and integrity compliance courses",
    ]
    assert [ids(hits)[0] for hits in dense.search(queries, 2)] == [
        "water",
        "scope3",
        "board",
        "safety",
        "waste",
        "bribery",
    ]


def test_dense_scores_are_cosine_similarities(dense):
    assert np.allclose(np.linalg.norm(dense.embeddings, axis=1), 1.0, atol=1e-5)
    hits = dense.search(["workplace accidents"], 6)[0]
    query = dense.encode(["workplace accidents"])[0]
    expected = {p.id: float(dense.embeddings[row] @ query) for row, p in enumerate(PASSAGES)}
    assert [h.score for h in hits] == pytest.approx([expected[h.passage_id] for h in hits], abs=1e-6)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_dense_scope_and_faiss_backend_agree(dense):
    queries, scope = ["garbage disposal", "garbage disposal", "workplace accidents"], ["acme", None, "globex"]
    numpy_hits = dense.search(queries, 2, scope)
    assert set(ids(numpy_hits[0])) <= {"water", "scope3", "board"} and ids(numpy_hits[1])[0] == "waste"
    faiss = DenseRetriever(backend="faiss", device="cpu")
    faiss.index(PASSAGES, cache=None)
    faiss_hits = faiss.search(queries, 2, scope)
    assert [ids(h) for h in faiss_hits] == [ids(h) for h in numpy_hits]
    assert [h.score for hits in faiss_hits for h in hits] == pytest.approx(
        [h.score for hits in numpy_hits for h in hits], abs=1e-5
    )


def test_rrf_by_hand():
    fused = rrf([["a", "b", "c"], ["b", "c", "d"]], k=60)
    # b: 1/62 + 1/61 = 0.032522, c: 1/63 + 1/62 = 0.032002, a: 1/61 = 0.016393, d: 1/63 = 0.015873
    assert [pid for pid, _ in fused] == ["b", "c", "a", "d"]
    assert [s for _, s in fused] == pytest.approx([1 / 62 + 1 / 61, 1 / 63 + 1 / 62, 1 / 61, 1 / 63])
    assert rrf([["a"]], k=0) == [("a", 1.0)]


def test_rrf_ties_go_to_the_id_met_first_rank_by_rank():
    assert [pid for pid, _ in rrf([["a", "b"], ["b", "a"]])] == ["a", "b"]  # both 1/61 + 1/62
    assert [pid for pid, _ in rrf([["y", "z"], ["x"]])] == ["y", "x", "z"]  # y and x both 1/61: y read first
    with pytest.raises(UserError, match="more than once"):
        rrf([["a", "a"]])


def test_hybrid_fuses_the_two_rankings(bm25, dense):
    hybrid = HybridRetriever(BM25Retriever(), dense, rrf_k=60, depth=4)
    hybrid.index(PASSAGES)
    queries = ["How much water do the plants withdraw?", "workplace accidents"]
    expected = [rrf([ids(b), ids(d)], 60)[:3] for b, d in zip(bm25.search(queries, 4), dense.search(queries, 4))]
    got = hybrid.search(queries, 3)
    assert [[(h.passage_id, h.score) for h in hits] for hits in got] == [
        [(p, pytest.approx(s)) for p, s in e] for e in expected
    ]
    assert got[0][0].passage_id == "water" and got[0][0].score == pytest.approx(2 / 61)  # first on both sides


def test_oracle_returns_the_gold_passages():
    oracle = OracleRetriever()
    oracle.index(PASSAGES)
    assert oracle.needs_gold
    hits = oracle.search(["q1", "q2"], 1, ["globex", None], gold=[["waste", "safety"], []])
    assert hits == [[type(hits[0][0])("waste", 1.0)], []]
    with pytest.raises(UserError, match="'nowhere' of query 0 is not indexed"):
        oracle.search(["q1"], 3, gold=[["nowhere"]])
    with pytest.raises(UserError, match="'water' of query 0 is in 'acme', not in its scope 'globex'"):
        oracle.search(["q1"], 3, ["globex"], gold=[["water"]])
    with pytest.raises(UserError, match="1 gold lists for 2 queries"):
        oracle.search(["q1", "q2"], 3, gold=[["water"]])


def test_bad_calls_are_user_errors(bm25):
    with pytest.raises(UserError, match=r"doc_scope 'initech' is not an indexed document \(2 documents indexed\)"):
        bm25.search(["water"], 3, ["initech"])
    with pytest.raises(UserError, match="empty corpus"):
        BM25Retriever().index([])
    with pytest.raises(UserError, match="search called before index"):
        BM25Retriever().search(["water"], 3)
    with pytest.raises(UserError, match="'water' occurs more than once"):
        BM25Retriever().index(PASSAGES + PASSAGES[:1])
    with pytest.raises(UserError, match="k must be a positive integer"):
        bm25.search(["water"], 0)
    with pytest.raises(UserError, match="1 doc scopes for 2 queries"):
        bm25.search(["water", "waste"], 3, ["acme"])
    with pytest.raises(UserError, match="retriever dense: model /nonexistent/model is not a folder"):
        DenseRetriever(model="/nonexistent/model")
    # A bad retriever setting (backend, stemmer, k1, ...) is refused with the others, before any job: test_bad_input.py
    assert bm25.search([], 3) == []


def count_calls(monkeypatch, owner, attr):
    calls = []
    original = getattr(owner, attr)

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, attr, counted)
    return calls


def test_bm25_cache_hit_and_invalidation(tmp_path, monkeypatch):
    import bm25s

    builds = count_calls(monkeypatch, bm25s.BM25, "index")
    first = build_retriever(BM25_CFG, PASSAGES, cache_dir=tmp_path)
    again = build_retriever(BM25_CFG, PASSAGES, cache_dir=tmp_path)
    assert len(builds) == 1  # the second one loaded the saved index
    query = ["scope 3 purchased goods"]
    assert again.search(query, 6) == first.search(query, 6)
    build_retriever({**BM25_CFG, "k1": 1.2}, PASSAGES, cache_dir=tmp_path)
    edited = [*PASSAGES[:-1], Passage("bribery", "globex", "Anti-corruption training reached all staff.", 6, 6)]
    build_retriever(BM25_CFG, edited, cache_dir=tmp_path)
    build_retriever(BM25_CFG, PASSAGES, corpus_hash="another-corpus", cache_dir=tmp_path)
    assert len(builds) == 4 and len(list((tmp_path / "retrieval").iterdir())) == 4
    with pytest.raises(UserError, match="holds other passages; corpus hash 'another-corpus' names two corpora"):
        build_retriever(BM25_CFG, PASSAGES[:3], corpus_hash="another-corpus", cache_dir=tmp_path)


def test_an_unreadable_cache_entry_is_rebuilt(tmp_path, monkeypatch):
    import bm25s

    builds = count_calls(monkeypatch, bm25s.BM25, "index")
    build_retriever(BM25_CFG, PASSAGES, cache_dir=tmp_path)
    (entry,) = (tmp_path / "retrieval").iterdir()
    (entry / "ids.json").unlink()  # cut short, or written by an older layout
    rebuilt = build_retriever(BM25_CFG, PASSAGES, cache_dir=tmp_path)
    assert len(builds) == 2 and (entry / "ids.json").is_file()
    assert ids(rebuilt.search(["scope 3 purchased goods"], 1)[0]) == ids(
        build_retriever(BM25_CFG, PASSAGES).search(["scope 3 purchased goods"], 1)[0]
    )


def test_dense_cache_hit_skips_encoding_and_backend_shares_the_entry(tmp_path, monkeypatch):
    encodes = count_calls(monkeypatch, DenseRetriever, "encode")
    first = build_retriever(DENSE_CFG, PASSAGES, cache_dir=tmp_path)
    assert len(encodes) == 1
    again = build_retriever({**DENSE_CFG, "backend": "faiss"}, PASSAGES, cache_dir=tmp_path)
    assert len(encodes) == 1 and np.array_equal(again.embeddings, first.embeddings)
    (entry,) = (tmp_path / "retrieval").iterdir()
    assert entry.name.startswith("dense-") and (entry / "embeddings.npy").is_file()
    assert ids(again.search(["garbage disposal"], 1)[0]) == ["waste"] and len(encodes) == 2  # the query only


def test_hybrid_reuses_the_parts_cached_on_their_own(tmp_path, monkeypatch):
    cache = IndexCache(tmp_path, passages_hash(PASSAGES))
    build_retriever(BM25_CFG, PASSAGES, cache_dir=tmp_path)
    build_retriever(DENSE_CFG, PASSAGES, cache_dir=tmp_path)
    encodes = count_calls(monkeypatch, DenseRetriever, "encode")
    hybrid = build_retriever(
        {"_target_": "esgexp.retrieval.hybrid.HybridRetriever", "name": "hybrid", "bm25": BM25_CFG, "dense": DENSE_CFG},
        PASSAGES,
        cache_dir=tmp_path,
    )
    assert encodes == [] and sorted(p.name for p in (tmp_path / "retrieval").iterdir()) == sorted(
        [cache.directory(hybrid.bm25).name, cache.directory(hybrid.dense).name]
    )


def test_every_retriever_config_composes_without_heavy_imports(tmp_path):
    for name in ("bm25", "dense", "hybrid", "oracle", "random"):
        cfg = compose_config(tmp_path, f"retriever={name}")
        assert cfg.retriever.name == name and cfg.retriever._target_.startswith("esgexp.retrieval.")
    assert compose_config(tmp_path, "retriever=hybrid").retriever.bm25.stemmer == "english"
    code = (
        "import sys; sys.path.insert(0, 'tests')\n"
        "from pathlib import Path\nfrom hydra.utils import instantiate\nfrom conftest import compose_config\n"
        "for name in ('bm25', 'dense', 'hybrid', 'oracle', 'random'):\n"
        f"    instantiate(compose_config(Path({str(tmp_path)!r}), f'retriever={{name}}').retriever)\n"
        "print([m for m in ('bm25s', 'Stemmer', 'sentence_transformers', 'torch', 'faiss') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.stdout.strip() == "[]", out.stderr


def test_build_retriever_rejects_a_config_without_a_retriever():
    with pytest.raises(UserError, match="must name a Retriever class"):
        build_retriever({"name": "bm25"}, PASSAGES)


def test_queries_are_cleaned_like_passages():
    passages = [Passage("co2", "d", "CO2 emissions fell", 1, 1), Passage("fig", "d", "key figures of the year", 1, 1)]
    retriever = build_retriever(BM25_CFG, passages)
    assert retriever.search(["CO₂ emissions"], 1) == retriever.search(["CO2 emissions"], 1)
    assert ids(retriever.search(["ﬁgures"], 1)[0]) == ["fig"]


def test_bm25_keeps_one_character_tokens_by_default():
    passages = [
        Passage("s1", "d", "Scope 1 emissions from our own boilers", 1, 1),
        Passage("s3", "d", "Scope 3 emissions from purchased goods", 1, 1),
    ]
    kept = build_retriever(BM25_CFG, passages)
    assert ids(kept.search(["scope 3 emissions"], 1)[0]) == ["s3"]
    dropped = build_retriever({**BM25_CFG, "token_pattern": r"(?u)\b\w\w+\b"}, passages)
    assert [h.score for h in dropped.search(["scope 3 emissions"], 2)[0]] == [
        h.score for h in dropped.search(["scope 1 emissions"], 2)[0]
    ]


def test_dense_cache_misses_when_the_model_files_change(tmp_path, monkeypatch):
    import os
    import shutil

    from esgexp.retrieval.dense import default_model_path

    model = tmp_path / "model"
    shutil.copytree(default_model_path(), model)
    encodes = count_calls(monkeypatch, DenseRetriever, "encode")
    config = {**DENSE_CFG, "model": str(model)}
    build_retriever(config, PASSAGES, cache_dir=tmp_path / "cache")
    build_retriever(config, PASSAGES, cache_dir=tmp_path / "cache")
    assert len(encodes) == 1
    weights = max(model.rglob("*.safetensors"), key=lambda f: f.stat().st_size)
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # saved over in place
    build_retriever(config, PASSAGES, cache_dir=tmp_path / "cache")
    assert len(encodes) == 2


@pytest.mark.numerics
def test_dense_precision_auto_follows_the_cpu_and_the_device():
    from esgexp.models.loading import cpu_has_fast_bf16
    from esgexp.retrieval.dense import encoder_precision

    native = cpu_has_fast_bf16()[0]
    assert encoder_precision("auto", "cpu") == ("bfloat16" if native else "float32")
    assert encoder_precision("auto", "cuda") == "float16"
    assert encoder_precision("float32", "cpu") == "float32"
    assert DenseRetriever(device="cpu").precision == encoder_precision("auto", "cpu")
    with pytest.raises(UserError, match=r"precision=float16 runs on a GPU only"):
        encoder_precision("float16", "cpu")


@pytest.mark.numerics
def test_dense_bfloat16_embeds_again_close_to_float32_and_ranks_the_same(tmp_path, monkeypatch):
    encodes = count_calls(monkeypatch, DenseRetriever, "encode")
    exact = build_retriever({**DENSE_CFG, "device": "cpu", "precision": "float32"}, PASSAGES, cache_dir=tmp_path)
    half = build_retriever({**DENSE_CFG, "device": "cpu", "precision": "bfloat16"}, PASSAGES, cache_dir=tmp_path)
    assert len(encodes) == 2 and len(list((tmp_path / "retrieval").iterdir())) == 2  # a changed precision re-embeds
    assert half.embeddings.dtype == np.float32 and not np.array_equal(half.embeddings, exact.embeddings)
    assert (half.embeddings * exact.embeddings).sum(axis=1).min() > 0.999
    assert_rankings_agree(half.search(QUERIES, 6), exact.search(QUERIES, 6), LABELLED, tolerance=0.01)
    build_retriever({**DENSE_CFG, "device": "cpu", "precision": "bfloat16"}, PASSAGES, cache_dir=tmp_path)
    assert len(encodes) == 4  # the bfloat16 index loaded, only the queries above and none here encoded


def test_dense_runtime_auto_is_openvino_on_a_cpu_and_torch_on_a_gpu():
    from esgexp.retrieval.dense import encoder_runtime

    pytest.importorskip("openvino", reason="openvino (a declared dependency) is not installed")
    assert encoder_runtime("auto", "cpu") == "openvino"
    assert encoder_runtime("auto", "cuda") == "torch"
    assert encoder_runtime("torch", "cpu") == "torch"
    with pytest.raises(UserError, match=r"runtime=openvino runs on the CPU only"):
        encoder_runtime("openvino", "cuda")


@pytest.mark.numerics
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_dense_openvino_vectors_are_torchs_and_embed_again(precision, tmp_path, monkeypatch):
    pytest.importorskip("openvino", reason="openvino (a declared dependency) is not installed")
    from esgexp.retrieval.openvino_encoder import computes_bf16

    encodes = count_calls(monkeypatch, DenseRetriever, "encode")
    settings = {**DENSE_CFG, "device": "cpu", "precision": precision, "pooling": "cls", "passage_prompt": "passage: "}
    if precision == "bfloat16" and not computes_bf16():
        # this CPU (AVX2-only, older AVX512) has no bf16 in OpenVINO, which would compile float32 instead
        with pytest.raises(
            UserError, match=r"OpenVINO computes no bfloat16 on this CPU \(it would run f32 .*retriever.runtime=torch"
        ):
            build_retriever({**settings, "runtime": "openvino"}, PASSAGES, cache_dir=tmp_path)
        assert build_retriever({**settings, "runtime": "auto"}, PASSAGES, cache_dir=tmp_path).runtime == "torch"
        return
    in_torch = build_retriever({**settings, "runtime": "torch"}, PASSAGES, cache_dir=tmp_path)
    compiled = build_retriever({**settings, "runtime": "openvino"}, PASSAGES, cache_dir=tmp_path)
    assert len(encodes) == 2 and len(list((tmp_path / "retrieval").iterdir())) == 2  # a changed runtime re-embeds
    # the same pooling, prompt and normalisation: only the transformer's arithmetic differs
    assert compiled.embeddings.shape == in_torch.embeddings.shape
    assert (compiled.embeddings * in_torch.embeddings).sum(axis=1).min() > (
        0.99999 if precision == "float32" else 0.999
    )
    assert np.allclose(np.linalg.norm(compiled.embeddings, axis=1), 1, atol=1e-5)
    tolerance = 1e-4 if precision == "float32" else 0.01
    assert_rankings_agree(compiled.search(QUERIES, 6), in_torch.search(QUERIES, 6), LABELLED, tolerance)
    assert compiled.settings()["runtime"] == "openvino" and "runtime" not in in_torch.settings()


def test_dense_openvino_that_cannot_convert_is_named_or_left_to_torch_under_auto(monkeypatch, caplog, tmp_path):
    openvino = pytest.importorskip("openvino", reason="openvino (a declared dependency) is not installed")

    def refuse(*args, **kwargs):
        raise RuntimeError("Cannot trace this model's custom attention\nmore")

    monkeypatch.setattr(openvino, "convert_model", refuse)
    texts = ["scope 1 emissions", "board diversity"]
    # a folder of its own: a conversion this process has not made yet (none is dropped to force one)
    settings = {"device": "cpu", "precision": "float32", "openvino_cache": str(tmp_path / "never-written")}
    with pytest.raises(UserError, match=r"OpenVINO cannot convert BertModel .*custom attention.*runtime=torch"):
        DenseRetriever(**settings, runtime="openvino").encode(texts)
    fallen_back = DenseRetriever(**settings, runtime="auto")
    vectors = fallen_back.encode(texts)
    assert np.array_equal(vectors, DenseRetriever(device="cpu", precision="float32", runtime="torch").encode(texts))
    assert DenseRetriever(**settings, runtime="auto").runtime == "torch"  # a job's second instance
    assert caplog.text.count("encoding in torch instead") == 1  # said once per process
    # what ran is what the index key and the run's tag say: torch, not the openvino auto would have picked
    assert fallen_back.runtime == "torch" and "runtime" not in fallen_back.settings()
    node = OmegaConf.create({"_target_": "esgexp.retrieval.dense.DenseRetriever", **settings, "runtime": "auto"})
    assert DenseRetriever.encoder_arithmetic(node) == "float32, torch"


def test_dense_openvino_conversion_is_kept_and_read_back_by_the_next_process(tmp_path):
    pytest.importorskip("openvino", reason="openvino (a declared dependency) is not installed")
    texts = [p.text for p in PASSAGES]
    settings = {"device": "cpu", "precision": "float32", "runtime": "openvino"}
    fresh = DenseRetriever(**settings).encode(texts)
    kept = DenseRetriever(**settings, openvino_cache=str(tmp_path / "openvino")).encode(texts)
    (saved,) = (tmp_path / "openvino").glob("*.xml")
    assert saved.with_suffix(".bin").is_file() and not list((tmp_path / "openvino").glob(".*"))  # nothing staged left
    assert np.allclose(kept, fresh, atol=1e-6)  # float32 weights kept as they are (not compressed to fp16)
    np.save(tmp_path / "texts.npy", np.array(texts))
    script = (
        "import sys, numpy as np, openvino\n"
        "def refuse(*a, **k): raise AssertionError('converted again')\n"
        "openvino.convert_model = refuse\n"
        "from esgexp.retrieval.dense import DenseRetriever\n"
        "texts = [str(t) for t in np.load(sys.argv[1] + '/texts.npy')]\n"
        "retriever = DenseRetriever(device='cpu', precision='float32', runtime='openvino',"
        " openvino_cache=sys.argv[1] + '/openvino')\n"
        "np.save(sys.argv[1] + '/again.npy', retriever.encode(texts))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert np.array_equal(np.load(tmp_path / "again.npy"), kept)


def test_dense_progress_bar_counts_the_passages_it_embeds_and_not_the_queries(capsys):
    pytest.importorskip("openvino", reason="openvino (a declared dependency) is not installed")
    texts = [p.text for p in PASSAGES]
    shown = DenseRetriever(device="cpu", precision="float32", runtime="openvino", progress_bar=True, batch_size=4)
    vectors = shown.encode(texts)
    bar = capsys.readouterr().err
    assert "embedding: 100%" in bar and f"{len(texts)}/{len(texts)} [" in bar
    shown.encode(["garbage disposal"], query=True)
    assert capsys.readouterr().err == ""  # queries: no bar
    quiet = DenseRetriever(device="cpu", precision="float32", runtime="openvino", batch_size=4)
    assert np.array_equal(quiet.encode(texts), vectors) and capsys.readouterr().err == ""


def test_dense_openvino_conversion_that_cannot_be_kept_still_encodes_and_leaves_no_part_behind(
    tmp_path, monkeypatch, caplog
):
    openvino = pytest.importorskip("openvino", reason="openvino (a declared dependency) is not installed")
    save = openvino.save_model

    def disk_full_after_the_xml(model, path, **kwargs):
        save(model, path, **kwargs)  # both files written, then the disk fills (as OpenVINO reports it)
        raise RuntimeError("Can't write weights: No space left on device")

    monkeypatch.setattr(openvino, "save_model", disk_full_after_the_xml)
    texts = [p.text for p in PASSAGES]
    folder = tmp_path / "openvino"
    settings = {"device": "cpu", "precision": "float32", "runtime": "openvino"}
    vectors = DenseRetriever(**settings, openvino_cache=str(folder)).encode(texts)
    assert np.allclose(vectors, DenseRetriever(**settings).encode(texts), atol=1e-6)
    assert list(folder.iterdir()) == []  # no half-kept conversion, nothing staged left
    assert "the converted encoder could not be kept" in caplog.text and "No space left" in caplog.text
