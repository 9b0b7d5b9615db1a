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


def test_later_stages_hold_their_time_back_so_a_slow_stage_cannot_starve_them(tmp_path):
    module = gpu_check()
    plan = {"a": 10, "b": 20, "c": 30}
    check = module.Check(tmp_path / "out.json", budget_s=100, smoke=True, plan=plan)
    seen = {}

    def note():
        seen["deadline_left"] = module.DEADLINE - module.time.monotonic()

    check.stage("a", 10, note)  # b and c hold 50 s back: a's commands must end 50 s before the budget's end
    assert 45 < seen["deadline_left"] <= 50
    assert module.DEADLINE == check.deadline  # restored after the stage
    check.drop("c")  # what c needs failed: it holds nothing back
    check.stage("b", 20, note)
    assert 95 < seen["deadline_left"] <= 100
    # a stage that would eat into the later stages' time is skipped, and says why
    tight = module.Check(tmp_path / "tight.json", budget_s=40, smoke=True, plan=plan)
    assert tight.stage("a", 10, lambda: {"ran": True}) is None
    assert "held for later stages" in tight.report["stages"]["a"]["reason"]
    assert tight.stage("c", 30, lambda: {"ran": True}) == {"ran": True}  # the last stage holds nothing back


def test_the_stages_fit_the_default_budget():
    module = gpu_check()
    assert sum(module.STAGES.values()) <= 450
    assert list(module.STAGES) == ["environment", "install", "model", "hf", "finetune", "throughput", "lora_step"]


def test_a_command_past_its_limit_is_killed_with_what_it_started(tmp_path):
    import sys
    import time

    import pytest

    module = gpu_check()
    pid_file = tmp_path / "child.pid"
    # the command starts a child that would hold the pipes open for a minute, then waits itself
    script = (
        "import subprocess, sys, time; "
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(60)"
    )
    started = time.monotonic()
    with pytest.raises(module.CommandTimeout, match="stopped after"):
        module.run_command([sys.executable, "-c", script], timeout=3)
    assert time.monotonic() - started < 30
    child = int(pid_file.read_text())
    time.sleep(0.2)
    assert not alive(child)


def alive(pid: int) -> bool:
    """Running (a killed process whose new parent has not reaped it yet is a zombie: not alive)."""
    import os

    stat = Path(f"/proc/{pid}/stat")
    if stat.parent.parent.joinpath("self").exists():  # Linux: the state after the command's name
        return stat.exists() and stat.read_text().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_throughput_figures_count_flops_as_the_roofline_does():
    module = gpu_check()
    roof = module.import_benchmark("mcq_throughput")
    inference = {
        "seconds": 2.0,
        "scorer": "LogprobScorer",
        "n": 5,
        "batch_size": 2,
        "token_lengths": [110, 108, 105, 104, 101],  # longest first, as PromptDataModule serves them
        "prefix_tokens": 100,
        "parameters": {"non_embedding": 1000, "lm_head": 500},
        "model_dir": "m",
        "dtype": "bfloat16",
        "device": "cuda:0",
    }
    job = module.job_throughput({"load_s": 1.0, "job_s": 5.0}, inference, roof)
    # the prefix once, then batches of suffixes padded to their longest: (10, 8) (5, 4) (1)
    assert job["tokens_computed"] == 100 + 2 * 10 + 2 * 5 + 1 == roof.ours_tokens([110, 108, 105, 104, 101], 100, 2)
    assert job["tflop"] == (2 * 1000 * 131 + 2 * 500 * 5) / 1e12
    assert job["questions_per_s"] == 2.5 and job["rows_per_batch"] == round(31 / 3)
    assert job["prompt_tokens"] == 528
