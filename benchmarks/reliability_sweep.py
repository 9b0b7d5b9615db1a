"""The reliability rounds' sweep (docs/reliability.md): cases a new user meets, each run from the command line
as a user runs it, with a verdict from what the command did.

Each case is a command (``python -m esgexp...`` or a shell line), what a right outcome is (exit status and
a pattern its output must hold) and what would be bad (a pattern or an exit status that means the defect is
there: a job run on another program's server, a stop signal swallowed, a folder overwritten). Verdicts:
``clear`` (the right exit status and the expected line, no traceback), ``bad`` (the defect's mark), else
``unclear``. Servers are the tests' real ones (tests/openai_server.py: llama.cpp's server, the stand-in API,
the fault proxy; tests/batch_api.py), started here on 127.0.0.1.

    python benchmarks/reliability_sweep.py [--only GROUP,...] [--json FILE] [--code OLDER_CHECKOUT]

prints one line per case and the counts per group, and writes every case's outcome as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

PY = sys.executable


@dataclass
class Case:
    group: str
    name: str
    command: list[str] | str  # argv, or a shell line (bash -c)
    exit: tuple[int, ...]  # the right exit statuses
    expect: str | tuple[str, ...]  # the pattern(s) the output (stdout + stderr) holds when the outcome is right
    bad: str | None = None  # a pattern of the defect
    timeout: float = 120
    check: object = None  # a callable(output) -> str | None: why the outcome is bad, run after the command
    within: float | None = None  # seconds: a right outcome that takes longer is bad (the defect is the wait)
    result: dict = field(default_factory=dict)


def expected(case: Case) -> tuple[str, ...]:
    return (case.expect,) if isinstance(case.expect, str) else case.expect


def esgexp(*args: str, module: str = "esgexp") -> list[str]:
    return [PY, "-m", module, *args]


def run(case: Case, env: dict, cwd: Path) -> dict:
    shell = isinstance(case.command, str)
    started = time.monotonic()
    try:
        done = subprocess.run(
            ["bash", "-c", case.command] if shell else case.command,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=case.timeout,
        )
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        code, output = None, f"(timed out after {case.timeout:g} s) {expired.stdout or ''}{expired.stderr or ''}"
    seconds = time.monotonic() - started
    why_bad = case.check(output) if case.check else None
    if not why_bad and case.within is not None and seconds > case.within:
        why_bad = f"took {seconds:.1f} s, more than {case.within:g} s"
    if why_bad or (case.bad and re.search(case.bad, output)):
        verdict = "bad"
    elif code in case.exit and all(re.search(p, output) for p in expected(case)) and "Traceback" not in output:
        verdict = "clear"
    else:
        verdict = "unclear"
    lines = [line for line in output.splitlines() if re.search(r"error:|interrupted|WARNING|warning:", line)]
    return {
        "group": case.group,
        "case": case.name,
        "exit": code,
        "seconds": round(seconds, 1),
        "verdict": verdict,
        "why_bad": why_bad,
        "said": (lines[-1] if lines else (output.strip().splitlines() or [""])[-1])[-300:],
    }


def cases(tmp: Path, servers: dict) -> list[Case]:
    """Every case, its files made under ``tmp``; ``servers``: the base URLs and ports the cases use."""
    common = (f"paths.root_dir={tmp}", "tracking.offline=true", "trainer.progress_bar=false")
    fake, proxy500, proxydrop, late500 = (servers[k] for k in ("fake", "proxy500", "proxydrop", "late500"))
    openai = ("backend=openai", "backend.max_concurrency=1")
    out: list[Case] = []

    # --- signals: a job started in the background by a script, stopped with kill ------------------------
    job = " ".join(esgexp(*openai, f"backend.base_url={servers['slow']}", "dataset.limit=100", "cache=off", *common))
    for sig, status, how in (("TERM", 143, "SIGTERM"), ("USR2", 140, "SIGUSR2")):
        out.append(
            Case("signals", f"kill -{sig} a job started with & in a script", f"{job} & p=$!; sleep 6; kill -{sig} $p; wait $p; echo status=$?",
                 (0,), (rf"interrupted \({how}\): \d+ answers kept in .*; resume=true continues", f"status={status}"),
                 bad=r"status=0"))  # fmt: skip
    out.append(
        Case("signals", "nohup job & then kill", f"nohup {job} > {tmp}/nohup.out 2>&1 & p=$!; sleep 6; kill $p; wait $p; echo status=$?; cat {tmp}/nohup.out",
             (0,), (r"interrupted \(SIGTERM\): \d+ answers kept", "status=143"), bad=r"status=0"))  # fmt: skip
    out.append(
        Case("signals", "timeout 8 around a job in a script", f"timeout 8 {job} & wait $!; echo status=$?",
             (0,), (r"interrupted \(SIGTERM\): \d+ answers kept", "status=124"), bad=r"status=0"))  # fmt: skip
    out.append(
        Case("signals", "kill -INT an interactive-style job", f"{PY} -c \"import signal,subprocess,time,sys; p=subprocess.Popen(sys.argv[1:]); time.sleep(8); p.send_signal(signal.SIGINT); sys.exit(p.wait())\" {job}",
             (130,), r"interrupted: \d+ answers kept in .*; resume=true continues"))  # fmt: skip

    # --- servers esgexp starts ------------------------------------------------------------------------
    served = ("backend=openai", "backend/server=llama_cpp", "dataset.limit=2", *common)
    out.append(Case("managed servers", "backend.server.port taken by another program", esgexp(*served, f"backend.server.port={servers['fake_port']}"),
                    (2,), rf"backend.server.port={servers['fake_port']} is taken by pid \d+ \(", bad=r"accuracy"))  # fmt: skip
    from test_managed_server import HANDS_OVER  # a command that hands its port to a server in another session

    other = servers["other_port"]
    out.append(Case("managed servers", "the command leaves the port to another session's program",
                    esgexp(*served, f"backend.server.port={other}", "backend.server.health_path=/",
                           f"backend.server.command=['{{python}}',-c,'{HANDS_OVER}','{{port}}']"),
                    (2,), rf"backend.server.port={other} is taken by pid \d+ \(.*http.server", bad=r"accuracy"))  # fmt: skip
    out.append(Case("managed servers", "backend.server.port=abc", esgexp(*served, "backend.server.port=abc"),
                    (2,), r"error: backend.server.port must be an integer from 1 to 65535 or null, got 'abc'"))  # fmt: skip
    out.append(Case("managed servers", "backend/server=vllm without vLLM", esgexp("backend=openai", "backend/server=vllm", "model=qwen2.5-0.5b", *common),
                    (2,), r"'vllm' cannot be started: No such file or directory \(vLLM is not installed: pip install"))  # fmt: skip
    out.append(Case("managed servers", "backend/server=llama_cpp on a model without a GGUF", esgexp("backend=openai", "backend/server=llama_cpp", "model=qwen2.5-0.5b", *common),
                    (2,), r"backend.server.command needs \{model_gguf\}: give a model with a packaged GGUF"))  # fmt: skip
    out.append(Case("managed servers", "backend/server=llama_cpp with backend=hf", esgexp("backend=hf", "backend/server=llama_cpp", *common),
                    (2,), r"error: backend/server goes with backend=openai, not backend=hf"))  # fmt: skip
    out.append(Case("managed servers", "a managed llama.cpp server on a free port", esgexp(*served, "+backend.server.extra_args=[--n_threads,1]"),
                    (0,), r"accuracy", timeout=300))  # fmt: skip

    # --- servers that fail every request ----------------------------------------------------------------
    for name, url, said in (("HTTP 500", proxy500, "HTTP 500"), ("dropped", proxydrop, "connection dropped")):
        out.append(Case("failing servers", f"every item's request {name} from the start (31 items, defaults)",
                        esgexp("backend=openai", f"backend.base_url={url}", "dataset.limit=31", *common),
                        (2,), rf"failed every request after 0 items \(8 requests in a row failed.*{said}.*resume=true asks them again",
                        timeout=60))  # fmt: skip
    out.append(Case("failing servers", "HTTP 500 on every item after 5 answered (max_concurrency=1)",
                    esgexp(*openai, f"backend.base_url={late500}", "dataset.limit=31", *common),
                    (3,), (r"failed every request after 5 items", r"never answered\s+26 \(resume=true finishes them\)"),
                    timeout=120))  # fmt: skip

    # --- resume into another job's folder ----------------------------------------------------------------
    run_dir = tmp / "a_job_run"
    run_dir.mkdir(exist_ok=True)
    (run_dir / "config.yaml").write_text("task: mcq\ndataset:\n  name: esg_sample\n")
    (run_dir / "predictions.jsonl").write_text('{"id": "1"}\n')
    corpus = servers["corpus"]

    def unchanged(output: str) -> str | None:
        written = not (run_dir / "config.yaml").read_text().startswith("task: mcq")
        return "the run folder was written into" if written or (run_dir / "build_report.json").exists() else None

    for resume in ("resume=false", "resume=true"):
        out.append(Case("build folders", f"esgexp-build out=<a job's run folder> {resume}",
                        esgexp("builder=esgbench", f"corpus={corpus}", f"out={run_dir}", resume, *common[:1], module="esgexp.build"),
                        (2,), r"holds a job's run folder \(task=mcq\), not a build: set out=NEW_DIR", check=unchanged))  # fmt: skip
    notes = tmp / "notes"
    notes.mkdir(exist_ok=True)
    (notes / "notes.txt").write_text("mine")
    out.append(Case("build folders", "esgexp-build out=<a folder of notes> resume=true",
                    esgexp("builder=esgbench", f"corpus={corpus}", f"out={notes}", "resume=true", *common[:1], module="esgexp.build"),
                    (2,), r"is not empty and holds no build: set out=NEW_DIR"))  # fmt: skip

    # --- CSV files ------------------------------------------------------------------------------------
    sample = (
        (ROOT / "esgexp" / "data" / "bundled" / "esg_mcq_sample.csv")
        .read_text(encoding="utf-8")
        .splitlines(keepends=True)
    )
    variants = {
        "a quote that opens mid-field, field count unchanged": '2866,"56,"Which of the following, is a Scope 3 category?",A,a,b,c,d,z,doc,1,text\n',
        "a quote left open over the next lines": '2867,57,"Which is open,A,a,b,c,d,z,doc,1,text\n2868,58,Next?,A,a,b,c,d,z,doc,1,text\n',
        "a row missing a cell": "2869,59,Short?,A,a,b,c,d,z,doc,1\n",
        "a row with a cell too many": "2870,60,Long?,A,a,b,c,d,z,doc,1,text,extra\n",
    }
    expected = {
        "a quote that opens mid-field, field count unchanged": r"line 2: field 'new_id' is quoted, but text follows its closing quote",
        "a quote left open over the next lines": r"lines 2-\d+: field 'query' (runs on into what looks like another row|opens a quote)",
        "a row missing a cell": r"line 2: 11 fields, the header has 12; row skipped",
        "a row with a cell too many": r"line 2: 13 fields, the header has 12; row skipped",
    }
    for name, row in variants.items():
        path = tmp / f"csv_{len(out)}.csv"
        path.write_text(sample[0] + row + "".join(sample[1:]), encoding="utf-8")  # the file's line 2
        load = f"from esgexp.data.esgenius import ESGeniusCSV; print(ESGeniusCSV(name='x', path={str(path)!r}).load().skipped)"
        out.append(Case("csv rows", name, [PY, "-c", load], (0,), expected[name], bad=r"^\[\]$"))

    # --- the judge, checked before the first item ------------------------------------------------------
    qa = ("experiment=sustainableqa_factoid", "dataset=sustainableqa_sample", "dataset.limit=2", *common)
    env_no_key = "env -u OPENAI_API_KEY "
    out.append(Case("judge", "judge.model=gpt-4o without OPENAI_API_KEY", env_no_key + " ".join(esgexp(*openai, f"backend.base_url={fake}", *qa, "judge=default", "judge.model=gpt-4o")),
                    (2,), r"error: judge: model gpt-4o: API key not set \(environment variable OPENAI_API_KEY\)"))  # fmt: skip
    out.append(Case("judge", "the judge's server down", esgexp(*openai, f"backend.base_url={fake}", *qa, "judge=default", "judge.backend=openai",
                                                               f"+judge.backend_overrides.base_url=http://127.0.0.1:{servers['free_port']}/v1"),
                    (2,), r"error: judge smollm2-135m: the server at .* does not answer"))  # fmt: skip
    if servers.get("llama"):
        out.append(Case("judge", "llama-cpp-python's server as judge with the default json_schema",
                        esgexp(*openai, f"backend.base_url={fake}", *qa, "judge=default", "judge.backend=openai",
                               f"+judge.backend_overrides.base_url={servers['llama']}", "+judge.backend_overrides.backoff_s=0.1"),
                        (2,), r"\+judge.backend_overrides.response_format=json_object", timeout=120))  # fmt: skip

    # --- batch ----------------------------------------------------------------------------------------
    if servers.get("batch"):
        out.append(Case("batch", "backend.batch_wait=false", esgexp("backend=openai", f"backend.base_url={servers['batch']}", "backend.batch=true",
                                                                   "backend.batch_wait=false", "dataset.limit=4", *common, f"paths.cache_dir={tmp}/cache"),
                        (3,), r"wait in batch\(es\) still running[\s\S]*resume=true", bad=r"every item failed"))  # fmt: skip

    # --- paths ----------------------------------------------------------------------------------------
    out.append(Case("paths", "esgexp-sync of a folder that does not exist", esgexp(f"{tmp}/gone", module="esgexp.sync"),
                    (2,), rf"error: {tmp}/gone: no such file or folder in {tmp}"))  # fmt: skip
    out.append(Case("paths", "esgexp-compare of folders that do not exist", esgexp(f"{tmp}/gone", f"{tmp}/gone2", module="esgexp.compare"),
                    (2,), r"neither a run folder nor an MLflow run id \(32 hex digits\): no such file or folder"))  # fmt: skip
    out.append(Case("paths", "a bare file name that is not there", esgexp("dataset.path=nosuch.csv", *common),
                    (2,), r"no such file or folder in the current folder \("))  # fmt: skip

    # --- settings and the command line (earlier rounds' cases, again) ----------------------------------
    for name, args, said in (
        ("dataset.limit=abc", ("dataset.limit=abc",), r"dataset.limit must be an integer >= 1 or null, got 'abc'"),
        ("a misspelt key", ("dataset.limt=3",), r"did you mean dataset.limit\?"),
        ("a sweep without -m", ("dataset.limit=1,2",), r"is a sweep: -m goes first"),
        ("--key=value", ("--dataset.limit=2",), r"an override is key=value without dashes"),
        (
            "backend.give_up_after=1",
            ("backend=openai", "backend.give_up_after=1"),
            r"backend.give_up_after must be an integer >= 2",
        ),
    ):
        out.append(Case("settings", name, esgexp(*args, *common), (2,), said))

    # --- other commands and files a new user tries --------------------------------------------------------
    noise = tmp / "noise.csv"
    noise.write_bytes(bytes(range(256)) * 12)
    truncated = tmp / "truncated.db"
    truncated.write_bytes(Path(servers["store"]).read_bytes()[:3000])
    (tmp / "afile").write_text("x")
    out.append(Case("other commands", "random bytes as dataset.path", esgexp(f"dataset.path={noise}", *common),
                    (2,), r"is binary data \(not text in any encoding\)", bad=r"dataset.encoding=cp1252"))  # fmt: skip
    out.append(Case("other commands", "a truncated mlflow.db given to the leaderboard",
                    esgexp(f"tracking.uri=sqlite:///{truncated}", f"out_dir={tmp}/lb", module="esgexp.leaderboard"),
                    (2,), r"^error: .*truncated.db"))  # fmt: skip
    out.append(Case("other commands", "esgexp-paper with a misspelt key", esgexp("tabel=x", module="esgexp.paper"),
                    (2,), r"error: tabel is not a setting: did you mean table\?"))  # fmt: skip
    out.append(Case("other commands", "esgexp-ingest with a file where paths.corpus_dir's folder goes",
                    esgexp(f"corpus.pdf_dir={servers['docs']}", "corpus.name=r", f"paths.corpus_dir={tmp}/afile/c", module="esgexp.ingest"),
                    (2,), r"error: .*afile.*paths.corpus_dir"))  # fmt: skip
    out.append(Case("other commands", "esgexp-leaderboard on an empty folder", esgexp(f"paths.root_dir={tmp}/nolb", module="esgexp.leaderboard"),
                    (2,), r"error: no MLflow store at .*point tracking.uri at the store your jobs logged to"))  # fmt: skip
    out.append(Case("other commands", "esgexp-build of a corpus that does not exist", esgexp("builder=esgbench", f"corpus={tmp}/nocorpus", f"out={tmp}/b9", module="esgexp.build"),
                    (2,), r"error: corpus folder not found: .*nocorpus.*esgexp.ingest"))  # fmt: skip
    out.append(Case("other commands", "esgexp-export-adapter with two adapters", esgexp("a", "b", module="esgexp.export_adapter"),
                    (2,), r"error: one adapter at a time, got a, b"))  # fmt: skip
    # --- fifth round: paper tables, locks, batch files, floods, full disks, a second Ctrl-C ---------------
    out += fifth_round(tmp, servers, common)
    out += faults(tmp, servers, common)
    # --- newcomer ---------------------------------------------------------------------------------------
    out.append(Case("newcomer", "papers/ and compare/ are git-ignored", f"cd {ROOT} && git check-ignore papers/x.md compare/y.md",
                    (0,), r"papers/x.md\s+compare/y.md"))  # fmt: skip
    out.append(Case("newcomer", "make clean removes papers and compare", f"cd {ROOT} && make -n clean",
                    (0,), r"rm -rf .*papers compare"))  # fmt: skip
    if servers.get("tiny"):
        out.append(Case("newcomer", "model=local with a chat template left unused", esgexp("model=local", f"model.path={servers['tiny']}", "dataset.limit=2", "scoring.max_new_tokens=2", *common),
                        (0,), r"model.chat_template=true"))  # fmt: skip
    out.append(Case("newcomer", "README's experiment=rag line composes ESGenius", esgexp("experiment=rag", "dataset=esgenius", "dataset.path=ESGenius_w_ref_1136q.csv", "--cfg", "job"),
                    (0,), r"name: esgenius"))  # fmt: skip
    return out


def fifth_round(tmp: Path, servers: dict, common: tuple[str, ...]) -> list[Case]:
    """The cases of the round's last items (docs/reliability.md): a table that cannot run, a stopped table,
    unreadable paper overrides, two jobs on one run folder, malformed batch output lines, a flood of warnings,
    the space a full disk's advice names, a second Ctrl-C."""
    out: list[Case] = []
    papers = tmp / "paper_root" / "papers"
    papers.mkdir(parents=True, exist_ok=True)
    filled = '{"table": "esgbench", "cells": [{"row": "r", "column": "c", "ours": 0.5}]}'
    (papers / "esgbench.json").write_text(filled)

    def kept(output: str) -> str | None:
        return None if (papers / "esgbench.json").read_text() == filled else "the filled table was overwritten"

    out.append(Case("paper tables", "a table that cannot run over an earlier filled table",
                    esgexp("table=esgbench", f"paths.root_dir={tmp / 'paper_root'}", module="esgexp.paper"),
                    (2,), (r"kept: .*an earlier run's values", r"error: no job of table esgbench can run here"), check=kept))  # fmt: skip
    sample = ROOT / "esgexp" / "data" / "bundled" / "esg_mcq_sample.csv"
    table = " ".join(esgexp("table=esgenius_table2", f"data.esgenius={sample}", "'rows=[GPT-4o]'", "'columns=[Zero-Shot]'",
                            f"\"overrides=['backend.base_url={servers['slow']}','backend.max_concurrency=1']\"",
                            f"paths.root_dir={tmp / 'paper_root'}", "tracking.offline=true", module="esgexp.paper"))  # fmt: skip
    key = ("env", "OPENAI_API_KEY=test-key")
    out.append(Case("paper tables", "SIGTERM while a table's job runs", f"{' '.join(key)} {table} & p=$!; sleep 8; kill -TERM $p; wait $p; echo status=$?",
                    (0,), (r"interrupted \(SIGTERM\): the jobs' answers so far are kept in .*resume=true continues the table", "status=143")))  # fmt: skip
    ctrl_c = "import signal,subprocess,time,sys; p=subprocess.Popen(sys.argv[1:]); time.sleep(8); p.send_signal(signal.SIGINT); sys.exit(p.wait())"
    paper = esgexp("table=esgenius_table2", f"data.esgenius={sample}", "rows=[GPT-4o]", "columns=[Zero-Shot]",
                   f"overrides=['backend.base_url={servers['slow']}','backend.max_concurrency=1']",
                   f"paths.root_dir={tmp / 'paper_root'}", "tracking.offline=true", module="esgexp.paper")  # fmt: skip
    out.append(Case("paper tables", "Ctrl-C while a table's job runs", [*key, PY, "-c", ctrl_c, *paper],
                    (130,), r"interrupted: the jobs' answers so far are kept in .*resume=true continues the table"))  # fmt: skip
    for name, args, said in (
        ("overrides without quotes, misspelt", ("table=esgbench", "overides=[dataset.limit=3]"),
         r"overides is not a setting: did you mean overrides\?; each item that holds '=' goes in quotes: \"overrides=\['dataset.limit=3'\]\""),
        ("a list the shell split at a space, misspelt", ("table=esgbench", "rowz=[Random,", "BM25]"),
         r"rowz is not a setting: did you mean rows\?; the shell split this list at a space: quote the whole override: 'rows=\[Random, BM25\]'"),
    ):  # fmt: skip
        out.append(
            Case(
                "paper tables",
                name,
                esgexp(*args, "dry_run=true", module="esgexp.paper"),
                (2,),
                said,
            )
        )

    # two jobs on one run folder at once
    folder = tmp / "locked_run"
    job = " ".join(esgexp("backend=openai", "backend.max_concurrency=1", f"backend.base_url={servers['slow']}", "dataset.limit=40",
                          "cache=off", f"hydra.run.dir={folder}", "resume=true", *common))  # fmt: skip
    out.append(Case("concurrency", "two resume=true of one run folder at once",
                    f"{job} > /dev/null 2>&1 & p=$!; sleep 6; {job}; echo second=$?; kill $p; wait $p; echo first=$?",
                    (0,), (rf"error: run folder {folder} is in use by another esgexp job running now", "second=2"), bad=r"second=0"))  # fmt: skip

    # malformed lines of a batch output file (backend.batch_output), twice: resume ends the same way, not worse
    output, batch_run = tmp / "batch_answers.jsonl", tmp / "batch_run"
    batch = " ".join(esgexp("backend=openai", "backend.base_url=http://127.0.0.1:9/v1", f"backend.batch_output={output}",
                            "dataset.limit=6", "cache=off", f"hydra.run.dir={batch_run}", "resume=true", *common))  # fmt: skip
    answer = {"choices": [{"message": {"content": "A"}, "finish_reason": "stop"}], "model": "m", "usage": {}}
    spoil = (f"import json; lines = [json.dumps({{'custom_id': json.loads(l)['custom_id'], 'response': {{'status_code': 200, 'body': {answer!r}}}}})"
             f" for l in open('{batch_run}/batch/input.jsonl')]; lines[1] = lines[1][:40]; lines[4] = 'not json'; "
             f"open('{output}', 'w').write(chr(10).join(lines) + chr(10))")  # fmt: skip
    out.append(Case("batch", "two malformed lines in backend.batch_output, then resume=true twice",
                    f"{batch} > /dev/null 2>&1; {PY} -c \"{spoil}\"; {batch} > /dev/null 2>&1; {batch}",
                    (3,), (rf"{output}: 2 line\(s\) are not batch output lines \(line 2, 5;", r"never answered\s+2"),
                    bad=r"not a batch output line \('not json'\)$"))  # fmt: skip

    # a flood: ClimRetrieve base questions whose reports are not in the corpus
    base = tmp / "climretrieve_base.csv"
    rows = ["Document,Question,Relevant,Page,Source From,Source Relevance Score,Core 16 Question"]
    rows.append('acme,Does the company report Scope 1?,"Scope 1 emissions were 12,400 tCO2e in 2024.",1,text,3,1')
    rows += [f"Absent {n} Report.pdf,Question {n}?,Some text,1,text,2,1" for n in range(60)]
    base.write_text("\n".join(rows) + "\n")
    flood = esgexp("experiment=climretrieve_retrieval", "dataset=climretrieve_base", f"dataset.path={base}",
                   f"dataset.corpus={servers['corpus']}", "retriever=bm25", *common)  # fmt: skip

    one_line = (
        r"^(?![\s\S]*'Absent 1 Report.pdf' is not in the corpus)"  # the second report's question: no line of its own
    )
    out.append(Case("floods", "ClimRetrieve base on a corpus with 1 of its 61 reports", flood, (0,),
                    (r"60 question\(s\) skipped: their report is not in the corpus", r"each with why: .*skipped_rows.txt", one_line)))  # fmt: skip

    # a full disk's advice names what the corpus needs (a 1 MiB tmpfs; root only)
    docs, disk = tmp / "big_docs", tmp / "small_disk"
    docs.mkdir(exist_ok=True)
    disk.mkdir(exist_ok=True)
    for n in range(3):
        (docs / f"report{n}.md").write_text(f"Report {n}. " + "Scope 1 emissions fell by 4 percent. " * 12000)
    ingest = " ".join(
        esgexp(f"corpus.pdf_dir={docs}", "corpus.name=big", f"paths.corpus_dir={disk}/c", module="esgexp.ingest")
    )
    out.append(Case("full disks", "ingest of a 3 MiB corpus onto a 1 MiB disk",
                    f"mount -t tmpfs -o size=1m tmpfs {disk} || exit 9; {ingest}; s=$?; umount -l {disk}; exit $s",
                    (2,), r"needs [\d.]+ MiB and [\d.,]+ (B|KiB|MiB) is free there\. Free at least [\d.]+ MiB there"))  # fmt: skip

    # a second Ctrl-C while the first waits for answers in flight (8 s each)
    slow = servers["slower"]
    second = esgexp(
        "backend=openai",
        f"backend.base_url={slow}",
        "backend.max_concurrency=2",
        "dataset.limit=10",
        "cache=off",
        *common,
    )
    twice = ("import signal,subprocess,time,sys; p=subprocess.Popen(sys.argv[1:]); time.sleep(13); p.send_signal(signal.SIGINT); "
             "time.sleep(1); t=time.monotonic(); p.send_signal(signal.SIGINT); p.wait(); print('second took %.1f s, status=%d' % (time.monotonic()-t, p.returncode))")  # fmt: skip
    out.append(Case("signals", "a second Ctrl-C while answers are in flight", [PY, "-c", twice, *second], (0,),
                    r"second took [0-2]\.\d s, status=130", bad=r"second took ([3-9]|\d\d)\.\d s"))  # fmt: skip
    return out


