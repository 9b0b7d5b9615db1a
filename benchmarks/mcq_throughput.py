"""MCQ throughput of esgexp beside lm-evaluation-harness: SmolLM2-135M on the CPU.

For each data file, dtype and scoring mode this measures questions per second, peak memory,
accuracy and (against lm-eval) per-question agreement, prints a table and writes a JSON file.

* ours:    the path a job runs (``esgexp.run``): the project config composed with ``backend=hf``,
           ``cache=off`` (no request cache: every item is computed), the backend from
           ``esgexp.jobs.lifecycle.job_backend`` (an ``HFBackend``), the prompts from ``MCQTask``, the requests
           from ``esgexp.tasks.generation.make_requests`` (``LetterRequest`` for ``logprob``, prefix KV cache on;
           ``GenerationRequest`` for ``generate``, greedy, 16 new tokens) and ``HFBackend.run``.
* lm-eval: lm-evaluation-harness, ``hf`` backend, on the same questions through a local task YAML
           whose Jinja prompt is derived from conf/template/esgenius.yaml. ``logprob`` is its
           ``multiple_choice`` task (argmax of the log-likelihood of " A" .. " D"); ``generate`` is
           ``generate_until`` with the same 16-token greedy budget (stops at end of turn). It runs once
           per batch size of ``--lmeval-batch-sizes`` (default 1,4,8,16) and we are compared with its
           FASTEST setting on this machine. Every prompt lm-eval built is checked to be identical to
           the input our backend rendered, string for string ("prompts identical").

Both sides get the raw prompt (no chat template: the paper protocol; --chat-template wraps it as
one user turn on both sides), the same model folder (the packaged GGUF converted once to
safetensors) and the same dtype. Each measurement runs in a fresh subprocess, so peak memory
(ru_maxrss) is per configuration and nothing is shared warm. Model loading is timed apart from
inference; q/s = questions / inference seconds. Ours includes rendering and tokenising the prompts;
lm-eval's inference time is its ``simple_evaluate`` call, which includes its own per-run setup
(building the dataset, contexts and requests); the time inside its model calls alone is reported
too ("core"). The CPU's capability as torch sees it (``get_cpu_capability``, oneDNN bf16) is
printed and recorded: it decides how fast bfloat16 is.

--batch-size and --lmeval-batch-sizes take lists; the two sides' runs alternate (ours, lm-eval, ours,
...) and each side's fastest batch size stands. In logprob mode the report adds:

``--dtypes bfloat16-checked`` (ours only) is ``backend.logprob_autocast=bfloat16`` over float32 weights: a
bf16 pass whose close calls are scored again in float32 (the runs' ``n_rechecked`` in the JSON).

* against the fp32 reference (our float32 log-probabilities, when float32 is among --dtypes): per
  side and dtype the share of questions with the same answer, with the same order of all four
  letters, and the largest log-probability difference (renormalised over A-D);
* a roofline: the token positions each side computes (ours: the shared prefix once, then each
  batch's suffixes padded to its longest; lm-eval: each whole prompt, padded per batch), the FLOPs
  that implies (2 x parameters x tokens; the vocabulary projection once per question for us, at
  every position for lm-eval, which takes the logits of the whole sequence), and the share of the
  machine's matrix-multiply rate they reach: ``F.linear`` at one decoder layer's shapes on as many
  rows as our typical batch, in float32 and bfloat16, timed in a worker like the others
  (--mm-seconds per shape; 0 skips it). "in model" rates count only the seconds inside the
  model's forward passes (ours) or lm-eval's loglikelihood call (its "core").

In generate mode it adds where our seconds go (prompt passes, generation steps, outside the model),
the prompt tokens each side computes, and the speed ratio those skipped tokens alone explain (both
sides run the same generation steps through transformers' ``generate``).

Run from the repository root, offline, on an otherwise idle machine (busy CPUs make torch's
threads wait on each other and the timings meaningless; the script warns when the load is high):

    make bench            # = .venv/bin/python benchmarks/mcq_throughput.py: the bundled sample
    .venv/bin/python benchmarks/mcq_throughput.py --modes logprob --dtypes float32 \\
        --data /work/shared/data/samples/esgenius/ESGenius_1136q.csv --json benchmarks/mcq_throughput_full.json
    .venv/bin/python benchmarks/mcq_throughput.py --limit 16 --dtypes float32   # a quick check
    .venv/bin/python benchmarks/mcq_throughput.py --no-lmeval --batch-size 16     # ours alone

Needs the ``bench`` extra (``pip install -e ".[bench]"``: lm-eval) unless --no-lmeval.
Results go to benchmarks/mcq_throughput.json (--json PATH). This is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import hashlib
import json
import math
import os
import platform
import resource
import string
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

BUNDLED = ROOT / "esgexp" / "data" / "bundled" / "esg_mcq_sample.csv"
TEMPLATE_FILE = ROOT / "conf" / "template" / "esgenius.yaml"
MODEL_FILE = ROOT / "conf" / "model" / "smollm2-135m.yaml"
TRAINER_FILE = ROOT / "conf" / "trainer" / "default.yaml"
DEFAULT_JSON = ROOT / "benchmarks" / "mcq_throughput.json"
LETTERS = "ABCD"
MAX_NEW_TOKENS = 16
TASK_NAME = "esgexp_bench_mcq"
MODES = ("logprob", "generate")
DTYPES = ("float32", "bfloat16", "bfloat16-checked")
# A setting that is not a weight dtype, ours only (lm-eval has none such): its weights' dtype and its
# backend.logprob_autocast (the arithmetic of its pass, and so of its roofline).
AUTOCAST_SETTINGS = {"bfloat16-checked": ("float32", "bfloat16")}
MM_DTYPES = ("float32", "bfloat16")  # the rates the roofline is measured in


def weights_and_arithmetic(dtype: str) -> tuple[str, str | None]:
    """A --dtypes value's model.dtype and backend.logprob_autocast (None: the weights' own arithmetic)."""
    return AUTOCAST_SETTINGS.get(dtype, (dtype, None))


LMEVAL_BATCH_SIZES = "1,4,8,16"
BUSY_SHARE = 0.10  # other processes using more than this share of the CPUs during a run: measure again (--retry-busy)


# --------------------------------------------------------------------------------------------
# Shared by the parent and both workers: the questions and the exact prompt text.


def cache_dir() -> Path:
    """Where esgexp keeps the converted model (conf/paths/default.yaml: paths.cache_dir)."""
    return Path(os.environ.get("ESGEXP_CACHE_DIR", Path.home() / ".cache" / "esgexp"))


def load_items(data: str, limit: int | None) -> list:
    """The first ``limit`` questions of ``data`` as esgexp's loader yields them (no shuffle)."""
    from esgexp.data.esgenius import ESGeniusCSV

    items = ESGeniusCSV(name=Path(data).stem, path=str(data)).load().items
    return items[:limit] if limit else items


