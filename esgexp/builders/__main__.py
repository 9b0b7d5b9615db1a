"""``python -m esgexp.builders``: the ``esgexp-build`` command (esgexp/cli/build.py)."""

from esgexp.cli.build import main

if __name__ == "__main__":
    main()
