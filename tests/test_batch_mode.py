"""Batch mode of backend=openai, from the command line: OpenAI's Batch API (a stand-in with the documented Files and
Batches endpoints, tests/batch_api.py, answering through the stand-in API or the real llama.cpp server), its failed
and expired lines, a run killed between submission and completion and then resumed, and a batch file run
elsewhere (as ``vllm run-batch`` does) read back with ``backend.batch_output``."""

import json
import time
from pathlib import Path

import pytest
from batch_api import FakeBatchAPI, run_batch_file
from cli import run_cli, start_cli
from helpers import read_jsonl
from openai_server import FakeOpenAI

REPO = Path(__file__).resolve().parent.parent
PRICE = "+model.price={prompt: 2.0, completion: 8.0, batch_discount: 0.5}"


def batch_args(base_url: str, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "backend=openai",
        f"backend.base_url={base_url}",
        "backend.batch=true",
        "backend.batch_poll_s=0.05",
        "dataset.limit=8",
        f"paths.root_dir={tmp_path}",
        f"paths.request_cache={tmp_path}/requests.sqlite",
        f"paths.cache_dir={tmp_path}/cache",  # the batch registry: this test's own
        "trainer.progress_bar=false",
        *extra,
    ]


def run_folder(tmp_path: Path) -> Path:
    """The newest run folder under ``tmp_path``."""
    return max(tmp_path.glob("runs/*/*/*/"), key=lambda p: p.name)


def said(done) -> str:
    """What a command printed (its log lines go to stdout)."""
    return done.stdout + done.stderr


