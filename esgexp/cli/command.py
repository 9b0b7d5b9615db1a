"""How every command reports a user's mistake, Ctrl-C and a bug.

``user_message(error)`` is the one place that tells a user mistake (ours, Hydra's, OmegaConf's, a missing
file, a component given a key it does not take) from a bug, and words it as one line. ``run_command``
wraps each console command: a mistake is one ``error:`` line and exit 2, Ctrl-C one ``interrupted`` line
and exit 130 (SIGTERM: 143, SIGUSR2: 140, the same way); a bug keeps its traceback. ``exit_on_user_error``
does the same inside a Hydra job, where it also writes the run folder's FAILED file and lets a sweep go on."""

import errno
import logging
import os
import re
import signal
import sys
from collections.abc import Callable
from contextlib import contextmanager

from esgexp.errors import RERUN, RESUME, UserError, one_line


def log_to_files(log: logging.Logger, level: int, message: str) -> None:
    """Write ``message`` at ``level`` to the file handlers ``log`` reaches (Hydra's ``<run dir>/esgexp.log``),
    not to its console handlers."""
    if not log.isEnabledFor(level):
        return
    record = log.makeRecord(log.name, level, __file__, 0, "%s", (message,), None)
    logger = log
    while logger is not None:
        for handler in logger.handlers:
            if isinstance(handler, logging.FileHandler) and level >= handler.level:
                handler.handle(record)
        logger = logger.parent if logger.propagate else None


@contextmanager
def exit_on_user_error(log: logging.Logger):
    """Inside a Hydra job: a user mistake (``user_message``) becomes one ``error: ...`` line on stderr,
    also recorded in the run's log file, and exit status 2. Any failure also leaves a ``FAILED`` file (its
    one-line reason) in the run folder, so a folder without results says why; a ``FAILED`` left there by
    an earlier try of the same folder is removed first. Ctrl-C (or SIGTERM, SIGUSR2) is recorded in the log
    file and ``FAILED`` and goes on to ``run_command``, which prints it.

    In a job of a sweep (``-m``) nothing ends the process: a mistake, or any other error (its traceback
    goes to the job's log file), is written to the job's ``FAILED`` file and the sweep goes on to the
    next job; the sweep's end reports every job (esgexp/core/sweep.py)."""
    from esgexp.core.run_folder import FolderInUse
    from esgexp.core.sweep import clear_failed, in_multirun, mark_failed

    clear_failed()
    try:
        yield
    except KeyboardInterrupt as interrupt:
        log_to_files(log, logging.ERROR, interrupted_line(interrupt))
        mark_failed(interrupted_line(interrupt))
        raise
    except Exception as error:
        message = user_message(error)
        if message is not None:
            log_to_files(log, logging.ERROR, message)
            print(f"error: {message}", file=sys.stderr)
            if not isinstance(error, FolderInUse):  # the folder is the other job's: its FAILED says how it ended
                mark_failed(message)
            if not in_multirun():
                sys.exit(2)
            return
        reason = f"{type(error).__name__}: {error}"
        if not in_multirun():
            mark_failed(reason)
            raise
        import traceback

        log_to_files(log, logging.ERROR, traceback.format_exc())
        print(
            f"error: job failed: {reason} (traceback in {mark_failed(reason).parent / 'esgexp.log'})", file=sys.stderr
        )


def check_command_line(cfg, log: logging.Logger) -> None:
    """First thing in a Hydra job: the keys its command line added (``+key=value``) checked against ``cfg``
    (a component's unknown key: UserError; a key nothing reads: a warning line)."""
    from hydra.core.hydra_config import HydraConfig

    from esgexp.cli import overrides

    if HydraConfig.initialized():
        for warning in overrides.check_added_keys(cfg, list(HydraConfig.get().overrides.task)):
            log_to_files(log, logging.WARNING, warning)
            print(f"warning: {warning}", file=sys.stderr)


