"""``python -m esgexp.export_adapter``: the command users know; its code is ``esgexp/cli/export_adapter.py``."""

from esgexp.cli.export_adapter import cli

if __name__ == "__main__":
    cli()
