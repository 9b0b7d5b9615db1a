"""Messages that diagnose the input itself: a path that is a folder, a file or nothing where the setting
takes something else, a binary file where text goes, a ``~``, and the command line's grammar (``-m`` after
the overrides, ``--key=value``, a sweep in a one-job command, the export command's positional adapter)."""

import gzip
import json
import random
import sys
import zipfile
from pathlib import Path

import pytest
from cli import run_cli

from esgexp.cli.command import user_message
from esgexp.cli.command_line import checked_command_line, home_expanded
from esgexp.cli.export_adapter import adapter_given
from esgexp.cli.export_adapter import main as export_adapter
from esgexp.cli.overrides import compose_config, override_positions
from esgexp.data.climretrieve import ClimRetrieveReportLevel
from esgexp.data.esgbench import ESGBenchGold
from esgexp.data.esgenius import ESGeniusCSV
from esgexp.data.sustainableqa import SustainableQA
from esgexp.data.text_files import decoding_problem
from esgexp.errors import UserError

CSV = "query_id,query,answer,A,B,C,D\n1,Q?,A,a,b,c,d\n"


def message(load) -> str:
    with pytest.raises(UserError) as raised:
        load()
    return str(raised.value)


def test_a_path_says_what_is_there_instead_of_what_its_setting_takes(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "mcq.csv").write_text(CSV)
    folder, file = tmp_path / "data", tmp_path / "data" / "mcq.csv"
    for loader in (ESGeniusCSV, ESGBenchGold, ClimRetrieveReportLevel):
        assert message(lambda loader=loader: loader(name="x", path=str(folder)).load()) == (
            f"dataset.path={folder} is a folder, not a file: give a file (it holds: mcq.csv)"
        )
    assert message(lambda: SustainableQA(name="x", path=str(file)).load()) == (
        f"dataset.path={file} is a file, not a folder: give the folder holding train.json, validation.json, test.json"
    )
    assert message(lambda: ESGeniusCSV(name="x", path=str(folder / "mqc.csv")).load()) == (
        f"dataset.path={folder / 'mqc.csv'}: no such file or folder; did you mean {file}?"
    )
    assert message(lambda: ESGeniusCSV(name="x", path=str(folder / "other.csv")).load()) == (
        f"dataset.path={folder / 'other.csv'}: no such file or folder in {folder}"
    )
    assert message(lambda: ESGeniusCSV(name="x", path=str(tmp_path / "nodir" / "x" / "a.csv")).load()) == (
        f"dataset.path={tmp_path / 'nodir' / 'x' / 'a.csv'}: no such file or folder: the folder {tmp_path / 'nodir'} "
        "does not exist"
    )
    assert message(lambda: ESGeniusCSV(name="x", path="~/no-such-esgexp-file.csv").load()) == (
        "dataset.path=~/no-such-esgexp-file.csv: no such file or folder: ~ is not expanded here; give the absolute "
        f"path (dataset.path={Path.home() / 'no-such-esgexp-file.csv'})"
    )


