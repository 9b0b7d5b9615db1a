"""``python -m esgexp.ingest corpus.pdf_dir=DIR corpus.name=NAME [chunker=window]``: build a corpus folder.

The last line printed is ``corpus: <absolute path>``; a file that cannot be read is a warning naming it.
"""

import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig

from esgexp.errors import exit_on_user_error

log = logging.getLogger("esgexp")


@hydra.main(version_base="1.3", config_path="../conf", config_name="ingest")
def main(cfg: DictConfig) -> None:
    from hydra.utils import instantiate

    from esgexp.data.corpus import ingest

    with exit_on_user_error(log):
        out_dir = Path(cfg.corpus.dir).resolve()
        report = ingest(cfg.corpus.pdf_dir, out_dir, instantiate(cfg.chunker), progress=cfg.progress)
    print(
        f"{report['n_docs']} documents, {report['n_pages']} pages, {report['n_chunks']} passages "
        f"({report['n_parsed']} read, {report['n_reused']} unchanged, {len(report['skipped'])} skipped) "
        f"in {report['seconds']:.1f} s"
    )
    print(f"corpus: {out_dir}")


if __name__ == "__main__":
    main()
