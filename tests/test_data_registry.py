"""Benchmarks by name: the registry (conf/data/) against the measured sources, and ``esgexp-data``, jobs and
paper tables against a real HTTP server on 127.0.0.1 that serves the shared samples under the registry's URL
layout (only the host differs from raw.githubusercontent.com and GitHub's LFS media host)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli import run_cli
from data_server import DataServer

from esgexp.core.config import BUNDLED_DIR
from esgexp.data.registry import benchmark, benchmarks

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "data"
SAMPLES = SHARED / "samples"
ESGENIUS = "/ANGEL-NTU/ESGenius/048255a37df693b61d415a0368fae3cedd2899da/data/ESGenius_1136q.csv"
GOLD = "/sherinegeorge21/ESGbench/687dd57e27bd40c0f186727893c9c6f95e5988f7/data/esgbench_open_source.jsonl"
TEST_JSON = "/media/DataScienceUIBK/SustainableQA/9d8e0ee60d4d1a5ecd30ab99ea3dd7cdb566edcc/Data/test.json"
# SustainableQA's test.json as a plain download of its path gives it: a Git LFS pointer
POINTER = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:9341bbb1989fda35505af1965ff3a48c4ec5c4dfc636ca92d4917a16c67a45e2\nsize 10470154\n"
)


@pytest.fixture
def samples() -> Path:
    if not SAMPLES.is_dir():
        pytest.skip(f"../shared benchmark samples not present at {SAMPLES}")
    return SAMPLES


@pytest.fixture
def server(samples):
    with DataServer(
        {
            ESGENIUS: samples / "esgenius" / "ESGenius_1136q.csv",
            GOLD: samples / "esgbench" / "esgbench_open_source_sample40.jsonl",
        }
    ) as running:
        yield running


def data_cli(tmp_path: Path, *args: str, env: dict | None = None):
    env = dict(os.environ if env is None else env)
    env.setdefault("HF_HUB_OFFLINE", "1")
    return run_cli("esgexp.data_cli", *args, "progress=false", cwd=tmp_path, env=env)


def files_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_registry_entries_are_the_measured_sources():
    """Every entry checked against benchmark-sources.tsv has its commit, path, size, sha256 and git blob id."""
    sources = SHARED / "benchmark-sources.tsv"
    if not sources.is_file():
        pytest.skip(f"../shared benchmark-sources.tsv not present at {sources}")
    measured = {(r["repository"], r["path"]): r for r in csv.DictReader(sources.open(), delimiter="\t")}
    checked = [f for bench in benchmarks().values() for f in bench.files if f.checked == "benchmark-sources.tsv"]
    assert len(checked) == 3 + 39 + 3 + 61 + 4 + 1
    for file in checked:
        source = file.sources[0]
        row = measured[(source.repo, source.path)]
        assert (source.revision, file.git_blob) == (row["commit"], row["git_blob_sha1"]), file.label
        assert (file.sha256 or "", str(file.size or "")) == (row["sha256"], row["size_bytes"]), file.label
        assert source.lfs == (row["storage"] == "lfs"), file.label
    assert {f.name for f in benchmark("sustainableqa").group("data")} == {"train.json", "validation.json", "test.json"}


def test_how_files_arrive_is_not_part_of_a_jobs_identity(make_cfg):
    from esgexp.jobs.identity import job_identity

    plain = job_identity(make_cfg("dataset=esgenius"))
    assert job_identity(make_cfg("dataset=esgenius", "data.download=true", "data.mirror=/m")) == plain


def test_get_then_verify_and_list(tmp_path, server):
    data = tmp_path / "data"
    got = data_cli(tmp_path, "get", "esgenius", "files=ESGenius_1136q.csv", f"paths.data_dir={data}", *server.hosts())
    assert got.returncode == 0, got.stdout + got.stderr
    assert "ESGenius_1136q.csv  947.5 KiB  verified (sha256 1d02bc6142b8" in got.stdout
    assert (data / "esgenius" / "ESGenius_1136q.csv").read_bytes() == (
        SAMPLES / "esgenius/ESGenius_1136q.csv"
    ).read_bytes()
    assert files_in(data) == ["esgenius/ESGenius_1136q.csv"]
    checked = data_cli(tmp_path, "verify", "esgenius", "files=ESGenius_1136q.csv", f"paths.data_dir={data}")
    assert checked.returncode == 0 and "esgenius/ESGenius_1136q.csv: verified" in checked.stdout
    listed = data_cli(tmp_path, "list", f"paths.data_dir={data}")
    assert listed.returncode == 0
    line = next(line for line in listed.stdout.splitlines() if line.strip().startswith("ESGenius_1136q.csv"))
    assert "947.5 KiB  verified" in line and "serves dataset=esgenius" in line
    assert "reports: 39 files" in listed.stdout and "0 present" in listed.stdout
    # a file changed in place is found out
    with (data / "esgenius" / "ESGenius_1136q.csv").open("a") as changed:
        changed.write("\n")
    again = data_cli(tmp_path, "verify", "esgenius", "files=ESGenius_1136q.csv", f"paths.data_dir={data}")
    assert again.returncode == 1 and "NOT the registry's (sha256 " in again.stdout
    mended = data_cli(
        tmp_path, "get", "esgenius", "files=ESGenius_1136q.csv", f"paths.data_dir={data}", *server.hosts()
    )
    assert mended.returncode == 0 and "not the registry's bytes" in mended.stdout
    assert (data / "esgenius" / "ESGenius_1136q.csv").read_bytes() == (
        SAMPLES / "esgenius/ESGenius_1136q.csv"
    ).read_bytes()


def test_a_hash_mismatch_is_refused_with_both_hashes_and_nothing_kept(tmp_path, server):
    data = tmp_path / "data"
    got = data_cli(
        tmp_path, "get", "esgbench", "files=esgbench_open_source.jsonl", f"paths.data_dir={data}", *server.hosts()
    )
    assert got.returncode == 1
    served = (SAMPLES / "esgbench" / "esgbench_open_source_sample40.jsonl").read_bytes()
    assert f"sha256 {hashlib.sha256(served).hexdigest()}" in got.stdout
    assert "not the registry's sha256 8b728af2eadc8a7fa07a3fd9ee6cae47349fc5fa5824d9f570e5e7243c0efc79" in got.stdout
    assert files_in(data) == []  # no file, no partial download, no temporary file


def test_each_file_not_got_says_what_mends_it_and_the_command_fails(tmp_path):
    """Three files, three faults: other bytes at the pinned address, a 404, a transfer cut off. The command exits
    1; each FAILED line says what mends it (the file is not the pinned one; not at that address, naming the URL
    and data.mirror), the last line offers running it again only for the cut one, and progress=false prints
    none of pooch's lines. A host that cannot be reached is named as such, not as "Max retries exceeded"."""
    other, partial = tmp_path / "other.csv", tmp_path / "partial.json"
    other.write_text("id,question\n1,not the published file\n")
    partial.write_bytes(b"{" + b" " * 4000 + b"}")
    commit = "/ANGEL-NTU/ESGenius/66d6e5fc089d2b97af354a3a00d96596aa495456/data"
    data = tmp_path / "data"
    with DataServer({ESGENIUS: other, f"{commit}/ESGenius_1136q.json": partial}) as served:
        served.cut[f"{commit}/ESGenius_1136q.json"] = 1000
        got = data_cli(tmp_path, "get", "esgenius", f"paths.data_dir={data}", "data.retries=0", *served.hosts())
    assert got.returncode == 1, got.stdout + got.stderr
    failed = {line.split(":")[0].strip(): line for line in got.stdout.splitlines() if ": FAILED: " in line}
    assert set(failed) == {"ESGenius_1136q.csv", "ESGenius_w_ref_1136q.csv", "ESGenius_1136q.json"}
    assert (
        "The file there is not the pinned one, so getting it from there again cannot mend it"
        in failed["ESGenius_1136q.csv"]
    )
    assert (
        f"{served.url}{commit}/ESGenius_w_ref_1136q.csv: HTTP 404 Not Found: the file is not at that address (set "
        "data.mirror to a folder or URL that holds esgenius/ESGenius_w_ref_1136q.csv"
        in failed["ESGenius_w_ref_1136q.csv"]
    )
    assert got.stdout.rstrip().endswith(
        "3 of 3 file(s) not got; running the same command again cannot get 2 of them: each FAILED line above says "
        "what mends it; it retries the other 1 (a cut-off one resumes)"
    )
    assert "Downloading file" not in got.stdout + got.stderr
    offline = data_cli(tmp_path, "get", "esgenius", "files=ESGenius_1136q.csv", f"paths.data_dir={data}",
                       "data.hosts.github=http://127.0.0.1:9", "data.retries=0")  # fmt: skip
    assert offline.returncode == 1 and "Max retries exceeded" not in offline.stdout
    assert (
        "the host 127.0.0.1:9 cannot be reached ([Errno 111] Connection refused): check this machine's network"
        in offline.stdout
    )
    assert "set data.mirror to a folder or internal URL that holds the files" in offline.stdout
    assert "running the same command again cannot get it" in offline.stdout


