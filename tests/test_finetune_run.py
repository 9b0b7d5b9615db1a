"""task=finetune end to end on the tiny random Llama: training, tracking, resume, adapter evaluation,
export, DDP and sweeps, and the mistakes that must fail before any weights load."""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
from pathlib import Path

import pytest
import torch
from cli import run_cli
from conftest import build_tiny_llama, compose_config
from helpers import composed

from esgexp.errors import Interrupted, UserError
from esgexp.run import run_job

# 32-true: precision auto depends on the CPU (test_precision_auto_on_the_cpu_follows_native_bf16).
FT = (
    "experiment=finetune_sustainableqa",
    "dataset=sustainableqa_sample",
    "model=local",
    "trainer.precision=32-true",
    "train.max_seq_len=512",
    "train.val_every_n_steps=3",
    "train.val_generate_items=2",
    "train.val_max_new_tokens=4",
    "train.lr=1e-2",
    "train.batch_size=4",
    "train.val_limit=8",
    "trainer.max_steps=6",
    "trainer.log_every_n_steps=1",
)


EMPTY_STORE: list[Path] = []  # conftest's empty_db, for the functions below


@pytest.fixture(scope="module", autouse=True)
def migrated_store(empty_db):
    """Every job here tracks into a copy of one empty store with its tables made: a fresh sqlite file costs
    MLflow's migrations (seconds) and is not what these tests are about."""
    EMPTY_STORE.append(empty_db)
    yield
    EMPTY_STORE.remove(empty_db)


def with_store(root: Path) -> Path:
    """``root``, its ``mlruns/mlflow.db`` (the default tracking.uri) a copy of the empty store unless one is there."""
    store = root / "mlruns" / "mlflow.db"
    if not store.exists():
        store.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(EMPTY_STORE[0], store)
    return root


def finetune_cfg(root: Path, model_dir: Path, *overrides: str):
    return compose_config(with_store(root), *FT, f"model.path={model_dir}", *overrides)


def mlflow_client(root: Path):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{root}/mlruns/mlflow.db")
    return mlflow.MlflowClient()


def history(client, run_id: str, key: str) -> list[float]:
    return [m.value for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir):
    """One 6-step fine-tune of the tiny model: (root, metrics, run folder, MLflow run id)."""
    root = tmp_path_factory.mktemp("finetune")
    metrics = run_job(finetune_cfg(root, tiny_model_dir))
    run_id = mlflow_client(root).search_runs(experiment_ids=["1"])[0].info.run_id
    return root, metrics, root / "run", run_id


