"""``python -m esgexp.paper``: the command users know; its code is ``esgexp/cli/paper.py``."""

from esgexp.cli.paper import cli

if __name__ == "__main__":
    cli()