def faults(tmp: Path, servers: dict, common: tuple[str, ...]) -> list[Case]:
    """Issue 55's fault cases: files esgexp-data cannot get (each says what mends it, the command fails), a
    judge's server gone on a rerun answered from the cache, a busy server whose health check times out, a
    server that fails every request from the first."""
    out: list[Case] = []
    get = ("get", "esgenius", "files=ESGenius_1136q.csv", "data.retries=0", "progress=false")
    again = r"run the same command again to retry"  # the old advice, wrong for these
    mirror = tmp / "data_mirror"
    (mirror / "esgenius").mkdir(parents=True, exist_ok=True)
    (mirror / "esgenius" / "ESGenius_1136q.csv").write_text("id,question\n1,another file\n")
    for name, args, said in (
        ("a 404 at the source", (f"data.hosts.github={servers['no_files']}",),
         (r"HTTP 404 Not Found: the file is not at that address \(set data.mirror", r"cannot get it")),
        ("other bytes in the mirror", (f"data.mirror={mirror}",),
         (r"The file there is not the pinned one, so getting it from there again cannot mend it", r"cannot get it")),
        ("an unreachable host", ("data.hosts.github=http://127.0.0.1:9",),
         (r"the host 127.0.0.1:9 cannot be reached \(\[Errno 111\] Connection refused\).*data.mirror", r"cannot get it")),
    ):  # fmt: skip
        command = esgexp(*get, f"paths.data_dir={tmp}/data_{len(out)}", *args, module="esgexp.data_cli")
        out.append(Case("data get", f"esgexp-data get: {name}", command, (1,), said,
                        bad=rf"{again}|Max retries exceeded|Downloading file"))  # fmt: skip

    # the judge's server gone on a rerun whose answers and verdicts are all in the request cache
    verdict = '{"reason": "It matches.", "verdict": "correct"}'
    job = [*esgexp("experiment=sustainableqa_factoid", "dataset=sustainableqa_sample", "dataset.limit=2",
                   "backend=openai", f"backend.base_url={servers['fake']}", "judge=default", "judge.backend=openai",
                   *common, f"paths.request_cache={tmp}/judge_cache.sqlite")]  # fmt: skip
    rerun = (
        "import subprocess, sys; sys.path.insert(0, sys.argv[1]); from openai_server import FakeOpenAI; "
        f"judge = FakeOpenAI(answer={verdict!r}); job = sys.argv[2:] + ['+judge.backend_overrides.base_url=' + judge.base_url]; "
        "first = subprocess.run(job, capture_output=True); judge.close(); print('first=%d' % first.returncode, flush=True); "
        "sys.exit(subprocess.run(job).returncode)"
    )  # fmt: skip
    out.append(Case("judge", "a rerun answered from the cache, the judge's server gone", [PY, "-c", rerun, str(ROOT / "tests"), *job],
                    (0,), (r"first=0", r"judge/accuracy"), bad=r"does not answer"))  # fmt: skip

    openai = ("backend=openai", "backend.max_concurrency=1", "dataset.limit=6", "cache=off", *common)
    out.append(Case("failing servers", "3 connections dropped while /v1/models is too busy to answer",
                    esgexp(*openai, f"backend.base_url={servers['busy']}", "backend.connect_timeout_s=1"),
                    (0,), r"lost 3 connections in a row, but it is up: its health check \(GET /v1/models\) took the connection and did not answer within 1 s \(busy\)",
                    bad=r"stopped answering"))  # fmt: skip
    for name, url, said in (
        ("HTTP 500", servers["all500"], r"answers a generate request .* with errors \(HTTP 500: .*gave up after 2 retries"),
        ("dropped", servers["alldrop"], r"drops it before answering \(connection dropped: .*gave up after 2 retries"),
    ):  # fmt: skip
        out.append(Case("failing servers", f"every request {name}, the probe too (defaults)",
                        esgexp("backend=openai", f"backend.base_url={url}", "dataset.limit=4", "cache=off", *common),
                        (2,), said, bad=r"is it running, and is this machine online", within=15, timeout=90))  # fmt: skip
    return out


