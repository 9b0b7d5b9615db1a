"""``dry_run=true``: a job's memory plan per device, printed before anything loads, then exit 0.

In: the composed config of a fine-tuning (task=finetune) or evaluation (task=mcq|qa) job. Out: the plan
on stdout and in ``memory_plan.json`` in the run folder; no weights, no torch, no data, no MLflow run
(a plan is not a result, so nothing reaches the tracking server or the leaderboard). For a model with
prices (``model.price``: an API model) the questions are read to price the job, live and as a batch. The model's shape
comes from its config.json (model.path, or the Hugging Face cache for model.hub_id), else from the
transcribed table esgexp/models/architectures.py, else only its parameter count (model.size_b).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from esgexp.backends import backend_class
from esgexp.core.outputs import write_json
from esgexp.errors import UserError
from esgexp.memory.plan import (
    DTYPE_BYTES,
    GiB,
    Plan,
    ServeSetup,
    Shape,
    TrainSetup,
    knobs,
    serve_fits,
    serve_knobs,
    serve_plan,
    train_plan,
)
from esgexp.tasks.kinds import KINDS, kind_of

log = logging.getLogger(__name__)

A100_SIZES_GB = (40, 80)  # the design card's GPUs, planned for when no memory is given or visible


def dry_run(cfg: DictConfig) -> dict:
    """Check the settings, print the plan with its verdict and knobs, write memory_plan.json; return it."""
    from esgexp.jobs.settings import check_settings

    check_settings(cfg)
    kind = kind_of(cfg.task)
    if not (kind.trains or kind.prompts):
        planned = "|".join(name for name, other in KINDS.items() if other.trains or other.prompts)
        raise UserError(
            f"dry_run=true plans the memory of a job that loads a model (task={planned}), not task={cfg.task}"
        )
    shape, source = find_shape(cfg.model, cfg.paths.cache_dir)
    finetune = kind.trains
    if finetune:
        from esgexp.tasks.finetune import check_groups

        check_groups(cfg)
    engine = gpu_engine(cfg) is not None and not finetune
    on_gpu = engine or uses_gpu(str(cfg.trainer.accelerator))
    devices = device_sizes(cfg, on_gpu)
    report = {"model": cfg.model.name, "task": cfg.task, "shape_source": source, "on_gpu": on_gpu, "plans": []}
    lines = [f"memory plan: {cfg.model.name}, task={cfg.task} (shape: {source}); nothing was loaded"]
    if shape is None and cfg.model.get("price") and not cfg.model.get("size_b") and not finetune:
        lines.append(f"memory: none here, the model is served by its API ({cfg.backend.get('base_url')})")
    elif shape is None:
        lines += weights_only(cfg, on_gpu, devices, report)
    elif finetune:
        lines += plan_training(cfg, shape, on_gpu, devices, report)
    else:
        lines += plan_serving(cfg, shape, on_gpu, devices, report)
    if (cfg.model.get("price") or cfg.get("judge")) and not finetune:
        lines += price_lines(cfg, report)
    print("\n".join(lines))
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_json(output_dir / "memory_plan.json", report)
    print(f"plan written: {output_dir / 'memory_plan.json'} (dry run: no MLflow run)")
    return report


def price_lines(cfg: DictConfig, report: dict) -> list[str]:
    """The job's requests and cost at the model's prices, live and (with ``price.batch_discount``) as a batch;
    with ``judge=...`` the judge's too."""
    from esgexp.papers.estimate import CHARS_PER_TOKEN, estimate

    found = estimate(cfg, {})
    report["cost"] = {}
    lines = []
    for who, part in (("cost", found), (found.judge.note if found.judge else "", found.judge)):
        if part is None or (part is found and not cfg.model.get("price")):
            continue
        lines.append(f"{who}: {cost_text(part)}")
        report["cost"][who] = {"requests": part.requests, "prompt_tokens": part.prompt_tokens, "live": part.cost}
        if part.batch_cost is not None:
            report["cost"][who]["batch"] = part.batch_cost
    lines.append(f"(tokens estimated at {CHARS_PER_TOKEN} characters each, completions at their full budget)")
    return lines


