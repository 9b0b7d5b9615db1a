"""``python -m esgexp.leaderboard [tracking.uri=...] [out_dir=...] [format=all|csv|md|html] [latest_only=false]``."""

import logging
import sys

from esgexp.errors import exit_on_user_error
from esgexp.leaderboard import main


def cli() -> None:
    """``esgexp-leaderboard`` and ``python -m esgexp.leaderboard``."""
    with exit_on_user_error(logging.getLogger("esgexp.leaderboard")):
        main(sys.argv[1:])


if __name__ == "__main__":
    cli()