def test_finetune_saves_adapter_config_and_tracks_curves(trained):
    root, metrics, run_dir, run_id = trained
    assert metrics["train/steps"] == 6
    assert metrics["train/n_examples"] == metrics["train/n_items"] > 0 and metrics["train/n_dropped"] == 0
    assert 0.0 <= metrics["val/gen_f1"] <= 1.0 and metrics["train/tokens_per_s"] > 0
    for name in ("adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "esgexp_adapter.json"):
        assert (run_dir / "adapter" / name).is_file(), name
    assert {p.name for p in (run_dir / "checkpoints").iterdir()} >= {"last.ckpt"}
    assert (run_dir / "config.yaml").is_file() and len(
        (run_dir / "val_generations.jsonl").read_text().splitlines()
    ) == 2
    card = json.loads((run_dir / "adapter" / "esgexp_adapter.json").read_text())
    assert card["base_model"] == "local" and card["mlflow_run_id"] == run_id and card["strategy"] == "zero_context"

    client = mlflow_client(root)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["task"] == "finetune"
    assert run.data.params["model.lora.r"] == "16" and run.data.params["train.lr"] == "0.01"
    train_loss = history(client, run_id, "train/loss")
    val_loss = history(client, run_id, "val/loss")
    # One point per step (Lightning) and the run's final value at step 6.
    assert len(train_loss) == 7 and len(val_loss) == 3  # validated at step 3 and at the end
    assert val_loss[-1] < val_loss[0]  # it learns
    assert len(history(client, run_id, "train/lr")) == 6 and history(client, run_id, "train/tokens_per_s")
    artifacts = {a.path for a in client.list_artifacts(run_id, "adapter")}
    assert "adapter/adapter_model.safetensors" in artifacts


def test_checkpoints_hold_the_trainable_weights_only(trained):
    _, _, run_dir, _ = trained
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert state["global_step"] == 6 and state["state_dict"]
    assert all("lora_" in key for key in state["state_dict"])
    assert state["optimizer_states"] and state["lr_schedulers"][0]["last_epoch"] == 6


def test_same_config_gives_the_same_losses(tmp_path, tiny_model_dir, trained):
    root, metrics, _, run_id = trained
    again = run_job(finetune_cfg(tmp_path, tiny_model_dir))
    assert history(
        mlflow_client(tmp_path), mlflow_client(tmp_path).search_runs(["1"])[0].info.run_id, "train/loss"
    ) == history(mlflow_client(root), run_id, "train/loss")
    assert again["val/loss"] == metrics["val/loss"]


def test_resume_from_a_checkpoint_continues_to_the_same_weights(tmp_path, tiny_model_dir):
    """4 steps, then resumed to 6, equals 6 steps straight: step count, optimiser and schedule restored."""
    same = (
        "model.lora.dropout=0",
        "train.train_limit=8",
        "train.batch_size=2",
        "train.val_every_n_steps=2",
        "train.val_generate_items=0",
    )
    run_job(finetune_cfg(tmp_path / "straight", tiny_model_dir, *same))
    run_job(finetune_cfg(tmp_path / "first", tiny_model_dir, *same, "trainer.max_steps=4"))
    metrics = run_job(
        finetune_cfg(tmp_path / "resumed", tiny_model_dir, *same, f"ckpt_path={tmp_path / 'first' / 'run'}")
    )
    assert metrics["train/steps"] == 6
    straight = torch.load(tmp_path / "straight" / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    resumed = torch.load(tmp_path / "resumed" / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    for key, value in straight["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][key]), key
    for index, state in straight["optimizer_states"][0]["state"].items():
        assert torch.equal(state["exp_avg_sq"], resumed["optimizer_states"][0]["state"][index]["exp_avg_sq"])


def test_ctrl_c_keeps_the_steps_done_and_the_run_resumes(tmp_path, tiny_model_dir, monkeypatch):
    from esgexp.training.lora_module import LoraFineTuner

    step = LoraFineTuner.training_step

    def interrupted_at_step_4(self, batch, batch_idx):
        if self.global_step == 4:
            raise KeyboardInterrupt
        return step(self, batch, batch_idx)

    monkeypatch.setattr(LoraFineTuner, "training_step", interrupted_at_step_4)
    sigint = signal.getsignal(signal.SIGINT)  # Lightning ignores further Ctrl-C while it shuts down
    with pytest.raises(Interrupted, match=r"training stopped at step 4; .*last\.ckpt; ckpt_path=last continues"):
        run_job(finetune_cfg(tmp_path / "a", tiny_model_dir, "train.val_generate_items=0"))
    signal.signal(signal.SIGINT, sigint)
    saved = torch.load(tmp_path / "a" / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    assert saved["global_step"] == 4  # the validation checkpoint was at step 3
    assert mlflow_client(tmp_path / "a").search_runs(["1"])[0].info.status == "KILLED"
    monkeypatch.setattr(LoraFineTuner, "training_step", step)
    metrics = run_job(
        finetune_cfg(
            tmp_path / "b", tiny_model_dir, "train.val_generate_items=0", f"ckpt_path={tmp_path / 'a' / 'run'}"
        )
    )
    assert metrics["train/steps"] == 6


def test_ckpt_path_last_finds_the_newest_run_of_the_same_config(tmp_path, tiny_model_dir):
    from esgexp.tasks.finetune import resolve_ckpt_path

    runs = tmp_path / "runs" / "finetune_sustainableqa"
    run_job(finetune_cfg(tmp_path, tiny_model_dir, "trainer.max_steps=2", f"paths.output_dir={runs / 'a'}"))
    run_job(
        finetune_cfg(tmp_path, tiny_model_dir, "trainer.max_steps=2", "train.lr=0.5", f"paths.output_dir={runs / 'b'}")
    )
    found = resolve_ckpt_path(finetune_cfg(tmp_path, tiny_model_dir, "ckpt_path=last"))
    assert found == str(runs / "a" / "checkpoints" / "last.ckpt")  # b is another config (lr)
    with pytest.raises(UserError, match="no earlier run of this config"):
        resolve_ckpt_path(finetune_cfg(tmp_path, tiny_model_dir, "ckpt_path=last", "train.lr=0.1"))


def test_adapter_evaluates_through_the_normal_pipeline(trained, tiny_model_dir):
    root, _, run_dir, run_id = trained
    evaluate = (
        "experiment=sustainableqa_factoid",
        "dataset=sustainableqa_sample",
        "dataset.limit=3",
        "model=local",
        f"model.path={tiny_model_dir}",
        "strategy=zero_context",
        "scoring.max_new_tokens=4",
    )
    base = run_job(compose_config(root, *evaluate, f"paths.output_dir={root}/eval-base"))
    by_id = run_job(compose_config(root, *evaluate, f"model.adapter={run_id}", f"paths.output_dir={root}/eval-id"))
    by_dir = run_job(compose_config(root, *evaluate, f"model.adapter={run_dir}", f"paths.output_dir={root}/eval-dir"))
    assert base["n_items"] == by_id["n_items"] == by_dir["n_items"] == 3
    outputs = {
        name: [json.loads(line)["output"] for line in (root / name / "predictions.jsonl").read_text().splitlines()]
        for name in ("eval-base", "eval-id", "eval-dir")
    }
    assert outputs["eval-id"] == outputs["eval-dir"] != outputs["eval-base"]

    from esgexp.leaderboard.board import collect_rows

    rows = collect_rows(f"sqlite:///{root}/mlruns/mlflow.db", latest_only=False)
    assert {r["task"] for r in rows} == {"qa"}  # the training run is not a leaderboard row
    tuned = [r for r in rows if r["finetuned_from"]]
    assert len(tuned) == 2 and {r["model"] for r in tuned} == {f"local+lora:{run_id[:8]}"}
    assert all(r["finetuned_from"] == "local" for r in tuned)
    assert [r["model"] for r in rows if not r["finetuned_from"]] == ["local"]


def test_adapter_on_another_base_is_refused_before_loading(trained, tmp_path, monkeypatch):
    from esgexp.models import loading

    _, _, run_dir, _ = trained
    other = tmp_path / "other"
    build_tiny_llama(other)
    config = json.loads((other / "config.json").read_text())
    config["hidden_size"] = 64
    (other / "config.json").write_text(json.dumps(config))
    monkeypatch.setattr(loading, "load_model_and_tokenizer", lambda *a, **k: pytest.fail("weights loaded"))
    cfg = compose_config(
        with_store(tmp_path),
        "experiment=sustainableqa_factoid",
        "dataset=sustainableqa_sample",
        "dataset.limit=2",
        "model=local",
        f"model.path={other}",
        f"model.adapter={run_dir}",
    )
    with pytest.raises(UserError, match="hidden_size 32 vs 64"):
        run_job(cfg)


@pytest.mark.parametrize("spec, message", [("/no/such/adapter", "no such folder"), ("0" * 32, "no such MLflow run")])
def test_unknown_adapter_is_a_clear_error(tmp_path, tiny_model_dir, spec, message):
    cfg = compose_config(
        with_store(tmp_path),
        "experiment=sustainableqa_factoid",
        "dataset=sustainableqa_sample",
        "model=local",
        f"model.path={tiny_model_dir}",
        f"model.adapter={spec}",
    )
    with pytest.raises(UserError, match=message):
        run_job(cfg)


def test_export_merges_the_adapter_into_a_standalone_model(trained, tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from esgexp.cli.export_adapter import export
    from esgexp.models.lora import attach_adapter

    root, _, run_dir, _ = trained
    overrides = ["model=local", f"model.path={tiny_model_dir}", f"model.adapter={run_dir}", f"paths.root_dir={root}"]
    cfg = composed("export_adapter", overrides=[*overrides, f"out_dir={tmp_path / 'merged'}"])
    quantised = composed("export_adapter", overrides=[*overrides, "model.load_in_4bit=true"])
    out = export(cfg)
    tokens = torch.tensor([[1, 40, 41, 42, 43]])
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    with_adapter = attach_adapter(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir), run_dir / "adapter", merge=False
    ).eval()
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    with torch.no_grad():
        expected = with_adapter(tokens).logits
        assert torch.allclose(merged(tokens).logits, expected, atol=1e-5)
        assert not torch.allclose(plain(tokens).logits, expected, atol=1e-4)
    assert (out / "tokenizer.json").is_file() and not any(p.name.startswith("adapter_") for p in out.iterdir())
    with pytest.raises(UserError, match="cannot merge into a quantised base"):
        export(quantised)
    with pytest.raises(UserError, match="exists and is not empty"):
        export(cfg)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ("model.lora.target_modules=[q_proj,attn_out]",),
            "attn_out not in model 'local'; available: .*k_proj.*q_proj",
        ),
        (("train.max_seq_len=5000",), "longer than model 'local' accepts \\(4096 positions\\)"),
        (("ckpt_path=/no/such.ckpt",), "ckpt_path=/no/such.ckpt: no such checkpoint"),
        (("ckpt_path=last",), "no earlier run of this config"),
        (("model.load_in_4bit=true",), "QLoRA\\) needs a CUDA GPU"),
        (("strategy=rag",), "not strategy=rag"),
        (("trainer=deepspeed", "trainer.accelerator=cpu"), "needs the deepspeed package"),
        (("trainer=gpu",), "no CUDA GPU is visible"),
        (("train.schedule=step",), "train.schedule must be one of"),
        (("train.pad_to_multiple_of=0",), "train.pad_to_multiple_of must be an integer >= 1, got 0"),
        (("train.monitor=val/gen_f1",), "train.monitor=val/gen_f1 train.monitor_mode=min"),
        (("train.train_limit=0",), "train.train_limit must be an integer >= 1 or null, got 0"),
        (("train.max_seq_len=8",), "no train item fits train.max_seq_len=8"),
    ],
)
def test_mistakes_fail_before_the_weights_load(tmp_path, tiny_model_dir, monkeypatch, overrides, message):
    from esgexp.models import loading

    if "deepspeed" in message and importlib.util.find_spec("deepspeed") is not None:
        pytest.skip("deepspeed is installed here")
    monkeypatch.setattr(loading, "load_model_and_tokenizer", lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(UserError, match=message):
        run_job(finetune_cfg(tmp_path, tiny_model_dir, *overrides))


def test_empty_train_split_is_a_clear_error(tmp_path, tiny_model_dir):
    from esgexp.core.config import BUNDLED_DIR

    data = tmp_path / "data"
    data.mkdir()
    for split in ("validation", "test"):
        (data / f"{split}.json").write_text((BUNDLED_DIR / "sustainableqa" / f"{split}.json").read_text())
    (data / "train.json").write_text(json.dumps({"all_chunks_qas": [], "all_table_qas": []}))
    with pytest.raises(UserError, match=r"the train split is empty or unusable: .*train.json"):
        run_job(finetune_cfg(tmp_path, tiny_model_dir, "dataset=sustainableqa", f"dataset.path={data}"))


def test_long_passages_are_cut_and_counted(tmp_path, tiny_model_dir):
    metrics = run_job(
        finetune_cfg(
            tmp_path, tiny_model_dir, "train.max_seq_len=200", "trainer.max_steps=1", "train.val_generate_items=0"
        )
    )
    report = json.loads((tmp_path / "run" / "train_report.json").read_text())
    assert metrics["train/n_truncated"] == len(report["train"]["truncated"]) > 0
    assert metrics["train/n_dropped"] == len(report["train"]["dropped"]) > 0
    assert metrics["train/n_examples"] == metrics["train/n_items"] - metrics["train/n_dropped"]


def test_packing_trains_on_fewer_rows(tmp_path, tiny_model_dir):
    metrics = run_job(
        finetune_cfg(
            tmp_path, tiny_model_dir, "train.packing=true", "trainer.max_steps=2", "train.val_generate_items=0"
        )
    )
    assert metrics["train/steps"] == 2 and metrics["val/loss"] > 0


def test_ddp_sweep_on_two_cpu_processes(tmp_path, clean_env, tiny_model_dir):
    """A sweep of two DDP jobs: each job's two ranks end with the same adapter, only rank 0 logs."""
    args = [
        *FT,
        f"model.path={tiny_model_dir}",
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "trainer.max_steps=2",
        "train.val_every_n_steps=2",
        "train.val_generate_items=1",
        "trainer.progress_bar=false",
        "model.lora.r=2,4",
        f"paths.root_dir={tmp_path}",
    ]
    # The launching process (rank 0 of each job) is this one; Lightning starts each job's rank 1 as
    # `python -m esgexp.__main__ ...` (its argv), a process of its own.
    done = run_cli("esgexp", "-m", *args, cwd=with_store(tmp_path), env=clean_env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = sorted(p.parent for p in (tmp_path / "runs" / "finetune_sustainableqa").glob("*/*/*/metrics.json"))
    assert len(jobs) == 2
    for job in jobs:
        assert json.loads((job / "metrics.json").read_text())["ddp/ranks_agree"] == 1
        assert (job / "train_ddp_process_1.log").is_file() and (job / "adapter" / "adapter_model.safetensors").is_file()
    runs = mlflow_client(tmp_path).search_runs(experiment_ids=["1"])
    assert sorted(r.data.params["model.lora.r"] for r in runs) == ["2", "4"]  # one run per job, none from rank 1


@pytest.mark.parametrize(
    "overrides",
    [
        ("trainer.accumulate_grad_batches=2", "train.gradient_checkpointing=true"),
        ("trainer.precision=bf16-mixed", "train.schedule=linear", "train.weight_decay=0.1"),
        ("train.early_stopping_patience=1", "train.monitor=val/gen_f1", "train.monitor_mode=max", "train.packing=true"),
    ],
)
def test_training_knobs_run(tmp_path, tiny_model_dir, overrides):
    metrics = run_job(
        finetune_cfg(tmp_path, tiny_model_dir, "trainer.max_steps=3", "train.val_every_n_steps=1", *overrides)
    )
    assert 1 <= metrics["train/steps"] <= 3 and metrics["val/loss"] > 0
    saved = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    assert saved["global_step"] == metrics["train/steps"]


def fake_cpu(monkeypatch, capability: str, features: tuple[str, ...] = (), onednn_bf16: bool = True) -> None:
    """Make torch report this CPU capability, these CPU features and oneDNN bf16 support."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: dict.fromkeys(features, True))
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: onednn_bf16)


@pytest.mark.parametrize(
    "capability, features, onednn_bf16, fast, reason",
    [
        ("AVX2", (), True, False, "CPU capability AVX2 has no native bf16"),
        ("AVX512", (), True, False, "CPU capability AVX512 has no native bf16"),  # AVX512 without BF16: emulated
        ("AVX512", ("avx512_bf16",), True, True, "CPU capability AVX512 with native bf16 (avx512_bf16)"),
        (
            "AVX512",
            ("amx_bf16", "avx512_bf16"),
            True,
            True,
            "CPU capability AVX512 with native bf16 (amx_bf16, avx512_bf16)",
        ),
        ("AVX2", ("avx512_bf16",), True, False, "CPU capability AVX2 has no native bf16"),  # ATEN_CPU_CAPABILITY=avx2
        ("AVX512", ("avx512_bf16",), False, False, "CPU capability AVX512 has no native bf16"),  # no oneDNN bf16
    ],
)
@pytest.mark.numerics
def test_cpu_has_fast_bf16(monkeypatch, capability, features, onednn_bf16, fast, reason):
    from esgexp.models.loading import cpu_has_fast_bf16

    fake_cpu(monkeypatch, capability, features, onednn_bf16)
    assert cpu_has_fast_bf16() == (fast, reason)


@pytest.mark.parametrize(
    "capability, features, expected, message",
    [
        ("AVX2", (), "32-true", "precision auto -> 32-true: CPU capability AVX2 has no native bf16"),
        (
            "AVX512",
            ("amx_bf16",),
            "bf16-mixed",
            "precision auto -> bf16-mixed: CPU capability AVX512 with native bf16 (amx_bf16)",
        ),
    ],
)
@pytest.mark.numerics
def test_precision_auto_on_the_cpu_follows_native_bf16(
    make_cfg, monkeypatch, caplog, capability, features, expected, message
):
    """auto is bf16-mixed only on a CPU with native bf16, and says why; model.dtype=auto stays float32 for inference."""
    from esgexp.models.loading import torch_dtype
    from esgexp.training.trainer import training_precision

    fake_cpu(monkeypatch, capability, features)
    with caplog.at_level("INFO", logger="esgexp"):
        assert training_precision(make_cfg().trainer, on_gpu=False) == expected
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name.startswith("esgexp")] == [("INFO", message)]
    assert torch_dtype("auto", on_gpu=False) == torch.float32
    assert training_precision(make_cfg().trainer, on_gpu=True) == "16-mixed"


@pytest.mark.numerics
def test_explicit_bf16_on_a_cpu_without_native_bf16_warns(make_cfg, monkeypatch, caplog):
    from esgexp.training.trainer import training_precision

    fake_cpu(monkeypatch, "AVX2")
    with caplog.at_level("WARNING", logger="esgexp"):
        assert training_precision(make_cfg("trainer.precision=bf16-mixed").trainer, on_gpu=False) == "bf16-mixed"
    assert (
        "bf16 is emulated on this CPU and much slower than 32-true (CPU capability AVX2 has no native bf16)"
        in caplog.text
    )
    caplog.clear()
    fake_cpu(monkeypatch, "AVX512", ("avx512_bf16",))
    with caplog.at_level("WARNING", logger="esgexp"):
        assert training_precision(make_cfg("trainer.precision=bf16-mixed").trainer, on_gpu=False) == "bf16-mixed"
        assert training_precision(make_cfg("trainer.precision=32-true").trainer, on_gpu=False) == "32-true"
    assert not caplog.records


@pytest.mark.numerics
def test_16_mixed_on_the_cpu_says_it_runs_bf16(make_cfg, monkeypatch, caplog):
    from esgexp.training.trainer import training_precision

    fake_cpu(monkeypatch, "AVX512", ("avx512_bf16",))
    cfg = make_cfg("trainer.precision=16-mixed")
    with caplog.at_level("WARNING", logger="esgexp"):
        assert training_precision(cfg.trainer, on_gpu=False) == "16-mixed"
    assert "runs it as bf16-mixed" in caplog.text and "emulated" not in caplog.text


def test_fsdp_wraps_each_decoder_layer(make_cfg, tiny_model_dir):
    from lightning.pytorch.strategies import FSDPStrategy
    from transformers import AutoModelForCausalLM
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    from esgexp.training.trainer import lightning_strategy

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    strategy = lightning_strategy(make_cfg("trainer=fsdp").trainer, model)
    assert isinstance(strategy, FSDPStrategy) and strategy.kwargs["use_orig_params"] is True
    assert strategy.kwargs["auto_wrap_policy"]._module_classes == {LlamaDecoderLayer}
    assert lightning_strategy(make_cfg("trainer=ddp").trainer, model) == "ddp"


def test_any_lightning_trainer_argument_goes_through_trainer_lightning(tmp_path, tiny_model_dir):
    """``+trainer.lightning.NAME=VALUE`` reaches Lightning's Trainer as it is (a new Trainer setting needs no
    code); a name the Trainer does not take, or one esgexp sets from its own key, stops before any weights load."""
    from esgexp.training.trainer import lightning_arguments

    assert lightning_arguments(finetune_cfg(tmp_path / "d", tiny_model_dir).trainer) == {}  # the default: none
    cfg = finetune_cfg(
        tmp_path, tiny_model_dir, "+trainer.lightning.limit_val_batches=0.5", "+trainer.lightning.deterministic=true"
    )
    assert lightning_arguments(cfg.trainer) == {"limit_val_batches": 0.5, "deterministic": True}
    metrics = run_job(cfg)
    assert metrics["train/steps"] >= 1
    with pytest.raises(
        UserError,
        match=r"trainer.lightning.limit_val_batch is not an argument .*did you mean trainer.lightning.limit_val_batches",
    ):
        run_job(finetune_cfg(tmp_path / "b", tiny_model_dir, "+trainer.lightning.limit_val_batch=0.5"))
    with pytest.raises(UserError, match=r"trainer.lightning.max_steps: esgexp sets max_steps itself"):
        run_job(finetune_cfg(tmp_path / "c", tiny_model_dir, "+trainer.lightning.max_steps=3"))
