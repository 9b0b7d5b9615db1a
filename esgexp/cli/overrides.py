"""Command-line overrides measured against the config they change.

``did_you_mean`` finds the known key closest to a misspelt one (``config_keys`` lists a config's keys).
``check_added_keys`` looks at each key added with ``+`` (``+dataset.limt=3``, ``+foo=bar``): one a
component's constructor does not take is a UserError naming its valid settings, before any work; one
that no esgexp code reads is a warning line (the job goes on, the key stays in config.yaml).
``override_positions`` reads a command line as Hydra's own parser does, and words what it would refuse.
"""

from __future__ import annotations

import difflib
import inspect
import re
import shlex
import sys
from functools import cache
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from esgexp.cli.secret_values import redacted
from esgexp.core.config import CONF_DIR, PACKAGE_DIR, compose_config
from esgexp.errors import UserError

# Hydra's options that each make a command do something else: one at most.
MODES = ("run", "multirun", "cfg", "info", "shell_completion")


def override_positions(args: list[str]) -> list[int]:
    """Where in ``args`` (a command line) Hydra's parser finds the overrides; a UserError with the grammar's
    hint for what it would refuse: ``--key=value`` (overrides take no dashes), an override after an option
    such as ``-m`` (options go first), an option without its value."""
    import argparse

    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    parser.exit_on_error = False
    try:
        namespace, unknown = parser.parse_known_args(args)
    except argparse.ArgumentError as error:
        raise UserError(f"{error} (the options: {command_name()} --help)") from None
    dashed = next((arg for arg in unknown if arg.startswith("-")), None)
    if dashed:
        raise UserError(dashed_message(dashed, args))
    if unknown:
        overrides = set(namespace.overrides + unknown)
        option = next(arg for arg in reversed(args[: args.index(unknown[0])]) if arg.startswith("-"))
        reordered = [arg for arg in args if arg not in overrides] + [arg for arg in args if arg in overrides]
        raise UserError(
            f"{unknown[0]} comes after the option {option}: options go before the overrides: "
            f"{command_name()} {shlex.join(reordered)}"
        )
    modes = [f"--{mode.replace('_', '-')}" for mode in MODES if getattr(namespace, mode)]
    if len(modes) > 1:
        flags = ", ".join(f"--{mode.replace('_', '-')}" for mode in MODES)
        raise UserError(f"{' and '.join(modes)} cannot go together: give only one of {flags}")
    return [i for i, arg in enumerate(args) if arg in namespace.overrides]


def dashed_message(arg: str, args: list[str]) -> str:
    """``--key=value`` (or ``--key value``): the override without dashes."""
    key, equals, value = arg.lstrip("-").partition("=")
    after = args[args.index(arg) + 1 : args.index(arg) + 2]
    if not equals:
        value = after[0] if after and "=" not in after[0] and not after[0].startswith("-") else "VALUE"
    return f"{arg}: an override is key=value without dashes: {key}={value} (the options: {command_name()} --help)"


def command_name() -> str:
    """How this command was started: ``esgexp``, ``esgexp-ingest``, ``python -m esgexp.ingest``."""
    path = Path(sys.argv[0]).resolve()
    if path.suffix != ".py":
        return path.name
    if PACKAGE_DIR not in path.parents:
        return "esgexp"
    return "python -m " + ".".join(
        part for part in path.with_suffix("").relative_to(PACKAGE_DIR.parent).parts if part != "__main__"
    )


def unknown_option(group: str, option: str, options: list[str]) -> str:
    """``GROUP=OPTION`` names no config: the close option, and the ones there are."""
    near = difflib.get_close_matches(option, options, n=1, cutoff=0.6)
    hint = f": did you mean {group}={near[0]}?" if near else ""
    listed = f": choose one of {', '.join(options)}" if options else ""
    return f"Could not find '{group}/{option}' ({group}={option}){hint}{listed}"


