"""``python -m esgexp.settings_reference``: the command users know; its code is ``esgexp/cli/settings_reference.py``."""

from esgexp.cli.settings_reference import main

if __name__ == "__main__":
    main()
