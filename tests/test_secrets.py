"""An API key pasted where a setting's value belongs: refused before any file is written, never echoed, and
the message names the environment variable to put it in (issue 36)."""

import random
import string

import pytest
from cli import run_cli

from esgexp.cli.overrides import unknown_key_message
from esgexp.cli.secret_values import refuse_secrets, secrets_in
from esgexp.errors import UserError

ALNUM = string.ascii_letters + string.digits
RANDOM = random.Random(36)


def random_text(n: int) -> str:
    """``n`` random letters and digits, with upper case, lower case and a digit."""
    return "Aa1" + "".join(RANDOM.choice(ALNUM) for _ in range(n - 3))


KEY = "sk-proj-" + random_text(40)  # the marker: no file or output may hold it
SHA256 = "3f786850e387550fdab836ed7e6dc881de23001b3f786850e387550fdab836ed"
RUN_ID = "0123456789abcdef0123456789abcdef"
LONG_PATH = f"/srv/data/ExperimentBaselineRunNumber20240101/{random_text(40)}/esg"


def files_holding(root, text: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and text in p.read_text(errors="replace")]


def assert_refused(result, root, *told: str) -> None:
    """Exit 2 with one ``error:`` line that says ``told``; the key in no output and no file under ``root``."""
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert result.stderr.count("error:") == 1 and len(result.stderr.strip().splitlines()) == 1, output
    assert KEY not in output and KEY[8:] not in output
    assert "sk-proj-…redacted" in result.stderr and "esgexp never writes keys to disk" in result.stderr
    for text in told:
        assert text in result.stderr, result.stderr
    assert not (root / "runs").exists() and files_holding(root, KEY[8:]) == []


@pytest.mark.parametrize(
    "args, told",
    [
        (
            ["backend=openai", "model=gpt-4o-mini", f"backend.api_key_env={KEY}"],
            "backend.api_key_env names an environment variable (e.g. OPENAI_API_KEY); put the key in that "
            "variable: export OPENAI_API_KEY=...",
        ),
        (  # the misspelt key's did-you-mean no longer repeats the key
            ["backend=openai", "model=deepseek-v3", f"backend.api_key={KEY}"],
            "backend.api_key_env names an environment variable (e.g. DEEPSEEK_API_KEY)",
        ),
        (["-m", "backend=openai", f"backend.api_key_env=a,{KEY}"], "export OPENAI_API_KEY=..."),
        (["retriever=text-embedding-3-small", f"retriever.api_key_env={KEY}"], "retriever.api_key_env names"),
        ([f"+judge.api_key_env={KEY}"], "judge.api_key_env names an environment variable"),
        ([f"experiment_name={KEY}"], "set it in the environment variable the setting names"),
        (
            ["backend=openai", f"backend.base_url={KEY}"],
            "backend.base_url must be a URL (http(s)://host:port/v1), and what was given looks like an API key",
        ),
    ],
)
def test_a_key_in_a_setting_is_refused_before_any_file_is_written(tmp_path, args, told):
    result = run_cli("esgexp", *args, f"paths.root_dir={tmp_path}", cwd=tmp_path)
    assert_refused(result, tmp_path, told)


@pytest.mark.parametrize("module", ["esgexp.ingest", "esgexp.build", "esgexp.paper", "esgexp.sync", "esgexp.compare"])
def test_every_command_refuses_a_key_before_it_starts(tmp_path, module):
    result = run_cli(module, f"backend.api_key_env={KEY}", f"paths.root_dir={tmp_path}", cwd=tmp_path)
    assert_refused(result, tmp_path, "export OPENAI_API_KEY=...")


def test_digests_run_ids_and_paths_pass_but_a_key_among_them_is_refused(tmp_path):
    values = [f"model.adapter={RUN_ID}", f"experiment_name={SHA256}", f"paths.data_dir={LONG_PATH}"]
    shown = run_cli("esgexp", "--cfg", "job", *values, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert all(v in shown.stdout for v in (RUN_ID, SHA256, LONG_PATH))
    refused = run_cli("esgexp", "--cfg", "job", *values, f"tracking.uri=http://u:{KEY}@mlflow:5000", cwd=tmp_path)
    assert_refused(refused, tmp_path, "tracking.uri: a setting value looks like a secret key")


@pytest.mark.parametrize(
    "value",
    [
        KEY,
        "sk-" + random_text(48),
        "sk-ant-api03-" + random_text(93),
        "hf_" + "".join(RANDOM.choice(string.ascii_letters) for _ in range(31)) + "Ab",
        random_text(40),
        f"a,{random_text(32)}",
        f"{{token:{random_text(36)}}}",
    ],
)
def test_what_looks_like_a_key(value):
    assert secrets_in(value)


@pytest.mark.parametrize(
    "value",
    [
        SHA256,
        SHA256.upper(),
        RUN_ID,
        LONG_PATH,
        "https://mlflow.example.org:5000/" + random_text(40),
        "ExperimentBaselineRunNumber20240101",
        "Qwen2_5_72B_Instruct_GPTQ_Int4_AWQ_Finetuned",
        "sk-learn-experiments-with-long-name-2024",
        "sk-no-key-required",
        "OPENAI_API_KEY",
        random_text(31),
    ],
)
def test_what_does_not_look_like_a_key(value):
    assert secrets_in(value) == []


def test_every_key_is_named_redacted_in_one_message():
    ant = "sk-ant-api03-" + random_text(93)
    with pytest.raises(UserError) as refused:
        refuse_secrets("config", ["backend=openai", f"backend.api_key_env={KEY}", f"retriever.api_key_env={ant}"])
    message = str(refused.value)
    assert KEY not in message and ant[13:] not in message and "\n" not in message
    assert "backend.api_key_env" in message and "retriever.api_key_env" in message
    assert "(sk-ant-…redacted)" in message and "export ANTHROPIC_API_KEY=..." in message


def test_did_you_mean_never_repeats_a_key():
    message = unknown_key_message("backend.api_key", KEY, ["backend.api_key_env", "backend.base_url"])
    assert (
        message
        == "backend.api_key is not a setting: did you mean backend.api_key_env? (backend.api_key_env=sk-proj-…redacted)"
    )


@pytest.mark.parametrize(
    "args, setting, variable",
    [
        (["backend=openai", f"backend.base_url={KEY}"], "backend.api_key_env", "OPENAI_API_KEY"),
        (["model=deepseek-v3", f"model.api.base_url={KEY}"], "model.api.api_key_env", "DEEPSEEK_API_KEY"),
    ],
)
def test_a_key_given_as_a_base_url_is_told_the_setting_takes_a_url_and_where_keys_go(args, setting, variable):
    with pytest.raises(UserError) as refused:
        refuse_secrets("config", args)
    key = args[1].split("=")[0]
    assert str(refused.value) == (
        f"{key} must be a URL (http(s)://host:port/v1), and what was given looks like an API key "
        f"(sk-proj-…redacted): esgexp never writes keys to disk. A key goes in an environment variable that "
        f"{setting} names: export {variable}=... (and {setting}={variable})"
    )
