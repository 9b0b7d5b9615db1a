"""The error for user mistakes (bad config, missing file, bad data), and how entry points report it."""

import logging
import sys
from contextlib import contextmanager


class UserError(Exception):
    """A mistake the user can fix; the CLI prints it as one line, without a traceback."""


@contextmanager
def exit_on_user_error(log: logging.Logger):
    """Inside a command: a user mistake (ours, or a bad config value) becomes ``error: ...`` and exit status 2."""
    from hydra.errors import InstantiationException
    from omegaconf.errors import OmegaConfBaseException

    try:
        yield
    except (UserError, OmegaConfBaseException, InstantiationException) as error:
        log.error("%s", error)
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
