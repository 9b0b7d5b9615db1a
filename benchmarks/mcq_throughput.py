"""MCQ throughput of esgexp beside lm-evaluation-harness: SmolLM2-135M on the CPU.

For each data file, dtype and scoring mode this measures questions per second, peak memory,
accuracy and (against lm-eval) per-question agreement, prints a table and writes a JSON file.

* ours:    esgexp's own path (ESGeniusCSV -> MCQPrompter -> PromptDataModule -> run_inference), as
           ``esgexp.run.predict`` runs it: ``logprob`` is LogprobScorer with the prefix cache on,
           ``generate`` is GenerateScorer (greedy, 16 new tokens) and ``parse_answer``.
* lm-eval: lm-evaluation-harness, ``hf`` backend, on the same questions through a local task YAML
           whose Jinja prompt is derived from conf/template/esgenius.yaml. ``logprob`` is its
           ``multiple_choice`` task (argmax of the log-likelihood of " A" .. " D"); ``generate`` is
           ``generate_until`` with the same 16-token greedy budget (stops at end of turn). Every
           prompt lm-eval built is checked to be identical to ours ("prompts identical").

Both sides get the raw prompt (no chat template: the paper protocol; --chat-template wraps it as
one user turn on both sides), the same model folder (the packaged GGUF converted once to
safetensors) and the same dtype. Each measurement runs in a fresh subprocess, so peak memory
(ru_maxrss) is per configuration and nothing is shared warm. Model loading is timed apart from
inference; q/s = questions / inference seconds. lm-eval's inference time is its
``simple_evaluate`` call, which includes its own per-run setup (building the dataset, contexts
and requests); the time inside its model calls alone is reported too ("core").

Run from the repository root, offline, on an otherwise idle machine (busy CPUs make torch's
threads wait on each other and the timings meaningless; the script warns when the load is high):

    make bench            # = .venv/bin/python benchmarks/mcq_throughput.py: the bundled sample
    .venv/bin/python benchmarks/mcq_throughput.py \\
        --data esgexp/data/bundled/esg_mcq_sample.csv /work/shared/data/samples/esgenius/ESGenius_1136q.csv
    .venv/bin/python benchmarks/mcq_throughput.py --limit 16 --dtypes float32   # a quick check

Needs the ``bench`` extra (``pip install -e ".[bench]"``: lm-eval) unless --no-lmeval.
Results go to benchmarks/mcq_throughput.json (--json PATH). This is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import datetime
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
DEFAULT_JSON = ROOT / "benchmarks" / "mcq_throughput.json"
LETTERS = "ABCD"
MAX_NEW_TOKENS = 16
TASK_NAME = "esgexp_bench_mcq"
MODES = ("logprob", "generate")
DTYPES = ("float32", "bfloat16")


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


# --------------------------------------------------------------------------------------------
# Worker: ours.


def run_ours(job: dict) -> dict:
    """Load the model as esgexp does, then score every question as ``esgexp.run.predict`` does.

    The model folder is resolved once in the parent (``model_dir``), as ``esgexp.run.run_job``
    resolves it before ``predict``; lm-eval loads the very same folder.
    """
    from omegaconf import OmegaConf

    from esgexp.models.inference import PromptDataModule, run_inference
    from esgexp.models.loading import load_model_and_tokenizer
    from esgexp.models.scoring import LogprobScorer, make_scorer
    from esgexp.models.generation import model_input  # noqa: F401  imported before the clock starts (model_inputs uses it)

    threads = set_threads(job["threads"])
    items = load_items(job["data"], job["limit"])
    prompts = build_prompts(items)
    model_cfg = OmegaConf.load(MODEL_FILE)
    model_cfg.dtype = job["dtype"]

    start = time.perf_counter()
    model, tokenizer = load_model_and_tokenizer(job["model_dir"], model_cfg, on_gpu=False)
    load_s = time.perf_counter() - start

    start = time.perf_counter()
    ids = [item.id for item in items]
    texts = model_inputs(prompts, tokenizer, job["chat_template"])
    data = PromptDataModule(ids, texts, tokenizer, job["batch_size"])
    scoring = {"name": job["mode"], "letters": list(LETTERS), "prefix_cache": True, "max_new_tokens": MAX_NEW_TOKENS}
    scorer = make_scorer(scoring, tokenizer, texts, [tokens for _, tokens in data.examples])
    results: list[dict] = []
    run_inference(model, scorer, data, results.extend, accelerator="cpu", progress_bar=False)
    infer_s = time.perf_counter() - start

    by_id = {r["id"]: r for r in results}
    outputs = [None if by_id[i].get("failed") else by_id[i]["output"] for i in ids]
    scores = [[by_id[i]["scores"][letter] for letter in LETTERS] if "scores" in by_id[i] else None for i in ids]
    return {
        "load_s": load_s,
        "infer_s": infer_s,
        "peak_mib": peak_mib(),
        "torch_threads": threads,
        "prefix_tokens": len(scorer.prefix_ids) if isinstance(scorer, LogprobScorer) else 0,
        "n_failed": sum(1 for r in results if r.get("failed")),
        "letter_logprobs": scores if job["mode"] == "logprob" else None,
        "outputs": outputs,
        "answers": parsed_answers(outputs),
    }


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
                raise SystemExit(f"item {item.id}: gold {item.answer!r} is not one letter A-D; lm-eval needs one (--no-lmeval)")
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


def timed(method, totals: dict):
    """Wrap an LM request method so the seconds spent inside it add up in ``totals['s']``."""

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            totals["s"] += time.perf_counter() - start

    return wrapper


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
    result = run_ours(job) if job["side"] == "ours" else run_lmeval(job)
    Path(job_path + ".result").write_text(json.dumps(result))


# --------------------------------------------------------------------------------------------
# Parent: one subprocess per measurement, then the table and the JSON file.


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
            raise SystemExit(f"worker failed ({job['side']} {job['mode']} {job['dtype']}):\n{tail}")
        return json.loads(Path(job_path + ".result").read_text())


def measure(args, data: str, items: list, model_dir: str, mode: str, dtype: str, side: str) -> dict:
    batch_size = args.batch_size if side == "ours" else args.lmeval_batch_size
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
    print(f"running {label} ...", file=sys.stderr, flush=True)
    result = run_worker(job, args.verbose)
    result.update(job=job, n=len(items), qps=len(items) / result["infer_s"], accuracy=accuracy(items, result["answers"]))
    if "core_s" in result:
        result["core_qps"] = len(items) / result["core_s"]
    print(
        f"  load {result['load_s']:.1f} s, inference {result['infer_s']:.1f} s = {result['qps']:.2f} q/s, "
        f"peak {result['peak_mib']:.0f} MiB, accuracy {result['accuracy']:.3f}",
        file=sys.stderr,
        flush=True,
    )
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


def comparison_row(data: str, n: int, mode: str, dtype: str, ours: dict, lmeval: dict | None) -> dict:
    """One table row: our numbers, lm-eval's and how they compare."""
    row = {
        "data": Path(data).name,
        "n": n,
        "mode": mode,
        "dtype": dtype,
        "ours_qps": ours["qps"],
        "ours_load_s": ours["load_s"],
        "ours_peak_mib": ours["peak_mib"],
        "ours_accuracy": ours["accuracy"],
        "ours_invalid_rate": ours["answers"].count("INVALID") / n,
    }
    if lmeval:
        row.update(
            lmeval_qps=lmeval["qps"],
            lmeval_core_qps=lmeval["core_qps"],
            lmeval_load_s=lmeval["load_s"],
            speed_ratio=ours["qps"] / lmeval["qps"],
            speed_ratio_core=ours["qps"] / lmeval["core_qps"],
            agreement=agreement(ours["answers"], lmeval["answers"]),
            identical_outputs=sum(a == b for a, b in zip(ours["outputs"], lmeval["outputs"], strict=True)),
            max_logprob_diff=max_logprob_diff(ours["letter_logprobs"], lmeval["letter_logprobs"]),
            lmeval_peak_mib=lmeval["peak_mib"],
            lmeval_accuracy=lmeval["accuracy"],
            contexts_identical=lmeval["contexts_identical"],
        )
    return row


