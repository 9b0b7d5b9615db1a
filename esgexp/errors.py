"""The error for user mistakes (bad config, missing file, bad data), and how entry points report it."""

import logging
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
    stderr, also recorded in the run's log file, and exit status 2.

    In a job of a sweep (``-m``) nothing ends the process: a mistake, or any other error (its traceback
    goes to the job's log file), is written to the job's ``FAILED`` file and the sweep goes on to the
    next job; the sweep's end reports every job (esgexp/sweep.py)."""
    from hydra.errors import InstantiationException
    from omegaconf.errors import OmegaConfBaseException

    from esgexp.sweep import in_multirun, mark_failed

    try:
        yield
    except (UserError, OmegaConfBaseException, InstantiationException) as error:
        log_to_files(log, logging.ERROR, str(error))
        print(f"error: {error}", file=sys.stderr)
        if not in_multirun():
            sys.exit(2)
        mark_failed(str(error))
    except Exception as error:
        if not in_multirun():
            raise
        import traceback

        log_to_files(log, logging.ERROR, traceback.format_exc())
        reason = f"{type(error).__name__}: {error}"
        print(f"error: job failed: {reason} (traceback in {mark_failed(reason).parent / 'esgexp.log'})", file=sys.stderr)