def template_text() -> str:
    from omegaconf import OmegaConf

    return OmegaConf.load(TEMPLATE_FILE).text


def build_prompts(items: list) -> list[str]:
    """The raw ESGenius prompt of each item (no chat template), exactly as esgexp builds it."""
    from esgexp.strategies.mcq import MCQPrompter

    prompter = MCQPrompter(template=template_text())
    return [prompter.build(item) for item in items]


def model_inputs(prompts: list[str], tokenizer, chat_template: bool) -> list[str]:
    """What the model reads: the raw prompt, or (--chat-template) one user turn, as esgexp.run does."""
    from esgexp.models.generation import model_input

    return [model_input(prompt, tokenizer, chat_template) for prompt in prompts]


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parsed_answers(outputs: list[str | None]) -> list[str]:
    """esgexp's strict parse of each raw output (None, a failed item, is INVALID)."""
    from esgexp.eval.mcq import parse_answer

    return [parse_answer(output) for output in outputs]


def peak_mib() -> float:
    """This process's peak resident memory so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def set_threads(threads: int | None) -> int:
    import torch

    if threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def default_batch_size() -> int:
    """Our inference batch size as a job gets it: trainer.batch_size of conf/trainer/default.yaml."""
    from omegaconf import OmegaConf

    return int(OmegaConf.load(TRAINER_FILE).batch_size)


def cpu_capability() -> dict:
    """What torch computes with on this CPU: its kernel level (DEFAULT/AVX2/AVX512), whether oneDNN
    has bf16 kernels, the bf16 instruction sets and esgexp's own verdict (``cpu_has_fast_bf16``)."""
    import torch

    from esgexp.models.loading import cpu_has_fast_bf16

    capabilities = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
    fast, reason = cpu_has_fast_bf16()
    return {
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkldnn_bf16_supported": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
        "features": {
            name: bool(capabilities.get(name)) for name in ("avx2", "avx512_f", "avx512_bf16", "amx_bf16", "amx_tile")
        },
        "esgexp_fast_bf16": fast,
        "esgexp_fast_bf16_reason": reason,
    }


def describe_capability(capability: dict) -> str:
    features = ", ".join(name for name, present in capability["features"].items() if present) or "none"
    return (
        f"torch CPU capability {capability['torch_cpu_capability']}, oneDNN bf16 "
        f"{'supported' if capability['mkldnn_bf16_supported'] else 'not supported'} (features: {features}); "
        f"esgexp: {capability['esgexp_fast_bf16_reason']}"
    )


# --------------------------------------------------------------------------------------------
# Worker: ours.


def compose_job_config(job: dict):
    """The project config a job would get for this measurement: backend=hf, no request cache."""
    from hydra import compose, initialize_config_dir

    import esgexp  # noqa: F401  (sets HF_HUB_OFFLINE, registers the config resolvers)
    from esgexp.core.config import CONF_DIR

    overrides = [
        f"paths.root_dir={ROOT}",
        "paths.output_dir=null",  # no run folder (its default needs Hydra's runtime); a server logs to the cache
        "backend=hf",
        f"scoring={job['mode']}",
        f"model.dtype={weights_and_arithmetic(job['dtype'])[0]}",
        f"backend.logprob_autocast={weights_and_arithmetic(job['dtype'])[1] or 'null'}",
        f"model.chat_template={'true' if job['chat_template'] else 'false'}",
        f"model.generation.max_new_tokens={MAX_NEW_TOKENS}",
        f"trainer.batch_size={job['batch_size']}",
        "trainer.accelerator=cpu",
        "trainer.progress_bar=false",
        "cache=off",
    ]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=overrides)


def run_ours(job: dict) -> dict:
    """Score every question through ``HFBackend.run`` as ``esgexp.run`` does for a job.

    The weights load (``loaded_model``) before the clock starts, as a job loads them on its first
    request; the clock then covers rendering, tokenising, batching and the model.
    """
    from esgexp.jobs.lifecycle import job_backend
    from esgexp.models.scoring import common_prefix
    from esgexp.tasks.generation import make_requests
    from esgexp.tasks.mcq import MCQTask

    threads = set_threads(job["threads"])
    cfg = compose_job_config(job)
    items = load_items(job["data"], job["limit"])
    task = MCQTask(cfg)
    task.prepare(items)
    prompts = {item.id: task.prompt(item, None) for item in items}
    requests = make_requests(cfg, items, prompts)

    start = time.perf_counter()
    backend = job_backend(cfg, job["mode"])
    model = backend.loaded_model()
    load_s = time.perf_counter() - start

    model_time = {"s": 0.0, "prefill_s": 0.0, "decode_s": 0.0}
    model.forward = timed(model.forward, model_time, forward_part)  # the seconds inside the model's forward passes
    responses = []
    start = time.perf_counter()
    backend.run(requests, responses.extend)
    infer_s = time.perf_counter() - start

    # after the clock, for the checks and the roofline: rendering and tokenising on their own
    start = time.perf_counter()
    rendered = [backend.rendered(request) for request in requests]
    tokens = backend.tokenizer(rendered, add_special_tokens=True)["input_ids"]
    tokenise_s = time.perf_counter() - start
    by_id = {response.id: response for response in responses}
    ids = [item.id for item in items]
    outputs = [None if by_id[i].failed else by_id[i].output for i in ids]
    scores = [[by_id[i].scores[letter] for letter in LETTERS] if by_id[i].scores else None for i in ids]
    rechecked = backend.stats().get("n_rechecked")
    backend.close()
    return {
        "load_s": load_s,
        "infer_s": infer_s,
        "model_s": model_time["s"],
        "prefill_s": model_time["prefill_s"],
        "decode_s": model_time["decode_s"],
        "tokenise_s": tokenise_s,
        "peak_mib": peak_mib(),
        "torch_threads": threads,
        "token_lengths": [len(t) for t in tokens],
        "parameters": parameter_counts(model),
        "backend": type(backend).__name__,
        "batch_size": backend.batch_size,
        "prefix_tokens": len(common_prefix(tokens)) if backend.prefix_cache else 0,
        "n_failed": sum(1 for r in responses if r.failed),
        "n_rechecked": rechecked,
        "prompt_hashes": [text_hash(text) for text in rendered],
        "letter_logprobs": scores if job["mode"] == "logprob" else None,
        "outputs": outputs,
        "answers": parsed_answers(outputs),
    }


