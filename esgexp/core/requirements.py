"""Optional dependencies a component class declares (``requires``: an import name -> the message naming what to
install), found without importing them."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping


def missing(requires: Mapping[str, str]) -> list[str]:
    """The message of each module of ``requires`` that is not installed here (none imported)."""
    return [message for module, message in requires.items() if importlib.util.find_spec(module) is None]