def test_a_cut_download_resumes_where_it_stopped(tmp_path, server):
    data, size = tmp_path / "data", (SAMPLES / "esgenius" / "ESGenius_1136q.csv").stat().st_size
    server.cut[ESGENIUS] = 300_000
    args = ("get", "esgenius", "files=ESGenius_1136q.csv", f"paths.data_dir={data}", *server.hosts())
    first = data_cli(tmp_path, *args, "data.retries=0")
    assert first.returncode == 1 and "FAILED" in first.stdout
    (part,) = (data / "esgenius").glob(".*.part")  # what arrived, kept for the next try
    kept = part.stat().st_size
    assert 0 < kept <= 300_000
    second = data_cli(tmp_path, *args)
    assert second.returncode == 0, second.stdout + second.stderr
    assert server.requests[-1] == (ESGENIUS, f"bytes={kept}-")  # only the rest was asked for
    assert files_in(data) == ["esgenius/ESGenius_1136q.csv"]
    assert (data / "esgenius" / "ESGenius_1136q.csv").stat().st_size == size


def test_git_lfs_pointers_are_recognised(tmp_path, samples):
    pointer = tmp_path / "pointer.json"
    pointer.write_text(POINTER)
    with DataServer({TEST_JSON: pointer}) as lfs:  # an LFS host that hands out the pointer, not the object
        data = tmp_path / "data"
        got = data_cli(tmp_path, "get", "sustainableqa", "files=test.json", f"paths.data_dir={data}", *lfs.hosts())
        assert lfs.requests == [(TEST_JSON, None)]  # the object is asked for at the LFS media URL
    assert got.returncode == 1 and "gave a Git LFS pointer (oid sha256:9341bbb1989f" in got.stdout
    assert files_in(data) == []
    # a pointer given as the data itself: named, with the command that gets the file
    folder = tmp_path / "sqa"
    shutil.copytree(BUNDLED_DIR / "sustainableqa", folder)
    (folder / "test.json").write_text(POINTER)
    job = run_cli(
        "esgexp", "dataset=sustainableqa", f"dataset.path={folder}", f"paths.root_dir={tmp_path}", cwd=tmp_path
    )
    assert job.returncode == 2
    assert f"error: dataset.path={folder}/test.json is a Git LFS pointer (oid sha256:9341bbb1989f" in job.stderr
    assert "get the file itself with `esgexp-data get sustainableqa files=test.json`" in job.stderr


