"""Hydra's config files parsed once per test process instead of at every compose.

The suite composes configs a few thousand times (each test's config, each command-line job, each paper
grid's jobs); a compose reads and parses about 25 YAML files, a quarter of its time. ``install()`` wraps
the two file sources Hydra reads (our ``conf/`` folder, Hydra's own package configs) so each file is
parsed once and every compose gets its own deep copy (Hydra takes the ``defaults`` list out of the
config it is handed). A file is parsed again when its size or modification time changes. What a compose
returns is unchanged: ``tests/test_config.py`` compares composed configs with and without it, and checks
that a second compose parses nothing.

Hydra's plugin scan (the first ``Plugins.instance()``) executes the modules of its config sources again,
so the classes it composes with are not the ones imported before it: ``install`` runs the scan first and
wraps the classes it left.
"""

from __future__ import annotations

import copy
import importlib
import os

from hydra.plugins.config_source import ConfigResult

SOURCES = (
    ("hydra._internal.core_plugins.file_config_source", "FileConfigSource"),
    ("hydra._internal.core_plugins.importlib_resources_config_source", "ImportlibResourcesConfigSource"),
)
ORIGINAL: dict[type, object] = {}  # each wrapped source class: its own load_config
_parsed: dict[tuple, ConfigResult] = {}


def _file_stamp(source, config_path: str) -> tuple:
    """What says a file changed: its size and modification time (a package's configs never change)."""
    if type(source).__name__ != "FileConfigSource":
        return ()
    path = os.path.realpath(os.path.join(source.path, source._normalize_file_name(config_path)))
    try:
        stat = os.stat(path)
    except OSError:  # missing: Hydra's own load says so
        return (None,)
    return (stat.st_size, stat.st_mtime_ns)


def _cached_load(source, config_path: str) -> ConfigResult:
    key = (type(source).__name__, source.path, config_path, *_file_stamp(source, config_path))
    parsed = _parsed.get(key)
    if parsed is None:
        parsed = _parsed[key] = ORIGINAL[type(source)](source, config_path)
    return ConfigResult(
        provider=parsed.provider,
        path=parsed.path,
        config=copy.deepcopy(parsed.config),
        header=dict(parsed.header),
    )


def files_parsed() -> int:
    """How many config files this process has parsed since ``install``."""
    return len(_parsed)


def install() -> None:
    from hydra.core.plugins import Plugins

    Plugins.instance()  # the scan that executes the sources' modules again, before their classes are taken
    for module, name in SOURCES:
        source = getattr(importlib.import_module(module), name)
        ORIGINAL.setdefault(source, source.load_config)
        source.load_config = _cached_load


def uninstall() -> None:
    for source, load in ORIGINAL.items():
        source.load_config = load
    ORIGINAL.clear()
    _parsed.clear()