def cost_text(found) -> str:
    """``N requests, ~T prompt tokens: at most $X live, $Y with backend.batch=true``, or why not priced."""
    from esgexp.papers.estimate import dollars

    if found.cost is None:
        return f"{found.requests} requests, ~{found.prompt_tokens} prompt tokens; not priced ({found.note or 'no model.price'})"
    text = f"{found.requests} requests, ~{found.prompt_tokens} prompt tokens: at most {dollars(found.cost)} live"
    return text + (f", {dollars(found.batch_cost)} as a batch" if found.batch_cost is not None else "")


def find_shape(model_cfg: DictConfig, cache_dir: str) -> tuple[Shape | None, str]:
    """The model's Shape and where it came from: config.json (model.path, or the HF cache for hub_id),
    else the transcribed table, else None (only model.size_b is known)."""
    from esgexp.models.architectures import ARCHITECTURES

    config_file = None
    if model_cfg.get("path") and not OmegaConf.is_missing(model_cfg, "path"):
        config_file = Path(str(model_cfg.path)).expanduser() / "config.json"
        if not config_file.is_file():
            raise UserError(
                f"model {model_cfg.name!r}: model.path={model_cfg.path} is not a model folder (no config.json)"
            )
    elif model_cfg.get("hub_id"):
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model_cfg.hub_id, "config.json")
        config_file = Path(cached) if isinstance(cached, str) else None
    if config_file is not None:
        return Shape.from_config(json.loads(config_file.read_text(encoding="utf-8"))), str(config_file)
    if model_cfg.name in ARCHITECTURES:
        return Shape.from_config(
            ARCHITECTURES[model_cfg.name]
        ), "esgexp/models/architectures.py (transcribed config.json)"
    return None, "model.size_b only (no config.json cached, not in esgexp/models/architectures.py)"


def uses_gpu(accelerator: str) -> bool:
    """Whether the job would run on CUDA GPUs, without importing torch: gpu|cuda, or auto where nvidia-smi is."""
    return accelerator in ("gpu", "cuda") or (accelerator == "auto" and shutil.which("nvidia-smi") is not None)


def device_sizes(cfg: DictConfig, on_gpu: bool) -> list[tuple[float, str]]:
    """The device memories to plan against, in bytes, each with where the number came from."""
    if not on_gpu:
        meminfo = Path("/proc/meminfo")
        lines = meminfo.read_text().splitlines() if meminfo.is_file() else []
        available = next((int(line.split()[1]) * 1024 for line in lines if line.startswith("MemAvailable:")), None)
        if available is None:
            return [(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "RAM")]
        return [(available, "RAM available now")]
    size = cfg.trainer.get("gpu_memory_gb")
    if size:
        return [(float(size) * GiB, "trainer.gpu_memory_gb")]
    visible = visible_gpu_mib()
    if visible:
        return [(visible * 2**20, "nvidia-smi")]
    return [(gb * GiB, f"A100 {gb} GB; set trainer.gpu_memory_gb for yours") for gb in A100_SIZES_GB]


def visible_gpu_mib() -> float | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return min(float(x) for x in done.stdout.split()) if done.returncode == 0 and done.stdout.strip() else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def training_precision(precision: str, on_gpu: bool) -> str:
    """trainer.precision=auto as esgexp.training.trainer resolves it: 16-mixed on a GPU; on the CPU
    bf16-mixed where /proc/cpuinfo lists native bf16 (AMX or AVX512-BF16), else 32-true."""
    if precision != "auto":
        return precision
    if on_gpu:
        return "16-mixed"
    cpuinfo = Path("/proc/cpuinfo")
    flags = set(cpuinfo.read_text().split()) if cpuinfo.is_file() else set()
    return "bf16-mixed" if "avx512f" in flags and flags & {"amx_bf16", "avx512_bf16"} else "32-true"


def base_weight_bytes(model_dtype: str, precision: str, on_gpu: bool) -> int:
    """Bytes per frozen base weight, as esgexp.training.trainer.base_dtype picks the dtype."""
    if model_dtype != "auto":
        return DTYPE_BYTES[model_dtype]
    return 2 if on_gpu and precision in ("16-mixed", "bf16-mixed") else 4


