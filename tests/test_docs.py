"""The docs stay true: every command quoted in README.md and docs/ composes its config, docs/settings.md is
what the generator writes, every benchmark script's --help runs, and each console command is its
``python -m`` form, called through the installed entry point."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from cli import run_cli
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from esgexp.core.config import CONF_DIR

ROOT = CONF_DIR.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A command's module (python -m X) or console script -> the config it composes; None: no Hydra config.
CONFIGS = {
    "esgexp": "config",
    "esgexp.ingest": "ingest",
    "esgexp.build": "build",
    "esgexp.builders": "build",
    "esgexp.verify": "verify",
    "esgexp.leaderboard": "leaderboard",
    "esgexp.compare": "compare",
    "esgexp.paper": "paper",
    "esgexp.export_adapter": "export_adapter",
    "esgexp.models": "config",
    "esgexp.sync": None,
    "esgexp.settings_reference": None,
    "esgexp.data.make_sustainableqa_fixture": None,
    "esgexp.data_cli": "data_cli",
    # the console scripts' modules (pyproject.toml)
    "esgexp.cli.main": "config",
    "esgexp.cli.ingest": "ingest",
    "esgexp.cli.build": "build",
    "esgexp.cli.verify": "verify",
    "esgexp.cli.leaderboard": "leaderboard",
    "esgexp.cli.compare": "compare",
    "esgexp.cli.sync": None,
    "esgexp.cli.export_adapter": "export_adapter",
    "esgexp.cli.paper": "paper",
    "esgexp.cli.data": "data_cli",
}
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
# esgexp-ingest -> esgexp.cli.ingest (the module the script's function lives in, less __main__)
SCRIPT_MODULES = {name: target.split(":")[0].removesuffix(".__main__") for name, target in SCRIPTS.items()}
COMMAND = re.compile(r"^(?:python -m (esgexp[\w.]*)|(esgexp(?:-[\w-]+)?))(?=\s|$)(.*)$")
# Keys that stand for any key in the docs' generic examples (``esgexp k=v``, ``group=option``).
PLACEHOLDER_KEYS = {"k", "key", "group", "a.b"}
INLINE = re.compile(r"`((?:python -m esgexp|esgexp)[^`]*)`")


def quoted_commands() -> list[tuple[str, str]]:
    """(where, command line) of every esgexp command in the docs' code blocks and inline code, less the
    deliberate mistakes quoted under a "## Tried ..." heading (docs/reliability.md)."""
    found = []
    for path in DOCS:
        in_block, pending, mistakes = False, "", False
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("## "):
                mistakes = line.startswith("## Tried")
            if mistakes:
                continue
            if line.lstrip().startswith("```"):
                in_block = not in_block
                continue
            candidates = [line.strip()] if in_block else INLINE.findall(line)
            for text in candidates:
                text = (pending + " " + text).strip() if pending else text
                if text.endswith("\\"):
                    pending = text[:-1]
                    continue
                pending = ""
                if COMMAND.match(text):
                    found.append((f"{path.relative_to(ROOT)}:{number}", text))
    return found


def overrides_of(arguments: str) -> tuple[list[str], bool]:
    """Hydra overrides of a quoted command (comments, placeholders and run folders dropped; ``[k=v]``
    optional parts kept; a sweep's comma lists cut to their first value) and whether it is a sweep."""
    arguments = re.sub(r"\s#.*$", "", arguments)
    try:
        tokens = shlex.split(arguments)
    except ValueError:  # an apostrophe in prose
        tokens = arguments.split()
    sweep = "-m" in tokens or "--multirun" in tokens
    overrides = []
    for token in tokens:
        if re.fullmatch(r"\[[^\]]*=.*\]", token):
            token = token[1:-1]
        if token in ("-m", "--multirun", "...", "|") or "=" not in token or token.startswith("["):
            continue
        key, value = token.split("=", 1)
        if key in PLACEHOLDER_KEYS or key.isupper() or value == "...":
            continue
        if sweep and "," in value and not value.startswith("["):
            value = value.split(",")[0]
        overrides.append(f"{key}={value}")
    return overrides, sweep


COMMANDS = quoted_commands()


def test_the_docs_quote_commands():
    assert len(COMMANDS) > 40 and any(where.startswith("README.md") for where, _ in COMMANDS)


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[where for where, _ in COMMANDS])
def test_a_quoted_command_composes_its_config(where, command):
    module, script, arguments = COMMAND.match(command).groups()
    module = module or SCRIPT_MODULES.get(script)
    assert module in CONFIGS, f"{where}: unknown command {script or module!r}"
    if CONFIGS[module] is None:
        return
    overrides, _ = overrides_of(arguments)
    if CONFIGS[module] == "paper":  # the table command adds a table's data keys (esgexp/cli/paper.py)
        overrides = [f"++{o}" if o.startswith("data.") else o for o in overrides]
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            compose(CONFIGS[module], overrides=overrides, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as error:
        pytest.fail(f"{where}: `{command}` does not compose: {error}")


def test_settings_reference_is_fresh():
    from esgexp.cli.settings_reference import reference

    written = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert written == reference(), "docs/settings.md is stale: run python -m esgexp.settings_reference"


def test_readme_is_a_landing_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) < 11_000
    commands = [line for line in readme.splitlines()[:6] if line.startswith("make ")]
    assert [c.split()[1] for c in commands] == ["run", "test"]


BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", BENCHMARKS, ids=[p.name for p in BENCHMARKS])
def test_every_benchmark_script_prints_its_help(script):
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def entry_point(name: str) -> Path:
    path = Path(sys.executable).parent / name
    if not path.is_file():
        pytest.fail(f"console script {name} is not installed next to {sys.executable}: pip install -e .")
    return path


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_console_command_is_its_python_m_form(name):
    """The installed entry point and ``python -m`` print the same help (Hydra's, with the composed config,
    for the Hydra commands) and both exit 0."""
    module = SCRIPT_MODULES[name]
    script = subprocess.run([entry_point(name), "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    python_m = run_cli(module, "--help", cwd=ROOT)
    assert script.returncode == python_m.returncode == 0, script.stderr[-1500:] + python_m.stderr[-1500:]
    strip = lambda text: re.sub(r"(python -m \S+|esgexp-?[\w-]*|__main__\.py|\w+\.py)", "CMD", text)  # noqa: E731
    assert strip(script.stdout) == strip(python_m.stdout)
