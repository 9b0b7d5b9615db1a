"""The paper tables' retrievers, each on a local stand-in: bi-encoder options (two encoders, prompts, pooling,
dot product, a hub id from the Hugging Face cache), the seeded random baseline, ColBERT on a checkpoint
made from the bundled MiniLM, and OpenAI-compatible embeddings from a real llama.cpp server."""

from __future__ import annotations

import json
import shutil
import string
from pathlib import Path

import numpy as np
import pytest
from cli import run_cli
from conftest import REPO, SHARED_SAMPLES, compose_config
from test_retrievers import BM25_CFG, PASSAGES, TEXTS, ids

from esgexp.errors import UserError
from esgexp.retrieval import build_retriever
from esgexp.retrieval.dense import DenseRetriever, default_model_path
from esgexp.retrieval.random_order import RandomRetriever

TOPICAL = {
    "How much freshwater do the factories consume?": "water",
    "greenhouse gases in the supply chain": "scope3",
    "female representation among directors": "board",
    "workplace accidents": "safety",
}
PAPER_CONFIGS = {
    "bge-base": ("BAAI/bge-base-en-v1.5", None),
    "gte-base": ("thenlper/gte-base", None),
    "contriever": ("facebook/contriever", None),
    "dpr": (
        "sentence-transformers/facebook-dpr-ctx_encoder-single-nq-base",
        "sentence-transformers/facebook-dpr-question_encoder-single-nq-base",
    ),
    "dragon-plus": ("facebook/dragon-plus-context-encoder", "facebook/dragon-plus-query-encoder"),
}


@pytest.fixture(scope="module")
def minilm_copy(tmp_path_factory) -> Path:
    """A second folder holding the bundled MiniLM: the 'query encoder' of a two-encoder retriever."""
    folder = tmp_path_factory.mktemp("query-encoder") / "minilm"
    shutil.copytree(default_model_path(), folder)
    return folder


# --- bi-encoders ---------------------------------------------------------------------------------


def test_two_encoders_and_prompts(minilm_copy):
    two = DenseRetriever(query_model=str(minilm_copy), device="cpu")
    two.index(PASSAGES)
    one = DenseRetriever(device="cpu")
    one.index(PASSAGES)
    assert two.query_model == str(minilm_copy) and two.model == default_model_path()
    queries = list(TOPICAL)
    assert [ids(h)[0] for h in two.search(queries, 1)] == list(TOPICAL.values())
    assert [h.score for hits in two.search(queries, 3) for h in hits] == pytest.approx(
        [h.score for hits in one.search(queries, 3) for h in hits], abs=1e-5
    )
    prompted = DenseRetriever(query_prompt="query: ", passage_prompt="passage: ", device="cpu")
    assert np.allclose(prompted.encode(["workplace accidents"], query=True), one.encode(["query: workplace accidents"]))
    assert np.allclose(prompted.encode(["workplace accidents"]), one.encode(["passage: workplace accidents"]))
    assert not np.allclose(prompted.encode(["workplace accidents"], query=True), one.encode(["workplace accidents"]))


@pytest.fixture(scope="module")
def raw_minilm(tmp_path_factory) -> Path:
    """The bundled MiniLM without its Normalize module: raw vectors, as DPR, Contriever and DRAGON+ give."""
    folder = tmp_path_factory.mktemp("raw-encoder") / "minilm-raw"
    shutil.copytree(default_model_path(), folder)
    modules = json.loads((folder / "modules.json").read_text())
    (folder / "modules.json").write_text(json.dumps([m for m in modules if not m["type"].endswith("Normalize")]))
    return folder


def test_pooling_and_dot_product_by_hand(raw_minilm):
    exact = {"normalize": False, "device": "cpu", "precision": "float32"}  # compared with float32 token vectors
    cls = DenseRetriever(model=str(raw_minilm), pooling="cls", **exact)
    mean = DenseRetriever(model=str(raw_minilm), pooling="mean", **exact)
    tokens = cls.encoder().encode(["workplace accidents"], output_value="token_embeddings")[0].numpy()
    assert np.allclose(cls.encode(["workplace accidents"])[0], tokens[0], atol=1e-5)  # the [CLS] token's vector
    assert np.allclose(mean.encode(["workplace accidents"])[0], tokens.mean(axis=0), atol=1e-5)
    cls.index(PASSAGES)
    assert abs(np.linalg.norm(cls.embeddings[0]) - 1) > 0.1  # raw vectors, not unit ones
    query = cls.encode(["workplace accidents"], query=True)[0]
    hits = cls.search(["workplace accidents"], 6)[0]
    assert [h.score for h in hits] == pytest.approx(
        sorted((float(row @ query) for row in cls.embeddings), reverse=True), rel=1e-5
    )