def metrics_of(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


def test_a_job_goes_through_the_batch_api_at_the_batch_price_and_a_rerun_sends_nothing(fake, tmp_path, clean_env):
    with FakeBatchAPI(fake.base_url) as api:
        done = run_cli("esgexp", *batch_args(api.base_url, tmp_path, PRICE), cwd=REPO, env=clean_env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert (api.uploads, api.created) == (1, ["batch_1"])
        assert api.statuses == ["in_progress", "finalizing", "completed"]
        folder = run_folder(tmp_path)
        records = read_jsonl(folder / "predictions.jsonl")
        assert len(records) == 8 and all(r["output"] == "A" and not r.get("failed") for r in records)
        saved = json.loads((folder / "batch" / "batch_1.json").read_text())
        assert saved["input_file_id"] == "file-1" and saved["status"] == "completed" and len(saved["answered"]) == 8
        lines = read_jsonl(folder / "batch" / "1.input.jsonl")
        assert {line["url"] for line in lines} == {"/v1/chat/completions"} and lines[0]["body"]["model"]
        metrics = metrics_of(folder)
        assert metrics["n_batches_submitted"] == 1 and metrics["n_batch_answers"] == 8
        prompt, completion = metrics["usage/batch_prompt_tokens"], metrics["usage/batch_completion_tokens"]
        assert metrics["usage/cost"] == pytest.approx((prompt * 2.0 + completion * 8.0) / 1e6 * 0.5)
        assert "usage/prompt_tokens" not in metrics
        assert "batch batch_1: completed, 8 of 8 done, 0 failed" in said(done)

        again = run_cli("esgexp", *batch_args(api.base_url, tmp_path), cwd=REPO, env=clean_env)
        assert again.returncode == 0, again.stderr[-3000:]
        assert (api.uploads, api.created) == (1, ["batch_1"])  # every answer from the request cache
        assert metrics_of(run_folder(tmp_path))["n_cached"] == 8


def test_a_finished_batch_is_read_again_and_one_whose_output_is_gone_is_submitted_anew(fake, tmp_path, clean_env):
    """Without the request cache a rerun reads the earlier batch's output again (nothing submitted); once the
    provider has deleted that file, the requests go into a new batch, not the live API."""
    with FakeBatchAPI(fake.base_url) as api:
        args = batch_args(api.base_url, tmp_path, "cache=off")
        assert run_cli("esgexp", *args, cwd=REPO, env=clean_env).returncode == 0
        again = run_cli("esgexp", *args, cwd=REPO, env=clean_env)
        assert again.returncode == 0 and api.created == ["batch_1"] and api.live == 0, again.stderr[-3000:]
        assert metrics_of(run_folder(tmp_path))["n_batch_answers"] == 8
        del api.files[api.batches["batch_1"]["output_file_id"]]
        gone = run_cli("esgexp", *args, cwd=REPO, env=clean_env)
        assert gone.returncode == 0, gone.stderr[-3000:]
        assert api.created == ["batch_1", "batch_2"] and api.live == 0
        assert "of batch batch_1 is gone (HTTP 404" in said(gone)


def test_letter_log_probabilities_through_a_batch(fake, tmp_path, clean_env):
    with FakeBatchAPI(fake.base_url) as api:
        done = run_cli("esgexp", *batch_args(api.base_url, tmp_path, "scoring=logprob"), cwd=REPO, env=clean_env)
        assert done.returncode == 0, done.stderr[-3000:]
    records = read_jsonl(run_folder(tmp_path) / "predictions.jsonl")
    assert all(r["parsed"] == "A" and r["scores"]["A"] > r["scores"]["B"] for r in records)
    assert all(line["body"]["logprobs"] for line in read_jsonl(run_folder(tmp_path) / "batch" / "1.input.jsonl"))


def test_lines_a_batch_failed_are_asked_live_or_left_for_resume(fake, tmp_path, clean_env):
    """batch_failed=resume: the failed lines end the run incomplete; resume=true submits only them, once."""
    with FakeBatchAPI(fake.base_url, fail=("Scope 2",)) as api:
        done = run_cli(
            "esgexp", *batch_args(api.base_url, tmp_path, "backend.batch_failed=resume"), cwd=REPO, env=clean_env
        )
        folder = run_folder(tmp_path)
        marked = [
            line["custom_id"]
            for line in read_jsonl(folder / "batch" / "1.input.jsonl")
            if "Scope 2" in json.dumps(line)
        ]
        assert 0 < len(marked) < 8
        assert done.returncode == 3, done.stderr[-3000:]  # incomplete
        failed = [r for r in read_jsonl(folder / "predictions.jsonl") if r.get("failed")]
        assert len(failed) == len(marked)
        assert all(r["error"] == "batch batch_1 (completed): HTTP 500: upstream failed" for r in failed)

        api.fail = ()
        resumed = run_cli(
            "esgexp",
            *batch_args(api.base_url, tmp_path, "backend.batch_failed=resume", "resume=true"),
            cwd=REPO,
            env=clean_env,
        )
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert api.created == ["batch_1", "batch_2"] and api.batches["batch_2"]["request_counts"]["total"] == len(
            marked
        )
        records = read_jsonl(run_folder(tmp_path) / "predictions.jsonl")
        assert len(records) == 8 and not any(r.get("failed") for r in records)

    before = fake.count
    with FakeBatchAPI(fake.base_url, fail=("Scope 2",)) as api:  # batch_failed=live (the default)
        done = run_cli("esgexp", *batch_args(api.base_url, tmp_path, "cache=off"), cwd=REPO, env=clean_env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"{len(marked)} request(s) the batches did not answer are asked live now" in said(done)
        metrics = metrics_of(run_folder(tmp_path))
        assert metrics["n_batch_answers"] == 8 - len(marked) and metrics["n_failed"] == 0
        # the live path's probe, then the lines the batch failed; upstream also answered the batch's other lines
        assert api.live == 1 + len(marked) and fake.count - before == 9


@pytest.mark.parametrize(("end", "answered"), [("expired", 4), ("cancelled", 4), ("failed", 0)])
def test_a_batch_that_ends_early_hands_over_what_it_answered_and_the_rest_goes_live(
    fake, tmp_path, clean_env, end, answered
):
    """expired and cancelled: the first half answered, the rest in the error file; failed (validation): nothing."""
    with FakeBatchAPI(fake.base_url, end=end) as api:
        done = run_cli("esgexp", *batch_args(api.base_url, tmp_path), cwd=REPO, env=clean_env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert api.statuses[-1] == end and api.live == 1 + 8 - answered  # the live path's probe, the lines left
    metrics = metrics_of(run_folder(tmp_path))
    assert metrics["n_batch_answers"] == answered and metrics["n_failed"] == 0
    assert f"{8 - answered} request(s) the batches did not answer are asked live now" in said(done)


def test_a_run_killed_after_submitting_resumes_and_never_submits_twice(fake, tmp_path, clean_env):
    """kill -9 while the batch is in progress: the ids were saved at submission; resume=true waits for that
    same batch and collects it."""
    with FakeBatchAPI(fake.base_url) as api:
        api.hold()
        job = start_cli("esgexp", *batch_args(api.base_url, tmp_path), cwd=REPO, env=clean_env)
        deadline = time.monotonic() + 60
        while api.looks < 3 and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.05)
        assert api.created == ["batch_1"] and job.poll() is None, job.communicate()[1][-3000:] if job.poll() else ""
        job.kill()
        job.wait()
        assert not (run_folder(tmp_path) / "predictions.jsonl").exists() or not read_jsonl(
            run_folder(tmp_path) / "predictions.jsonl"
        )
        api.release()
        resumed = run_cli("esgexp", *batch_args(api.base_url, tmp_path, "resume=true"), cwd=REPO, env=clean_env)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert (api.uploads, api.created) == (1, ["batch_1"])
        assert "8 request(s) are in 1 batch(es) submitted before (batch_1): not submitted again" in said(resumed)
        records = read_jsonl(run_folder(tmp_path) / "predictions.jsonl")
        assert len(records) == 8 and not any(r.get("failed") for r in records)


def test_batch_wait_false_submits_and_ends_and_resume_collects(fake, tmp_path, clean_env):
    """A table's worth of batches submitted in minutes: the job submits, looks once, and ends without an answer
    (nothing asked live); the next day resume=true collects the same batch."""
    with FakeBatchAPI(fake.base_url) as api:
        args = batch_args(api.base_url, tmp_path, "backend.batch_wait=false")
        first = run_cli("esgexp", *args, cwd=REPO, env=clean_env)
        assert first.returncode == 3, first.stderr[-3000:]  # incomplete, as asked: not "every item failed"
        pending = f"pending in batch batch_1 (in_progress) at {api.base_url}: resume=true collects it"
        assert "every item failed" not in said(first) and "error:" not in said(first)
        assert "8 request(s) wait in batch(es) still running" in said(first)
        assert api.created == ["batch_1"] and api.live == 0 and api.statuses == ["in_progress"]
        records = read_jsonl(run_folder(tmp_path) / "predictions.jsonl")
        assert len(records) == 8 and all(r["error"] == pending for r in records)
        done = run_cli("esgexp", *args, "resume=true", cwd=REPO, env=clean_env)  # looks once more: finalizing
        assert done.returncode == 3 and api.created == ["batch_1"], done.stderr[-3000:]
        done = run_cli("esgexp", *args, "resume=true", cwd=REPO, env=clean_env)  # completed: collected
        assert done.returncode == 0, done.stderr[-3000:]
        assert (api.uploads, api.created, api.live) == (1, ["batch_1"], 0)
        assert metrics_of(run_folder(tmp_path))["n_batch_answers"] == 8


def test_a_batch_file_run_elsewhere_is_read_back_and_nothing_is_sent(fake, tmp_path, clean_env):
    """backend.batch_output: the job writes the batch file and says how to run it; once the output exists (here
    made as `vllm run-batch` makes it, against the stand-in API) the same command reads it back; the base URL
    is a port nobody listens on."""
    output = tmp_path / "answers.jsonl"
    args = batch_args("http://127.0.0.1:9/v1", tmp_path, "~backend.batch", f"backend.batch_output={output}")
    first = run_cli("esgexp", *args, cwd=REPO, env=clean_env)
    assert first.returncode == 2, first.stderr[-3000:]
    input_file = run_folder(tmp_path) / "batch" / "input.jsonl"
    assert f"The batch file of this job's 8 request(s) is written: {input_file}" in said(first)
    assert f"vllm run-batch -i {input_file} -o {output} --model" in said(first)
    run_batch_file(input_file, output, fake.base_url)
    done = run_cli("esgexp", *args, "resume=true", cwd=REPO, env=clean_env)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = metrics_of(run_folder(tmp_path))
    assert metrics["n_batch_answers"] == 8 and metrics["n_failed"] == 0 and metrics["n_failed_requests"] == 0


def test_batch_answers_of_the_real_server_are_the_live_answers(llama_server, tmp_path, clean_env):
    """The same 6 questions through a batch (the stand-in Batch API in front of llama.cpp's server) and live:
    identical outputs (greedy decoding)."""
    with FakeBatchAPI(llama_server) as api:
        batch = run_cli(
            "esgexp", *batch_args(api.base_url, tmp_path / "batch", "dataset.limit=6"), cwd=REPO, env=clean_env
        )
        assert batch.returncode == 0, batch.stderr[-3000:]
    live_args = batch_args(llama_server, tmp_path / "live", "dataset.limit=6", "backend.batch=false")
    live = run_cli("esgexp", *live_args, cwd=REPO, env=clean_env)
    assert live.returncode == 0, live.stderr[-3000:]
    outputs = [
        {r["id"]: r["output"] for r in read_jsonl(run_folder(tmp_path / side) / "predictions.jsonl")}
        for side in ("batch", "live")
    ]
    assert outputs[0] == outputs[1] and len(outputs[0]) == 6


def test_a_server_without_a_batch_api_is_one_clear_error(llama_server, tmp_path, clean_env):
    done = run_cli("esgexp", *batch_args(llama_server, tmp_path), cwd=REPO, env=clean_env)
    assert done.returncode == 2
    assert "refused a batch file upload (POST /files): HTTP 404" in said(done)
    assert "needs a server with OpenAI's Batch API" in said(done) and "vllm run-batch" in said(done)


def test_bad_batch_settings_and_files_are_named(tmp_path, clean_env):
    done = run_cli(
        "esgexp", *batch_args("http://127.0.0.1:9/v1", tmp_path, "backend.batch_failed=later"), cwd=REPO, env=clean_env
    )
    assert done.returncode == 2 and "backend.batch_failed" in said(done) and "live, resume" in said(done)
    output = tmp_path / "answers.jsonl"
    output.write_text('{"custom_id": "1.abc", "response": {"status_code": 200, "body": {}}}\nnot json\n')
    args = batch_args("http://127.0.0.1:9/v1", tmp_path, f"backend.batch_output={output}")
    done = run_cli("esgexp", *args, cwd=REPO, env=clean_env)
    assert "1 line(s) are not batch output lines (line 2; e.g. 'not json')" in said(done)
    assert done.returncode == 2 and "every item failed" in said(done)  # the one good line is no request of the job


def spoiled(text: str) -> str:
    """A batch output's text with its line 3 cut short (its custom_id still readable) and line 6 not JSON."""
    lines = text.splitlines(keepends=True)
    lines[2], lines[5] = lines[2][: lines[2].index('"response"')] + "\n", "<html>502 Bad Gateway</html>\n"
    return "".join(lines)


def test_malformed_lines_of_a_batch_output_are_named_and_asked_again(fake, tmp_path, clean_env):
    """backend.batch_output with two bad lines: the other answers are taken, each bad line named, and the
    run ends incomplete (resume=true finishes it, the same way with the file as it is, and in full once it is
    mended)."""
    output = tmp_path / "answers.jsonl"
    args = batch_args("http://127.0.0.1:9/v1", tmp_path, "~backend.batch", f"backend.batch_output={output}")
    run_cli("esgexp", *args, cwd=REPO, env=clean_env)
    run_batch_file(run_folder(tmp_path) / "batch" / "input.jsonl", output, fake.base_url)
    good = output.read_text()
    cut = json.loads(good.splitlines()[2])["custom_id"]
    output.write_text(spoiled(good))
    for _ in range(2):  # resume=true with the file as it is ends the same way, not worse
        done = run_cli("esgexp", *args, "resume=true", cwd=REPO, env=clean_env)
        assert done.returncode == 3, said(done)[-3000:]  # incomplete, not a failed job
        assert f"{output}: 2 line(s) are not batch output lines (line 3, 6;" in said(done)
        records = read_jsonl(run_folder(tmp_path) / "predictions.jsonl")
        failed = {r["id"]: r["error"] for r in records if r.get("failed")}
        assert len(records) == 8 and len(failed) == 2
        assert f"batch_output: malformed: {output}, line 3: not a batch output line" in failed[cut.split(".")[0]]
    output.write_text(good)
    done = run_cli("esgexp", *args, "resume=true", cwd=REPO, env=clean_env)
    assert done.returncode == 0, said(done)[-3000:]
    assert not [r for r in read_jsonl(run_folder(tmp_path) / "predictions.jsonl") if r.get("failed")]


def test_malformed_lines_of_a_downloaded_batch_output_are_asked_again(fake, tmp_path, clean_env):
    """A batch's output file with two bad lines, read again by a rerun: the rest is read, their requests go into
    a new batch."""
    with FakeBatchAPI(fake.base_url) as api:
        args = batch_args(api.base_url, tmp_path, "cache=off")
        assert run_cli("esgexp", *args, cwd=REPO, env=clean_env).returncode == 0
        output_id = api.batches["batch_1"]["output_file_id"]
        api.files[output_id] = spoiled(api.files[output_id].decode()).encode()
        again = run_cli("esgexp", *args, cwd=REPO, env=clean_env)
        assert again.returncode == 0, said(again)[-3000:]
        assert f"file {output_id} of batch batch_1: 2 line(s) are not batch output lines (line 3, 6;" in said(again)
        assert api.created == ["batch_1", "batch_2"] and api.batches["batch_2"]["request_counts"]["total"] == 2
    assert metrics_of(run_folder(tmp_path))["n_batch_answers"] == 8


def test_a_job_larger_than_one_batch_is_split(fake, tmp_path, clean_env):
    with FakeBatchAPI(fake.base_url) as api:
        done = run_cli(
            "esgexp", *batch_args(api.base_url, tmp_path, "backend.batch_max_requests=3"), cwd=REPO, env=clean_env
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert [api.batches[b]["request_counts"]["total"] for b in api.created] == [3, 3, 2]
    assert metrics_of(run_folder(tmp_path))["n_batch_answers"] == 8


def test_two_providers_giving_the_same_batch_id_keep_their_own_batches(fake, tmp_path, clean_env):
    """Both stand-ins number their batches batch_1: the registry keeps one per server, and resuming the first
    collects its own batch."""
    with FakeBatchAPI(fake.base_url) as first, FakeBatchAPI(fake.base_url) as second:
        for api in (first, second):
            pending = run_cli(
                "esgexp", *batch_args(api.base_url, tmp_path, "backend.batch_wait=false"), cwd=REPO, env=clean_env
            )
            assert pending.returncode == 3 and api.created == ["batch_1"], pending.stderr[-3000:]
        assert len(list((tmp_path / "cache" / "batches").glob("*-batch_1.json"))) == 2
        done = run_cli("esgexp", *batch_args(first.base_url, tmp_path, "resume=true"), cwd=REPO, env=clean_env)
        assert done.returncode == 0 and first.created == ["batch_1"], done.stderr[-3000:]
        assert metrics_of(run_folder(tmp_path))["n_batch_answers"] == 8


def test_a_batch_the_server_no_longer_knows_is_asked_again(fake, tmp_path, clean_env):
    with FakeBatchAPI(fake.base_url) as api:
        args = batch_args(api.base_url, tmp_path, "backend.batch_wait=false", "backend.batch_failed=resume")
        assert run_cli("esgexp", *args, cwd=REPO, env=clean_env).returncode == 3
        del api.batches["batch_1"]
        lost = run_cli("esgexp", *args, "resume=true", cwd=REPO, env=clean_env)
        assert "batch batch_1 is not on" in said(lost) and lost.returncode == 2, lost.stderr[-3000:]
        done = run_cli("esgexp", *batch_args(api.base_url, tmp_path, "resume=true"), cwd=REPO, env=clean_env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert api.created == ["batch_1", "batch_2"] and api.live == 0
