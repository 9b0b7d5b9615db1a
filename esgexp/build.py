"""``python -m esgexp.build ...``: the same command as ``python -m esgexp.builders`` and ``esgexp-build``.

The builders' package is ``esgexp/builders/`` (a folder named ``build`` is what packaging tools and the
common Python ``.gitignore`` treat as build output); this module keeps the command users know."""

from esgexp.cli.build import main

if __name__ == "__main__":
    main()