def run_command(main: Callable[[], object], config: str, overrides: list[str] | None = None) -> None:
    """Run a console command's ``main`` (its config is ``config``; its Hydra overrides ``overrides``, by
    default the command line, checked first: its grammar, ``~``, a sweep's values: esgexp/cli/command_line.py; a
    value that looks like an API key is refused before that: esgexp/cli/secret_values.py): a user mistake is one
    ``error:`` line and exit 2, Ctrl-C one ``interrupted`` line and exit 130 (SIGTERM and SIGUSR2 take the
    same path: esgexp/backends/sigint.py; exit 128 + the signal's number), any other error its traceback.
    Keys ``overrides`` add that nothing reads are a warning line first (commands that compose their config
    themselves)."""
    from esgexp.backends.sigint import STOP_SIGNALS, stop_signal, stop_signals_as_ctrl_c, stopped_at_once

    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises its errors here instead of printing its own report
    for stream in (sys.stdout, sys.stderr):  # an ASCII-only locale (LC_ALL=C) prints `·` or é as \xb7, never fails
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    on_command_line = overrides is None
    overrides = sys.argv[1:] if on_command_line else overrides
    try:
        from esgexp.cli.secret_values import refuse_secrets

        refuse_secrets(config, list(dict.fromkeys(sys.argv[1:] + list(overrides))))  # before any file is written
        if on_command_line:  # a Hydra command: its grammar and a sweep's values are checked before it starts
            from esgexp.cli.command_line import checked_command_line

            sys.argv[1:] = overrides = checked_command_line(config, overrides)
        if config in COMPOSED_COMMANDS and {"-h", "--help"} & set(sys.argv[1:]):
            print(command_help(config))
            return
        if any(o.startswith("+") for o in overrides) and config in COMPOSED_COMMANDS:
            from esgexp import overrides as command_line
            from esgexp.core.config import compose_config

            for warning in command_line.check_added_keys(compose_config(config, overrides), overrides):
                print(f"warning: {warning}", file=sys.stderr)
        with stop_signals_as_ctrl_c():
            main()
    except KeyboardInterrupt as interrupt:
        for signum in STOP_SIGNALS:  # a second signal while threads finish
            signal.signal(signum, lambda signum, _: os._exit(128 + signum))
        print(interrupted_line(interrupt), file=sys.stderr, flush=True)
        if stopped_at_once():  # a second Ctrl-C: the threads still waiting on a server are not joined
            logging.shutdown()
            sys.stdout.flush()
            os._exit(128 + stop_signal())
        sys.exit(128 + stop_signal())
    except Exception as error:
        message = user_message(error, config, overrides)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


# Commands that compose their config with hydra.compose (not @hydra.main, whose jobs check their own keys).
COMPOSED_COMMANDS = ("compare", "leaderboard", "export_adapter", "paper")


