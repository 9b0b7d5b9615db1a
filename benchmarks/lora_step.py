"""LoRA training-step throughput: our Lightning module (esgexp.training.lora_module) vs plain PyTorch + PEFT.

Both sides train the same peft-wrapped model (SmolLM2-135M-Instruct by default, fp32 weights, the
project's LoRA config r=16, alpha=32, dropout 0.05, all-linear; seeded, so the same adapter init and
dropout masks) on the same synthetic batches in the same order, with AdamW and the project's LR
schedule (conf/train/lora.yaml: lr 2e-4, warm-up, cosine) and gradient clipping at 1.0 (conf/trainer).

- ours: ``LoraFineTuner`` + ``SFTDataModule`` under a plain ``L.Trainer`` with make_trainer's settings
  (precision 32-true or bf16-mixed, clipping, log_every_n_steps) but not make_trainer itself, which
  always adds checkpoints (best and last) and a validation at the end: here logger=False, no
  checkpointing, limit_val_batches=0. Step time: the module's own ``train_seconds`` (on_train_batch_start
  to on_train_batch_end: forward, self.log, backward, clipping, optimizer and scheduler step).
- plain: a loop over a DataLoader (the same DistributedSampler order, the same collate): zero_grad,
  forward with use_cache=False like our module (under ``torch.autocast("cpu", dtype=torch.bfloat16)``
  for bf16), backward, clip_grad_norm_, optimizer and scheduler step, timed from batch start to the end.

Rows: seeded random token ids over the tokenizer's vocabulary, batch x seq-len, the first half of each
row masked as prompt (labels -100). --warmup steps untimed, then --steps timed; tok/s = input tokens /
summed step seconds; "loop" tok/s times whole iterations (batch start to next batch start: also data
loading and Lightning's loop). Each (side, dtype) runs in its own subprocess (peak RSS = ru_maxrss, and
its increase over the RSS right after loading the model), --repeats times, the sides alternating which
goes first; each side's best run (max tok/s) is reported. Torch threads: torch's default on both
sides, or --threads N on both. Run from the repository root:

    .venv/bin/python benchmarks/lora_step.py                         # fp32 and bf16, 3 repeats
    .venv/bin/python benchmarks/lora_step.py --threads 1             # on a machine shared with other jobs
    .venv/bin/python benchmarks/lora_step.py --model-path DIR        # any local causal LM

Prints a Markdown table and writes benchmarks/lora_step.json (--json PATH). Not a test.

--plan-check MODEL[:LAYERS] ...: the memory plan (esgexp.memory.plan, as dry_run=true prints it) beside the
measured peak of LoRA steps with the plain loop: smollm2-135m (the bundled weights; with :LAYERS a random
model of its shape), llama-3.2-1b or llama-3.1-8b (random weights built from the transcribed config, no
download), optionally with only LAYERS decoder layers. Peak: ru_maxrss on the CPU (the whole process),
torch.cuda.max_memory_allocated on a GPU (--device cuda). On the CPU a shape whose plan exceeds --max-gib
(default 14) is refused, not run. Writes benchmarks/lora_plan.json (--json PATH):

    .venv/bin/python benchmarks/lora_step.py --plan-check smollm2-135m --batch-size 4 --seq-len 256 --no-checkpointing
    .venv/bin/python benchmarks/lora_step.py --plan-check llama-3.1-8b llama-3.1-8b:16 --plan-dtype bfloat16 --batch-size 1 --seq-len 32
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from functools import partial
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

DEFAULT_JSON = ROOT / "benchmarks" / "lora_step.json"
SIDES = ("ours", "plain")
PRECISION = {"float32": "32-true", "bfloat16": "bf16-mixed"}
TARGET = 0.90  # ours/plain tok/s: at most 10% overhead
WORKER_FLAGS = ("model_path", "batch_size", "seq_len", "steps", "warmup", "seed", "threads")
PLAN_MODELS = ("smollm2-135m", "llama-3.2-1b", "llama-3.1-8b")
PLAN_JSON = ROOT / "benchmarks" / "lora_plan.json"


def project_config():
    """The composed fine-tuning config (LoRA shape, optimiser, clipping) with the default model."""
    from hydra import compose, initialize_config_dir

    import esgexp  # noqa: F401  (offline hub, resolvers)
    from esgexp.core.config import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(
            "config", overrides=["experiment=finetune_sustainableqa", "model=smollm2-135m", "paths.output_dir=."]
        )


def rss_mib() -> float:
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) / 1024


def usage() -> tuple[float, float, float]:
    """Minor page faults, user and system CPU seconds of this process so far."""
    now = resource.getrusage(resource.RUSAGE_SELF)
    return now.ru_minflt, now.ru_utime, now.ru_stime


def make_rows(vocab: int, n_rows: int, seq_len: int, seed: int):
    from esgexp.training.sft_data import IGNORE_INDEX, Example

    rng = random.Random(seed)
    rows = [[rng.randrange(vocab) for _ in range(seq_len)] for _ in range(n_rows)]
    return [Example(ids, [IGNORE_INDEX] * (seq_len // 2) + ids[seq_len // 2 :]) for ids in rows]


def run_ours(model, rows, cfg, args, dtype: str) -> dict:
    import lightning as L
    import torch

    from esgexp.training.lora_module import LoraFineTuner, OptimSettings
    from esgexp.training.sft_data import SFTDataModule

    class Recorder(L.Callback):  # Lightning calls its hooks just before the module's
        def __init__(self):
            self.out, self.counter = {"marks": [], "usage": [], "losses": [], "tokens": []}, []

        def on_train_start(self, trainer, module):
            torch.manual_seed(args.seed)  # the same dropout masks as the plain loop

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            self.out["marks"].append(time.perf_counter())
            self.out["usage"].append(usage())
            self.counter.append(module.train_seconds)

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self.out["losses"].append(float(outputs["loss"]))
            self.out["tokens"].append(batch["n_tokens"])

        def on_train_end(self, trainer, module):
            self.out["usage"].append(usage())
            self.counter.append(module.train_seconds)

    train = cfg.train
    module = LoraFineTuner(
        model, OptimSettings(float(train.lr), float(train.weight_decay), int(train.warmup_steps), str(train.schedule))
    )
    recorder = Recorder()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            precision=PRECISION[dtype],
            max_steps=args.warmup + args.steps,
            gradient_clip_val=float(cfg.trainer.gradient_clip_val),
            log_every_n_steps=int(cfg.trainer.log_every_n_steps),
            limit_val_batches=0,
            num_sanity_val_steps=0,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[recorder],
            default_root_dir=tmp,
        )
        trainer.fit(module, datamodule=SFTDataModule(rows, [], args.batch_size, args.pad_id, args.seed))
    seconds = [b - a for a, b in zip(recorder.counter, recorder.counter[1:])]
    return recorder.out | {"seconds": seconds}


def run_plain(model, rows, cfg, args, dtype: str, autocast_to: str | None = None) -> dict:
    """The plain loop on the model's device, under autocast to ``autocast_to`` (bfloat16 when dtype is)."""
    import torch

    from esgexp.training.lora_module import lr_factor
    from esgexp.training.sft_data import collate

    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in trainable if p.ndim >= 2], "weight_decay": float(cfg.train.weight_decay)},
        {"params": [p for p in trainable if p.ndim < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW([g for g in groups if g["params"]], lr=float(cfg.train.lr))
    factor = partial(
        lr_factor, warmup=int(cfg.train.warmup_steps), total=args.warmup + args.steps, schedule=str(cfg.train.schedule)
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    sampler = torch.utils.data.DistributedSampler(rows, num_replicas=1, rank=0, shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(
        rows, batch_size=args.batch_size, sampler=sampler, collate_fn=partial(collate, pad_id=args.pad_id)
    )
    device = next(model.parameters()).device
    autocast_to = autocast_to or ("bfloat16" if dtype == "bfloat16" else None)
    autocast = partial(torch.autocast, device.type, dtype=getattr(torch, autocast_to)) if autocast_to else nullcontext
    clip = float(cfg.trainer.gradient_clip_val)

    def step(batch) -> float:  # one optimiser step; its loss dies with it, as in Lightning's closure
        optimizer.zero_grad()
        with autocast():
            loss = model(**{k: v.to(device) for k, v in batch.items() if k != "n_tokens"}, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, clip)
        optimizer.step()
        scheduler.step()
        return float(loss)

    out = {"seconds": [], "marks": [], "usage": [], "losses": [], "tokens": []}
    torch.manual_seed(args.seed)
    for batch in loader:
        start = time.perf_counter()
        out["marks"].append(start)
        out["usage"].append(usage())
        out["losses"].append(step(batch))
        out["tokens"].append(batch["n_tokens"])
        out["seconds"].append(time.perf_counter() - start)
    out["usage"].append(usage())
    return out


def worker(args) -> dict:
    """One (side, dtype) run in this process."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from esgexp.models.inference import quiet_lightning
    from esgexp.models.lora import wrap_for_training

    quiet_lightning()
    if args.threads:
        torch.set_num_threads(args.threads)
    side, dtype = args.worker
    cfg = project_config()
    tokenizer = AutoTokenizer.from_pretrained(args.model_path)
    args.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    model = AutoModelForCausalLM.from_pretrained(args.model_path, dtype=torch.float32)
    loaded_mib = rss_mib()
    model.config.pad_token_id = args.pad_id
    torch.manual_seed(args.seed)  # the same LoRA init on both sides
    model = wrap_for_training(model, cfg.model.lora, gradient_checkpointing=False, quantised=False)
    rows = make_rows(len(tokenizer), args.batch_size * (args.warmup + args.steps), args.seq_len, args.seed)
    run = (run_ours if side == "ours" else run_plain)(model, rows, cfg, args, dtype)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    seconds, tokens = run["seconds"][args.warmup :], run["tokens"][args.warmup :]
    loops = [b - a for a, b in zip(run["marks"][args.warmup :], run["marks"][args.warmup + 1 :])]
    faults, user, system = (b - a for a, b in zip(run["usage"][args.warmup], run["usage"][-1]))  # over the timed steps
    return {
        "side": side,
        "dtype": dtype,
        "steps": len(seconds),
        "tokens": sum(tokens),
        "tok_per_s": sum(tokens) / sum(seconds),
        "median_step_s": statistics.median(seconds),
        "loop_tok_per_s": sum(tokens[: len(loops)]) / sum(loops),
        "step_seconds": [round(s, 4) for s in seconds],
        "losses": [round(x, 5) for x in run["losses"]],
        "rss_after_load_mib": loaded_mib,
        "peak_rss_mib": peak_mib,
        "peak_increase_mib": peak_mib - loaded_mib,
        "minor_faults_per_step": faults / len(seconds),
        "user_cpu_s": user,
        "system_cpu_s": system,
        "torch_threads": torch.get_num_threads(),
    }


def spawn(side: str, dtype: str, args) -> dict:
    flags = [item for name in WORKER_FLAGS for item in (f"--{name.replace('_', '-')}", str(getattr(args, name)))]
    done = subprocess.run(
        [sys.executable, __file__, "--worker", side, dtype, *flags], capture_output=True, text=True, cwd=ROOT
    )
    if done.returncode != 0:
        sys.exit(f"worker {side} {dtype} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarise(runs: list[dict], dtypes: list[str]) -> list[dict]:
    """Per dtype: each side's best run (max tok/s), its largest peak RSS over the repeats, the ratios."""
    rows = []
    for dtype in dtypes:
        row = {"dtype": dtype}
        for side in SIDES:
            mine = [r for r in runs if r["side"] == side and r["dtype"] == dtype]
            best = max(mine, key=lambda r: r["tok_per_s"])
            row |= {
                f"{side}_{key}": best[key]
                for key in ("tok_per_s", "loop_tok_per_s", "median_step_s", "system_cpu_s", "losses")
            }
            row |= {f"{side}_{key}": max(r[key] for r in mine) for key in ("peak_rss_mib", "peak_increase_mib")}
            row[f"{side}_all_tok_per_s"] = [round(r["tok_per_s"], 1) for r in mine]
            row[f"{side}_fastest_step_s"] = min(min(r["step_seconds"]) for r in mine)  # the least disturbed step
        row["ratio"] = row["ours_tok_per_s"] / row["plain_tok_per_s"]
        row["loop_ratio"] = row["ours_loop_tok_per_s"] / row["plain_loop_tok_per_s"]
        row["max_loss_diff"] = max(abs(a - b) for a, b in zip(row.pop("ours_losses"), row.pop("plain_losses")))
        row["meets_target"] = row["ratio"] >= TARGET
        rows.append(row)
    return rows


def table(rows: list[dict], machine: dict) -> str:
    """The Markdown table, under a line naming the CPU, torch's capability on it and whether bf16 is native."""
    native = "yes" if machine["native_bf16"] else "no"
    lines = [
        f"CPU: {machine['cpu_model']}, capability {machine['cpu_capability']}, native bf16: {native}",
        "",
        "| dtype | ours tok/s | plain tok/s | ratio (ours/plain) | ours peak MiB | plain peak MiB | meets 10% target |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dtype']} | {r['ours_tok_per_s']:,.1f} | {r['plain_tok_per_s']:,.1f} | {r['ratio']:.3f} | "
            f"{r['ours_peak_rss_mib']:,.0f} | {r['plain_peak_rss_mib']:,.0f} | {'yes' if r['meets_target'] else 'no'} |"
        )
    return "\n".join(lines)


def machine_info() -> dict:
    """Where and with what the numbers were taken, torch's CPU capability and whether bf16 is native on it."""
    import torch

    from esgexp.models.loading import cpu_has_fast_bf16

    versions = {
        package: metadata.version(package) for package in ("torch", "transformers", "peft", "lightning", "esgexp")
    }
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []
    cpu = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), platform.processor()
    )
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    native_bf16, reason = cpu_has_fast_bf16()
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": native_bf16,
        "native_bf16_reason": reason,
        "memory_gib": round(memory, 1),
        "load_average_at_start": os.getloadavg(),
        "versions": versions,
    }


def plan_of(spec: str, args):
    """The model's shape (layers overridden by ``NAME:LAYERS``), the run's TrainSetup and its plan."""
    from esgexp.memory.plan import DTYPE_BYTES, Shape, TrainSetup, train_plan
    from esgexp.models.architectures import ARCHITECTURES

    name, _, layers = spec.partition(":")
    if name not in PLAN_MODELS:
        sys.exit(f"--plan-check {spec}: one of {', '.join(PLAN_MODELS)}, optionally :LAYERS")
    config = dict(ARCHITECTURES[name]) | ({"num_hidden_layers": int(layers)} if layers else {})
    lora = project_config().model.lora
    setup = TrainSetup(
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        checkpointing=args.checkpointing,
        weight_bytes=DTYPE_BYTES[args.plan_dtype],
        mixed=args.autocast != "none",
        on_gpu=args.device == "cuda",
        r=int(lora.r),
        targets=str(lora.target_modules),
        dropout=float(lora.dropout),
    )
    shape = Shape.from_config(config)
    return config, shape, setup, train_plan(shape, setup)


def random_model(config, dtype, device: str):
    """A Llama of ``config`` with random weights in ``dtype`` on ``device``, made in seconds: built on the
    meta device (no fp32 transient, no slow init), then every matrix filled from one seeded block of
    N(0, 0.02) values and every norm weight set to 1."""
    import torch
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM._from_config(config, dtype=dtype)
    model.to_empty(device=device)
    model.tie_weights()
    block = torch.randn(1 << 20, generator=torch.Generator().manual_seed(0)).mul_(0.02).to(dtype=dtype, device=device)
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim == 1:
                param.fill_(1.0)
                continue
            flat = param.view(-1)
            for start in range(0, flat.numel(), block.numel()):
                count = min(block.numel(), flat.numel() - start)
                flat[start : start + count].copy_(block[:count])
        with torch.device(device):  # its inv_freq was computed on the meta device
            model.model.rotary_emb = type(model.model.rotary_emb)(config=model.config)
    return model


def plan_worker(args) -> dict:
    """Build (or load) the model, wrap it with LoRA, run the steps; memory at each stage and the peak."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from esgexp.models.inference import quiet_lightning
    from esgexp.models.lora import wrap_for_training

    quiet_lightning()
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
    imported_mib = rss_mib()
    cfg = project_config()
    config, _, _, _ = plan_of(args.plan_worker, args)
    dtype = getattr(torch, args.plan_dtype)
    started = time.perf_counter()
    if ":" not in args.plan_worker and args.plan_worker == "smollm2-135m":
        from esgexp.models.loading import resolve_model_dir

        source = resolve_model_dir(cfg.model, cfg.paths.cache_dir)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype).to(args.device)
        origin = f"bundled weights ({source})"
    else:
        fields = {k: v for k, v in config.items() if k not in ("model_type", "torch_dtype")}
        model = random_model(LlamaConfig(**fields, pad_token_id=0), dtype, args.device)
        origin = "random weights from the transcribed config"
    load_seconds = time.perf_counter() - started
    model.config.pad_token_id = model.config.pad_token_id or 0
    args.pad_id = model.config.pad_token_id
    loaded_mib = rss_mib()
    print(f"loaded ({origin}) in {load_seconds:.0f} s: RSS {loaded_mib:.0f} MiB", file=sys.stderr, flush=True)
    if cuda:
        torch.cuda.synchronize()
        loaded_cuda = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(args.seed)
    model = wrap_for_training(model, cfg.model.lora, args.checkpointing, quantised=False)
    rows = make_rows(model.config.vocab_size, args.batch_size * (args.warmup + args.steps), args.seq_len, args.seed)
    run = run_plain(model, rows, cfg, args, "float32", None if args.autocast == "none" else args.autocast)
    out = {
        "origin": origin,
        "load_seconds": load_seconds,
        "step_seconds": [round(x, 2) for x in run["seconds"]],
        "losses": [round(x, 4) for x in run["losses"]],
        "rss_after_imports_mib": imported_mib,
        "rss_after_load_mib": loaded_mib,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "torch_threads": torch.get_num_threads(),
    }
    if cuda:
        out |= {
            "cuda_after_load_mib": loaded_cuda / 2**20,
            "cuda_peak_allocated_mib": torch.cuda.max_memory_allocated() / 2**20,
            "cuda_peak_reserved_mib": torch.cuda.max_memory_reserved() / 2**20,
            "gpu": torch.cuda.get_device_name(),
        }
    return out


def plan_check(args) -> None:
    """Per model: plan, then (unless refused) the measured run in its own process; a table and the JSON."""
    from esgexp.memory.plan import GiB

    kept = json.loads(args.json.read_text())["results"] if args.json.is_file() else []
    results = []
    for spec in args.plan_check:
        _, shape, setup, plan = plan_of(spec, args)
        entry = {
            "model": spec,
            "layers": shape.layers,
            "parameters": shape.parameters(),
            "dtype": args.plan_dtype,
            "autocast": args.autocast,
            "device": args.device,
            "setup": vars(setup),
            "plan": plan.as_dict(),
        }
        print(f"{spec}: plan {plan.total / GiB:.2f} GiB", file=sys.stderr)
        if args.plan_only:
            entry["refused"] = "not run (--plan-only)"
        elif args.device == "cpu" and plan.total > args.max_gib * GiB:
            entry["refused"] = f"plan {plan.total / GiB:.2f} GiB > --max-gib {args.max_gib}"
            print(f"  refused: {entry['refused']}", file=sys.stderr)
        else:
            flags = ["--plan-worker", spec, "--device", args.device, "--plan-dtype", args.plan_dtype]
            flags += ["--autocast", args.autocast, "--checkpointing" if args.checkpointing else "--no-checkpointing"]
            flags += [
                item for name in WORKER_FLAGS[1:] for item in (f"--{name.replace('_', '-')}", str(getattr(args, name)))
            ]
            try:
                done = subprocess.run(
                    [sys.executable, __file__, *flags],
                    capture_output=True,
                    text=True,
                    cwd=ROOT,
                    timeout=args.worker_timeout,
                )
            except subprocess.TimeoutExpired as expired:
                partial = expired.stderr.decode() if isinstance(expired.stderr, bytes) else expired.stderr or ""
                done = subprocess.CompletedProcess(
                    expired.cmd, -9, "", f"timed out after {args.worker_timeout} s\n{partial}"
                )
            if done.returncode != 0:
                entry["error"] = done.stderr[-3000:]
                print(f"  failed: {done.stderr[-1500:]}", file=sys.stderr)
            else:
                entry["measured"] = json.loads(done.stdout.strip().splitlines()[-1])
        entry["command"], entry["date"] = sys.argv[1:], datetime.datetime.now(datetime.timezone.utc).isoformat()
        results.append(entry)
        # earlier runs of other settings stay in the file; a rerun of the same settings replaces its entry
        same = {run_key(r) for r in results}
        merged = [r for r in kept if run_key(r) not in same] + results
        args.json.write_text(json.dumps({"machine": machine_info(), "results": merged}, indent=2) + "\n")
    print(plan_table(results))
    print(f"\nwritten: {args.json}")


def run_key(entry: dict) -> str:
    return json.dumps([entry[k] for k in ("model", "dtype", "autocast", "device", "setup")], sort_keys=True)


def plan_table(results: list[dict]) -> str:
    lines = [
        "| model | layers | params | dtype | batch x seq | checkpointing | plan GiB | measured peak GiB | measured/plan | plan weights+runtime GiB | measured after load GiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        plan, setup, m = r["plan"], r["setup"], r.get("measured")
        fixed = sum(line["gib"] for line in plan["lines"] if line["name"] in ("weights", "runtime"))
        if m is None:
            peak = after = ratio = r.get("refused") or "failed"
        elif r["device"] == "cuda":
            peak, after = m["cuda_peak_allocated_mib"] / 1024, m["cuda_after_load_mib"] / 1024
            ratio, fixed = f"{peak / (plan['total_gib'] - 1.0):.3f} (without the 1 GiB runtime line)", fixed - 1.0
            peak, after = f"{peak:.2f}", f"{after:.2f}"
        else:
            peak, after = m["peak_rss_mib"] / 1024, m["rss_after_load_mib"] / 1024
            ratio, peak, after = f"{peak / plan['total_gib']:.3f}", f"{peak:.2f}", f"{after:.2f}"
        lines.append(
            f"| {r['model']} | {r['layers']} | {r['parameters'] / 1e9:.2f} B | {r['dtype']}"
            f"{'' if r['autocast'] == 'none' else ' + autocast ' + r['autocast']} | {setup['batch_size']} x {setup['seq_len']} "
            f"| {'yes' if setup['checkpointing'] else 'no'} | {plan['total_gib']:.2f} | {peak} | {ratio} | {fixed:.2f} | {after} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", choices=tuple(PRECISION), default=list(PRECISION))
    parser.add_argument("--model-path", help="a local causal LM folder (default: the project's smollm2-135m)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs per (side, dtype), the order of the sides alternating"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads on both sides (default 0: torch's own)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--worker", nargs=2, metavar=("SIDE", "DTYPE"), help=argparse.SUPPRESS)
    parser.add_argument("--plan-check", nargs="+", metavar="MODEL[:LAYERS]", help="plan beside measured peak memory")
    parser.add_argument("--plan-dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    parser.add_argument("--autocast", choices=("none", "bfloat16", "float16"), default="none")
    parser.add_argument("--checkpointing", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--max-gib", type=float, default=14.0, help="--plan-check on the CPU: refuse larger plans")
    parser.add_argument("--plan-only", action="store_true", help="--plan-check: record the plans, run nothing")
    parser.add_argument("--worker-timeout", type=float, default=None, help="--plan-check: stop a run after this many s")
    parser.add_argument("--plan-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    if args.plan_worker:
        print(json.dumps(plan_worker(args)))
        return
    if args.plan_check:
        if args.json == DEFAULT_JSON:
            args.json = PLAN_JSON
        plan_check(args)
        return

    from omegaconf import OmegaConf

    from esgexp.models.loading import resolve_model_dir

    started = datetime.datetime.now(datetime.timezone.utc)
    machine = machine_info()
    cfg = project_config()
    args.model_path = args.model_path or resolve_model_dir(cfg.model, cfg.paths.cache_dir)
    runs = []
    for repeat in range(args.repeats):
        for dtype in args.dtypes:
            for side in SIDES if repeat % 2 == 0 else SIDES[::-1]:
                runs.append(spawn(side, dtype, args) | {"repeat": repeat})
                r = runs[-1]
                print(
                    f"{dtype} {side} #{repeat}: {r['tok_per_s']:,.1f} tok/s (loop {r['loop_tok_per_s']:,.1f}), peak {r['peak_rss_mib']:,.0f} MiB, "
                    f"system CPU {r['system_cpu_s']:.1f} s, {r['minor_faults_per_step']:,.0f} page faults/step",
                    file=sys.stderr,
                )
    rows = summarise(runs, args.dtypes)
    machine |= {"load_average_at_end": os.getloadavg(), "torch_threads": runs[0]["torch_threads"]}
    settings = {name: getattr(args, name) for name in (*WORKER_FLAGS, "repeats")}
    settings |= {
        "lora": OmegaConf.to_container(cfg.model.lora),
        "train": {k: cfg.train[k] for k in ("lr", "weight_decay", "warmup_steps", "schedule")},
        "gradient_clip_val": cfg.trainer.gradient_clip_val,
        "log_every_n_steps": cfg.trainer.log_every_n_steps,
    }
    report = {
        "date": started.isoformat(timespec="seconds"),
        "command": sys.argv[1:],
        "settings": settings,
        "machine": machine,
        "target_ratio": TARGET,
        "summary": rows,
        "runs": runs,
    }
    args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(table(rows, machine))
    print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
