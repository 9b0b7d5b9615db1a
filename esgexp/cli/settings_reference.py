"""``python -m esgexp.settings_reference [OUT]``: docs/settings.md, every setting with its default and rule.

Read from the configs (``conf/config.yaml`` and each option file of each config group, uncomposed, so an
interpolation such as ``${seed}`` shows as written) and the rules of ``esgexp/jobs/settings.py``'s ``SCHEMA``.
A key whose default differs between a group's options lists them; long texts (prompts) show their length.
``tests/test_docs.py`` fails when docs/settings.md is not what this writes.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from esgexp.core.config import CONF_DIR

# The groups of conf/config.yaml's defaults list, in its order, and those of the other commands' configs.
GROUPS = (
    "dataset",
    "backend",
    "model",
    "strategy",
    "template",
    "scoring",
    "metrics",
    "judge",
    "retriever",
    "query",
    "trainer",
    "train",
    "tracking",
    "stats",
    "paths",
    "downloads",
    "chunker",
    "builder",
)
COMMANDS = ("ingest", "build", "verify", "leaderboard", "compare", "export_adapter", "paper", "data_cli")
LONG_TEXT = 60
SHOWN_VALUES = 4


def leaves(node, prefix: str = "") -> dict[str, object]:
    """``{"a.b": value}`` for every leaf of a raw config node (interpolations kept as written)."""
    found: dict[str, object] = {}
    items = node.items_ex(resolve=False) if isinstance(node, DictConfig) else []
    for key, value in items:
        if key == "defaults" and not prefix:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, DictConfig) and len(value):
            found.update(leaves(value, f"{name}."))
        else:
            found[name] = value
    return found


def raw(path: Path) -> DictConfig:
    return OmegaConf.load(path)


def shown(value: object) -> str:
    """A value as a table cell: YAML-like, long texts as their length, pipes escaped."""
    if isinstance(value, ListConfig):
        value = OmegaConf.to_container(value, resolve=False)
    if isinstance(value, DictConfig):
        value = OmegaConf.to_container(value, resolve=False) or {}
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, str) and len(value) > LONG_TEXT:
        text = f"(text, {len(value)} characters)"
    else:
        text = str(value)
    return "`" + text.replace("|", "\\|").replace("\n", "\\n") + "`"


def rule_of(key: str) -> str:
    """The rule ``SCHEMA`` (or a component class, for ``dataset.<key>``, ``backend.<key>``) checks for ``key`` (a rule that depends
    on the config: its docstring), or ``-``."""
    from esgexp.jobs.settings import SCHEMA

    rule = SCHEMA.get(key) or component_rules().get(key)
    if rule is None:
        return "-"
    if callable(rule) and not hasattr(rule, "expected"):
        return " ".join((rule.__doc__ or "depends on the job").split())
    text = rule.expected()
    return text + (" or null" if getattr(rule, "optional", False) else "")


@cache
def component_rules() -> dict:
    """The rules every dataset, backend and retriever class declares, keyed as their settings (``backend.dtype``)."""
    from esgexp.core.rules import declared_rules

    found = {}
    for group in ("dataset", "backend", "retriever"):
        for path in sorted((CONF_DIR / group).glob("*.yaml")):
            found.update(declared_rules(raw(path), f"{group}."))
    return found


def group_rows(group: str, default: str | None) -> list[tuple[str, str, str]]:
    """(key, default or per-option values, rule) for every key of the group's option files."""
    paths = sorted((CONF_DIR / group).glob("*.yaml"))
    options = {path.stem: leaves(raw(path)) for path in paths}
    package = package_of(paths[0], group)
    keys: dict[str, None] = {}
    for found in options.values():
        keys.update(dict.fromkeys(found))
    rows = []
    for key in keys:
        values: dict[str, list[str]] = {}
        for option, found in options.items():
            if key in found:
                values.setdefault(shown(found[key]), []).append(option)
        having = sum(len(opts) for opts in values.values())
        if len(values) == 1 and having == len(options):
            cell = next(iter(values))
        elif len(values) > SHOWN_VALUES and len(values) == having:
            example = options[default][key] if default in options and key in options[default] else None
            cell = "per option" + (f", e.g. {shown(example)} ({default})" if example is not None else "")
        else:
            parts = [f"{value} ({named(opts)})" for value, opts in values.items()]
            more = len(parts) - SHOWN_VALUES
            cell = "; ".join(parts[:SHOWN_VALUES]) + (f"; ... {more} more" if more > 0 else "")
        rows.append((f"{package}.{key}", cell, rule_of(f"{package}.{key}")))
    return rows


def package_of(path: Path, group: str) -> str:
    """Where a group's options land in the config: their ``# @package NAME`` line, else the group's name."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# @package "):
            return line.removeprefix("# @package ").strip()
    return group


def named(options: list[str]) -> str:
    """Up to three option names, else their count."""
    return ", ".join(options) if len(options) <= 3 else f"{len(options)} options"


def table(rows: list[tuple[str, str, str]]) -> list[str]:
    lines = ["| setting | default | rule |", "|---|---|---|"]
    return lines + [f"| `{key}` | {default} | {rule} |" for key, default, rule in rows]


def defaults_of(config: DictConfig) -> dict[str, str | None]:
    """Group -> the option conf/config.yaml's defaults list picks (None: no default)."""
    chosen: dict[str, str | None] = {}
    for entry in config.get("defaults", []):
        if isinstance(entry, DictConfig):
            for group, option in entry.items():
                chosen[str(group)] = None if option is None else str(option)
    return chosen


def reference() -> str:
    """The whole of docs/settings.md."""
    config = raw(CONF_DIR / "config.yaml")
    chosen = defaults_of(config)
    lines = [
        "# Settings reference",
        "",
        "Generated by `python -m esgexp.settings_reference` from `conf/` and the rules in `esgexp/jobs/settings.py`",
        "(do not edit by hand; `tests/test_docs.py` fails when it is stale). Every key is a Hydra override:",
        "`esgexp dataset.limit=100`, a group option `esgexp retriever=bge-base`. The rules are checked before a",
        "job starts; a bad value is one message naming the key. Where a group's options set a key differently,",
        "the default column lists each value with its options; the option `conf/config.yaml` picks is named.",
        "`trainer.accelerator=gpu|cuda` and `model.load_in_4bit=true` need a CUDA GPU: on a machine without one",
        "a job that loads its model here (fine-tuning, `backend=hf`) is refused before any weights are converted",
        "or loaded (`check_device`; `dry_run=true` plans it on any machine).",
        "",
        "## Top level (conf/config.yaml)",
        "",
        *table([(key, shown(value), rule_of(key)) for key, value in leaves(config).items()]),
    ]
    for group in GROUPS:
        if not (CONF_DIR / group).is_dir():
            continue
        options = ", ".join(sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")))
        default = chosen.get(group)
        lines += [
            "",
            f"## {group}",
            "",
            f"Options: {options}. Default: `{default}`.",
            "",
            *table(group_rows(group, default)),
        ]
    for command in COMMANDS:
        path = CONF_DIR / f"{command}.yaml"
        if path.is_file():
            found = leaves(raw(path))
            lines += [
                "",
                f"## The `{command}` command (conf/{command}.yaml)",
                "",
                *table([(k, shown(v), rule_of(k)) for k, v in found.items()]),
            ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else CONF_DIR.parent / "docs" / "settings.md"
    out.write_text(reference(), encoding="utf-8")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
