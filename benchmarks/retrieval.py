"""Retrieval speed: esgexp's BM25 beside bm25s called directly, and dense encoding throughput.

* BM25: index time and query time (1,000 queries, k=10) over synthetic passages (default 20,000,
  about 100 words each, seeded ESG-flavoured text), through ``BM25Retriever`` and through bm25s
  directly with the same settings (Lucene scoring, k1=1.5, b=0.75, English stop words, PyStemmer
  English). Both sides include tokenisation. ratio = ours / direct (goal: <= 1.2); "top-10 same"
  is the share of queries whose top-10 id sets agree (ties at the 10th score may differ). Each
  timing is the best of ``--repeat`` rounds, the two sides alternating which goes first.
  Scoped search (each query limited to one of 50 reports) is timed for ours only.
* Dense encoding: the first ``--dense-n`` passages (default 1,500) of the PDFs in ``--dense-pdfs`` (default the
  two long shared reports), cut by the default chunker, encoded by the bundled all-MiniLM-L6-v2 through
  sentence-transformers' own ``encode`` in float32 (the anchor) and through ``DenseRetriever.encode`` in float32
  and bfloat16 in each runtime, each at every ``--batch-sizes``; the sides alternate which goes first, best of
  ``--dense-repeat`` rounds; passages/s against the anchor's best batch size, the vectors' cosine to the
  anchor's and the share of each passage's 10 nearest neighbours kept. ``DenseRetriever.encode`` runs in each of
  ``--runtimes`` (torch, and OpenVINO where it is installed). The roofline: ``F.linear``'s GFLOP/s at
  the encoder's layer shapes in float32 and bfloat16, measured in the same run; each run's FLOPs are counted
  over the batches as they are padded (``encode_flops``).
* Dense search: queries/s of ``DenseRetriever.search`` over the first ``--dense-n`` synthetic passages.
* Recall: recall@5 and @10 of ``retriever=dense`` in each runtime and precision on the ClimRetrieve report-level
  sample (``--climretrieve``) and the bundled SustainableQA sample, computed as a retrieval job computes them.

    .venv/bin/python benchmarks/retrieval.py            # prints Markdown tables, writes retrieval.json
    .venv/bin/python benchmarks/retrieval.py --threads 1 --dense-n 600   # on a shared machine
    .venv/bin/python benchmarks/retrieval.py --smoke --dense-pdfs DIR   # every part at its smallest
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import sys
import tempfile
import time
from functools import partial
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))  # the sibling scripts (ingestion's chunker, mcq_throughput's roofline)

import numpy as np  # noqa: E402

from esgexp.core.records import Passage  # noqa: E402
from esgexp.retrieval.bm25 import TOKEN_PATTERN, BM25Retriever  # noqa: E402
from esgexp.retrieval.dense import DenseRetriever  # noqa: E402

DEFAULT_JSON = ROOT / "benchmarks" / "retrieval.json"
SAMPLES = ROOT.parent / "shared" / "data" / "samples"
ESG_WORDS = (
    "emissions scope carbon climate water withdrawal energy renewable waste landfill recycling board "
    "diversity women directors governance audit committee risk transition physical scenario pathway "
    "net zero target baseline intensity methane supplier value chain biodiversity deforestation land "
    "employees safety injury training human rights labour community stakeholder materiality disclosure "
    "taxonomy alignment capex opex revenue green bond sustainability report assurance verification tcfd "
    "issb sasb gri csrd esrs double impact financial investors engagement remuneration bribery corruption "
    "ethics whistleblowing data privacy cybersecurity product packaging plastic circular economy fleet "
    "electricity purchased heating cooling offsets removals credits science based initiative reduction"
).split()
FILLER = "the of and to in a is for on by with as at from our we this that are was were be has have".split()
SYLLABLES = "ka ri to me lo sa vi ne du pa gor tel mun ber sta fi con pro tra ment".split()


def synthetic_corpus(n_passages: int, n_queries: int, seed: int = 0) -> tuple[list[Passage], list[str], list[str]]:
    """Passages of 80-120 words from a Zipf-weighted vocabulary (ESG terms, pseudo-words, filler),
    spread over 50 reports; queries of 4-10 words, most taken from one passage. Returns passages,
    queries and each query's report (for scoped search)."""
    rng = random.Random(seed)
    pseudo = sorted({"".join(rng.choices(SYLLABLES, k=rng.randint(2, 4))) for _ in range(6000)})
    vocab = ESG_WORDS + pseudo
    rng.shuffle(vocab)
    weights = [1 / (rank + 1) for rank in range(len(vocab))]
    passages = []
    for i in range(n_passages):
        words = rng.choices(vocab, weights, k=rng.randint(80, 120))
        words = [rng.choice(FILLER) if rng.random() < 0.3 else w for w in words]
        passages.append(
            Passage(f"p{i}", f"report{i % 50}", " ".join(words).capitalize() + ".", 1 + i // 50, 1 + i // 50)
        )
    queries, scopes = [], []
    for _ in range(n_queries):
        source = rng.choice(passages)
        words = rng.sample(source.text.rstrip(".").split(), rng.randint(3, 8)) + rng.choices(
            vocab, weights, k=rng.randint(1, 2)
        )
        queries.append(" ".join(words))
        scopes.append(source.doc_id)
    return passages, queries, scopes


def timed(fn):
    """(seconds, result) of one call."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def best_of_pair(repeat: int, ours, direct):
    """Best seconds and last result of each side over ``repeat`` rounds; the side that goes first
    alternates, so a burst of load from other processes does not favour either."""
    best = {"ours": float("inf"), "direct": float("inf")}
    results = {}
    for round_ in range(repeat):
        order = [("ours", ours), ("direct", direct)]
        for side, fn in order if round_ % 2 == 0 else order[::-1]:
            seconds, results[side] = timed(fn)
            best[side] = min(best[side], seconds)
    return best, results


def bench_bm25(passages: list[Passage], queries: list[str], scopes: list[str], repeat: int, k: int = 10) -> dict:
    import bm25s
    import Stemmer

    texts = [p.text for p in passages]
    stemmer = Stemmer.Stemmer("english")

    def direct_index():
        retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
        retriever.index(
            bm25s.tokenize(
                texts, stopwords="english", stemmer=stemmer, token_pattern=TOKEN_PATTERN, show_progress=False
            ),
            show_progress=False,
        )
        return retriever

    def ours_index():
        retriever = BM25Retriever(k1=1.5, b=0.75, stemmer="english", stopwords="english")
        retriever.index(passages)
        return retriever

    def direct_search():
        tokens = bm25s.tokenize(
            queries, stopwords="english", stemmer=stemmer, token_pattern=TOKEN_PATTERN, show_progress=False
        )
        return direct.retrieve(tokens, k=k, show_progress=False).documents

    index_s, built = best_of_pair(repeat, ours_index, direct_index)
    ours, direct = built["ours"], built["direct"]
    query_s, found = best_of_pair(repeat, lambda: ours.search(queries, k), direct_search)
    scoped_s = min(timed(lambda: ours.search(queries, k, scopes))[0] for _ in range(repeat))
    same = sum(
        {f"p{r}" for r in rows} == {h.passage_id for h in hits}
        for rows, hits in zip(found["direct"].tolist(), found["ours"])
    )
    return {
        "passages": len(passages),
        "queries": len(queries),
        "k": k,
        "index_s": {"ours": index_s["ours"], "bm25s": index_s["direct"], "ratio": index_s["ours"] / index_s["direct"]},
        "query_s": {"ours": query_s["ours"], "bm25s": query_s["direct"], "ratio": query_s["ours"] / query_s["direct"]},
        "queries_per_s": {
            "ours": len(queries) / query_s["ours"],
            "bm25s": len(queries) / query_s["direct"],
            "ours_scoped": len(queries) / scoped_s,
        },
        "top10_same": same / len(queries),
    }


# --- Dense encoding against sentence-transformers' plain float32 encode -----------------------------------
def report_passages(folder: Path, n: int) -> list[Passage]:
    """The first ``n`` passages of the PDFs in ``folder``, cut by the default chunker (conf/chunker/paragraphs)."""
    from ingestion import PARAGRAPHS

    from esgexp.data.pdf import read_pages

    passages = [p for pdf in sorted(folder.glob("*.pdf")) for p in PARAGRAPHS.chunk(pdf.stem, read_pages(pdf))]
    if not passages:
        raise SystemExit(f"no passages: no readable PDF in {folder} (--dense-pdfs DIR)")
    return passages[:n]


def encoder_shapes(encoder) -> tuple[list[tuple[str, int, int]], int]:
    """(name, in, out) of one BERT layer's linear layers and the number of layers."""
    config = encoder[0].auto_model.config
    hidden, inner = config.hidden_size, config.intermediate_size
    shapes = [("qkv", hidden, 3 * hidden), ("attention out", hidden, hidden), ("up", hidden, inner)]
    return [*shapes, ("down", inner, hidden)], config.num_hidden_layers


def encode_flops(encoder, texts: list[str], batch_size: int, by_tokens: bool = False, multiple: int = 1) -> dict:
    """The FLOPs of encoding ``texts`` in batches longest first, by characters as sentence-transformers sorts
    them (``by_tokens``: by word pieces, as the OpenVINO runtime sorts them), each batch padded to its longest
    text rounded up to a ``multiple`` of word pieces, cut at ``max_seq_length``: the linear layers' 2 x in x out per token and attention's 4 x length x
    hidden per token per layer; ``padding_share``: the padded tokens' share."""
    shapes, layers = encoder_shapes(encoder)
    hidden = encoder[0].auto_model.config.hidden_size
    per_token = 2 * layers * sum(k * n for _, k, n in shapes)
    lengths = [min(len(ids), encoder.max_seq_length) for ids in encoder.tokenizer(texts)["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: -(lengths[i] if by_tokens else len(texts[i])))
    flops = padded = 0
    for start in range(0, len(order), batch_size):
        batch = [lengths[i] for i in order[start : start + batch_size]]
        width = -(-max(batch) // multiple) * multiple
        tokens = width * len(batch)
        padded += tokens
        flops += tokens * (per_token + 4 * layers * width * hidden)
    return {"flops": flops, "tokens": sum(lengths), "padding_share": 1 - sum(lengths) / padded}


def neighbours_kept(vectors: np.ndarray, reference: np.ndarray, k: int = 10) -> float:
    """The share of each passage's top-``k`` neighbours (by inner product, itself left out) under
    ``reference`` that ``vectors`` keeps (k is at most the other passages' number)."""
    k = min(k, len(reference) - 1)

    def top(matrix: np.ndarray) -> np.ndarray:
        sims = matrix @ matrix.T
        np.fill_diagonal(sims, -np.inf)
        return np.argsort(-sims, axis=1)[:, :k]

    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(top(vectors), top(reference))]))


def runnable_settings(runtimes: list[str]) -> list[tuple[str, str]]:
    """Each (runtime, precision) of ``runtimes`` in float32 and bfloat16 that this CPU can run as named: OpenVINO's
    bfloat16 only where its CPU plugin has bf16 (elsewhere it compiles float32, and esgexp refuses it)."""
    from esgexp.retrieval.openvino_encoder import computes_bf16

    settings = [(r, p) for r in runtimes for p in ("float32", "bfloat16")]
    return [(r, p) for r, p in settings if (r, p) != ("openvino", "bfloat16") or computes_bf16()]


def bench_dense(
    passages: list[Passage], batch_sizes: list[int], repeat: int, mm_seconds: float, settings: list[tuple[str, str]]
) -> dict:
    """passages/s of sentence-transformers' own ``encode`` in float32 (the anchor, at each batch size) and of
    ``DenseRetriever.encode`` in each (runtime, precision) of ``settings`` at each batch size, the two sides alternating
    which goes first, the best of ``repeat`` rounds each; the vectors against the anchor's; the linear
    layers' GFLOP/s in float32 and bfloat16 at the encoder's shapes (the roofline) in the same run."""
    import torch
    from mcq_throughput import linear_rates

    from esgexp.retrieval.dense import PRECISIONS, encoder_precision, encoder_runtime
    from esgexp.retrieval.openvino_encoder import PAD_MULTIPLE

    texts = [p.text for p in passages]
    default = DenseRetriever(device="cpu")
    encoder = default.encoder()  # loading is not timed
    precisions = ["float32", "bfloat16"]
    sides = {("sentence-transformers", "torch", "float32", b): None for b in batch_sizes}
    sides |= {("esgexp", r, p, b): None for r, p in settings for b in batch_sizes}

    def anchor(batch_size: int) -> np.ndarray:
        return encoder.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)

    def ours(runtime: str, precision: str, batch_size: int) -> np.ndarray:
        retriever = DenseRetriever(device="cpu", precision=precision, runtime=runtime, batch_size=batch_size)
        return retriever.encode(texts)

    for runtime, precision in settings:  # converting and compiling an encoder happens once per process: not timed
        DenseRetriever(device="cpu", precision=precision, runtime=runtime).encode(texts[:8])

    seconds: dict = {key: float("inf") for key in sides}
    vectors: dict = {}
    for round_ in range(repeat):
        keys = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
        for key in keys:
            side, runtime, precision, batch_size = key
            work = (
                partial(anchor, batch_size)
                if side == "sentence-transformers"
                else partial(ours, runtime, precision, batch_size)
            )
            took, vectors[key] = timed(work)
            seconds[key] = min(seconds[key], took)
    reference = vectors[("sentence-transformers", "torch", "float32", batch_sizes[0])]
    shapes, _ = encoder_shapes(encoder)
    rows = 32 * 128  # a batch of 32 passages of about 128 word pieces: the report passages' size
    rates = linear_rates(shapes, rows, precisions, mm_seconds)
    runs = []
    for (side, runtime, precision, batch_size), took in seconds.items():
        compiled = runtime == "openvino"
        work = encode_flops(encoder, texts, batch_size, by_tokens=compiled, multiple=PAD_MULTIPLE if compiled else 1)
        got = vectors[(side, runtime, precision, batch_size)]
        runs.append(
            {
                "side": side,
                "runtime": runtime,
                "precision": precision,
                "batch_size": batch_size,
                "seconds": took,
                "passages_per_s": len(texts) / took,
                "gflops": work["flops"] / took / 1e9,
                "roofline_share": work["flops"] / took / 1e9 / rates[precision]["rate_gflops"],
                "padding_share": work["padding_share"],
                "min_cosine_to_float32": float((got * reference).sum(axis=1).min()),
                "top10_neighbours_kept": neighbours_kept(got, reference),
            }
        )
    best_anchor = max((r for r in runs if r["side"] == "sentence-transformers"), key=lambda r: r["passages_per_s"])
    for r in runs:
        r["x_anchor_best"] = r["passages_per_s"] / best_anchor["passages_per_s"]
    return {
        "passages": len(texts),
        "mean_tokens_per_passage": encode_flops(encoder, texts, 1)["tokens"] / len(texts),
        "max_seq_length": encoder.max_seq_length,
        "torch_threads": torch.get_num_threads(),
        "precision_auto_here": encoder_precision("auto", "cpu"),
        "runtime_auto_here": encoder_runtime("auto", "cpu"),
        "precisions": list(PRECISIONS),
        "default_batch_size": default.batch_size,
        "linear_rates": {"rows": rows, **rates},
        "runs": runs,
    }