def test_index_cache_keys_on_the_passage_encoder(tmp_path, minilm_copy):
    base = {"_target_": "esgexp.retrieval.dense.DenseRetriever", "name": "dense", "device": "cpu"}
    for change in ({}, {"query_prompt": "q: "}, {"query_model": str(minilm_copy)}):  # query side: one entry
        build_retriever({**base, **change}, PASSAGES, cache_dir=tmp_path)
    assert len(list((tmp_path / "retrieval").iterdir())) == 1
    for change in ({"passage_prompt": "p: "}, {"pooling": "cls"}, {"normalize": False}, {"model": str(minilm_copy)}):
        build_retriever({**base, **change}, PASSAGES, cache_dir=tmp_path)
    assert len(list((tmp_path / "retrieval").iterdir())) == 5


def fake_hub_cache(root: Path, repo: str, commit: str) -> Path:
    """The Hugging Face cache layout (models--ORG--NAME/snapshots/COMMIT, refs/main) holding the MiniLM files."""
    folder = root / f"models--{repo.replace('/', '--')}"
    shutil.copytree(default_model_path(), folder / "snapshots" / commit)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(commit)
    return root


def test_a_hub_id_loads_from_the_local_cache_and_one_missing_says_how_to_get_it(tmp_path, monkeypatch):
    """A hub id is read from the Hugging Face cache as HF_HUB_CACHE names it (huggingface_hub and transformers
    read that folder from ``huggingface_hub.constants`` when they look a file up, as set here)."""
    from huggingface_hub import constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(fake_hub_cache(tmp_path / "hub", "acme/minilm", commit)))
    retriever = DenseRetriever(model="acme/minilm", query_model="acme/minilm", device="cpu")
    retriever.index(PASSAGES)
    assert retriever.settings()["model_files"] == commit
    assert [h.passage_id for h in retriever.search(["workplace accidents"], 1)[0]] == ["safety"]
    with pytest.raises(UserError) as error:
        DenseRetriever(name="bge-base", model="acme/not-downloaded")
    assert str(error.value) == (
        "retriever 'bge-base': acme/not-downloaded is not in the local Hugging Face cache and the hub is offline "
        "(HF_HUB_OFFLINE=1). Download it once where the hub is reachable "
        "(`HF_HUB_OFFLINE=0 hf download acme/not-downloaded`), or point retriever.model at a local copy."
    )


@pytest.mark.parametrize("name", sorted(PAPER_CONFIGS))
def test_paper_bi_encoder_configs(tmp_path, name):
    cfg = compose_config(tmp_path, f"retriever={name}")
    model, query_model = PAPER_CONFIGS[name]
    assert (cfg.retriever.name, cfg.retriever.model, cfg.retriever.query_model) == (name, model, query_model)
    assert cfg.retriever._target_ == "esgexp.retrieval.dense.DenseRetriever"
    assert cfg.retriever.normalize == (name in ("bge-base", "gte-base"))  # DPR, Contriever, DRAGON+: dot product
    assert cfg.retriever.pooling == ("mean" if name in ("gte-base", "contriever") else "cls")
    if name == "bge-base":
        assert cfg.retriever.query_prompt == "Represent this sentence for searching relevant passages: "
    # The weights are not in this machine's cache: one line says how to get them.
    with pytest.raises(UserError, match=rf"retriever '{name}': .* hf download "):
        build_retriever(cfg.retriever, PASSAGES)


# --- the random baseline ---------------------------------------------------------------------------


