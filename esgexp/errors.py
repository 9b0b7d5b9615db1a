"""The exceptions every layer raises for a user's mistake, and the words they share.

``UserError`` is a mistake the user can fix (bad config, missing file, bad data): every command prints it
as one ``error:`` line and exits 2 (esgexp/cli/command.py). This module imports nothing from esgexp, so
any module may raise these without an import circle."""


class UserError(Exception):
    """A mistake the user can fix; the CLI prints it as one line, without a traceback."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, saying what was kept and how to go on (``12 answers kept in DIR; resume=true continues``)."""


# How a command stopped by a full disk goes on; for one whose config has no ``resume`` setting, RERUN instead.
RESUME = "run the same command with resume=true to continue"
RERUN = "run the same command again"


def one_line(error: BaseException) -> str:
    """``error``'s text on one line: OmegaConf's ``full_key``/``object_type`` lines folded into ``(at KEY)``."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    kept, at = [], None
    for line in lines:
        if line.startswith("full_key:"):
            at = line.removeprefix("full_key:").strip()
        elif not line.startswith(("object_type=", "reference_type=")):
            kept.append(line)
    text = " ".join(kept)
    return f"{text} (at {at})" if at and at not in text else text