def did_you_mean(key: str, known: list[str]) -> str | None:
    """The known dotted key closest to a misspelt ``key`` (difflib), or None when none is close."""
    parent = key.rpartition(".")[0]
    siblings = [name for name in known if name.rpartition(".")[0] == parent]
    for pool in (siblings, known):
        close = difflib.get_close_matches(key, pool, n=1, cutoff=0.75)
        if close:
            return close[0]
    return None


def unreadable_message(override: str, reason: str, config: str | None, overrides: list[str]) -> str:
    """What to say about an override Hydra's grammar cannot read: a misspelt key's close known key, and the
    form that reads (a list whose items hold ``=`` with each item quoted; a list the shell split at a space
    whole, in quotes); else Hydra's reason with the quoting hint."""
    key, _, value = override.partition("=")
    parts = []
    known = config_keys(config, [], key_of(override)) if config else []
    near = did_you_mean(key_of(override), known) if known and key_of(override) not in known else None
    if near:
        parts.append(f"{key_of(override)} is not a setting: did you mean {near}?")
        key = key.replace(key_of(override), near)
    at = overrides.index(override) if override in overrides else -1
    if value.startswith("[") and not value.rstrip().endswith("]") and at >= 0:
        tail = next((i for i in range(at + 1, len(overrides)) if overrides[i].rstrip().endswith("]")), None)
        if tail is not None:
            value = " ".join([value, *overrides[at + 1 : tail + 1]])
            parts.append("the shell split this list at a space: quote the whole override")
    if value.startswith("[") and value.endswith("]"):
        items = [item.strip() for item in value[1:-1].split(",") if item.strip()]
        if any("=" in item and item[0] not in "'\"" for item in items):
            parts.append("each item that holds '=' goes in quotes")
            value = "[" + ", ".join(item if item[0] in "'\"" else f"'{item}'" for item in items) + "]"
    if not parts:
        return (
            f"cannot read {override!r}: {reason} (quote a value with special characters, e.g. key='a,b'; the "
            "grammar: https://hydra.cc/docs/advanced/override_grammar/basic/)"
        )
    return f"cannot read {override!r}: {'; '.join(parts)}: {shell_word(f'{key}={value}')}"


def shell_word(arg: str) -> str:
    """``arg`` as one shell word a reader can copy: in double quotes when it holds single quotes and nothing a
    shell expands inside double quotes, else ``shlex.quote``'s form."""
    if "'" in arg and not set('"$`\\!') & set(arg):
        return f'"{arg}"'
    return shlex.quote(arg)


