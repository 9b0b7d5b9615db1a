"""``python -m esgexp.sync``: the command users know; its code is ``esgexp/cli/sync.py``."""

from esgexp.cli.sync import cli

if __name__ == "__main__":
    cli()
