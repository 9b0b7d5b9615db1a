"""Config composition: every experiment and model file, and the user-facing override surface."""

from pathlib import Path

import pytest
import yaml
from conftest import compose_config

from esgexp.core.config import CONF_DIR, flatten

EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))
MODELS = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))
MODEL_KEYS = {
    "name",
    "hub_id",
    "path",
    "gguf",
    "family",
    "size_b",
    "instruct",
    "reasoning",
    "dtype",
    "chat_template",
    "generation",
}


def test_default_config_is_the_embedded_default(tmp_path):
    cfg = compose_config(tmp_path)
    assert (cfg.dataset.name, cfg.model.name, cfg.strategy.name, cfg.scoring.name) == (
        "esg_sample",
        "smollm2-135m",
        "zero_shot",
        "generate",
    )
    assert Path(cfg.dataset.path).is_file()
    assert cfg.tracking.uri == f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    assert cfg.scoring.max_new_tokens == cfg.model.generation.max_new_tokens


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes(tmp_path, experiment):
    cfg = compose_config(tmp_path, f"experiment={experiment}")
    assert cfg.experiment_name == experiment
    flat = flatten(cfg)  # resolves every interpolation
    assert flat["dataset._target_"].startswith("esgexp.")


@pytest.mark.parametrize("model", MODELS)
def test_every_model_file_has_the_model_keys(tmp_path, model):
    raw = yaml.safe_load((CONF_DIR / "model" / f"{model}.yaml").read_text())
    if "api" in raw:  # an API model: its server, key variable and prices, and it selects the API backend
        assert raw.pop("defaults") == [{"override /backend@_global_.backend": "openai"}]
        api = set(raw.pop("api"))  # o-series models add their parameter rule (params, reasoning_effort)
        assert api in (
            {"base_url", "api", "api_key_env"},
            {"base_url", "api", "api_key_env", "params", "reasoning_effort"},
        )
        price = set(raw.pop("price")) - {"as_of"}  # as_of: the date the prices were read
        assert price in ({"prompt", "completion"}, {"prompt", "completion", "batch_discount"})
        if "alias" in raw:  # a provider's moving alias: what it served when the paper ran, its dated ids
            assert set(raw.pop("alias")) == {"moving", "when_paper_ran", "dated_ids"}
    assert set(raw) == MODEL_KEYS and raw["name"] == model
    assert raw["dtype"] in ("auto", "float32", "bfloat16", "float16")
    assert sum(bool(raw[k]) for k in ("hub_id", "path", "gguf")) == 1
    assert raw["size_b"] is None or raw["size_b"] > 0
    cfg = compose_config(tmp_path, f"model={model}", "model.dtype=float32")
    assert cfg.model.dtype == "float32"


def test_model_table_covers_the_esgenius_families():
    families = {yaml.safe_load((CONF_DIR / "model" / f"{m}.yaml").read_text())["family"] for m in MODELS}
    assert {"Qwen2.5", "Qwen2.5-1M", "Qwen3", "QwQ", "Llama-3.1", "Gemma-3", "DeepSeek-R1-Distill"} <= families
    assert "qwen2.5-14b" in MODELS and "qwen2.5-14b-instruct" in MODELS


def test_flatten_gives_dotted_keys():
    assert flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": None}) == {"a.b": 1, "a.c.d": [1, 2], "e": None}


def test_composing_and_help_import_no_heavy_library(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys, esgexp.__main__, esgexp.run, esgexp.leaderboard\n"
        "heavy = [m for m in ('torch', 'transformers', 'lightning', 'mlflow', 'datasets') if m in sys.modules]\n"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
    help_text = subprocess.run(
        [sys.executable, "-m", "esgexp", "--help"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert help_text.returncode == 0 and "model: " in help_text.stdout


def test_the_test_suites_config_file_cache_composes_what_hydra_composes(tmp_path):
    """tests/hydra_cache.py (installed in every test process) parses each file once, changes no composed
    config, and reads a file edited between two composes again."""
    import hydra_cache
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    def composed(conf_dir, name, *overrides):
        with initialize_config_dir(str(conf_dir), version_base="1.3"):
            return OmegaConf.to_yaml(compose(name, overrides=list(overrides), return_hydra_config=True))

    cases = [
        ("config", "experiment=rag", "model=qwen2.5-14b-instruct"),
        ("config", "experiment=finetune_sustainableqa", "trainer=gpu"),
        ("config", "model=gpt-4o", "scoring=logprob"),
        ("build", "builder=esgenius", "corpus=/c"),
        ("leaderboard",),
    ]
    cached = [composed(CONF_DIR, *case) for case in cases]
    parsed = hydra_cache.files_parsed()
    assert parsed > 0 and [composed(CONF_DIR, *case) for case in cases] == cached
    assert hydra_cache.files_parsed() == parsed  # the second time every file came from the cache
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "config.yaml").write_text("value: 1\n")
    before = composed(conf, "config")
    hydra_cache.uninstall()
    try:
        assert [composed(CONF_DIR, *case) for case in cases] == cached
    finally:
        hydra_cache.install()
    (conf / "config.yaml").write_text("value: 22\n")
    assert "value: 1\n" in before and "value: 22\n" in composed(conf, "config")
