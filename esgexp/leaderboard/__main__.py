"""``python -m esgexp.leaderboard``: the ``esgexp-leaderboard`` command (esgexp/cli/leaderboard.py)."""

from esgexp.cli.leaderboard import cli

if __name__ == "__main__":
    cli()
