"""``python -m esgexp [group=option ...] [key=value ...]``: one job, or a sweep with ``-m``."""

import logging

import hydra
from omegaconf import DictConfig

from esgexp.cli.command import check_command_line, exit_on_user_error, run_command
from esgexp.core.config import CONF_DIR

log = logging.getLogger("esgexp")


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> dict:
    from esgexp.run import exit_if_incomplete, run_job

    with exit_on_user_error(log):
        check_command_line(cfg, log)
        return exit_if_incomplete(run_job(cfg))


def cli() -> None:
    """The ``esgexp`` console command and ``python -m esgexp``."""
    run_command(main, "config")


if __name__ == "__main__":
    cli()