def parameter_counts(model) -> dict:
    """The model's parameters: those every token runs through (``non_embedding``: the decoder layers
    and the final norm) and the vocabulary projection's (``lm_head``, the tied embedding matrix when tied)."""
    head = model.get_output_embeddings().weight
    embeddings = {id(model.get_input_embeddings().weight), id(head)}
    non_embedding = sum(p.numel() for p in model.parameters() if id(p) not in embeddings)
    return {"non_embedding": non_embedding, "lm_head": head.numel()}


# --------------------------------------------------------------------------------------------
# Worker: the machine's matrix-multiply rate at the model's shapes (the roofline's ceiling).


def layer_shapes(model_dir: str) -> list[tuple[str, int, int]]:
    """(name, in features, out features) of each linear layer of one decoder layer, from the model's config."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir)
    hidden, inner = config.hidden_size, config.intermediate_size
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    kv = config.num_key_value_heads * head_dim
    q = config.num_attention_heads * head_dim
    return [
        ("q", hidden, q),
        ("k", hidden, kv),
        ("v", hidden, kv),
        ("o", q, hidden),
        ("gate", hidden, inner),
        ("up", hidden, inner),
        ("down", inner, hidden),
    ]


def run_mm(job: dict) -> dict:
    """GFLOP/s of ``torch.nn.functional.linear`` (what the model's layers call) on ``job['rows']`` tokens
    for each linear layer of one decoder layer, per dtype; ``rate`` is the layer's whole set
    (FLOPs over seconds), the ceiling a forward pass made only of these multiplies would reach."""
    threads = set_threads(job["threads"])
    rates = linear_rates(layer_shapes(job["model_dir"]), job["rows"], job["dtypes"], job["seconds"])
    return {"rows": job["rows"], "torch_threads": threads, "rates": rates}


def linear_rates(shapes: list[tuple[str, int, int]], rows: int, dtypes: list[str], seconds: float) -> dict:
    """Per dtype: GFLOP/s of ``F.linear`` on ``rows`` rows for each (name, in, out) of ``shapes`` (at least 3
    calls and ``seconds`` each, after a warm-up) and ``rate_gflops``, the whole set's FLOPs over its seconds."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    rates = {}
    for dtype in dtypes:
        per_shape, total_flop, total_s = {}, 0.0, 0.0
        for name, k, n in shapes:
            x = torch.randn(rows, k, dtype=getattr(torch, dtype))
            w = torch.randn(n, k, dtype=getattr(torch, dtype))
            F.linear(x, w)  # warm-up
            reps, start = 0, time.perf_counter()
            while reps < 3 or time.perf_counter() - start < seconds:
                F.linear(x, w)
                reps += 1
            each = (time.perf_counter() - start) / reps
            per_shape[f"{name} {k}x{n}"] = 2 * rows * k * n / each / 1e9
            total_flop, total_s = total_flop + 2 * rows * k * n, total_s + each
        rates[dtype] = {"rate_gflops": total_flop / total_s / 1e9, "per_shape_gflops": per_shape}
    return rates


# --------------------------------------------------------------------------------------------
# Worker: lm-evaluation-harness.


def jinja_template(template: str) -> str:
    """The esgexp template (str.format fields) as the equivalent Jinja template for lm-eval.

    Fields {query} and {A}..{D} become Jinja variables of the same name (CSV columns); {Z} is
    the fixed text "Not sure", as MCQPrompter fills it. Literal text that Jinja would read as
    markup is wrapped in a raw block.
    """
    parts = []
    for literal, field, spec, conversion in string.Formatter().parse(template):
        parts.append(jinja_literal(literal))
        if field is None:
            continue
        if spec or conversion:
            raise ValueError(f"template field {{{field}}} has a format spec or conversion; not supported")
        if field == "Z":
            parts.append(jinja_literal("Not sure"))
        elif field in ("query", *LETTERS):
            parts.append("{{ " + field + " }}")
        else:
            raise ValueError(f"template field {{{field}}} has no lm-eval equivalent")
    return "".join(parts)


def jinja_literal(text: str) -> str:
    return "{% raw %}" + text + "{% endraw %}" if any(m in text for m in ("{{", "{%", "{#")) else text


def write_lmeval_csv(folder: Path, items: list) -> Path:
    """The benchmarked questions, as esgexp loaded them (fields stripped), one row each."""
    import csv

    path = folder / "questions.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, quoting=csv.QUOTE_ALL)
        writer.writerow(["id", "query", *LETTERS, "answer"])
        for item in items:
            if item.answer not in LETTERS:
                raise SystemExit(
                    f"item {item.id}: gold {item.answer!r} is not one letter A-D; lm-eval needs one (--no-lmeval)"
                )
            writer.writerow([item.id, item.question, *(item.options[letter] for letter in LETTERS), item.answer])
    return path


def write_lmeval_task(folder: Path, csv_path: Path, mode: str) -> dict:
    """A task YAML in ``folder`` that feeds lm-eval our prompt; returns its config."""
    import yaml

    task = {
        "task": TASK_NAME,
        "dataset_path": "csv",
        # na_filter off: pandas would otherwise read option texts such as "None" or "NA" as NaN.
        "dataset_kwargs": {"data_files": {"test": str(csv_path)}, "na_filter": False},
        "test_split": "test",
        "doc_to_text": jinja_template(template_text()),
    }
    if mode == "logprob":
        task.update(
            output_type="multiple_choice",
            doc_to_choice=list(LETTERS),
            doc_to_target="{{ '" + LETTERS + "'.index(answer) }}",
            target_delimiter=" ",
            metric_list=[{"metric": "acc"}],
        )
    else:
        task.update(
            output_type="generate_until",
            doc_to_target="answer",
            generation_kwargs={"max_gen_toks": MAX_NEW_TOKENS, "do_sample": False},  # until: EOS only
            metric_list=[{"metric": "exact_match"}],
        )
    (folder / f"{TASK_NAME}.yaml").write_text(yaml.safe_dump(task, sort_keys=False, allow_unicode=True))
    return task


def timed(method, totals: dict, part=None):
    """Wrap ``method`` so the seconds spent inside it add up in ``totals['s']`` and, with ``part`` (the
    call's arguments -> a key of ``totals``), also in ``totals[part(...)]``. The wrapper keeps the
    method's signature: ``generate`` reads a forward's to decide whether a prompt's pass may compute the
    logits of its last position only (``logits_to_keep``)."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            seconds = time.perf_counter() - start
            totals["s"] += seconds
            if part:
                totals[part(*args, **kwargs)] += seconds

    return wrapper


def forward_part(*args, **kwargs) -> str:
    """``decode_s`` for a forward pass of one new token a row (a generation step), else ``prefill_s``."""
    ids = kwargs.get("input_ids", args[0] if args else None)
    return "decode_s" if ids is not None and ids.shape[1] == 1 else "prefill_s"


def run_lmeval(job: dict) -> dict:
    """The same questions through lm-eval's hf backend with the same prompt and dtype."""
    with tempfile.TemporaryDirectory(prefix="esgexp-bench-lmeval-") as folder:
        # A private datasets cache: no warm state from an earlier run, nothing left in the user's cache.
        os.environ["HF_DATASETS_CACHE"] = str(Path(folder) / "hf_datasets")
        return run_lmeval_in(Path(folder), job)


def run_lmeval_in(folder: Path, job: dict) -> dict:
    """``run_lmeval`` with its task YAML, CSV and datasets cache in ``folder``."""
    threads = set_threads(job["threads"])
    items = load_items(job["data"], job["limit"])
    prompts = build_prompts(items)
    task = write_lmeval_task(folder, write_lmeval_csv(folder, items), job["mode"])

    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    start = time.perf_counter()
    task_manager = TaskManager(include_path=str(folder))
    index_s = time.perf_counter() - start

    start = time.perf_counter()
    lm = HFLM(pretrained=job["model_dir"], dtype=job["dtype"], device="cpu", batch_size=job["batch_size"])
    load_s = time.perf_counter() - start

    core = {"s": 0.0}
    request = "loglikelihood" if job["mode"] == "logprob" else "generate_until"
    setattr(lm, request, timed(getattr(lm, request), core))
    start = time.perf_counter()
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=[TASK_NAME],
        task_manager=task_manager,
        batch_size=job["batch_size"],
        device="cpu",
        log_samples=True,
        bootstrap_iters=0,
        apply_chat_template=job["chat_template"],
    )
    infer_s = time.perf_counter() - start

    expected = model_inputs(prompts, lm.tokenizer, job["chat_template"])
    samples = sorted(results["samples"][TASK_NAME], key=lambda s: s["doc_id"])
    if len(samples) != len(items):
        raise RuntimeError(f"lm-eval logged {len(samples)} samples for {len(items)} questions")
    contexts = [sample["arguments"][0][0] for sample in samples]
    ties, scores = 0, None
    if job["mode"] == "logprob":
        scores = [[resp[0] for resp in s["filtered_resps"]] for s in samples]
        outputs = [LETTERS[row.index(max(row))] for row in scores]  # first on ties, as lm-eval's argmax
        ties = sum(row.count(max(row)) > 1 for row in scores)
    else:
        outputs = [s["filtered_resps"][0] for s in samples]
    mismatches = [i for i, (ctx, text) in enumerate(zip(contexts, expected)) if ctx != text]
    metric = "acc,none" if job["mode"] == "logprob" else "exact_match,none"
    return {
        "load_s": load_s,
        "infer_s": infer_s,
        "core_s": core["s"],
        "task_index_s": index_s,
        "peak_mib": peak_mib(),
        "torch_threads": threads,
        "contexts_identical": len(items) - len(mismatches),
        "prompt_hashes": [text_hash(context) for context in contexts],
        "first_context_mismatch": (
            {"id": items[mismatches[0]].id, "ours": expected[mismatches[0]], "lm_eval": contexts[mismatches[0]]}
            if mismatches
            else None
        ),
        "lm_eval_metric": results["results"][TASK_NAME].get(metric),
        "tied_top_choices": ties,  # questions whose best log-likelihood is tied (bf16 log_softmax)
        "letter_logprobs": scores,
        "task_yaml": task,
        "outputs": outputs,
        "answers": parsed_answers(outputs),
    }