def test_a_hub_source_through_huggingface_hub(tmp_path, samples):
    """ESGenius's hub copy, the second source: read through huggingface_hub (its cache under HF_HOME) when GitHub
    does not answer, and checked against the same hash."""
    hub = "/datasets/cy0307/ESGenius/resolve/main/data/ESGenius_1136q.csv"
    args = ("get", "esgenius", "files=ESGenius_1136q.csv", "data.hosts.github=http://127.0.0.1:9", "data.retries=0")
    with DataServer({hub: samples / "esgenius" / "ESGenius_1136q.csv"}) as server:
        env = dict(os.environ, HF_HUB_OFFLINE="0", HF_HOME=str(tmp_path / "hf"))
        got = data_cli(
            tmp_path, *args, f"paths.data_dir={tmp_path}/data", f"data.hosts.huggingface={server.url}", env=env
        )
        assert got.returncode == 0, got.stdout + got.stderr
        assert (hub, None) in server.requests and files_in(tmp_path / "data") == ["esgenius/ESGenius_1136q.csv"]
        # offline (esgexp's default), the hub source reads only the Hugging Face cache: here, the file just fetched
        offline = data_cli(tmp_path, *args, f"paths.data_dir={tmp_path}/again", env=dict(env, HF_HUB_OFFLINE="1"))
        assert offline.returncode == 0 and files_in(tmp_path / "again") == ["esgenius/ESGenius_1136q.csv"]