def binary_files(folder: Path) -> dict[str, tuple[Path, str]]:
    """A file of each kind often given where text goes, with the start of what its message says."""
    gz = folder / "mcq.csv.gz"
    gz.write_bytes(gzip.compress(CSV.encode()))
    xlsx = folder / "mcq.xlsx"
    with zipfile.ZipFile(xlsx, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
    pdf = folder / "report.pdf"
    pdf.write_bytes(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    parquet = folder / "mcq.parquet"
    parquet.write_bytes(b"PAR1\x15\x04\x15\x10")
    noise = folder / "noise.csv"  # random bytes: no encoding reads them, so no encoding advice
    noise.write_bytes(random.Random(0).randbytes(3000))
    return {
        "random": (noise, f"{noise} is binary data (not text in any encoding), not a text file: give the CSV"),
        "gzip": (gz, f"{gz} is a gzip archive, not a text file: unpack it first (gunzip -k {gz})"),
        "xlsx": (xlsx, f"{xlsx} is an Excel workbook (xlsx), not a text file: save the sheet as CSV UTF-8"),
        "pdf": (
            pdf,
            f"{pdf} is a PDF, not a text file: give the text file (CSV, JSON or JSONL); PDFs go into a corpus",
        ),
        "parquet": (parquet, f"{parquet} is a Parquet file, not a text file: convert it to CSV or JSONL"),
    }


def test_a_binary_file_where_text_goes_is_named_whatever_the_encoding(tmp_path):
    for path, said in binary_files(tmp_path).values():
        assert message(lambda path=path: ESGeniusCSV(name="x", path=str(path), encoding="latin-1").load()).startswith(
            said
        )
        assert message(lambda path=path: ESGBenchGold(name="x", path=str(path)).load()).startswith(said)
        assert decoding_problem(path, setting=None).startswith(said.split(" is ", 1)[1])  # a corpus's .txt
    split = tmp_path / "sqa"
    split.mkdir()
    (split / "test.json").write_bytes(gzip.compress(json.dumps({"all_chunks_qas": []}).encode()))
    assert message(lambda: SustainableQA(name="x", path=str(split)).load()).startswith(
        f"{split / 'test.json'} is a gzip archive, not a text file"
    )


def test_the_command_line_grammar_is_checked_before_hydra_reads_it(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["esgexp"])
    assert message(lambda: override_positions(["dataset.limit=2", "-m", "model=a,b"])) == (
        "model=a,b comes after the option -m: options go before the overrides: esgexp -m dataset.limit=2 model=a,b"
    )
    assert message(lambda: override_positions(["a=1", "--cfg", "job", "b=2"])).startswith(
        "b=2 comes after the option --cfg: options go before the overrides: esgexp --cfg job a=1 b=2"
    )
    for args in (["--dataset.limit=2"], ["--dataset.limit", "2"]):
        assert message(lambda args=args: override_positions(args)) == (
            f"{args[0]}: an override is key=value without dashes: dataset.limit=2 (the options: esgexp --help)"
        )
    assert message(lambda: override_positions(["-m", "--cfg", "job"])).startswith(
        "--multirun and --cfg cannot go together"
    )
    assert override_positions(["dataset.limit=2", "-m"]) == [0]  # Hydra reads a trailing -m
    home = str(Path.home())
    assert checked_command_line("config", ["-cn", "config", "-m", "dataset.path=~/a.csv,~/b.csv"]) == [
        "-cn",
        "config",
        "-m",
        f"dataset.path={home}/a.csv,{home}/b.csv",
    ]
    assert home_expanded("paths.runs_dir='~/my runs'") == f"paths.runs_dir='{home}/my runs'"
    assert [home_expanded(arg) for arg in ("~dataset.limit", "a=b~c", "a=~x")] == ["~dataset.limit", "a=b~c", "a=~x"]


def test_a_sweep_in_a_single_run_says_where_m_goes(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["esgexp", "dataset.limit=1,2"])
    with pytest.raises(Exception) as raised:
        compose_config("config", ["dataset.limit=1,2"])
    assert user_message(raised.value, "config", ["dataset.limit=1,2"]) == (
        "dataset.limit=1,2 is a sweep: -m goes first for one job per value (esgexp -m dataset.limit=1,2), "
        "or quote it for one value (\"dataset.limit='1,2'\")"
    )


def test_export_adapter_takes_the_adapter_on_its_own(tmp_path):
    adapter = tmp_path / "run dir"
    adapter.mkdir()
    assert adapter_given([str(adapter), "out_dir=/o"]) == [f"model.adapter='{adapter}'", "out_dir=/o"]
    assert message(lambda: adapter_given(["a", "model.adapter=b"])).startswith(
        "one adapter at a time, got a, model.adapter=b: esgexp-export-adapter RUN_DIR"
    )
    assert message(lambda: export_adapter([str(adapter)])) == (
        f"model.adapter={adapter}: no adapter_config.json in {adapter} or {adapter / 'adapter'}"
    )


def test_the_commands_expand_home_and_check_a_folder_setting(tmp_path, clean_env):
    shown = run_cli("esgexp", "--cfg", "job", "dataset.path=~/esgexp-data/mcq.csv", cwd=tmp_path, env=clean_env)
    assert shown.returncode == 0 and f"path: {Path.home()}/esgexp-data/mcq.csv" in shown.stdout, shown.stderr
    (tmp_path / "report.pdf").write_bytes(b"%PDF-1.4\n")
    result = run_cli(
        "esgexp.ingest", f"corpus.pdf_dir={tmp_path / 'report.pdf'}", "corpus.name=x", cwd=tmp_path, env=clean_env
    )
    assert result.returncode == 2 and result.stderr.strip() == (
        f"error: corpus.pdf_dir={tmp_path / 'report.pdf'} is a file, not a folder: give the folder of .pdf, .md or "
        ".txt files"
    )