def test_random_ranks_a_document_the_same_for_every_query():
    first, again, other = RandomRetriever(seed=1), RandomRetriever(seed=1), RandomRetriever(seed=2)
    for retriever in (first, again, other):
        retriever.index(PASSAGES)
    queries = ["water", "board", "waste"]
    hits = first.search(queries, 6)
    assert hits == again.search(queries, 6) and hits != other.search(queries, 6)
    assert hits[0] == hits[1] == hits[2]  # the query text does not move the ranking (it did: seeded by the text)
    assert sorted(ids(hits[0])) == sorted(p.id for p in PASSAGES)
    assert all(0 <= x.score < 1 for x in hits[0]) and [x.score for x in hits[0]] == sorted(
        (x.score for x in hits[0]), reverse=True
    )
    scoped = first.search(["water", "an explanation of many words", "board"], 3, ["globex", "globex", "acme"])
    assert scoped[0] == scoped[1] and set(ids(scoped[0])) == {"waste", "safety", "bribery"}
    # a document's ranking does not depend on the other documents indexed with it
    alone = RandomRetriever(seed=1)
    alone.index([p for p in PASSAGES if p.doc_id == "globex"])
    assert alone.search(["anything"], 3, ["globex"])[0] == scoped[0]
    # the draw does depend on the document: over many seeds every globex passage comes first sometimes
    firsts = set()
    for seed in range(40):
        retriever = RandomRetriever(seed=seed)
        retriever.index(PASSAGES)
        firsts.add(ids(retriever.search(["q"], 1, ["globex"])[0])[0])
    assert firsts == {"waste", "safety", "bribery"}


def test_every_new_config_composes(tmp_path):
    names = ["random", "colbertv2", "embeddings", "text-embedding-3-small", "text-embedding-3-large"]
    for name in [*names, "text-embedding-ada-002", *PAPER_CONFIGS]:
        assert compose_config(tmp_path, f"retriever={name}").retriever.name == name
    assert compose_config(tmp_path, "retriever=random", "seed=7").retriever.seed == 7
    openai = compose_config(tmp_path, "retriever=text-embedding-3-large").retriever
    assert (openai.base_url, openai.model, openai.api_key_env) == (
        "https://api.openai.com/v1",
        "text-embedding-3-large",
        "OPENAI_API_KEY",
    )
    assert openai.request_cache == str(tmp_path / "requests.sqlite") and openai.cache_mode == "read_write"


# --- late interaction (ColBERT) ---------------------------------------------------------------------

LEXICAL = {
    "How much water do the plants withdraw?": "water",
    "scope 3 purchased goods": "scope3",
    "board diversity of women": "board",
    "injury rate of contractors": "safety",
}


@pytest.fixture(scope="module")
def colbert_minilm(tmp_path_factory) -> Path:
    """A ColBERT checkpoint in Stanford's layout made from the bundled MiniLM: its BERT under ``bert.``, an
    identity ``linear.weight`` (384 dimensions), and an artifact.metadata with documents cut at 16 tokens."""
    import torch
    from safetensors.torch import load_file, save_file

    source, folder = Path(default_model_path()), tmp_path_factory.mktemp("colbert") / "colbert-minilm"
    folder.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(source / name, folder / name)
    weights = {f"bert.{key}": value for key, value in load_file(source / "model.safetensors").items()}
    save_file({**weights, "linear.weight": torch.eye(384)}, folder / "model.safetensors")
    metadata = {"query_token_id": "[unused0]", "doc_token_id": "[unused1]", "query_maxlen": 32, "doc_maxlen": 16}
    (folder / "artifact.metadata").write_text(json.dumps(metadata))
    return folder


def test_colbert_tokens_and_maxsim_by_hand(colbert_minilm, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    from esgexp.retrieval.late import ColBERTRetriever

    config = {"_target_": "esgexp.retrieval.late.ColBERTRetriever", "name": "colbert", "model": str(colbert_minilm)}
    config["device"] = "cpu"
    retriever = build_retriever(config, PASSAGES, cache_dir=tmp_path)
    assert [ids(h)[0] for h in retriever.search(list(LEXICAL), 1)] == list(LEXICAL.values())
    (query,) = retriever.encode(["workplace accidents"], query=True)
    passages = retriever.encode([p.text for p in PASSAGES], query=False)
    # A query is always 32 vectors ([MASK]-padded); a passage keeps [CLS], its marker, its first 13 tokens
    # less their punctuation, and [SEP] (16 at most); each a unit vector.
    tokenizer = AutoTokenizer.from_pretrained(colbert_minilm)
    kept = [3 + sum(t not in string.punctuation for t in tokenizer.tokenize(p.text)[:13]) for p in PASSAGES]
    assert query.shape == (32, 384) and [len(v) for v in passages] == kept and max(kept) == 16
    assert all(np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5) for v in passages)
    # The score by hand: each query token's best dot product with the passage's tokens, summed.
    expected = sorted(((query @ tokens.T).max(axis=1).sum() for tokens in passages), reverse=True)
    assert [h.score for h in retriever.search(["workplace accidents"], 6)[0]] == pytest.approx(expected, rel=1e-3)
    assert set(ids(retriever.search(["workplace accidents"], 6, ["acme"])[0])) == {"water", "scope3", "board"}
    encodes = []
    monkeypatch.setattr(ColBERTRetriever, "build_index", lambda self, passages: encodes.append(1))
    again = build_retriever(config, PASSAGES, cache_dir=tmp_path)  # the saved index: nothing encoded
    assert encodes == [] and again.search(list(LEXICAL), 3) == retriever.search(list(LEXICAL), 3)