COLUMNS = [
    ("data", "data", "{}"),
    ("n", "n", "{}"),
    ("mode", "mode", "{}"),
    ("dtype", "dtype", "{}"),
    ("ours q/s", "ours_qps", "{:.2f}"),
    ("lm-eval q/s", "lmeval_qps", "{:.2f}"),
    ("speed ratio", "speed_ratio", "{:.2f}x"),
    ("agreement", "agreement", "{:.1%}"),
    ("ours peak MiB", "ours_peak_mib", "{:.0f}"),
    ("lm-eval peak MiB", "lmeval_peak_mib", "{:.0f}"),
    ("ours acc", "ours_accuracy", "{:.3f}"),
    ("lm-eval acc", "lmeval_accuracy", "{:.3f}"),
    ("ratio (core)", "speed_ratio_core", "{:.2f}x"),
    ("max dlogp", "max_logprob_diff", "{:.1e}"),
    ("prompts identical", "contexts_identical", "{}"),
]


def format_table(rows: list[dict]) -> str:
    cells = [[title for title, _, _ in COLUMNS]]
    for row in rows:
        cells.append([fmt.format(row[key]) if row.get(key) is not None else "-" for _, key, fmt in COLUMNS])
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    notes = [
        "q/s: questions / inference seconds (model load excluded); lm-eval's is its whole simple_evaluate call.",
        "ratio (core): ours vs the time inside lm-eval's model calls only. agreement: same parsed answer, same dtype.",
        "max dlogp: largest difference of a letter's log-probability (renormalised over A-D) between the two sides.",
    ]
    for row in rows:
        if row["ours_invalid_rate"] >= 0.5:
            notes.append(
                f"note: {row['data']} {row['mode']} {row['dtype']}: {row['ours_invalid_rate']:.0%} of our answers are "
                "INVALID (with raw prompts SmolLM2 ends its turn at once; see --chat-template)"
            )
    return "\n".join(lines + [""] + notes)