def bench_dense_search(passages: list[Passage], queries: list[str], k: int = 10) -> dict:
    """Queries/s of ``DenseRetriever.search`` (the default settings) over ``passages``, indexed first."""
    retriever = DenseRetriever(device="cpu")
    retriever.index(passages)
    query_s, _ = timed(lambda: retriever.search(queries, k))
    return {"passages": len(passages), "queries": len(queries), "queries_per_s": len(queries) / query_s}


# --- Recall at each precision on the shared retrieval samples --------------------------------------------
RECALL_SETS = {
    "ClimRetrieve": ["experiment=climretrieve_retrieval", "dataset=climretrieve"],
    "SustainableQA": ["experiment=sustainableqa_retrieval", "dataset=sustainableqa_sample"],
}


def recall_by_setting(climretrieve_csv: Path, settings: list[tuple[str, str]]) -> dict:
    """recall@5 and @10 of ``retriever=dense`` at each (runtime, precision) of ``settings``, as a retrieval job computes them
    (``graded_retrieval``), on the ClimRetrieve report-level sample and the bundled SustainableQA sample."""
    from hydra.utils import instantiate

    from esgexp.core.config import compose_config
    from esgexp.tasks.retrieval import graded_retrieval

    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, overrides in RECALL_SETS.items():
            if name == "ClimRetrieve":
                if not climretrieve_csv.is_file():
                    results[name] = {"skipped": f"no ClimRetrieve sample at {climretrieve_csv}"}
                    continue
                overrides = [*overrides, f"dataset.path={climretrieve_csv}"]
            results[name] = {}
            for runtime, precision in settings:
                cfg = compose_config(
                    "config",
                    [
                        *overrides,
                        "retriever=dense",
                        "retriever.device=cpu",
                        f"retriever.precision={precision}",
                        f"retriever.runtime={runtime}",
                        f"paths.index_dir={scratch}",
                        f"paths.output_dir={scratch}",
                        "retrieval.ks=[5,10,15]",
                    ],
                )
                loaded = instantiate(cfg.dataset).load()
                _, metrics = graded_retrieval(cfg, loaded, [5, 10, 15])
                results[name][f"{runtime} {precision}"] = {
                    "queries": metrics["n_queries"],
                    "recall@5": metrics["recall@5"],
                    "recall@10": metrics["recall@10"],
                }
    return results


def installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def machine() -> dict:
    """Where the numbers were taken: the CPU (model name, torch's view of its bf16), load, versions."""
    from mcq_throughput import cpu_capability, cpu_model

    return {
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_capability": cpu_capability(),
        "cpus": os.cpu_count(),
        "load_avg_at_start": os.getloadavg(),
        "python": platform.python_version(),
        **{
            name: metadata.version(name)
            for name in ("bm25s", "PyStemmer", "numpy", "sentence-transformers", "torch", "faiss-cpu", "openvino")
            if installed(name)
        },
    }


def table(results: dict) -> str:
    bm25, dense, search = results["bm25"], results["dense"], results["dense_search"]
    rows = [
        "| measurement | esgexp | bm25s direct | ratio |",
        "|---|---|---|---|",
        f"| BM25 index, {bm25['passages']:,} passages (s) | {bm25['index_s']['ours']:.2f} | {bm25['index_s']['bm25s']:.2f} | {bm25['index_s']['ratio']:.2f}x |",
        f"| BM25 search, {bm25['queries']:,} queries, k={bm25['k']} (s) | {bm25['query_s']['ours']:.2f} | {bm25['query_s']['bm25s']:.2f} | {bm25['query_s']['ratio']:.2f}x |",
        f"| BM25 queries/s | {bm25['queries_per_s']['ours']:.0f} | {bm25['queries_per_s']['bm25s']:.0f} | |",
        f"| BM25 queries/s, scoped to one of 50 reports | {bm25['queries_per_s']['ours_scoped']:.0f} | | |",
        f"| BM25 top-10 id sets identical | {bm25['top10_same']:.1%} | | |",
        f"| dense search, {search['queries']:,} queries over {search['passages']:,}, queries/s | {search['queries_per_s']:.1f} | | |",
        "",
        f"Dense encoding, {dense['passages']:,} report passages ({dense['mean_tokens_per_passage']:.0f} word pieces "
        f"on average), {dense['torch_threads']} torch thread(s); here precision=auto is {dense['precision_auto_here']}, "
        f"runtime=auto is {dense['runtime_auto_here']}; "
        f"linear-layer roofline (F.linear, {dense['linear_rates']['rows']} rows): "
        + ", ".join(f"{p} {dense['linear_rates'][p]['rate_gflops']:.0f} GFLOP/s" for p in ("float32", "bfloat16")),
        "",
        "| side | runtime | precision | batch | passages/s | x anchor's best | GFLOP/s | roofline share | padding "
        "| min cos to fp32 | top-10 kept |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows += [
        f"| {r['side']} | {r['runtime']} | {r['precision']} | {r['batch_size']} | {r['passages_per_s']:.1f} | {r['x_anchor_best']:.2f} | "
        f"{r['gflops']:.0f} | {r['roofline_share']:.0%} | {r['padding_share']:.0%} | {r['min_cosine_to_float32']:.5f} | "
        f"{r['top10_neighbours_kept']:.1%} |"
        for r in dense["runs"]
    ]
    if results["not_run_here"]:
        rows += ["", f"Not run on this CPU (no bf16 in OpenVINO's CPU plugin): {', '.join(results['not_run_here'])}"]
    rows += ["", "| dataset | runtime, precision | queries | recall@5 | recall@10 |", "|---|---|---|---|---|"]
    for name, by_setting in results["recall"].items():
        if "skipped" in by_setting:
            rows.append(f"| {name} | {by_setting['skipped']} | | | |")
            continue
        rows += [
            f"| {name} | {p} | {m['queries']} | {m['recall@5']:.4f} | {m['recall@10']:.4f} |"
            for p, m in by_setting.items()
        ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=20_000, help="synthetic passages for BM25")
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5, help="rounds of each BM25 timing (best kept)")
    parser.add_argument("--dense-pdfs", type=Path, default=SAMPLES / "pdfs-large", help="the reports dense encodes")
    parser.add_argument("--dense-n", type=int, default=1_500, help="passages encoded by the dense retriever")
    parser.add_argument("--dense-repeat", type=int, default=2, help="rounds of each dense timing (best kept)")
    parser.add_argument("--batch-sizes", type=lambda t: [int(b) for b in t.split(",")], default=[8, 16, 32])
    parser.add_argument(
        "--runtimes",
        type=lambda t: t.split(","),
        default=["torch", "openvino"] if installed("openvino") else ["torch"],
        help="what runs DenseRetriever's encoder (default: torch, and openvino where it is installed)",
    )
    parser.add_argument("--mm-seconds", type=float, default=1.0, help="seconds per shape of the roofline")
    parser.add_argument(
        "--climretrieve", type=Path, default=SAMPLES / "climretrieve" / "report_level_sample.csv", help="recall's data"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--smoke", action="store_true", help="the smallest run of every part (a check, not numbers)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args(argv)
    if args.smoke:
        args.passages, args.queries, args.repeat, args.dense_n, args.dense_repeat = 200, 20, 1, 8, 1
        args.batch_sizes, args.mm_seconds = [4], 0.01
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    passages, queries, scopes = synthetic_corpus(args.passages, args.queries, args.seed)
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "seed": args.seed,
        "mean_words_per_passage": sum(len(p.text.split()) for p in passages) / len(passages),
        "bm25": bench_bm25(passages, queries, scopes, args.repeat),
        "dense_search": bench_dense_search(passages[: args.dense_n], queries),
        "dense": bench_dense(
            report_passages(args.dense_pdfs, args.dense_n),
            args.batch_sizes,
            args.dense_repeat,
            args.mm_seconds,
            runnable_settings(args.runtimes),
        ),
        "recall": recall_by_setting(args.climretrieve, runnable_settings(args.runtimes)),
        "not_run_here": [
            f"{r} {p}"
            for r in args.runtimes
            for p in ("float32", "bfloat16")
            if (r, p) not in runnable_settings(args.runtimes)
        ],
        "load_avg_at_end": os.getloadavg(),
    }
    print(table(results))
    args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"\nload average at start {results['machine']['load_avg_at_start']}, at end {results['load_avg_at_end']}")
    print(f"written: {args.json}")


if __name__ == "__main__":
    main()
