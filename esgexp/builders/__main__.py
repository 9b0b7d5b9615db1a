"""``python -m esgexp.build builder=NAME corpus=CORPUS_DIR [model=...] [backend=...] [out=DIR]``: build a
benchmark from an ingested corpus. The last line printed is ``dataset: <path>`` (give it as dataset.path)."""

import logging

import hydra
from omegaconf import DictConfig

from esgexp.errors import exit_on_user_error

log = logging.getLogger("esgexp")


@hydra.main(version_base="1.3", config_path="../../conf", config_name="build")
def main(cfg: DictConfig) -> None:
    from esgexp.builders.run import run_build

    with exit_on_user_error(log):
        dataset = run_build(cfg)
        print(f"dataset: {dataset}")


if __name__ == "__main__":
    main()