def train_setup(cfg: DictConfig, on_gpu: bool) -> tuple[TrainSetup, str]:
    precision = training_precision(str(cfg.trainer.precision), on_gpu)
    lora = cfg.model.lora
    targets = lora.target_modules if isinstance(lora.target_modules, str) else tuple(lora.target_modules)
    devices = cfg.trainer.devices
    setup = TrainSetup(
        batch_size=int(cfg.train.batch_size),
        seq_len=int(cfg.train.max_seq_len),
        checkpointing=bool(cfg.train.gradient_checkpointing),
        weight_bytes=base_weight_bytes(str(cfg.model.dtype), precision, on_gpu),
        mixed=precision in ("16-mixed", "bf16-mixed"),
        on_gpu=on_gpu,
        r=int(lora.r),
        targets=targets,
        dropout=float(lora.dropout),
        modules_to_save=tuple(lora.modules_to_save or ()),
        load_in_4bit=bool(cfg.model.load_in_4bit),
        devices=int(devices) if str(devices).isdigit() else 1,
        strategy=str(cfg.trainer.strategy),
    )
    return setup, precision


def plan_training(cfg: DictConfig, shape: Shape, on_gpu: bool, devices: list, report: dict) -> list[str]:
    setup, precision = train_setup(cfg, on_gpu)
    plan = train_plan(shape, setup)
    where = "GPU" if on_gpu else "CPU"
    lines = [f"{plan.title}: {precision} on the {where}, LoRA r={setup.r} on {describe_targets(setup.targets)}"]
    lines += render(plan)
    for size, origin in devices:
        fits = plan.total <= size
        entry = {"device_gib": round(size / GiB, 2), "device_source": origin, "fits": fits, "knobs": []}
        lines.append(verdict(size, origin, fits, plan.total))
        if not fits:
            found = knobs(shape, setup, size)
            entry["knobs"] = [{"overrides": name, "total_gib": round(total / GiB, 2)} for name, total in found]
            lines += [f"  to fit: {name}  ({total / GiB:.1f} GiB)" for name, total in found] or [
                "  no single setting or combination of checkpointing, 4-bit, batch, devices and length fits"
            ]
        report["plans"].append(plan.as_dict() | entry | {"setup": vars(setup) | {"precision": precision}})
    return lines


def gpu_engine(cfg: DictConfig) -> dict | None:
    """The GPU engine (vLLM, SGLang) that serves the job's model, as plan settings (``dtype``,
    ``tensor_parallel``, ``utilization``, ``max_model_len``, and the ``knob_*`` overrides that change them):
    backend=vllm's own keys, or the ``engine`` node of a server esgexp starts (backend/server=vllm|sglang), its
    flags read from the server's command and extra_args. None: no such engine (backend=hf, an API, llama.cpp)."""
    backend = cfg.backend
    if backend_class(backend._target_).serves_on_gpu:
        return {
            "dtype": str(backend.dtype),
            "tensor_parallel": int(backend.get("tensor_parallel_size", 1)),
            "utilization": float(backend.get("gpu_memory_utilization", 1.0)),
            "max_model_len": backend.get("max_model_len"),
        }
    server = backend.get("server")
    engine = server.get("engine") if server else None
    if not engine:
        return None
    args = [str(arg) for arg in [*server.command, *(server.get("extra_args") or [])]]
    given = {key: args[args.index(flag) + 1] for key, flag in engine.flags.items() if flag in args[:-1]}
    found = {**engine.defaults, **given}
    extra = "backend.server.extra_args=[{flag},{{}}]"
    return {
        "dtype": str(found.get("dtype", "auto")),
        "tensor_parallel": int(engine.tensor_parallel),
        "utilization": float(found["utilization"]),
        "max_model_len": int(found["max_model_len"]) if found.get("max_model_len") else None,
        "knob_max_model_len": extra.format(flag=engine.flags.max_model_len),
        "knob_utilization": extra.format(flag=engine.flags.utilization),
        "knob_tensor_parallel": "backend.server.tensor_parallel={}",
    }