def worker_main(job_path: str) -> None:
    """Run one measurement described by the JSON file ``job_path``; write the result beside it."""
    job = json.loads(Path(job_path).read_text())
    result = {"ours": run_ours, "lm-eval": run_lmeval, "mm": run_mm}[job["side"]](job)
    Path(job_path + ".result").write_text(json.dumps(result))


# --------------------------------------------------------------------------------------------
# Parent: one subprocess per measurement, then the tables and the JSON file.


def busy_cpu_seconds() -> float:
    """CPU seconds every process on the machine has used so far (all cores; /proc/stat)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds of this process and its finished children."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds of the running process ``pid`` (user + system; /proc/PID/stat), 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


class ForeignLoad:
    """How much of the machine other processes used while a block ran: 0.0 = only us, 1.0 = every core.

    "Us" is this process, its finished children and the running processes ``pids`` (a server).
    Timings on a shared machine are only meaningful when this is near 0 (CPU threads of a busy
    neighbour make torch's OpenMP threads wait on each other)."""

    def __init__(self, pids: tuple[int, ...] = ()):
        self.pids = pids
        self.share = 0.0

    def sample(self) -> tuple[float, float, float]:
        own = own_cpu_seconds() + sum(process_cpu_seconds(pid) for pid in self.pids)
        return time.perf_counter(), busy_cpu_seconds(), own

    def __enter__(self):
        self.start = self.sample()
        return self

    def __exit__(self, *exc) -> None:
        wall, busy, own = (b - a for a, b in zip(self.start, self.sample()))
        self.share = max(0.0, busy - own) / (wall * (os.cpu_count() or 1)) if wall > 0 else 0.0


def wait_until_quiet(limit_s: float, share: float = 0.05, window_s: float = 5.0) -> float:
    """Wait (at most ``limit_s``) until other processes use under ``share`` of the CPUs over ``window_s``;
    returns the share of the last window."""
    deadline = time.monotonic() + limit_s
    while True:
        with ForeignLoad() as load:
            time.sleep(window_s)
        if load.share < share or time.monotonic() + window_s > deadline:
            return load.share


def run_worker(job: dict, verbose: bool) -> dict:
    """Run ``job`` in a fresh Python process and return its result."""
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    with tempfile.TemporaryDirectory(prefix="esgexp-bench-") as folder:
        job_path = str(Path(folder) / "job.json")
        Path(job_path).write_text(json.dumps(job))
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", job_path]
        pipe = None if verbose else subprocess.PIPE  # the workers' chatter is shown only when one fails
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=pipe, stderr=pipe, text=True)
        if done.returncode != 0:
            tail = "" if verbose else "\n".join((done.stderr or "").splitlines()[-40:])
            raise SystemExit(
                f"worker failed ({job['side']} {job['mode']} {job['dtype']} batch {job['batch_size']}):\n{tail}"
            )
        return json.loads(Path(job_path + ".result").read_text())


