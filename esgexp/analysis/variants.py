"""What tells apart runs that would carry the same name (one model, strategy and scoring): the settings
in which their configs differ, e.g. ``limit=3`` or ``base_url=http://127.0.0.1:8000/v1``.

In: each run's flattened config (``{"dataset.limit": "3", ...}``, as MLflow params or esgexp.core.config.flatten
give it) by run key. Out: a short label per run ("" when nothing tells it apart)."""

from __future__ import annotations

from esgexp.jobs.identity import backend_runtime_keys, ignored

# The settings a reader looks for first (the item sample, the prompt, the server), in this order.
PREFERRED = ("dataset.", "template.", "backend.", "scoring.", "strategy.", "retriever.", "query.", "model.")
# At most this many differing settings are named (the rest counted), each value cut to VALUE_CHARS.
SHOWN = 2
VALUE_CHARS = 40
NONE_VALUES = (None, "", "None", "null")


def _value(value) -> str:
    text = "none" if value in NONE_VALUES else str(value)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


def differing_keys(configs: list[dict]) -> list[str]:
    """The keys whose values are not the same in every one of ``configs``, those outside a run's identity
    (esgexp/jobs/identity.py) left out, those of PREFERRED first; where a group's ``name`` differs
    (``template.name``), its other keys are left out."""
    keys = sorted({key for config in configs for key in config})
    runtime = tuple(
        {name for config in configs for name in backend_runtime_keys({"_target_": config.get("backend._target_")})}
    )
    found = [
        key for key in keys if not ignored(key, runtime) and len({_value(config.get(key)) for config in configs}) > 1
    ]
    renamed = {key.removesuffix(".name") for key in found if key.endswith(".name")}
    found = [key for key in found if key.endswith(".name") or key.rpartition(".")[0] not in renamed]

    def rank(key: str) -> tuple[int, str]:
        return next((i for i, prefix in enumerate(PREFERRED) if key.startswith(prefix)), len(PREFERRED)), key

    return sorted(found, key=rank)


def short_names(keys: list[str]) -> dict[str, str]:
    """Each dotted key by its last part (``dataset.limit`` -> ``limit``; a group's name by the group:
    ``template.name`` -> ``template``), the full key where two share it."""
    last = [key.removesuffix(".name").rsplit(".", 1)[-1] for key in keys]
    return {key: name if last.count(name) == 1 else key for key, name in zip(keys, last)}


def variant_labels(configs: dict[str, dict]) -> dict[str, str]:
    """``limit=3, template=qa`` per run of ``configs`` (run key -> flattened config): the settings that
    differ among them; "" for every run when there is one, or when none differs."""
    if len(configs) < 2:
        return dict.fromkeys(configs, "")
    keys = differing_keys(list(configs.values()))
    names = short_names(keys)
    labels = {}
    for run, config in configs.items():
        parts = [f"{names[key]}={_value(config.get(key))}" for key in keys[:SHOWN]]
        if len(keys) > SHOWN:
            parts.append(f"+{len(keys) - SHOWN} more")
        labels[run] = ", ".join(parts)
    return labels
