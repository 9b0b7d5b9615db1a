"""benchmarks/gpu_check.py's own machinery on the CPU: stages guarded, timed and skipped when time runs
out, the JSON kept after each; the answer comparison against float32. (--cpu-smoke runs every stage.)"""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_failed_stage_is_kept_and_the_next_runs_and_a_late_one_is_skipped(tmp_path):
    check = gpu_check().Check(tmp_path / "out.json", budget_s=60, smoke=True)
    assert check.stage("first", 1, lambda: {"value": 1}) == {"value": 1}

    def broken():
        raise ValueError("no device")

    assert check.stage("second", 1, broken) is None
    written = json.loads((tmp_path / "out.json").read_text())["stages"]  # on disk before the third stage
    assert written["first"]["status"] == "ok" and written["first"]["value"] == 1
    assert written["second"]["status"] == "failed" and "ValueError: no device" in written["second"]["error"]
    assert check.stage("third", 3600, lambda: {"ran": True}) is None
    stages = json.loads((tmp_path / "out.json").read_text())["stages"]
    assert stages["third"]["status"] == "skipped" and "needs 3600" in stages["third"]["reason"]


def test_answers_are_compared_with_float32s():
    reference = {
        "1": {"parsed": "A", "scores": {"A": -0.1, "B": -2.0, "C": -3.0}},
        "2": {"parsed": "B", "scores": {"A": -1.0, "B": -0.5, "C": -3.0}},
    }
    half = {
        "1": {"parsed": "A", "scores": {"A": -0.1, "B": -3.5, "C": -3.0}},  # same answer, ranking of B and C swapped
        "2": {"parsed": "A", "scores": {"A": -0.6, "B": -0.7, "C": -3.0}},
    }
    out = gpu_check().agreement(reference, half, "logprob")
    assert out["n"] == 2 and out["identical_answers"] == 0.5 and out["identical_rankings"] == 0.0
    assert abs(out["max_logprob_diff"] - 1.5) < 1e-12
    assert gpu_check().agreement(reference, reference, "generate") == {"n": 2, "identical_answers": 1.0}
