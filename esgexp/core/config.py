"""Config helpers: resolvers, flattening and the config directory."""

from __future__ import annotations

import os
import secrets
from datetime import datetime
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # esgexp/
CONF_DIR = PACKAGE_DIR.parent / "conf"
BUNDLED_DIR = PACKAGE_DIR / "data" / "bundled"


def register_resolvers() -> None:
    """``${bundled:NAME}``: a data file shipped inside the package; ``${cwd:}``: the launch folder;
    ``${run_stamp:PATTERN}``: a run folder's name (:func:`run_stamp`), fixed once per config."""
    if not OmegaConf.has_resolver("bundled"):
        OmegaConf.register_new_resolver("bundled", lambda name: str(BUNDLED_DIR / name))
    if not OmegaConf.has_resolver("cwd"):
        OmegaConf.register_new_resolver("cwd", lambda: os.getcwd())
    if not OmegaConf.has_resolver(RUN_STAMP):
        # Cached in the config, and Hydra copies the cache into every job of a sweep: one name per run or sweep.
        OmegaConf.register_new_resolver(RUN_STAMP, run_stamp, use_cache=True)


RUN_STAMP = "run_stamp"


def run_stamp(pattern: str) -> str:
    """The time now in strftime ``pattern``, then its milliseconds and a random tag:
    ``2026-12-01/20-19-03.452-a3f1``. Names sort in time order; jobs started in the same second get
    different names (esgexp/core/run_folder.py also creates the folder exclusively)."""
    moment = datetime.now()
    return f"{moment.strftime(pattern)}.{moment.microsecond // 1000:03d}-{secrets.token_hex(2)}"


def flatten(cfg: DictConfig | dict, prefix: str = "") -> dict[str, object]:
    """Flatten a (resolved) config into ``{"a.b.c": value}``; lists become their string form."""
    container = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    flat: dict[str, object] = {}
    for key, value in container.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def compose_config(config_name: str, overrides: list[str]) -> DictConfig:
    """``config_name`` composed with ``overrides`` (inside a Hydra app, or on its own)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return compose(config_name, overrides=overrides)
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(config_name, overrides=overrides)
