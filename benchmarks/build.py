"""Benchmark construction: pages/s of table extraction on the real reports; items/s per builder with
SmolLM2-135M on this CPU (backend=hf, xgrammar constrained decoding) and through the local
OpenAI-compatible server (llama.cpp, response_format json_object) at concurrency 4; and the share of
candidates that survive each stage.

The corpus is the two real report PDFs in ../shared/data/samples/pdfs, ingested with the default
chunker and ``tables=true`` into a temporary folder (table extraction is timed per report first). Each build runs through ``esgexp.builders.run.run_build`` exactly as
``python -m esgexp.build`` runs it, with the request cache off (every request reaches the model), on
the first ``--candidates`` candidates. Throughput: candidates / build seconds (model load included
for hf) and built items / build seconds. Prints a table, writes benchmarks/build.json (--json PATH).

    .venv/bin/python benchmarks/build.py [--candidates 6] [--builders esgbench,esgenius,sustainableqa] [--no-server]
        [--set builder.max_question_chars=120] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # openai_server: LlamaServer
sys.path.insert(0, str(ROOT / "benchmarks"))

import mcq_throughput as mcq  # noqa: E402  (machine description, CPU capability)

PDFS = ROOT.parent / "shared" / "data" / "samples" / "pdfs"
DEFAULT_JSON = ROOT / "benchmarks" / "build.json"


def table_rates(pdfs: Path) -> list[dict]:
    """pages/s of the default table extractor (``rules``) per report PDF in ``pdfs``, and the tables it keeps."""
    from esgexp.data.pdf import read_pages
    from esgexp.data.tables import TableExtractor

    extractor, rows = TableExtractor(), []
    for pdf in sorted(pdfs.glob("*.pdf")):
        n_pages = len(read_pages(pdf))
        started = time.perf_counter()
        kept = extractor.keep(extractor.found(pdf), pdf.stem)
        seconds = time.perf_counter() - started
        rows.append(
            {
                "report": pdf.stem,
                "pages": n_pages,
                "seconds": round(seconds, 2),
                "pages_per_s": round(n_pages / seconds, 2),
                "tables": len(kept),
            }
        )
    return rows


def make_corpus(folder: Path, source: Path) -> Path:
    """The report PDFs of ``source`` (only the PDFs) ingested with the default chunker and their tables."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from esgexp.core.config import CONF_DIR
    from esgexp.data.corpus import ingest
    from esgexp.data.tables import TableExtractor

    pdfs = folder / "pdfs"
    pdfs.mkdir(parents=True)
    for pdf in sorted(source.glob("*.pdf")):
        (pdfs / pdf.name).symlink_to(pdf)
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        chunker = instantiate(compose("ingest", overrides=["corpus.pdf_dir=x", "corpus.name=x"]).chunker)
    ingest(pdfs, folder / "corpus", chunker, progress=False, tables=TableExtractor())
    return folder / "corpus"


def run_one(root: Path, corpus: Path, builder: str, candidates: int, backend: list[str], settings: list[str]) -> dict:
    from hydra import compose, initialize_config_dir

    from esgexp.builders.run import run_build
    from esgexp.core.config import CONF_DIR

    out = root / f"{builder}-{backend[0].split('=')[1]}"
    overrides = [
        f"paths.root_dir={root}",
        f"out={out}",
        f"corpus={corpus}",
        f"builder={builder}",
        "cache=off",
        "progress=false",
        "trainer.progress_bar=false",
        f"builder.max_candidates={candidates}",
        *backend,
        *settings,
    ]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("build", overrides=overrides)
    started = time.perf_counter()
    error = None
    try:
        run_build(cfg)
    except Exception as exc:  # a build with no surviving item still has its report
        error = str(exc)
    seconds = time.perf_counter() - started
    report = json.loads((out / "build_report.json").read_text())
    stages = report["stages"]
    first = stages["candidates"]["n_out"]
    return {
        "builder": builder,
        "backend": backend[0].split("=")[1],
        "settings": settings,
        "seconds": round(seconds, 2),
        "candidates": first,
        "items": report.get("n_items", 0),
        "candidates_per_s": round(first / seconds, 4),
        "items_per_s": round(report.get("n_items", 0) / seconds, 4),
        "survival": {
            name: round(s["n_out"] / first, 3) if first else 0.0 for name, s in stages.items() if name != "candidates"
        },
        "discarded": {name: s["discarded"] for name, s in stages.items() if s["discarded"]},
        "error": error,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=int, default=6)
    parser.add_argument("--builders", default="esgbench,esgenius,sustainableqa")
    parser.add_argument("--pdfs", default=str(PDFS), help="the report PDFs (default: the shared samples)")
    parser.add_argument("--no-server", action="store_true", help="skip the llama.cpp server runs")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a build override for every run (repeatable)"
    )
    parser.add_argument("--json", default=str(DEFAULT_JSON))
    args = parser.parse_args(argv)
    pdfs = Path(args.pdfs)
    if not pdfs.is_dir():
        sys.exit(f"the report PDFs are not at {pdfs} (--pdfs DIR)")
    tables = table_rates(pdfs)
    for entry in tables:
        print(json.dumps(entry), flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        corpus = make_corpus(root / "corpus-src", pdfs)
        backends = [["backend=hf"]]
        server = None
        if not args.no_server:
            from openai_server import LlamaServer, gguf_path

            server = LlamaServer(gguf_path(), root / "server.log", n_threads=os.cpu_count() or 1).start(timeout=300)
            backends.append(
                [
                    "backend=openai",
                    f"backend.base_url={server.base_url}",
                    "backend.response_format=json_object",
                    "backend.max_concurrency=4",
                    "backend.timeout_s=600",
                ]
            )
        try:
            for builder in args.builders.split(","):
                for backend in backends:
                    rows.append(run_one(root, corpus, builder, args.candidates, backend, args.set))
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            if server is not None:
                server.stop()
    print(
        f"\n{'builder':<10} {'backend':<8} {'cand.':>5} {'items':>5} {'s':>8} {'cand/s':>7} {'items/s':>7}  survival per stage"
    )
    for r in rows:
        survival = ", ".join(f"{k} {v:.2f}" for k, v in r["survival"].items())
        print(
            f"{r['builder']:<10} {r['backend']:<8} {r['candidates']:>5} {r['items']:>5} {r['seconds']:>8.1f} "
            f"{r['candidates_per_s']:>7.3f} {r['items_per_s']:>7.3f}  {survival}"
        )
    print(f"\n{'report':<20} {'pages':>5} {'s':>6} {'pages/s':>7} {'tables':>6}")
    for t in tables:
        print(f"{t['report']:<20} {t['pages']:>5} {t['seconds']:>6.1f} {t['pages_per_s']:>7.2f} {t['tables']:>6}")
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": mcq.describe_capability(mcq.cpu_capability()),
        "candidates": args.candidates,
        "table_extraction": tables,
        "runs": rows,
    }
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {args.json}")


if __name__ == "__main__":
    main()
