"""``python -m esgexp.data_cli``: the command users know as ``esgexp-data``; its code is ``esgexp/cli/data.py``."""

from esgexp.cli.data import cli

if __name__ == "__main__":
    cli()
