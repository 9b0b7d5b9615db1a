"""The error for user mistakes (bad config, missing file, bad data), and how entry points report it."""

import logging
import re
import sys
from contextlib import contextmanager


class UserError(Exception):
    """A mistake the user can fix; the CLI prints it as one line, without a traceback."""


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
    """Inside a command: a user mistake (ours, or a bad config value) becomes one ``error: ...`` line on
    stderr, also recorded in the run's log file, and exit status 2. Any failure also leaves a ``FAILED``
    file (its one-line reason) in the run folder, so a folder without results says why; a ``FAILED``
    left there by an earlier try of the same folder is removed first.

    In a job of a sweep (``-m``) nothing ends the process: a mistake, or any other error (its traceback
    goes to the job's log file), is written to the job's ``FAILED`` file and the sweep goes on to the
    next job; the sweep's end reports every job (esgexp/sweep.py)."""
    from hydra.errors import InstantiationException
    from omegaconf.errors import OmegaConfBaseException

    from esgexp.sweep import clear_failed, in_multirun, mark_failed

    clear_failed()
    try:
        yield
    except (UserError, OmegaConfBaseException, InstantiationException) as error:
        log_to_files(log, logging.ERROR, str(error))
        print(f"error: {error}", file=sys.stderr)
        mark_failed(str(error))
        if not in_multirun():
            sys.exit(2)
    except Exception as error:
        reason = f"{type(error).__name__}: {error}"
        if not in_multirun():
            mark_failed(reason)
            raise
        import traceback

        log_to_files(log, logging.ERROR, traceback.format_exc())
        print(
            f"error: job failed: {reason} (traceback in {mark_failed(reason).parent / 'esgexp.log'})", file=sys.stderr
        )


OVERRIDE_ERROR = re.compile(r"Could not override '([^']+)'")


def did_you_mean(key: str, known: list[str]) -> str | None:
    """The known dotted key closest to a misspelt ``key`` (difflib), or None when none is close."""
    import difflib

    parent = key.rpartition(".")[0]
    siblings = [name for name in known if name.rpartition(".")[0] == parent]
    for pool in (siblings, known):
        close = difflib.get_close_matches(key, pool, n=1, cutoff=0.75)
        if close:
            return close[0]
    return None


def config_keys(overrides: list[str], skip: str) -> list[str]:
    """Every dotted key of the config composed from ``overrides`` without those setting ``skip`` (and
    without sweeps or hydra settings); with no override at all when that fails."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from esgexp.config import CONF_DIR

    def key_of(override: str) -> str:
        return override.split("=", 1)[0].lstrip("+~")

    kept = [
        o
        for o in overrides
        if "=" in o
        and not o.startswith("-")
        and key_of(o) != skip
        and not key_of(o).startswith("hydra")
        and "," not in o
    ]
    GlobalHydra.instance().clear()  # the failed composition left it set
    for attempt in (kept, []):
        try:
            with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
                cfg = compose("config", overrides=attempt)
            break
        except Exception:
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


class SuggestingStream:
    """Wraps stderr: after Hydra's "Could not override 'KEY'" it adds "did you mean `NEAR`?" when a known
    key is close to KEY."""

    def __init__(self, stream, overrides: list[str]):
        self.stream = stream
        self.overrides = overrides

    def write(self, text: str) -> int:
        written = self.stream.write(text)
        match = OVERRIDE_ERROR.search(text)
        if match:
            key = match.group(1)
            near = did_you_mean(key, config_keys(self.overrides, key))
            if near:
                value = next((o.split("=", 1)[1] for o in self.overrides if o.split("=", 1)[0] == key), "...")
                self.stream.write(f"did you mean `{near}`? ({near}={value})\n")
        return written

    def __getattr__(self, name):
        return getattr(self.stream, name)


@contextmanager
def suggest_misspelt_keys():
    """Inside: Hydra's error for an unknown key on the command line also names the closest known key."""
    stream = sys.stderr
    sys.stderr = SuggestingStream(stream, sys.argv[1:])
    try:
        yield
    finally:
        sys.stderr = stream