def measure(args, data: str, items: list, model_dir: str, mode: str, dtype: str, side: str, batch_size: int) -> dict:
    job = {
        "side": side,
        "mode": mode,
        "dtype": dtype,
        "data": str(Path(data).resolve()),
        "limit": args.limit,
        "batch_size": batch_size,
        "threads": args.threads,
        "model_dir": model_dir,
        "chat_template": args.chat_template,
    }
    label = f"{side:<7} {mode:<8} {dtype:<8} {Path(data).name} ({len(items)} q, batch {batch_size})"
    attempts = []
    for attempt in range(1 + args.retry_busy):
        if args.wait_quiet:
            wait_until_quiet(args.wait_quiet)
        print(f"running {label} ...", file=sys.stderr, flush=True)
        load = os.getloadavg()[0]
        with ForeignLoad() as foreign:
            result = run_worker(job, args.verbose)
        result.update(
            job=job,
            n=len(items),
            qps=len(items) / result["infer_s"],
            accuracy=accuracy(items, result["answers"]),
            load_average_before=load,
            foreign_cpu_share=foreign.share,
        )
        if "core_s" in result:
            result["core_qps"] = len(items) / result["core_s"]
        print(
            f"  load {result['load_s']:.1f} s, inference {result['infer_s']:.1f} s = {result['qps']:.2f} q/s, "
            f"peak {result['peak_mib']:.0f} MiB, accuracy {result['accuracy']:.3f}, "
            f"other processes used {foreign.share:.0%} of the CPUs",
            file=sys.stderr,
            flush=True,
        )
        attempts.append(result)
        if foreign.share <= BUSY_SHARE:
            break
        if attempt < args.retry_busy:
            print(f"  busy machine (> {BUSY_SHARE:.0%} foreign CPU): measuring again", file=sys.stderr, flush=True)
    # the cleanest attempt (least foreign CPU) stands; the others are kept in the JSON
    best = min(attempts, key=lambda r: r["foreign_cpu_share"])
    best["attempts"] = [
        {k: r[k] for k in ("infer_s", "qps", "foreign_cpu_share", "load_average_before")} for r in attempts
    ]
    return best


def matrix_rates(args, model_dir: str, ours: dict) -> dict:
    """The torch matrix-multiply rate (run_mm) at the rows of our typical forward pass, in both dtypes."""
    suffix = sum(ours["token_lengths"]) / len(ours["token_lengths"]) - ours["prefix_tokens"]
    job = {
        "side": "mm",
        "rows": round(ours["batch_size"] * suffix),
        "dtypes": list(MM_DTYPES),
        "seconds": args.mm_seconds,
        "threads": args.threads,
        "model_dir": model_dir,
        "mode": "-",
        "dtype": "-",
        "batch_size": ours["batch_size"],
    }
    print(f"running torch matrix-multiply micro-benchmark ({job['rows']} rows) ...", file=sys.stderr, flush=True)
    result = run_worker(job, args.verbose)
    result["load_average_before"] = os.getloadavg()[0]
    for dtype, rate in result["rates"].items():
        print(f"  {dtype}: {rate['rate_gflops']:.1f} GFLOP/s", file=sys.stderr, flush=True)
    return result


def accuracy(items: list, answers: list[str]) -> float:
    from esgexp.eval.mcq import mcq_metrics

    return mcq_metrics(items, answers)["accuracy"]


def agreement(ours: list[str], theirs: list[str]) -> float:
    return sum(a == b for a, b in zip(ours, theirs, strict=True)) / len(ours)


def max_logprob_diff(ours: list[list[float]] | None, theirs: list[list[float]] | None) -> float | None:
    """Largest difference between the two sides' letter log-probabilities, each renormalised over A-D.

    Renormalising cancels what the letter choice does not depend on (with --chat-template lm-eval
    also scores the newline before the letter), so this compares the distributions themselves.
    """
    if not ours or not theirs or None in ours:
        return None
    return max(
        abs(a - b)
        for row_ours, row_theirs in zip(ours, theirs, strict=True)
        for a, b in zip(renormalised(row_ours), renormalised(row_theirs), strict=True)
    )


def renormalised(logprobs: list[float]) -> list[float]:
    top = max(logprobs)
    total = top + math.log(sum(math.exp(x - top) for x in logprobs))
    return [x - total for x in logprobs]


def lmeval_setting(ours: dict, lmeval: dict) -> dict:
    """One lm-eval batch size: its speed and how it compares with ours."""
    return {
        "batch_size": lmeval["job"]["batch_size"],
        "qps": lmeval["qps"],
        "core_qps": lmeval["core_qps"],
        "infer_s": lmeval["infer_s"],
        "core_s": lmeval["core_s"],
        "load_s": lmeval["load_s"],
        "peak_mib": lmeval["peak_mib"],
        "accuracy": lmeval["accuracy"],
        "speed_ratio": ours["qps"] / lmeval["qps"],
        "agreement": agreement(ours["answers"], lmeval["answers"]),
        "identical_outputs": sum(a == b for a, b in zip(ours["outputs"], lmeval["outputs"], strict=True)),
        "max_logprob_diff": max_logprob_diff(ours["letter_logprobs"], lmeval["letter_logprobs"]),
        # lm-eval's contexts equal to what our backend rendered (hashes), and to lm-eval's own expectation
        "prompts_identical": sum(a == b for a, b in zip(ours["prompt_hashes"], lmeval["prompt_hashes"], strict=True)),
        "contexts_identical": lmeval["contexts_identical"],
        "load_average_before": lmeval["load_average_before"],
        "foreign_cpu_share": lmeval["foreign_cpu_share"],
    }


def comparison_row(data: str, n: int, mode: str, dtype: str, ours_runs: list[dict], lmevals: list[dict]) -> dict:
    """One table row: our fastest batch size's numbers, lm-eval's fastest setting's and how they compare."""
    ours = max(ours_runs, key=lambda run: run["qps"])
    row = {
        "data": Path(data).name,
        "n": n,
        "mode": mode,
        "dtype": dtype,
        "ours_batch_size": ours["batch_size"],
        "ours_qps": ours["qps"],
        "ours_infer_s": ours["infer_s"],
        "ours_load_s": ours["load_s"],
        "ours_peak_mib": ours["peak_mib"],
        "ours_accuracy": ours["accuracy"],
        "ours_invalid_rate": ours["answers"].count("INVALID") / n,
        "ours_prefix_tokens": ours["prefix_tokens"],
        "ours_foreign_cpu_share": ours["foreign_cpu_share"],
        "ours_load_average_before": ours["load_average_before"],
        "ours_model_s": ours["model_s"],
        "ours_tokenise_s": ours["tokenise_s"],
        "ours_settings": [
            {
                k: run.get(k)
                for k in ("batch_size", "qps", "infer_s", "model_s", "peak_mib", "load_average_before", "n_rechecked")
            }
            | {"foreign_cpu_share": run["foreign_cpu_share"]}
            for run in ours_runs
        ],
        "foreign_cpu": f"{ours['foreign_cpu_share']:.0%}",
    }
    if lmevals:
        settings = [lmeval_setting(ours, lmeval) for lmeval in lmevals]
        best = max(settings, key=lambda s: s["qps"])
        row.update(
            lmeval_best_batch_size=best["batch_size"],
            lmeval_qps=best["qps"],
            lmeval_core_qps=best["core_qps"],
            lmeval_infer_s=best["infer_s"],
            lmeval_load_s=best["load_s"],
            speed_ratio=best["speed_ratio"],
            speed_ratio_core=ours["qps"] / best["core_qps"],
            agreement=best["agreement"],
            identical_outputs=best["identical_outputs"],
            max_logprob_diff=best["max_logprob_diff"],
            lmeval_peak_mib=best["peak_mib"],
            lmeval_accuracy=best["accuracy"],
            prompts_identical=best["prompts_identical"],
            contexts_identical=best["contexts_identical"],
            min_agreement=min(s["agreement"] for s in settings),
            lmeval_settings=settings,
            foreign_cpu=f"{ours['foreign_cpu_share']:.0%}/{best['foreign_cpu_share']:.0%}",
        )
        if mode == "logprob":
            row["goal_met"] = best["speed_ratio"] >= 2.0 and best["agreement"] >= 0.99
    return row