def test_a_missing_benchmark_file_names_the_command_offline(tmp_path):
    job = run_cli(
        "esgexp", "dataset=esgenius", f"paths.data_dir={tmp_path}/data", f"paths.root_dir={tmp_path}", cwd=tmp_path
    )
    assert job.returncode == 2
    (line,) = [line for line in job.stderr.splitlines() if line.startswith("error:")]
    assert f"dataset.path={tmp_path}/data/esgenius/ESGenius_1136q.csv is esgenius's ESGenius_1136q.csv" in line
    assert f"`esgexp-data get esgenius files=ESGenius_1136q.csv paths.data_dir={tmp_path}/data`" in line
    assert f"https://raw.githubusercontent.com{ESGENIUS}" in line and "data.download=true" in line
    assert not (tmp_path / "data").exists()


def test_a_mirror_folder_made_with_to_serves_a_cluster(tmp_path, server):
    mirror = tmp_path / "mirror"
    laid = data_cli(tmp_path, "get", "esgenius", "files=ESGenius_1136q.csv", "--to", str(mirror), *server.hosts())
    assert laid.returncode == 0 and files_in(mirror) == ["esgenius/ESGenius_1136q.csv"]
    # the cluster: no route to any host (a closed port), the mirror folder copied there
    offline = ["data.hosts.github=http://127.0.0.1:9", f"data.mirror={mirror}"]
    cluster = tmp_path / "cluster"
    got = data_cli(tmp_path, "get", "esgenius", "files=ESGenius_1136q.csv", f"paths.data_dir={cluster}", *offline)
    assert got.returncode == 0, got.stdout + got.stderr
    assert files_in(cluster) == ["esgenius/ESGenius_1136q.csv"]
    # or the same folder behind an internal HTTP server
    with DataServer({"/esg-data/esgenius/ESGenius_1136q.csv": mirror / "esgenius" / "ESGenius_1136q.csv"}) as internal:
        by_url = data_cli(
            tmp_path, "get", "esgenius", "files=ESGenius_1136q.csv", f"paths.data_dir={tmp_path}/c1",
            "data.hosts.github=http://127.0.0.1:9", f"data.mirror={internal.url}/esg-data",
        )  # fmt: skip
        assert internal.requests == [("/esg-data/esgenius/ESGenius_1136q.csv", None)]
    assert by_url.returncode == 0 and files_in(tmp_path / "c1") == ["esgenius/ESGenius_1136q.csv"]
    # the same hashes are checked: a changed copy in the mirror is refused
    (mirror / "esgenius" / "ESGenius_1136q.csv").write_text("query_id,new_id\n")
    bad = data_cli(tmp_path, "get", "esgenius", "files=ESGenius_1136q.csv", f"paths.data_dir={tmp_path}/c2", *offline)
    assert bad.returncode == 1 and "not the registry's sha256 1d02bc61" in bad.stdout
    assert files_in(tmp_path / "c2") == []


def test_a_job_downloads_verifies_and_runs(tmp_path, server):
    data = tmp_path / "data"
    job = run_cli(
        "esgexp", "dataset=esgenius", "data.download=true", "dataset.limit=3", f"paths.data_dir={data}",
        f"paths.root_dir={tmp_path}", *server.hosts(), cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-2000:]
    assert "dataset.path: getting esgenius/ESGenius_1136q.csv (sha256 1d02bc61" in job.stdout
    assert files_in(data) == ["esgenius/ESGenius_1136q.csv"]
    (metrics,) = (tmp_path / "runs").rglob("metrics.json")
    assert json.loads(metrics.read_text())["n_items"] == 3


