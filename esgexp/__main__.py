"""``python -m esgexp [group=option ...] [key=value ...]``: one job, or a sweep with ``-m``."""

import logging

import hydra
from omegaconf import DictConfig

from esgexp.errors import exit_on_user_error, suggest_misspelt_keys

log = logging.getLogger("esgexp")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> dict:
    from esgexp.run import run_job

    with exit_on_user_error(log):
        return run_job(cfg)


def cli() -> None:
    """The ``esgexp`` console command and ``python -m esgexp``."""
    with suggest_misspelt_keys():
        main()


if __name__ == "__main__":
    cli()
