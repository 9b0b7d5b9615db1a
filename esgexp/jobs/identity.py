"""A job's identity: every setting of its composed config, less the declared few that cannot change its
outputs. Equal identities make a run resumable from another (``resume=true``), a checkpoint continuable
(``ckpt_path=last``), two runs one ``config_hash`` on the leaderboard; the settings outside it never tell
runs apart in a variant label (esgexp/analysis/variants.py).

A new config group or setting is part of the identity without anyone listing it: a setting that only
says where files go, how fast or how visibly a job runs belongs in NOT_IDENTITY below (a backend's speed
settings: ``runtime_keys`` of its class, esgexp/backends/base.py).
"""

from __future__ import annotations

import hashlib
import json
from functools import cache

from omegaconf import DictConfig, ListConfig, OmegaConf

# Settings (a dotted key, or a whole group) that never change what a job computes from its inputs.
NOT_IDENTITY = (
    "paths",  # where files go
    "data",  # how the benchmark files arrive (download, mirror, hosts): their bytes are checked against one hash
    "hydra",
    "tracking",  # where the run is recorded
    "experiment_name",
    "resume",  # how a job starts: from scratch, or from the answers / checkpoint of an equal one
    "ckpt_path",
    "dry_run",
    "skip_invalid_jobs",
    "cache",  # whether answers come from the request cache (the same answers either way)
    "stats",  # how intervals are computed from the same answers (a resumed run scores again)
    "trainer.progress_bar",  # how visibly and on which devices it runs
    "retriever.progress_bar",
    "retriever.dense.progress_bar",  # a hybrid's dense half
    "trainer.batch_size",
    "trainer.accelerator",
    "trainer.devices",
    "trainer.num_nodes",
    "trainer.strategy",
    "trainer.gpu_memory_gb",
    "trainer.log_every_n_steps",
    "trainer.max_steps",  # how long it trains: ckpt_path=last continues a run with a longer one
    "trainer.max_epochs",
)


def ignored(key: str, backend_runtime: tuple[str, ...] = ()) -> bool:
    """Whether the dotted ``key`` is outside the identity (NOT_IDENTITY, ``backend.<a runtime key>``, or
    ``judge.backend_overrides.<a runtime key of any backend>``: the judge's backend is its model's)."""
    outside = (
        NOT_IDENTITY
        + tuple(f"backend.{name}" for name in backend_runtime)
        + tuple(f"judge.backend_overrides.{name}" for name in every_backend_runtime_key())
    )
    return any(key == name or key.startswith(name + ".") for name in outside)


@cache
def every_backend_runtime_key() -> tuple[str, ...]:
    """The speed settings of every backend of conf/backend/."""
    from esgexp.core.config import CONF_DIR

    targets = {OmegaConf.load(path).get("_target_") for path in sorted((CONF_DIR / "backend").glob("*.yaml"))}
    return tuple(sorted({key for target in targets if target for key in backend_runtime_keys({"_target_": target})}))


def backend_runtime_keys(backend) -> tuple[str, ...]:
    """The speed settings of the backend a ``backend`` node (or its resolved dict) builds (none without one)."""
    from esgexp.backends import backend_class

    target = (backend or {}).get("_target_") if isinstance(backend, (dict, DictConfig)) else None
    try:
        return backend_class(str(target)).runtime_keys if target else ()
    except (ImportError, AttributeError, ValueError):  # a class an older esgexp had
        return ()


def identity(cfg: DictConfig | dict) -> dict:
    """The resolved config less the settings outside the identity, as nested dicts (a setting outside it is
    never resolved: ``paths.output_dir`` needs a running Hydra app)."""
    runtime = backend_runtime_keys(cfg.get("backend"))

    def kept(node, prefix: str) -> dict:
        out = {}
        for key, value in node.items_ex(resolve=False) if isinstance(node, DictConfig) else node.items():
            name = f"{prefix}{key}"
            if ignored(name, runtime):
                continue
            if isinstance(value, (dict, DictConfig)):
                out[key] = kept(node[key], f"{name}.")
            else:
                value = node[key]
                out[key] = OmegaConf.to_container(value, resolve=True) if isinstance(value, ListConfig) else value
        return out

    return kept(cfg, "")


def job_identity(cfg: DictConfig | dict) -> str:
    """A SHA-256 of the identity: equal for two configs that compute the same results."""
    return hashlib.sha256(json.dumps(identity(cfg), sort_keys=True, default=str).encode()).hexdigest()