def chunks(values: list, size: int) -> list[list]:
    return [values[i : i + size] for i in range(0, len(values), size)]


def ours_tokens(lengths: list[int], prefix: int, batch_size: int) -> int:
    """Token positions our logprob forward passes compute: the shared prefix once, then each batch's
    suffixes (longest first, as PromptDataModule serves them) padded to the batch's longest."""
    suffixes = sorted((n - prefix for n in lengths), reverse=True)
    return prefix + sum(max(chunk) * len(chunk) for chunk in chunks(suffixes, batch_size))


def lmeval_tokens(lengths: list[int], batch_size: int) -> int:
    """Token positions lm-eval's logprob forward passes compute: each whole prompt once (its four
    one-token choices share one call), longest first, each batch padded to its longest."""
    return sum(max(chunk) * len(chunk) for chunk in chunks(sorted(lengths, reverse=True), batch_size))


def roofline(row: dict, ours: dict, lmeval: dict | None, mm: dict) -> dict:
    """Tokens each side computes, the FLOPs that implies (2 x parameters x tokens: the decoder layers
    for every token; the vocabulary projection for the last token of each question for us, for every
    token for lm-eval, which takes the logits of the whole sequence), and the share of the measured
    matrix-multiply rate that the inference seconds reach (attention's own FLOPs are left out)."""
    params, n = ours["parameters"], row["n"]
    weights, autocast = weights_and_arithmetic(row["dtype"])
    rate = mm["rates"].get(autocast or weights, {}).get("rate_gflops")
    tokens = ours_tokens(ours["token_lengths"], ours["prefix_tokens"], ours["batch_size"])
    flop = 2 * params["non_embedding"] * tokens + 2 * params["lm_head"] * n
    sides = {"ours": {"tokens": tokens, "tflop": flop / 1e12, "seconds": ours["infer_s"], "model_s": ours["model_s"]}}
    if lmeval:
        tokens = lmeval_tokens(ours["token_lengths"], lmeval["job"]["batch_size"])
        flop = 2 * (params["non_embedding"] + params["lm_head"]) * tokens
        sides["lm-eval"] = {
            "tokens": tokens,
            "tflop": flop / 1e12,
            "seconds": lmeval["infer_s"],
            "model_s": lmeval["core_s"],
        }
    for side in sides.values():
        side["gflops"] = side["tflop"] * 1e3 / side["seconds"]
        side["gflops_in_model"] = side["tflop"] * 1e3 / side["model_s"]
        side["share_of_mm"] = side["gflops"] / rate if rate else None
    return {
        "mm_rate_gflops": rate,
        "mm_rows": mm["rows"],
        "prompt_tokens": sum(ours["token_lengths"]),
        "prefix_tokens": ours["prefix_tokens"],
        "sides": sides,
    }


def generate_work(row: dict, ours: dict, lmeval: dict | None) -> dict:
    """Where our generate seconds go (prompts, generation steps, outside the model) and the speed ratio
    that the prompt tokens we skip explain.

    Both sides generate through transformers' ``generate``: the same steps, each one token a row. They
    differ in the prompt tokens computed (ours: the shared prefix once, then each batch's rest padded
    to its longest; lm-eval: each whole prompt, left-padded per batch). ``explained_ratio``: our speed
    over lm-eval's if lm-eval computed its extra prompt tokens at our prompt rate and did all else in
    our time."""
    tokens = ours_tokens(ours["token_lengths"], ours["prefix_tokens"], ours["batch_size"])
    work = {
        "ours_prompt_tokens": tokens,
        "prefill_s": ours["prefill_s"],
        "decode_s": ours["decode_s"],
        "outside_model_s": ours["infer_s"] - ours["model_s"],
        "speed_ratio": row.get("speed_ratio"),
    }
    if lmeval:
        work["lmeval_prompt_tokens"] = lmeval_tokens(ours["token_lengths"], lmeval["job"]["batch_size"])
        extra_s = ours["prefill_s"] * (work["lmeval_prompt_tokens"] / tokens - 1)
        work["explained_ratio"] = (ours["infer_s"] + extra_s) / ours["infer_s"]
    return work


def ranking(logprobs: list[float]) -> list[int]:
    """The letters' order, most probable first (the first letter first on ties, as the answer's argmax)."""
    return sorted(range(len(logprobs)), key=lambda i: (-logprobs[i], i))


def against_reference(reference: list[list[float]], scores: list[list[float]] | None) -> dict | None:
    """Per-question agreement with the fp32 reference: the same answer, the same order of all four
    letters, and the largest difference of a letter's log-probability (renormalised over A-D)."""
    if not scores or None in scores:
        return None
    pairs = list(zip(reference, scores, strict=True))
    return {
        "answers_identical": sum(ranking(a)[0] == ranking(b)[0] for a, b in pairs) / len(pairs),
        "ranking_identical": sum(ranking(a) == ranking(b) for a, b in pairs) / len(pairs),
        "max_logprob_diff": max_logprob_diff(reference, scores),
    }


COLUMNS = [
    ("data", "data", "{}"),
    ("n", "n", "{}"),
    ("mode", "mode", "{}"),
    ("dtype", "dtype", "{}"),
    ("ours batch", "ours_batch_size", "{}"),
    ("ours q/s", "ours_qps", "{:.2f}"),
    ("lm-eval best batch", "lmeval_best_batch_size", "{}"),
    ("lm-eval q/s", "lmeval_qps", "{:.2f}"),
    ("speed ratio", "speed_ratio", "{:.2f}x"),
    ("agreement", "agreement", "{:.1%}"),
    ("ours peak MiB", "ours_peak_mib", "{:.0f}"),
    ("lm-eval peak MiB", "lmeval_peak_mib", "{:.0f}"),
    ("ours acc", "ours_accuracy", "{:.3f}"),
    ("lm-eval acc", "lmeval_accuracy", "{:.3f}"),
    ("ratio (core)", "speed_ratio_core", "{:.2f}x"),
    ("max dlogp", "max_logprob_diff", "{:.1e}"),
    ("prompts identical", "prompts_identical", "{}"),
    ("foreign CPU ours/lm-eval", "foreign_cpu", "{}"),
]

