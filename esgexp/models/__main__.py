"""``python -m esgexp.models [model=NAME]``: make a model's weights ready on this machine, as a job would on
its first run, and print what a job loads (a folder, or a hub id found in the local Hugging Face cache).

A packaged GGUF (the default SmolLM2) is converted once into ``paths.cache_dir``; ``make install`` runs this so
that the first ``make run``, a sweep's jobs and the tests all start from the converted folder.
"""

import sys

from hydra import compose, initialize_config_dir

from esgexp.cli.command import run_command
from esgexp.core.config import CONF_DIR


def main(overrides: list[str]) -> None:
    from esgexp.models.loading import resolve_model_dir

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    print(f"model {cfg.model.name}: {resolve_model_dir(cfg.model, cfg.paths.cache_dir)}")


if __name__ == "__main__":
    run_command(lambda: main(sys.argv[1:]), "config")
