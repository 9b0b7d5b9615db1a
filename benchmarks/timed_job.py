"""``python -m esgexp ARGS`` with a stopwatch: the same job, with its inference timed from inside.

    python benchmarks/timed_job.py TIMING.json [esgexp arguments ...]

runs esgexp's command line exactly as ``python -m esgexp`` does (runpy, same arguments, a sweep with -m
too) after wrapping three of its functions, none of which changes what they do:

* ``esgexp.run.run_job``: each job's seconds end to end (data, prompts, model load, inference, scoring,
  the run folder and the offline tracking record);
* ``HFBackend.loaded_model``: the seconds of the model's load (its first call);
* ``esgexp.models.inference.run_inference``: the seconds of the inference itself (the Lightning
  ``Trainer.predict`` over every batch, after the model is loaded; on a GPU synchronised before and after),
  the prompts' token counts, the batch size, the shared prefix the logprob scorer caches, the model's
  parameters (``benchmarks/mcq_throughput.py``'s ``parameter_counts``: the roofline's FLOPs) and its folder,
  and on a GPU the peak memory allocated.

After each inference and each job, TIMING.json is rewritten: a list with one record per job (a job that
was cut off keeps what it had). benchmarks/gpu_check.py's throughput stage reads it.
"""

from __future__ import annotations

import importlib.util
import json
import runpy
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def mcq_throughput():
    """benchmarks/mcq_throughput.py as a module (its top level imports the standard library only)."""
    spec = importlib.util.spec_from_file_location("mcq_throughput", ROOT / "benchmarks" / "mcq_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install(target: Path) -> list[dict]:
    """Wrap the job's functions; the records they fill are written to ``target`` as they change."""
    import torch

    import esgexp.models.inference as inference
    import esgexp.run as run
    from esgexp.backends.hf import HFBackend

    counts = mcq_throughput().parameter_counts
    records: list[dict] = []
    cuda = torch.cuda.is_available()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def write() -> None:
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
        tmp.replace(target)

    def current() -> dict:
        if not records or "job_s" in records[-1]:
            records.append({"inferences": []})
        return records[-1]

    run_job = run.run_job

    def timed_run_job(cfg):
        record = current()
        record["batch_size_setting"] = cfg.trainer.get("batch_size")
        start = time.perf_counter()
        try:
            return run_job(cfg)
        finally:
            record["job_s"] = time.perf_counter() - start
            write()

    loaded_model = HFBackend.loaded_model

    def timed_loaded_model(self):
        if self._model is not None:
            return self._model
        sync()
        start = time.perf_counter()
        model = loaded_model(self)
        sync()
        current()["load_s"] = time.perf_counter() - start
        return model

    run_inference = inference.run_inference

    def timed_run_inference(model, scorer, data, write_results, *args, **kwargs):
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        sync()
        start = time.perf_counter()
        run_inference(model, scorer, data, write_results, *args, **kwargs)
        sync()
        seconds = time.perf_counter() - start
        entry = {
            "seconds": seconds,
            "scorer": type(scorer).__name__,
            "n": len(data.examples),
            "batch_size": data.batch_size,
            "token_lengths": [len(tokens) for _, tokens in data.examples],
            "prefix_tokens": len(getattr(scorer, "prefix_ids", None) or ()),
            "parameters": counts(model),
            "model_dir": str(getattr(model.config, "name_or_path", "")),
            "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "device": str(next(model.parameters()).device),
        }
        if cuda:
            entry["cuda_peak_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
        current()["inferences"].append(entry)
        write()

    run.run_job = timed_run_job
    HFBackend.loaded_model = timed_loaded_model
    inference.run_inference = timed_run_inference
    return records


USAGE = "usage: python benchmarks/timed_job.py TIMING.json [esgexp arguments ...]"


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(USAGE)
    if sys.argv[1] in ("-h", "--help"):
        print(f"{USAGE}\n\n{__doc__}")
        return
    target = Path(sys.argv[1])
    sys.path.insert(0, str(ROOT))
    install(target)
    sys.argv = [str(ROOT / "esgexp" / "__main__.py"), *sys.argv[2:]]
    runpy.run_module("esgexp", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
