"""``python -m esgexp.compare``: the command users know; its code is ``esgexp/cli/compare.py``."""

from esgexp.cli.compare import cli

if __name__ == "__main__":
    cli()
