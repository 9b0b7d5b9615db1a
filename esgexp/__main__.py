"""``python -m esgexp``: the ``esgexp`` command (esgexp/cli/main.py)."""

from esgexp.cli.main import cli

if __name__ == "__main__":
    cli()
