"""``python -m esgexp.leaderboard [tracking.uri=...] [out_dir=...] [format=all|csv|md|html] [latest_only=false]``."""

import sys

from esgexp.cli.command import run_command
from esgexp.leaderboard import main


def cli() -> None:
    """``esgexp-leaderboard`` and ``python -m esgexp.leaderboard``."""
    run_command(lambda: main(sys.argv[1:]), "leaderboard")


if __name__ == "__main__":
    cli()