SETTING_COLUMNS = [
    ("data", "data", "{}"),
    ("mode", "mode", "{}"),
    ("dtype", "dtype", "{}"),
    ("lm-eval batch", "batch_size", "{}"),
    ("lm-eval q/s", "qps", "{:.2f}"),
    ("core q/s", "core_qps", "{:.2f}"),
    ("seconds", "infer_s", "{:.1f}"),
    ("peak MiB", "peak_mib", "{:.0f}"),
    ("ours / this", "speed_ratio", "{:.2f}x"),
    ("agreement", "agreement", "{:.1%}"),
    ("max dlogp", "max_logprob_diff", "{:.1e}"),
    ("prompts identical", "prompts_identical", "{}"),
    ("foreign CPU", "foreign_cpu_share", "{:.0%}"),
]


OURS_COLUMNS = [
    ("data", "data", "{}"),
    ("mode", "mode", "{}"),
    ("dtype", "dtype", "{}"),
    ("ours batch", "batch_size", "{}"),
    ("q/s", "qps", "{:.2f}"),
    ("seconds", "infer_s", "{:.1f}"),
    ("in model s", "model_s", "{:.1f}"),
    ("peak MiB", "peak_mib", "{:.0f}"),
    ("load avg", "load_average_before", "{:.1f}"),
    ("rechecked in fp32", "n_rechecked", "{}"),
    ("foreign CPU", "foreign_cpu_share", "{:.0%}"),
]

ROOFLINE_COLUMNS = [
    ("data", "data", "{}"),
    ("dtype", "dtype", "{}"),
    ("side", "side", "{}"),
    ("tokens computed", "tokens", "{}"),
    ("TFLOP", "tflop", "{:.2f}"),
    ("seconds", "seconds", "{:.1f}"),
    ("GFLOP/s", "gflops", "{:.1f}"),
    ("in model GFLOP/s", "gflops_in_model", "{:.1f}"),
    ("torch mm GFLOP/s", "mm", "{:.1f}"),
    ("share of mm", "share_of_mm", "{:.0%}"),
]

GENERATE_COLUMNS = [
    ("data", "data", "{}"),
    ("dtype", "dtype", "{}"),
    ("ours prompt tokens", "ours_prompt_tokens", "{}"),
    ("lm-eval prompt tokens", "lmeval_prompt_tokens", "{}"),
    ("ours prompts s", "prefill_s", "{:.1f}"),
    ("ours steps s", "decode_s", "{:.1f}"),
    ("ours outside model s", "outside_model_s", "{:.1f}"),
    ("ratio the skipped tokens explain", "explained_ratio", "{:.2f}x"),
    ("measured ratio", "speed_ratio", "{:.2f}x"),
]

REFERENCE_COLUMNS = [
    ("data", "data", "{}"),
    ("dtype", "dtype", "{}"),
    ("side", "side", "{}"),
    ("same answer", "answers_identical", "{:.1%}"),
    ("same letter ranking", "ranking_identical", "{:.1%}"),
    ("max dlogp", "max_logprob_diff", "{:.1e}"),
]


def render(columns: list[tuple[str, str, str]], records: list[dict]) -> list[str]:
    cells = [[title for title, _, _ in columns]]
    for record in records:
        cells.append([fmt.format(record[key]) if record.get(key) is not None else "-" for _, key, fmt in columns])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return lines


def format_table(rows: list[dict], capability: dict) -> str:
    lines = [describe_capability(capability), "", *render(COLUMNS, rows)]
    settings = [
        {**{k: row[k] for k in ("data", "mode", "dtype")}, **s} for row in rows for s in row.get("lmeval_settings", [])
    ]
    if settings:
        lines += ["", "every lm-eval setting:", *render(SETTING_COLUMNS, settings)]
    ours_settings = [
        {**{k: row[k] for k in ("data", "mode", "dtype")}, **s} for row in rows for s in row["ours_settings"]
    ]
    if len(ours_settings) > len(rows):
        lines += ["", "every batch size of ours:", *render(OURS_COLUMNS, ours_settings)]
    roofline_rows = [
        {**{k: row[k] for k in ("data", "dtype")}, "side": side, "mm": row["roofline"]["mm_rate_gflops"], **values}
        for row in rows
        if row.get("roofline")
        for side, values in row["roofline"]["sides"].items()
    ]
    if roofline_rows:
        lines += [
            "",
            "roofline (logprob; FLOPs = 2 x parameters x tokens computed):",
            *render(ROOFLINE_COLUMNS, roofline_rows),
        ]
    work_rows = [
        {**{k: row[k] for k in ("data", "dtype")}, **row["generate_work"]} for row in rows if "generate_work" in row
    ]
    if work_rows:
        lines += [
            "",
            "generate: prompts against generation steps (ours, fastest batch):",
            *render(GENERATE_COLUMNS, work_rows),
        ]
    reference_rows = [
        {**{k: row[k] for k in ("data", "dtype")}, "side": side, **values}
        for row in rows
        for side, values in (row.get("vs_fp32_reference") or {}).items()
        if values
    ]
    if reference_rows:
        lines += ["", "against our float32 log-probabilities:", *render(REFERENCE_COLUMNS, reference_rows)]
    notes = [
        "q/s: questions / inference seconds (model load excluded); lm-eval's is its whole simple_evaluate call.",
        "speed ratio: ours vs lm-eval's fastest batch size here. ratio (core): vs the time inside its model calls only.",
        "agreement: same parsed answer, same dtype. prompts identical: lm-eval's context == the input our backend rendered.",
        "max dlogp: largest difference of a letter's log-probability (renormalised over A-D) between the two sides.",
        "foreign CPU: share of the machine's CPUs other processes used during the run (0% = a clean measurement).",
    ]
    for row in rows:
        if "goal_met" in row:
            notes.append(
                f"goal (logprob: >= 2x lm-eval's best, >= 99% agreement) on {row['data']} {row['dtype']}: "
                f"{'met' if row['goal_met'] else 'NOT met'} ({row['speed_ratio']:.2f}x, {row['agreement']:.1%})"
            )
        if row["ours_invalid_rate"] >= 0.5:
            notes.append(
                f"note: {row['data']} {row['mode']} {row['dtype']}: {row['ours_invalid_rate']:.0%} of our answers are "
                "INVALID (with raw prompts SmolLM2 ends its turn at once; see --chat-template)"
            )
    return "\n".join([*lines, "", *notes])


