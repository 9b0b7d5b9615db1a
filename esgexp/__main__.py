"""``python -m esgexp [group=option ...] [key=value ...]``: one job, or a sweep with ``-m``."""

import logging
import sys

import hydra
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from esgexp.errors import UserError

log = logging.getLogger("esgexp")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> dict:
    from esgexp.run import run_job

    try:
        return run_job(cfg)
    except (UserError, OmegaConfBaseException) as error:
        log.error("%s", error)
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
