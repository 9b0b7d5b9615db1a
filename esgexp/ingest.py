"""``python -m esgexp.ingest``: the command users know; its code is ``esgexp/cli/ingest.py``."""

from esgexp.cli.ingest import main

if __name__ == "__main__":
    main()
