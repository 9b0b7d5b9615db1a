"""Hydra's config files parsed once per test process instead of at every compose.

The suite composes configs a few thousand times (each test's config, each command-line job, each paper
grid's jobs); a compose reads and parses about 25 YAML files, a quarter of its time. ``install()`` wraps
the two file sources Hydra reads (our ``conf/`` folder, Hydra's own package configs) so each file is
parsed once and every compose gets its own deep copy (Hydra takes the ``defaults`` list out of the
config it is handed). A file is parsed again when its size or modification time changes. What a compose
returns is unchanged: ``tests/test_config.py`` compares composed configs with and without it.
"""

from __future__ import annotations

import copy
import os

from hydra._internal.core_plugins.file_config_source import FileConfigSource
from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource
from hydra.plugins.config_source import ConfigResult

ORIGINAL = {source: source.load_config for source in (FileConfigSource, ImportlibResourcesConfigSource)}
_parsed: dict[tuple, ConfigResult] = {}


def _file_stamp(source, config_path: str) -> tuple:
    """What says a file changed: its size and modification time (a package's configs never change)."""
    if not isinstance(source, FileConfigSource):
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


def install() -> None:
    for source in ORIGINAL:
        source.load_config = _cached_load


def uninstall() -> None:
    for source, load in ORIGINAL.items():
        source.load_config = load
    _parsed.clear()