def key_of(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def config_keys(config_name: str, overrides: list[str], skip: str) -> list[str]:
    """Every dotted key of ``config_name`` composed from ``overrides`` without those setting ``skip`` (and
    without sweeps, flags or hydra settings); with no override at all when that fails."""
    from hydra.core.global_hydra import GlobalHydra

    kept = [
        o
        for o in overrides
        if "=" in o
        and not o.startswith("-")
        and key_of(o) != skip
        and not key_of(o).startswith("hydra")
        and "," not in o
    ]
    GlobalHydra.instance().clear()  # a failed composition may have left it set
    for attempt in (kept, []):
        try:
            cfg = compose_config(config_name, attempt)
            break
        except Exception:
            GlobalHydra.instance().clear()
            cfg = None
    if cfg is None:
        return []
    keys: list[str] = []

    def walk(node, prefix: str) -> None:
        for name in node.keys() if OmegaConf.is_dict(node) else []:
            keys.append(f"{prefix}{name}")
            walk(node._get_node(name), f"{prefix}{name}.")

    walk(cfg, "")
    return keys


def unknown_key_message(key: str, value: str, known: list[str]) -> str:
    """What to say about ``key=value`` when the config has no ``key``: the close known key, else its siblings
    (a value that looks like an API key redacted)."""
    near = did_you_mean(key, known)
    if near:
        return f"{key} is not a setting: did you mean {near}? ({near}={redacted(value)})"
    parent = key.rpartition(".")[0]
    siblings = sorted(k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == parent)
    where = f"under {parent}" if parent else "at the top level"
    listed = f": {', '.join(siblings)}" if siblings else ""
    return f"{key} is not a setting: check its spelling (the settings {where}{listed})"


def added_keys(overrides: list[str]) -> dict[str, str]:
    """``{key: value}`` of the overrides that add a key (``+key=value``, ``++key=value``), not a config group."""
    added = {}
    for override in overrides:
        if not override.startswith("+") or "=" not in override:
            continue
        key, value = override.lstrip("+").split("=", 1)
        group = key.split("@")[0]
        if "@" in key or group.startswith("hydra") or (CONF_DIR / group).is_dir():
            continue
        added[key] = value
    return added


def new_part(cfg: DictConfig, key: str, added: set[str]) -> int:
    """The index of the first part of dotted ``key`` that the added keys created (its node holds nothing else)."""
    parts = key.split(".")
    for i in range(len(parts) - 1):
        prefix = ".".join(parts[: i + 1])
        node = OmegaConf.select(cfg, prefix)
        leaves = [f"{prefix}.{k}" for k in _leaves(node)] if isinstance(node, DictConfig) else [prefix]
        if all(leaf in added for leaf in leaves):
            return i
    return len(parts) - 1


def _leaves(node: DictConfig, prefix: str = "") -> list[str]:
    found = []
    for name in node.keys():
        child = node._get_node(name)
        if isinstance(child, DictConfig) and len(child):
            found += _leaves(child, f"{prefix}{name}.")
        else:
            found.append(f"{prefix}{name}")
    return found


def settings_of(target: str) -> list[str] | None:
    """The keyword arguments a ``_target_`` takes; None when it takes any (``**kwargs``) or cannot be read."""
    from hydra.utils import get_object

    try:
        signature = inspect.signature(get_object(target))
    except (ImportError, AttributeError, ValueError, TypeError):
        return None
    params = signature.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]


def not_a_setting(node_key: str, target: str, name: str) -> str | None:
    """The message for a key ``name`` under the node ``node_key`` whose ``_target_`` does not take it;
    None when it does (or takes anything)."""
    valid = settings_of(target)
    if valid is None or name in valid:
        return None
    prefix = f"{node_key}." if node_key else ""
    near = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    hint = f": did you mean {prefix}{near[0]}?" if near else ""
    return f"{prefix}{name} is not a setting of {target}{hint} (its settings: {', '.join(valid)})"


@cache
def package_source() -> str:
    own = {
        Path(__file__).resolve(),
        PACKAGE_DIR / "errors.py",
        PACKAGE_DIR / "cli" / "secret_values.py",
    }  # example keys
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(PACKAGE_DIR.rglob("*.py")) if p not in own)


def read_by_code(name: str) -> bool:
    """Whether any esgexp module names a key ``name`` (``cfg.name``, ``.get("name")``, a keyword)."""
    return re.search(rf"\b{re.escape(name)}\b", package_source()) is not None


# Nodes whose keys go as they are to a library that checks them (Lightning's Trainer arguments).
PASSED_THROUGH = ("trainer.lightning",)


def check_added_keys(cfg: DictConfig, overrides: list[str]) -> list[str]:
    """Raise a UserError for an added key a component's constructor does not take; return a warning for
    each added key that no esgexp code reads."""
    added = added_keys(overrides)
    warnings = []
    for key, original in added.items():
        value = redacted(original)
        parts = key.split(".")
        i = new_part(cfg, key, set(added))
        node_key = ".".join(parts[:i])
        node = OmegaConf.select(cfg, node_key) if node_key else cfg
        target = node.get("_target_") if isinstance(node, DictConfig) else None
        if target:
            problem = not_a_setting(node_key, str(target), parts[i])
            if problem:
                raise UserError(f"+{key}={value}: {problem}")
        elif node_key.startswith(PASSED_THROUGH):  # read by its consumer, which checks the names
            continue
        elif not read_by_code(parts[i]):
            warnings.append(
                f"+{key}={value}: no config has {'.'.join(parts[: i + 1])} and nothing in esgexp reads it; "
                "it is saved in config.yaml but changes nothing (check its spelling, or leave it out)"
            )
    return warnings
