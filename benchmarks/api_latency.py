"""The API client under latency: ``backend=openai`` beside lm-eval's API models against a server that is
latency-bound with unlimited parallel slots, as hosted APIs are.

The server is ``tests/openai_server.FakeOpenAI`` in its own process on 127.0.0.1: every request is
answered after a fixed delay (``--delay``, default 200 ms), each in its own thread. The same ESGenius
MCQ prompts (``MCQTask`` with the esgenius template, as a job builds them; generate mode, 16 new tokens)
are sent at each concurrency (``--concurrency``, default 1, 8, 32, 64) by

* ours: ``OpenAIBackend`` (``api=chat`` and ``api=completions``) behind the request cache (a fresh
  sqlite file per run) with each answer appended to a ``predictions.jsonl``, as a job runs it;
* lm-eval 0.4.13: ``local-chat-completions`` / ``local-completions`` (``num_concurrent``), its
  ``generate_until`` timed inside ``simple_evaluate`` (task loading excluded), same prompts and budget;

beside the ideal, concurrency / delay requests per second. Each run sends ``n`` requests, a multiple of
the concurrency (at most the file's questions; ``--rounds`` at concurrency 1), so every run is a bounded
loop that ends by itself; the clock starts after a probe request (ours opens its connections and starts its
threads beside it, as in a job). Beside each rate: the client process's CPU milliseconds per request over
the timed part (the server is another process). The best of ``--repeats`` runs, the
two sides alternating which goes first. The machine's load (``os.getloadavg``) is recorded before and
after each run: the CPU may be shared. Prints a table, writes benchmarks/api_latency.json (--json PATH).

    .venv/bin/python benchmarks/api_latency.py
    .venv/bin/python benchmarks/api_latency.py --concurrency 32 --repeats 1 --no-lmeval

Needs lm-eval with its API models for the lm-eval side (the ``bench`` extra: ``pip install lm-eval==0.4.13``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # openai_server: FakeOpenAI
sys.path.insert(0, str(ROOT / "benchmarks"))

import backends as bench  # noqa: E402  (job_config, job_requests, write_lmeval_task)
import mcq_throughput as mcq  # noqa: E402  (load_items, machine_info)

DATA = ROOT.parent / "shared" / "data" / "samples" / "esgenius" / "ESGenius_1136q.csv"
DEFAULT_JSON = ROOT / "benchmarks" / "api_latency.json"
MODEL = "fake"
APIS = {"chat": ("/chat/completions", "local-chat-completions"), "completions": ("/completions", "local-completions")}


# --------------------------------------------------------------------------------------------
# The server, in a process of its own.


def serve(delay: float) -> None:
    """Run FakeOpenAI until stdin closes (the benchmark ended or died); print its base URL first."""
    from openai_server import FakeOpenAI

    with FakeOpenAI(delay=delay, answer="A", model=MODEL) as fake:
        print(fake.base_url, flush=True)
        sys.stdin.read()


class ServerProcess:
    def __init__(self, delay: float):
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(delay)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.base_url = self.process.stdout.readline().strip()
        if not self.base_url.startswith("http://127.0.0.1:"):
            self.close()
            raise RuntimeError(f"the fake server did not start: {self.base_url!r}")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# The two clients.


def run_ours(cfg, base_url: str, api: str, requests: list, concurrency: int, folder: Path) -> dict:
    """``OpenAIBackend.run`` behind a fresh request cache, each answer appended to a predictions file."""
    from esgexp.backends.cache import CachedBackend, RequestCache
    from esgexp.backends.openai import OpenAIBackend
    from esgexp.core.outputs import PredictionLog

    inner = OpenAIBackend(
        model_cfg=cfg.model,
        context=None,
        base_url=base_url,
        api=api,
        model=MODEL,
        max_concurrency=concurrency,
        timeout_s=60,
        progress_bar=False,
    )
    inner.check_server("generate")  # the probe, before the clock
    name = f"{api}-{concurrency}-{time.monotonic_ns()}"
    backend = CachedBackend(inner, RequestCache(folder / f"{name}.sqlite"))
    predictions = PredictionLog(folder / f"{name}.jsonl")
    answered = []

    def write(responses: list) -> None:
        predictions.append([r.to_result() for r in responses])
        answered.extend(responses)

    start, cpu = time.perf_counter(), cpu_s()
    backend.run(requests, write)
    seconds, cpu = time.perf_counter() - start, cpu_s() - cpu
    backend.close()
    failed = sum(1 for r in answered if r.failed)
    if len(answered) != len(requests) or failed:
        raise RuntimeError(f"ours: {len(answered)} answers, {failed} failed, for {len(requests)} requests")
    return {
        "seconds": seconds,
        "rps": len(requests) / seconds,
        "cpu_ms": cpu / len(requests) * 1000,
        "stats": backend.stats(),
    }


def run_lmeval(base_url: str, api: str, items: list, concurrency: int) -> dict:
    """lm-eval's API model for ``api`` over ``items`` (``generate_until`` timed, task loading not)."""
    import lm_eval
    from lm_eval.models.openai_completions import LocalChatCompletion, LocalCompletionsAPI
    from lm_eval.tasks import TaskManager

    path, _ = APIS[api]
    model_class = LocalChatCompletion if api == "chat" else LocalCompletionsAPI
    with tempfile.TemporaryDirectory(prefix="esgexp-bench-lmeval-") as folder:
        bench.write_lmeval_task(Path(folder), items)
        lm = model_class(
            base_url=f"{base_url}{path}",
            model=MODEL,
            tokenizer_backend=None,
            tokenized_requests=False,
            num_concurrent=concurrency,
            max_gen_toks=bench.MAX_NEW_TOKENS,
            timeout=60,
        )
        core = {"s": 0.0}
        generate_until = mcq.timed(lm.generate_until, core)

        def counted(*args, **kwargs):
            cpu = cpu_s()
            try:
                return generate_until(*args, **kwargs)
            finally:
                core["cpu"] = core.get("cpu", 0.0) + cpu_s() - cpu

        lm.generate_until = counted
        results = lm_eval.simple_evaluate(
            model=lm,
            tasks=[bench.TASK_NAME],
            task_manager=TaskManager(include_path=folder),
            log_samples=True,
            bootstrap_iters=0,
            apply_chat_template=api == "chat",
        )
    samples = results["samples"][bench.TASK_NAME]
    if len(samples) != len(items):
        raise RuntimeError(f"lm-eval logged {len(samples)} samples for {len(items)} questions")
    answers = [sample["filtered_resps"][0] for sample in samples]
    if any(answer != "A" for answer in answers):
        raise RuntimeError(f"lm-eval read answers other than the server's: {sorted(set(answers))[:5]}")
    return {"seconds": core["s"], "rps": len(items) / core["s"], "cpu_ms": core["cpu"] / len(items) * 1000}


