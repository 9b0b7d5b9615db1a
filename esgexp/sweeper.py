"""A sweep's values checked one by one before Hydra starts it (``-m``).

Each value of each swept key (``model=smollm2-135m,no-such-model``) is composed with the command's
other settings. A value that cannot be composed refuses the sweep with one message naming it and what
is wrong; with ``skip_invalid_jobs=true`` it is a ``warning: skipped ...`` line instead and the sweep runs
with the other values (its job numbers stay consecutive). A failure that only a combination of values
causes is left to Hydra's own check of every job (refused whole).
"""

from __future__ import annotations

import sys

from esgexp.errors import UserError, user_message

SKIP_KEY = "skip_invalid_jobs"


def checked_sweep(config_name: str, args: list[str]) -> list[str]:
    """``args`` (a Hydra command line) with every swept value that cannot be composed dropped (warned) when
    ``skip_invalid_jobs=true``, else a UserError naming them; ``args`` as they are for a single run."""
    if not {"-m", "--multirun"} & set(args):
        return args
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from esgexp.overrides import compose_config

    positions = [i for i, arg in enumerate(args) if not arg.startswith("-")]
    overrides = OverridesParser.create().parse_overrides([args[i] for i in positions])
    # hydra.* settings (run and sweep folders, launcher) do not change what a job's config can be.
    fixed = [o.input_line for o in overrides if not o.is_sweep_override() and not o.key_or_group.startswith("hydra")]
    settings = compose_config(config_name, fixed)
    skippable = SKIP_KEY in settings  # the main command's config (conf/config.yaml) has the setting
    skip = skippable and bool(settings[SKIP_KEY])
    fixed_args, bad = list(args), []
    for position, override in zip(positions, overrides, strict=True):
        if not override.is_sweep_override() or override.key_or_group.startswith("hydra"):
            continue
        key, good = override.get_key_element(), []
        try:
            values = list(override.sweep_string_iterator())
        except Exception:  # glob(...) needs Hydra's config loader: Hydra checks that sweep itself
            continue
        for value in values:
            try:
                compose_config(config_name, [*fixed, f"{key}={value}"])
                good.append(value)
            except Exception as error:
                message = user_message(error, config_name, [*fixed, f"{key}={value}"])
                if message is None:
                    raise
                bad.append(message)
        if good and len(good) < len(values):
            fixed_args[position] = f"{key}={','.join(good)}"
        elif not good:
            skip = False  # no job of the sweep could run
    if not bad:
        return args
    if not skip:
        way_out = f", or run the jobs of the other values only with {SKIP_KEY}=true" if skippable else ""
        raise UserError(f"the sweep cannot run {len(bad)} of its values: {'; '.join(bad)}. Fix or drop them{way_out}")
    for message in bad:
        print(f"warning: skipped jobs: {message}", file=sys.stderr)
    return fixed_args
