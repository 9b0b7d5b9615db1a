"""Model backends behind one interface (base.py): ``hf`` (transformers here), ``openai`` (any
OpenAI-compatible server), ``vllm`` (GPUs), each wrapped in the shared request cache (cache.py)."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from esgexp.backends.base import Backend, RunContext
from esgexp.backends.cache import CachedBackend, RequestCache
from esgexp.errors import UserError


def backend_class(target: str) -> type[Backend]:
    """The backend class a node's ``_target_`` names; its module is light (heavy libraries load in ``run``)."""
    from hydra.utils import get_class

    return get_class(target)


def make_backend(
    backend_cfg: DictConfig, model_cfg: DictConfig, context: RunContext, cache_path: str, cache_mode: str
) -> Backend:
    """The backend ``backend_cfg`` names (its ``_target_``, imported only now: optional dependencies
    stay optional), for ``model_cfg``, answering from the request cache at ``cache_path`` first."""
    settings = OmegaConf.to_container(backend_cfg, resolve=True)
    settings.pop("name", None)
    cls = backend_class(settings.pop("_target_"))
    missing = cls.missing_requirements()
    if missing:
        raise UserError(missing[0])
    backend = cls(model_cfg=model_cfg, context=context, **settings)
    cache = RequestCache(cache_path, cache_mode)
    return CachedBackend(backend, cache) if cache_mode != "off" else backend