# --------------------------------------------------------------------------------------------
# The grid.


def cpu_s() -> float:
    """CPU seconds of this process so far (every thread, user and system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load() -> float:
    return round(os.getloadavg()[0], 2)


def sizes(n_questions: int, concurrency: list[int], rounds_at_1: int) -> dict[int, int]:
    """Requests per run: a multiple of the concurrency, at most the questions (``rounds_at_1`` at 1)."""
    found = {}
    for c in concurrency:
        n = rounds_at_1 if c == 1 else (n_questions // c) * c
        if n < c:
            raise SystemExit(f"--concurrency {c}: more than the {n_questions} questions")
        found[c] = min(n, n_questions)
    return found


def measure(args, server_url: str, items: list, save) -> list[dict]:
    cfg = bench.job_config("openai")
    _, requests = bench.job_requests(cfg, items)
    counts = sizes(len(items), args.concurrency, args.rounds)
    rows = []
    with tempfile.TemporaryDirectory(prefix="esgexp-bench-api-") as folder:
        for api in args.apis:
            for c in args.concurrency:
                n = counts[c]
                best = {"ours": None, "lmeval": None}
                loads = [load()]
                for repeat in range(args.repeats):
                    sides = ["ours", "lmeval"] if repeat % 2 == 0 else ["lmeval", "ours"]
                    for side in sides:
                        if side == "lmeval" and args.no_lmeval:
                            continue
                        if side == "ours":
                            result = run_ours(cfg, server_url, api, requests[:n], c, Path(folder))
                        else:
                            result = run_lmeval(server_url, api, items[:n], c)
                        loads.append(load())
                        if best[side] is None or result["rps"] > best[side]["rps"]:
                            best[side] = result
                ideal = c / args.delay
                row = {
                    "api": api,
                    "concurrency": c,
                    "n": n,
                    "ideal_rps": ideal,
                    "ours": best["ours"],
                    "lmeval": best["lmeval"],
                    "load_1min": loads,
                }
                rows.append(row)
                print(format_row(row), flush=True)
                save(rows)  # a run stopped part-way keeps its rows
    return rows


HEADER = (
    f"{'api':<12}{'conc':>5}{'n':>5}{'ideal/s':>9}{'ours/s':>9}{'% ideal':>9}{'lm-eval/s':>11}"
    f"{'% ideal':>9}{'ours/lm-eval':>14}{'cpu ms/req':>13}  load"
)


def format_row(row: dict) -> str:
    ours, theirs, ideal = row["ours"], row["lmeval"], row["ideal_rps"]
    theirs_text = f"{theirs['rps']:>11.1f}{theirs['rps'] / ideal:>9.0%}" if theirs else f"{'-':>11}{'-':>9}"
    ratio = f"{ours['rps'] / theirs['rps']:>14.2f}" if theirs else f"{'-':>14}"
    loads = f"{min(row['load_1min']):.1f}-{max(row['load_1min']):.1f}"
    cpu = f"{ours['cpu_ms']:.2f}/{theirs['cpu_ms']:.2f}" if theirs else f"{ours['cpu_ms']:.2f}/-"
    return (
        f"{row['api']:<12}{row['concurrency']:>5}{row['n']:>5}{ideal:>9.1f}{ours['rps']:>9.1f}"
        f"{ours['rps'] / ideal:>9.0%}{theirs_text}{ratio}{cpu:>13}  {loads}"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(DATA), help="an ESGenius-format CSV (default: the shared 1,136q file)")
    parser.add_argument("--limit", type=int, default=640, help="questions to use (default 640)")
    parser.add_argument("--delay", type=float, default=0.2, help="the server's seconds per answer (default 0.2)")
    parser.add_argument("--concurrency", type=lambda t: [int(c) for c in t.split(",")], default=[1, 8, 32, 64])
    parser.add_argument("--rounds", type=int, default=40, help="requests at concurrency 1 (default 40)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per side and setting, best kept (default 2)")
    parser.add_argument("--apis", type=lambda t: t.split(","), default=["chat", "completions"])
    parser.add_argument("--no-lmeval", action="store_true", help="ours only")
    parser.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the results")
    parser.add_argument("--serve", type=float, default=None, help=argparse.SUPPRESS)  # the server process
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.serve is not None:
        serve(args.serve)
        return
    if not Path(args.data).is_file():
        raise SystemExit(f"no ESGenius file at {args.data} (--data PATH)")
    if not args.no_lmeval:
        try:
            import lm_eval  # noqa: F401
        except ImportError:
            raise SystemExit("lm-eval is not installed (pip install lm-eval==0.4.13, or --no-lmeval)") from None
    items = mcq.load_items(args.data, args.limit)
    started = datetime.datetime.now(datetime.UTC)
    print(f"{len(items)} questions from {args.data}; server delay {args.delay * 1000:.0f} ms; load {load()}")
    print(HEADER)
    versions = {name: metadata.version(name) for name in ("requests", "urllib3", "aiohttp")}
    if not args.no_lmeval:
        versions["lm_eval"] = metadata.version("lm_eval")
    report = {
        "started": started.isoformat(timespec="seconds"),
        "data": args.data,
        "n_questions": len(items),
        "delay_s": args.delay,
        "repeats": args.repeats,
        "machine": mcq.machine_info(None),
        "versions": versions,
    }

    def save(rows: list[dict]) -> None:
        uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        Path(args.json).write_text(json.dumps({**report, "uptime": uptime, "rows": rows}, indent=2) + "\n")

    with ServerProcess(args.delay) as server:
        measure(args, server.base_url, items, save)
    print(f"written {args.json}")


if __name__ == "__main__":
    main()