def start_servers(tmp: Path) -> tuple[dict, list]:
    """The servers the cases use; the objects to close."""
    from openai_server import FakeOpenAI, FaultProxy, free_port

    slow = FakeOpenAI(delay=0.3)
    slower = FakeOpenAI(delay=8.0)
    fake = FakeOpenAI()
    proxies = {kind: FaultProxy(fake.base_url) for kind in ("500", "drop")}
    for kind, proxy in proxies.items():
        proxy.fail_when(lambda request: "Hello" not in request.text, kind, path="/v1/chat/completions")
    late = FaultProxy(fake.base_url)
    late.fail_when(lambda request, late=late: late.answered >= 6, "500", path="/v1/chat/completions")
    busy = FaultProxy(fake.base_url)  # 3 connections dropped in a row, and a /v1/models too slow to answer
    busy.fail_when(lambda request: "Hello" not in request.text, "drop", times=3, path="/v1/chat/completions")
    busy.fail_when(None, "delay", path="/v1/models", delay=5)
    every = {
        kind: FaultProxy(fake.base_url).fail_when(None, kind, path="/v1/chat/completions") for kind in ("500", "drop")
    }
    from data_server import DataServer

    no_files = DataServer({}).__enter__()  # every path a 404
    closing = [slow, slower, fake, *proxies.values(), late, busy, *every.values(), no_files]
    servers = {
        "slow": slow.base_url,
        "slower": slower.base_url,
        "fake": fake.base_url,
        "fake_port": fake.port,
        "proxy500": proxies["500"].base_url,
        "proxydrop": proxies["drop"].base_url,
        "late500": late.base_url,
        "busy": busy.base_url,
        "all500": every["500"].base_url,
        "alldrop": every["drop"].base_url,
        "no_files": no_files.url,
        "other_port": free_port(),
        "free_port": free_port(),
    }
    from batch_api import FakeBatchAPI

    batch = FakeBatchAPI(fake.base_url).__enter__()
    closing.append(batch)
    servers["batch"] = batch.base_url
    from embedding_server import CACHE
    from openai_server import LlamaServer, server_gguf

    model = server_gguf(CACHE)
    if model is not None:
        llama = LlamaServer(model, tmp / "llama.log").start(timeout=120)
        closing.append(llama)
        servers["llama"] = llama.base_url
    from conftest import build_tiny_llama

    servers["tiny"] = str(build_tiny_llama(tmp / "tiny"))
    docs = tmp / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "acme.md").write_text("Scope 1 emissions were 12,400 tCO2e in 2024.\n")
    from esgexp.data.chunking import CharChunker
    from esgexp.data.corpus import ingest

    ingest(docs, tmp / "corpus", CharChunker(), progress=False)
    servers["corpus"] = str(tmp / "corpus")
    servers["docs"] = str(docs)
    from esgexp.core.tracking import seed_new_store

    seed_new_store(f"sqlite:///{tmp}/store/mlflow.db")
    servers["store"] = str(tmp / "store" / "mlflow.db")
    return servers, closing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run these groups only (GROUP,GROUP)")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "reliability_sweep.json"))
    parser.add_argument("--code", default=str(ROOT), help="the esgexp checkout the commands run (e.g. an older one)")
    options = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="esgexp-sweep-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": options.code, "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    servers, closing = start_servers(tmp)
    results = []
    try:
        for case in cases(tmp, servers):
            if options.only and case.group not in options.only.split(","):
                continue
            result = run(case, env, tmp)
            results.append(result)
            print(
                f"{result['verdict']:8} {result['exit']!s:>4} {result['seconds']:6.1f}s  {case.group}: {case.name}  | {result['said'][:160]}",
                flush=True,
            )
    finally:
        for server in closing:
            (getattr(server, "close", None) or server.stop)()
        from esgexp.backends.ports import listeners

        for pid in listeners(servers["other_port"]) or []:  # the other session's http.server of its case
            os.kill(pid, signal.SIGTERM)
    groups = sorted({r["group"] for r in results})
    print(f"\n{'group':18} cases clear unclear bad")
    for group in [*groups, None]:
        chosen = [r for r in results if group is None or r["group"] == group]
        counts = [sum(r["verdict"] == v for r in chosen) for v in ("clear", "unclear", "bad")]
        print(f"{group or 'all':18} {len(chosen):5} {counts[0]:5} {counts[1]:7} {counts[2]:3}")
    Path(options.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
