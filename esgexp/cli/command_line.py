"""The command line checked before Hydra reads it.

Its grammar first (``esgexp/cli/overrides.py``: ``--key=value``, an override after ``-m``); then a ``~`` that
starts a value (or an item of a list or sweep) becomes the home folder, as a shell would do for a path,
whatever the key (``dataset.path=~/data/x.csv``, ``paths.runs_dir=~/runs``); then a sweep's values (``-m``).
Each value of a swept config group (``model=smollm2-135m,no-such-model``) must name a YAML file of the
group. One that does not refuses the sweep with one message naming it, the close option and the options
there are; with ``skip_invalid_jobs=true`` it is a ``warning: skipped jobs ...`` line instead and the sweep
runs with the other values (its job numbers stay consecutive). Any other failure to compose a job is left
to Hydra's own check of every job (the sweep refused whole, its message from ``cli.command.user_message``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from esgexp.cli.overrides import unknown_option
from esgexp.core.config import CONF_DIR
from esgexp.errors import UserError

SKIP_KEY = "skip_invalid_jobs"
# A ~ that starts a value or an item of a list or sweep (quoted or not), followed by / or the item's end.
HOME = re.compile(r"(^|[,\[])(\s*['\"]?)~(?=[/,\]'\"]|$)")


def checked_command_line(config_name: str, args: list[str]) -> list[str]:
    """``args`` (a Hydra command line) as Hydra is to read them: ``~`` expanded in each override, a sweep
    checked (``checked_sweep``); a UserError for what Hydra's grammar refuses (``override_positions``)."""
    from esgexp.cli.overrides import override_positions

    positions = override_positions(args)
    expanded = [home_expanded(arg) if i in positions else arg for i, arg in enumerate(args)]
    return checked_sweep(config_name, expanded, positions)


def home_expanded(override: str) -> str:
    """``key=value`` with each ``~`` that starts its value or an item of it replaced by the home folder."""
    key, equals, value = override.partition("=")
    return key + equals + HOME.sub(lambda m: m.group(1) + m.group(2) + str(Path.home()), value) if equals else override


def checked_sweep(config_name: str, args: list[str], positions: list[int]) -> list[str]:
    """``args`` (a Hydra command line, its overrides at ``positions``) with every swept group value that
    names no config dropped (warned) when ``skip_invalid_jobs=true``, else a UserError naming them;
    ``args`` as they are for a single run."""
    if not {"-m", "--multirun"} & set(args):
        return args
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = OverridesParser.create().parse_overrides([args[i] for i in positions])
    checked, bad, runnable = list(args), [], True
    for position, override in zip(positions, overrides, strict=True):
        group = CONF_DIR / override.key_or_group
        if not override.is_sweep_override() or override.key_or_group.startswith("hydra") or not group.is_dir():
            continue
        try:
            values = list(override.sweep_string_iterator())
        except Exception:  # glob(...) needs Hydra's config loader: Hydra checks that sweep itself
            continue
        good = [v for v in values if v == "null" or (group / f"{v}.yaml").is_file()]
        options = sorted(p.stem for p in group.glob("*.yaml"))
        bad += [unknown_option(override.key_or_group, v, options) for v in values if v not in good]
        if not good:
            runnable = False
        elif len(good) < len(values):
            checked[position] = f"{override.get_key_element()}={','.join(good)}"
    if not bad:
        return args
    skippable = config_name == "config"  # conf/config.yaml has the setting
    if not (skippable and runnable and f"{SKIP_KEY}=true" in (a.lower() for a in args)):
        way_out = f", or run the jobs of the other values only with {SKIP_KEY}=true" if skippable and runnable else ""
        raise UserError(f"the sweep cannot run {len(bad)} of its values: {'; '.join(bad)}. Fix or drop them{way_out}")
    for message in bad:
        print(f"warning: skipped jobs: {message}", file=sys.stderr)
    return checked