def command_help(config: str) -> str:
    """``--help`` of a command that composes its config itself: its arguments and its settings' defaults."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from esgexp.core.config import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose(config)
    return (
        f"usage: KEY=VALUE ... (Hydra overrides of conf/{config}.yaml; every setting: docs/settings.md)\n\n"
        f"== Config ==\n{OmegaConf.to_yaml(cfg)}"
    )


def interrupted_line(interrupt: KeyboardInterrupt) -> str:
    """The one line an interruption prints: what was kept and how to go on, and the signal unless Ctrl-C
    (``interrupted: 12 answers kept in DIR; ...``, ``interrupted (SIGTERM): ...``, ``interrupted (Ctrl-C)``)."""
    from esgexp.backends.sigint import STOP_SIGNALS, stop_signal

    name = STOP_SIGNALS[stop_signal()]
    if not str(interrupt):
        return f"interrupted ({name})"
    return f"interrupted: {interrupt}" if stop_signal() == signal.SIGINT else f"interrupted ({name}): {interrupt}"


def user_message(error: BaseException, config: str | None = None, overrides: list[str] = ()) -> str | None:
    """The one line that tells the user what is wrong and what to do, or None when ``error`` is a bug.

    ``config`` and ``overrides`` (the command's config name and command line) let an unknown key get the
    closest known one."""
    from hydra.errors import HydraException, InstantiationException, OverrideParseException
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

    if isinstance(error, UserError):
        return for_command(str(error), config)
    if isinstance(error, InstantiationException):
        return instantiation_message(error)
    if isinstance(error, OverrideParseException):
        from esgexp.cli.overrides import unreadable_message

        reason = " ".join(line for line in str(error).splitlines() if line.strip() and not line.startswith("See "))
        return unreadable_message(str(getattr(error, "override", "an override")), reason, config, list(overrides))
    if isinstance(error, HydraException):
        return composition_message(error, config, list(overrides))
    if isinstance(error, MissingMandatoryValue):
        key = getattr(error, "full_key", None) or ""
        return f"{one_line(error)} (set it on the command line: {key}=...)"
    if isinstance(error, OmegaConfBaseException):
        return one_line(error)
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        where = f" writing {error.filename}" if error.filename else ""
        return for_command(
            f"no space left on the device{where}: what was written is kept; free some space, then {RESUME}", config
        )
    if (
        isinstance(error, (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError))
        and error.filename
    ):
        return f"{error.strerror}: {error.filename} (check the path)"
    return None


def for_command(message: str, config: str | None) -> str:
    """``message`` with its RESUME advice made RERUN where the command (``config``; by default the running
    Hydra job's) takes no ``resume`` (ingest, leaderboard): advice offers only what the command accepts."""
    config = config or job_config_name()
    return message.replace(RESUME, RERUN) if config and not takes_resume(config) else message


def job_config_name() -> str | None:
    """The config name of the running Hydra job (``ingest``, ``build``), or None outside one."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().job.config_name if HydraConfig.initialized() else None


def takes_resume(config: str) -> bool:
    """Whether ``conf/CONFIG.yaml`` has a top-level ``resume`` setting (an unknown config: assumed so)."""
    from omegaconf import OmegaConf

    from esgexp.core.config import CONF_DIR

    path = CONF_DIR / f"{config}.yaml"
    return not path.is_file() or "resume" in OmegaConf.load(path)


NOT_FOUND = re.compile(r"Could not find '([^']+)'")


UNKNOWN_KEY = re.compile(r"Could not override '([^']+)'\.\s*To append to your config use \+(\S+)")


ALREADY_THERE = re.compile(r"An item is already at '([^']+)'")


NOT_IN_DEFAULTS = re.compile(r"Could not override '([^']+)'\.\s*No match in the defaults list")


SWEEP_IN_ONE_RUN = re.compile(r"(?:Ambiguous value for argument|Sweep parameters) '([^']+)'")


def composition_message(error: BaseException, config: str | None, overrides: list[str]) -> str:
    """Hydra's composition errors (unknown key, unknown group option, key already there) in one line."""
    from esgexp.cli.overrides import config_keys, unknown_key_message, unknown_option

    text = str(error)
    unknown = UNKNOWN_KEY.search(text)
    if unknown:
        key, value = unknown.group(1), unknown.group(2).split("=", 1)[-1]
        return unknown_key_message(key, value, config_keys(config, overrides, key) if config else [])
    missing = NOT_FOUND.search(text)
    if missing:
        group, _, option = missing.group(1).rpartition("/")
        listing = text.split("Available options in", 1)[-1].split("Config search path", 1)[0]
        options = [line.strip() for line in listing.splitlines()[1:] if line.strip()]
        return unknown_option(group, option, options if "Available options in" in text else [])
    sweep = SWEEP_IN_ONE_RUN.search(text)
    if sweep:
        return sweep_message(sweep.group(1), config, overrides)
    nested = NOT_IN_DEFAULTS.search(text)
    if nested and "/" in nested.group(1):
        return nested_group_message(nested.group(1), overrides)
    there = ALREADY_THERE.search(text)
    if there:
        return f"+{there.group(1)}: {there.group(1)} is already a setting; set it without the + ({there.group(1)}=...)"
    cause = error.__cause__
    return one_line(error) + (f": {one_line(cause)}" if cause is not None else "")


def nested_group_message(group: str, overrides: list[str]) -> str:
    """A group nested in another group's option (``backend/server``) chosen with an option that has no such
    group (``backend=hf``): which options take it (the ``conf/`` options whose defaults list it)."""
    from omegaconf import OmegaConf

    from esgexp.core.config import CONF_DIR

    parent, _, leaf = group.rpartition("/")
    takers = sorted(
        path.stem
        for path in (CONF_DIR / parent).glob("*.yaml")
        if any(
            isinstance(d, dict) and leaf in d
            for d in OmegaConf.to_container(OmegaConf.load(path)).get("defaults") or []
        )
    )
    chosen = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+~") == parent), None)
    here = f"{parent}={chosen}" if chosen else f"the default {parent}"
    if not takers:
        return f"{group}: {here} has no {leaf} options"
    return f"{group} goes with {' or '.join(f'{parent}={t}' for t in takers)}, not {here}: use {parent}={takers[0]}"


def sweep_message(override: str, config: str | None, overrides: list[str]) -> str:
    """A sweep (``key=a,b``) in a command of one job: ``-m`` goes first (a Hydra job), or one value, quoted."""
    import shlex

    from esgexp.cli.overrides import command_name

    key, _, value = override.partition("=")
    one = f"quote it for one value (\"{key}='{value}'\")"
    if config is None or config in COMPOSED_COMMANDS:
        return f"{override}: this command runs one job: {one}"
    return f"{override} is a sweep: -m goes first for one job per value ({command_name()} -m {shlex.join(overrides)}), or {one}"


TARGET = re.compile(r"target '([^']+)'")


FULL_KEY = re.compile(r"full_key: (\S+)")


UNEXPECTED = re.compile(r"unexpected keyword argument '([^']+)'")


def instantiation_message(error: BaseException) -> str | None:
    """A component that could not be built: a key its constructor does not take (named with the ones it
    does), a missing argument, an unknown ``_target_``, or a user mistake it raised; None for a bug."""
    from esgexp.cli.overrides import not_a_setting

    text, cause = str(error), error.__cause__
    target = TARGET.search(text)
    full_key = FULL_KEY.search(text)
    node = full_key.group(1) if full_key else ""
    if text.startswith("Error locating target"):
        name = target.group(1) if target else ""
        return f"{node or 'a config'}: _target_ {name} cannot be imported: {one_line(cause or error)}"
    if isinstance(cause, TypeError) and target:
        unexpected = UNEXPECTED.search(str(cause))
        message = unexpected and not_a_setting(node, target.group(1), unexpected.group(1))
        if message:
            return message
        if "required" in str(cause) and "argument" in str(cause):
            return f"{node or target.group(1)}: {cause} (set it: {node + '.' if node else ''}NAME=...)"
    if cause is not None:
        inner = user_message(cause)
        return f"{node}: {inner}" if inner and node else inner
    return one_line(error)