# --- embeddings from a real OpenAI-compatible server --------------------------------------------------


@pytest.fixture(scope="module")
def embedding_server(tmp_path_factory):
    """llama.cpp's server (llama-cpp-python) on the bundled MiniLM converted to GGUF, serving /v1/embeddings."""
    from embedding_server import CACHE, minilm_gguf
    from openai_server import LlamaServer, ServerError, missing_server_modules

    missing = missing_server_modules()
    if missing:
        pytest.skip(f"llama-cpp-python[server] is not installed (cannot import {', '.join(missing)})")
    gguf, why = minilm_gguf(CACHE)
    if gguf is None:
        pytest.skip(f"no MiniLM GGUF for the embedding server: {why}")
    server = LlamaServer(gguf, tmp_path_factory.mktemp("embedding-server") / "server.log", n_ctx=512)
    server.command += ["--embedding", "true"]
    try:
        server.start(timeout=120)
    except ServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def embedding_proxy(embedding_server):
    from openai_server import FaultProxy

    with FaultProxy(embedding_server.base_url) as proxy:
        yield proxy


def embeddings_config(base_url: str, cache: Path, **extra) -> dict:
    return {
        "_target_": "esgexp.retrieval.embeddings.EmbeddingsRetriever",
        "name": "embeddings",
        "base_url": base_url,
        "model": "all-MiniLM-L6-v2",
        "batch_size": 4,
        "request_cache": str(cache),
        "backoff_s": 0.01,
        **extra,
    }


# The first run on a machine fetches llama-cpp-python's source (about 3 min) to convert MiniLM once.
def test_embeddings_match_the_model_and_a_rerun_sends_nothing(embedding_proxy, tmp_path):
    config = embeddings_config(embedding_proxy.base_url, tmp_path / "requests.sqlite")
    retriever = build_retriever(config, PASSAGES)
    assert embedding_proxy.count == 2  # 6 passages in batches of 4
    local = DenseRetriever(device="cpu")
    local.index(PASSAGES)
    assert np.allclose((retriever.embeddings * local.embeddings).sum(axis=1), 1, atol=1e-3)  # the same vectors
    assert [ids(h)[0] for h in retriever.search(list(TOPICAL), 1)] == list(TOPICAL.values())
    assert retriever.stats()["retriever/n_requests"] == 3 and embedding_proxy.count == 3
    assert embedding_proxy.bodies()[0] == {
        "model": "all-MiniLM-L6-v2",
        "input": [p.text for p in PASSAGES[:4]],
        "encoding_format": "float",
    }
    again = build_retriever(config, PASSAGES)  # no index cache: every vector from the request cache
    hits = again.search(list(TOPICAL), 3)
    assert embedding_proxy.count == 3 and again.stats()["retriever/n_requests"] == 0
    assert hits == retriever.search(list(TOPICAL), 3)


