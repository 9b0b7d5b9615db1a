"""``python -m esgexp.build builder=NAME corpus=CORPUS_DIR [model=...] [backend=...] [out=DIR]``: build a
benchmark from an ingested corpus. The last line printed is ``dataset: <path>`` (give it as dataset.path)."""

import logging

import hydra
from omegaconf import DictConfig

from esgexp.cli.command import check_command_line, exit_on_user_error, run_command
from esgexp.core.config import CONF_DIR
from esgexp.errors import Interrupted

log = logging.getLogger("esgexp")


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="build")
def job(cfg: DictConfig) -> None:
    from esgexp.builders.run import run_build

    with exit_on_user_error(log):
        check_command_line(cfg, log)
        try:
            dataset = run_build(cfg)
        except KeyboardInterrupt as interrupt:
            if isinstance(interrupt, Interrupted) or cfg.cache in ("off", "read_only"):
                raise
            raise Interrupted(
                f"the answers received are kept in the request cache; rerun with out={cfg.out} resume=true to go on"
            ) from None
        print(f"dataset: {dataset}")


def main() -> None:
    """``esgexp-build``, ``python -m esgexp.builders`` and ``python -m esgexp.build``."""
    run_command(job, "build")


if __name__ == "__main__":
    main()