def machine_info(threads: int | None) -> dict:
    """Where and with what the numbers were taken."""
    versions = {}
    for package in ("torch", "transformers", "lightning", "lm_eval", "datasets", "esgexp", "llama_cpp_python"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gib": memory_gib(),
        "cpu_capability": cpu_capability(),
        "threads_option": threads,
        "load_average_at_start": os.getloadavg(),
        "versions": versions,
    }


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def memory_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None


def warn_if_busy() -> None:
    """Other busy processes ruin CPU timings (torch's OpenMP threads then wait on each other)."""
    load = os.getloadavg()[0]
    if load > 0.5:
        print(
            f"warning: load average {load:.1f} on {os.cpu_count()} CPUs: other processes are busy, timings will be noisy",
            file=sys.stderr,
        )


def model_dir() -> str:
    """SmolLM2's safetensors folder (converted from the packaged GGUF on first use)."""
    from omegaconf import OmegaConf

    from esgexp.models.loading import resolve_model_dir

    return resolve_model_dir(OmegaConf.load(MODEL_FILE), cache_dir())


def batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of batch sizes: {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be positive: {text!r}")
    return sizes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", nargs="+", default=[str(BUNDLED)], help="ESGenius-format CSV file(s); default: the bundled sample"
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="only the first N questions of each file (default: all)"
    )
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(MM_DTYPES))
    parser.add_argument(
        "--batch-size",
        type=batch_sizes,
        default=None,
        help="our batch size(s), comma-separated; the fastest stands (default: trainer.batch_size of "
        "conf/trainer/default.yaml, what a job gets)",
    )
    parser.add_argument(
        "--mm-seconds",
        type=float,
        default=2.0,
        help="seconds per shape of the torch matrix-multiply micro-benchmark (the roofline; 0: skip it)",
    )
    parser.add_argument(
        "--lmeval-batch-sizes",
        type=batch_sizes,
        default=batch_sizes(LMEVAL_BATCH_SIZES),
        help=f"lm-eval's batch sizes, comma-separated; we are compared with the fastest (default {LMEVAL_BATCH_SIZES})",
    )
    parser.add_argument("--no-lmeval", action="store_true", help="measure esgexp only")
    parser.add_argument(
        "--json",
        default=str(DEFAULT_JSON),
        help=f"where to write the raw numbers (default {DEFAULT_JSON.relative_to(ROOT)})",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads in each worker (default: torch's own)")
    parser.add_argument(
        "--chat-template",
        action="store_true",
        help="wrap each prompt as one user turn of SmolLM2's chat template on both sides (default: raw prompts, "
        "the paper protocol; raw prompts make this chat model stop at once in generate mode)",
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0,
        metavar="SECONDS",
        help="before each run wait up to SECONDS until other processes use under 5%% of the CPUs (default 0: no wait)",
    )
    parser.add_argument(
        "--retry-busy",
        type=int,
        default=0,
        metavar="N",
        help=f"measure a run again (up to N times) when other processes used over {BUSY_SHARE * 100:.0f}%% of the CPUs "
        "during it; the cleanest attempt is reported (default 0)",
    )
    parser.add_argument("--verbose", action="store_true", help="show the workers' own output")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be a positive number")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker_main(args.worker)
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not args.no_lmeval:
        try:
            metadata.version("lm_eval")
        except metadata.PackageNotFoundError:
            raise SystemExit('lm-eval is not installed: pip install -e ".[bench]" (or pass --no-lmeval)') from None
    warn_if_busy()
    started = datetime.datetime.now(datetime.timezone.utc)
    machine = machine_info(args.threads)
    print(describe_capability(machine["cpu_capability"]), file=sys.stderr, flush=True)
    ours_batches = args.batch_size or [default_batch_size()]
    folder = model_dir()
    rows, runs = [], []
    for data in args.data:
        items = load_items(data, args.limit)
        reference = None  # our float32 log-probabilities: what every other setting is compared with
        for dtype in sorted(args.dtypes, key=lambda name: name != "float32"):  # float32 first: the reference
            for mode in args.modes:
                ours, lmevals = [], []
                # interleaved (ours, lm-eval, ours, ...) so that a change of load touches both sides
                lmeval_batches = [] if args.no_lmeval or dtype in AUTOCAST_SETTINGS else args.lmeval_batch_sizes
                for i in range(max(len(ours_batches), len(lmeval_batches))):
                    if i < len(ours_batches):
                        ours.append(measure(args, data, items, folder, mode, dtype, "ours", ours_batches[i]))
                    if i < len(lmeval_batches):
                        lmevals.append(measure(args, data, items, folder, mode, dtype, "lm-eval", lmeval_batches[i]))
                row = comparison_row(data, len(items), mode, dtype, ours, lmevals)
                best = max(ours, key=lambda run: run["qps"])
                fastest = max(lmevals, key=lambda run: run["qps"]) if lmevals else None
                if mode == "logprob":
                    if dtype == "float32":
                        reference = best["letter_logprobs"]
                    if reference:
                        row["vs_fp32_reference"] = {"ours": against_reference(reference, best["letter_logprobs"])}
                        if fastest:
                            row["vs_fp32_reference"]["lm-eval"] = against_reference(
                                reference, fastest["letter_logprobs"]
                            )
                    if args.mm_seconds:
                        row["roofline"] = roofline(row, best, fastest, matrix_rates(args, folder, best))
                else:
                    row["generate_work"] = generate_work(row, best, fastest)
                rows.append(row)
                runs += [*ours, *lmevals]
    finished = datetime.datetime.now(datetime.timezone.utc)
    report = {
        "date": started.isoformat(timespec="seconds"),
        "seconds": (finished - started).total_seconds(),
        "command": [str(Path(sys.argv[0])), *(argv if argv is not None else sys.argv[1:])],
        "machine": {**machine, "torch_threads": runs[0]["torch_threads"], "load_average_at_end": os.getloadavg()},
        "model_dir": folder,
        "settings": {
            "ours": "esgexp.jobs.lifecycle.job_backend (backend=hf, cache=off) -> HFBackend.run",
            "batch_size": ours_batches,
            "lmeval_batch_sizes": args.lmeval_batch_sizes,
            "limit": args.limit,
            "max_new_tokens": MAX_NEW_TOKENS,
            "chat_template": args.chat_template,
            "prefix_cache": True,
            "wait_quiet_s": args.wait_quiet,
            "retry_busy": args.retry_busy,
        },
        "rows": rows,
        "runs": runs,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    print(format_table(rows, machine["cpu_capability"]))
    print(f"\nraw numbers: {args.json}")


if __name__ == "__main__":
    main()