def machine_info(threads: int | None) -> dict:
    """Where and with what the numbers were taken."""
    versions = {}
    for package in ("torch", "transformers", "lightning", "lm_eval", "datasets", "esgexp"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
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


def warn_if_busy() -> None:
    """Other busy processes ruin CPU timings (torch's OpenMP threads then wait on each other)."""
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.1f} on {os.cpu_count()} CPUs: other processes are busy, timings will be noisy",
              file=sys.stderr)


def model_dir() -> str:
    """SmolLM2's safetensors folder (converted from the packaged GGUF on first use)."""
    from omegaconf import OmegaConf

    from esgexp.models.loading import resolve_model_dir

    return resolve_model_dir(OmegaConf.load(MODEL_FILE), cache_dir())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", nargs="+", default=[str(BUNDLED)], help="ESGenius-format CSV file(s); default: the bundled sample")
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions of each file (default: all)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    parser.add_argument("--batch-size", type=int, default=8, help="our batch size (default 8)")
    parser.add_argument("--lmeval-batch-size", type=int, default=1, help="lm-eval's batch size (default 1, its own default)")
    parser.add_argument("--no-lmeval", action="store_true", help="measure esgexp only")
    parser.add_argument("--json", default=str(DEFAULT_JSON), help=f"where to write the raw numbers (default {DEFAULT_JSON.relative_to(ROOT)})")
    parser.add_argument("--threads", type=int, default=None, help="torch threads in each worker (default: torch's own)")
    parser.add_argument(
        "--chat-template",
        action="store_true",
        help="wrap each prompt as one user turn of SmolLM2's chat template on both sides (default: raw prompts, "
        "the paper protocol; raw prompts make this chat model stop at once in generate mode)",
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
    folder = model_dir()
    rows, runs = [], []
    for data in args.data:
        items = load_items(data, args.limit)
        for dtype in args.dtypes:
            for mode in args.modes:
                ours = measure(args, data, items, folder, mode, dtype, "ours")
                lmeval = None if args.no_lmeval else measure(args, data, items, folder, mode, dtype, "lm-eval")
                rows.append(comparison_row(data, len(items), mode, dtype, ours, lmeval))
                runs += [ours] + ([lmeval] if lmeval else [])
    finished = datetime.datetime.now(datetime.timezone.utc)
    report = {
        "date": started.isoformat(timespec="seconds"),
        "seconds": (finished - started).total_seconds(),
        "command": [str(Path(sys.argv[0])), *(argv if argv is not None else sys.argv[1:])],
        "machine": {**machine, "torch_threads": runs[0]["torch_threads"], "load_average_at_end": os.getloadavg()},
        "model_dir": folder,
        "settings": {
            "batch_size": args.batch_size,
            "lmeval_batch_size": args.lmeval_batch_size,
            "limit": args.limit,
            "max_new_tokens": MAX_NEW_TOKENS,
            "chat_template": args.chat_template,
            "prefix_cache": True,
        },
        "rows": rows,
        "runs": runs,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    print(format_table(rows))
    print(f"\nraw numbers: {args.json}")


if __name__ == "__main__":
    main()
