"""``python -m esgexp.verify``: the same command as ``esgexp-verify``; its code is ``esgexp/cli/verify.py``."""

from esgexp.cli.verify import cli

if __name__ == "__main__":
    cli()