def plan_serving(cfg: DictConfig, shape: Shape, on_gpu: bool, devices: list, report: dict) -> list[str]:
    engine = gpu_engine(cfg)  # vLLM or SGLang: their own dtype, a paged KV cache in the room they are given
    if engine:
        dtype = engine["dtype"] if engine["dtype"] != "auto" else (shape.dtype or "float16")
        dtype = "float16" if dtype == "float32" else dtype  # auto serves a float32 checkpoint in 16 bits
    else:
        dtype = str(cfg.model.dtype) if cfg.model.dtype != "auto" else ("float16" if on_gpu else "float32")
    knobs = {key: value for key, value in (engine or {}).items() if key.startswith("knob_")}
    setup = ServeSetup(
        weight_bytes=DTYPE_BYTES[dtype],
        on_gpu=on_gpu,
        vllm=engine is not None,
        tensor_parallel=engine["tensor_parallel"] if engine else 1,
        utilization=engine["utilization"] if engine else 1.0,
        max_model_len=engine["max_model_len"] if engine else None,
        batch_size=int(cfg.trainer.batch_size),
        **knobs,
    )
    vllm = setup.vllm
    lines = []
    for size, origin in devices:
        plan = serve_plan(shape, setup, size)
        fits = serve_fits(plan)
        need = plan.extra["needed_tokens"]
        what = "max_model_len" if vllm else f"a batch of {setup.batch_size} prompts"
        lines.append(f"{plan.title}: {dtype} on the {'GPU' if on_gpu else 'CPU'}")
        lines += render(plan, total=False)
        lines.append(
            f"device: {size / GiB:.1f} GiB ({origin}) -> {'fits' if fits else 'does not fit'}: "
            f"KV cache for {plan.extra['kv_tokens']:,} tokens, {what} needs {need:,}"
        )
        entry = {"device_gib": round(size / GiB, 2), "device_source": origin, "fits": fits, "knobs": []}
        if not fits:
            found = serve_knobs(shape, setup, size)
            entry["knobs"] = [{"overrides": name, "kv_tokens": held} for name, held in found]
            lines += [f"  to fit: {name}  ({held:,} tokens)" for name, held in found] or ["  no setting found"]
        report["plans"].append(plan.as_dict() | entry | {"setup": vars(setup) | {"dtype": dtype}})
    return lines


def weights_only(cfg: DictConfig, on_gpu: bool, devices: list, report: dict) -> list[str]:
    """Without the architecture, the weights at the job's dtype are all there is to plan."""
    size_b = cfg.model.get("size_b")
    if not size_b:
        raise UserError(
            f"dry_run=true: model {cfg.model.name!r} has no config.json to read (model.path or a cached model.hub_id) "
            "and no model.size_b; nothing to plan from"
        )
    nbytes = 0.5 if cfg.model.load_in_4bit else (2 if on_gpu or cfg.model.dtype in ("float16", "bfloat16") else 4)
    engine = None if kind_of(cfg.task).trains else gpu_engine(cfg)
    tp = engine["tensor_parallel"] if engine else 1  # an engine splits the weights over its GPUs
    split = f" / {tp} GPUs (tensor parallel)" if tp > 1 else ""
    plan = Plan("weights only (the architecture is unknown: activations, LoRA and KV cache not planned)")
    plan.add("weights", float(size_b) * 1e9 * nbytes / tp, f"{size_b} B x {nbytes} B{split} (model.size_b)")
    lines = [plan.title, *render(plan)]
    for size, origin in devices:
        fits = plan.total <= size
        lines.append(verdict(size, origin, fits, plan.total) + ("" if not fits else " (weights alone)"))
        report["plans"].append(plan.as_dict() | {"device_gib": round(size / GiB, 2), "fits": fits})
    return lines


def describe_targets(targets) -> str:
    return targets if isinstance(targets, str) else ", ".join(targets)


def render(plan: Plan, total: bool = True) -> list[str]:
    width = max(len(name) for name, _, _ in plan.lines)
    rows = [f"  {name:<{width}}  {nbytes / GiB:8.2f} GiB  {note}".rstrip() for name, nbytes, note in plan.lines]
    if total:
        rows.append(f"  {'total':<{width}}  {plan.total / GiB:8.2f} GiB")
    return rows


def verdict(size: float, origin: str, fits: bool, needed: float) -> str:
    outcome = "fits" if fits else "does not fit"
    return f"device: {size / GiB:.1f} GiB ({origin}) -> {outcome} (plan {needed / GiB:.1f} GiB)"