def test_a_paper_table_finds_its_files_through_the_registry(tmp_path, server):
    data = tmp_path / "data"
    dry = run_cli(
        "esgexp.paper", "table=esgenius_table2", "rows=['Qwen2.5 0.5B I-T']", "dry_run=true", "data.download=true",
        f"paths.data_dir={data}", f"paths.root_dir={tmp_path}", *server.hosts(), cwd=tmp_path,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    assert files_in(data) == ["esgenius/ESGenius_1136q.csv"]
    zero_shot, rag = dry.stdout.split("\n  j")[1:3]
    assert f"dataset.path={data}/esgenius/ESGenius_1136q.csv" in zero_shot
    # the RAG column's _w_ref file is not on this server: its job says how to get the paper's
    assert "data.esgenius_w_ref not found: get the paper's with `esgexp-data get esgenius" in rag
    assert "files=ESGenius_w_ref_1136q.csv paths.data_dir=" in rag and "66d6e5fc089d2b97" in rag


def test_the_reports_group_then_one_ingest_builds_the_corpus(tmp_path, samples):
    """SustainableQA's Sources/ PDFs as the group ``reports`` (two of them on this server: the shared samples whose
    sha256 the registry holds), then the documented ingest over the folder they land in."""
    commit = "/DataScienceUIBK/SustainableQA/9d8e0ee60d4d1a5ecd30ab99ea3dd7cdb566edcc/Sources/"
    pdfs = {commit + "1&1 AG.pdf": samples / "pdfs" / "1_1_AG.pdf"}
    pdfs[commit + "MAX AUTOMATION SE NA O.N..pdf"] = samples / "pdfs" / "MAX_AUTOMATION_SE.pdf"
    data = tmp_path / "data"
    with DataServer(pdfs) as server:
        got = data_cli(tmp_path, "get", "sustainableqa", "reports", f"paths.data_dir={data}", *server.hosts())
        asked = len(server.requests)
    assert got.returncode == 1 and "59 of 61 file(s) not got" in got.stdout  # the rest: 404 here, each asked once
    assert asked == 61
    reports = data / "sustainableqa" / "reports"
    assert files_in(reports) == ["1&1 AG.pdf", "MAX AUTOMATION SE NA O.N..pdf"]
    built = run_cli(
        "esgexp.ingest", f"corpus.pdf_dir={reports}", "corpus.name=sustainableqa", "progress=false", "workers=1",
        f"paths.root_dir={tmp_path}", cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    passages = (tmp_path / "data" / "corpora" / "sustainableqa" / "paragraphs" / "passages.jsonl").read_text()
    assert {json.loads(line)["doc_id"] for line in passages.splitlines()} == {"1&1 AG", "MAX AUTOMATION SE NA O.N."}


def test_only_the_papers_bytes_are_the_papers_data(tmp_path, samples):
    """By hash, never by name or place: the published file renamed is the paper's; a sample named as the
    published file is not."""
    from esgexp.papers.provenance import published

    grid = SimpleNamespace(name="esgenius_table2", data_spec={})
    renamed, posing = tmp_path / "mine.csv", tmp_path / "ESGenius_1136q.csv"
    shutil.copyfile(samples / "esgenius" / "ESGenius_1136q.csv", renamed)
    shutil.copyfile(samples / "esgenius" / "ESGenius_1136q_sample40.csv", posing)
    (said,) = published(str(renamed), grid, "esgenius")
    assert said.startswith("esgenius/ESGenius_1136q.csv: github ANGEL-NTU/ESGenius data/ESGenius_1136q.csv at commit")
    assert published(str(posing), grid, "esgenius") is None
    # the grid's own list of digests counts too
    own = hashlib.sha256(posing.read_bytes()).hexdigest()
    listed = SimpleNamespace(name="esgenius_table2", data_spec={"esgenius": {"sha256": [own]}})
    assert published(str(posing), listed, "esgenius") == [f"ESGenius_1136q.csv: sha256 {own}, in the grid's own list"]


def test_a_copy_of_the_bundled_sample_is_not_comparable(tmp_path):
    """Issue 44 row A: a copy of our SustainableQA sample gets no published-value verdict, only "not comparable",
    and the legend says what that covers."""
    copy = tmp_path / "sqa"
    shutil.copytree(BUNDLED_DIR / "sustainableqa", copy)
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    result = run_cli(
        "esgexp.paper", "table=sustainableqa_table5", "rows=['Factoid | BM25']", f"data.sustainableqa={copy}",
        cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    table = json.loads((tmp_path / "papers" / "sustainableqa_table5.json").read_text())
    assert [cell["verdict"] for cell in table["cells"]] == ["not comparable"] * 6
    assert all(f"data.sustainableqa: {copy} is not the paper's data" in c["verdict_note"] for c in table["cells"])
    markdown = (tmp_path / "papers" / "sustainableqa_table5.md").read_text()
    assert (
        "our bundled samples, copies or subsets of the published files and one's own files are always not comparable"
        in markdown
    )
