"""Config helpers: resolvers, flattening and the config directory."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
BUNDLED_DIR = Path(__file__).resolve().parent / "data" / "bundled"


def register_resolvers() -> None:
    """``${bundled:NAME}``: a data file shipped inside the package; ``${cwd:}``: the launch folder."""
    if not OmegaConf.has_resolver("bundled"):
        OmegaConf.register_new_resolver("bundled", lambda name: str(BUNDLED_DIR / name))
    if not OmegaConf.has_resolver("cwd"):
        OmegaConf.register_new_resolver("cwd", lambda: os.getcwd())


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