# The first run on a machine fetches llama-cpp-python's source (about 3 min) to convert MiniLM once.
def test_embeddings_retry_a_busy_server_and_name_a_missing_key(embedding_proxy, tmp_path, monkeypatch):
    embedding_proxy.fail_next(2, "429", retry_after=0)
    retriever = build_retriever(embeddings_config(embedding_proxy.base_url, tmp_path / "r.sqlite"), PASSAGES[:2])
    assert retriever.stats()["retriever/n_retries"] == 2 and len(retriever.embeddings) == 2
    monkeypatch.delenv("ESGEXP_TEST_KEY", raising=False)
    with pytest.raises(
        UserError, match=r"set the environment variable ESGEXP_TEST_KEY \(retriever.api_key_env names it"
    ):
        build_retriever(
            embeddings_config(embedding_proxy.base_url, tmp_path / "r.sqlite", api_key_env="ESGEXP_TEST_KEY"), PASSAGES
        )
    with pytest.raises(UserError, match=r"the server at http://127\.0\.0\.1:9/v1 does not answer"):
        build_retriever(embeddings_config("http://127.0.0.1:9/v1", tmp_path / "r.sqlite", max_retries=0), PASSAGES)


# The first run on a machine fetches llama-cpp-python's source (about 3 min) to convert MiniLM once.
def test_climretrieve_job_with_embeddings_reruns_with_no_request(embedding_proxy, tmp_path, clean_env):
    sample = SHARED_SAMPLES / "climretrieve" / "report_level_sample.csv"
    if not sample.is_file():
        pytest.skip(f"the shared ClimRetrieve sample is not present at {sample}")
    command = ["experiment=climretrieve_retrieval", f"dataset.path={sample}"]
    command += ["retriever=embeddings", f"retriever.base_url={embedding_proxy.base_url}"]
    command += ["retriever.model=all-MiniLM-L6-v2", "retriever.timeout_s=300", f"paths.root_dir={tmp_path}"]
    command += [f"paths.request_cache={tmp_path}/requests.sqlite"]
    runs = []
    for run in ("first", "second"):  # the second with an index cache of its own: only the request cache helps
        folders = [f"paths.output_dir={tmp_path}/{run}", f"paths.index_dir={tmp_path}/{run}-indexes"]
        out = run_cli("esgexp", *command, *folders, env=clean_env, cwd=REPO, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(json.loads((tmp_path / run / "metrics.json").read_text()))
    first, second = runs
    # 32 paragraphs in one batch of 64, then the 6 questions in one more.
    assert first["retriever/n_requests"] == 2 and first["retriever/n_embedded"] == 38
    assert second["retriever/n_requests"] == 0 and second["retriever/n_cached"] == 38
    # What reached the server: the first run's two batches (and any retry of a slow one); none from the rerun.
    assert embedding_proxy.count_path("/v1/embeddings") == 2 + first["retriever/n_retries"]
    assert second["recall@5"] == first["recall@5"] and first["n_queries"] == 6


# --- a cross-encoder second stage (retriever.rerank) -----------------------------------------------


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory) -> Path:
    """A CrossEncoder made from the bundled MiniLM's BERT (its one-logit head seeded), saved to a folder."""
    import torch
    from sentence_transformers import CrossEncoder

    source, bert = Path(default_model_path()), tmp_path_factory.mktemp("cross-encoder") / "bert"
    bert.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        shutil.copy(source / name, bert / name)
    torch.manual_seed(0)
    folder = bert.parent / "cross-encoder"
    CrossEncoder(str(bert), num_labels=1, device="cpu").save(str(folder))
    return folder


def test_rerank_reorders_the_first_stage_by_the_cross_encoder(cross_encoder, tmp_path):
    from sentence_transformers import CrossEncoder

    cfg = compose_config(tmp_path, "retriever=bm25", f"+retriever.rerank={cross_encoder}", "+retriever.rerank_depth=4")
    reranked = build_retriever(cfg.retriever, PASSAGES, cache_dir=tmp_path / "indexes")
    first = build_retriever({**BM25_CFG}, PASSAGES)
    judge = CrossEncoder(str(cross_encoder), device="cpu")
    for query, hits in zip(TOPICAL, reranked.search(list(TOPICAL), 3)):
        candidates = ids(first.search([query], 4)[0])
        scores = judge.predict([(query, TEXTS[pid][1]) for pid in candidates])
        expected = sorted(zip(candidates, scores), key=lambda pair: -pair[1])[:3]
        assert [(h.passage_id, h.score) for h in hits] == [
            (pid, pytest.approx(float(s), abs=1e-5)) for pid, s in expected
        ]
    assert reranked.name == "bm25" and [
        p.name.split("-")[0] for p in (tmp_path / "indexes" / "retrieval").iterdir()
    ] == ["bm25"]  # the first stage's index, cached as itself
