"""``python -m esgexp.ingest corpus.pdf_dir=DIR corpus.name=NAME [chunker=window] [tables=true]``: build a corpus folder.

With ``tables=true`` every PDF's tables (``table_extractor``) are passages of kind ``table`` beside the text.
The last line printed is ``corpus: <absolute path>``; a file that cannot be read is a warning naming it.
"""

import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig

from esgexp.config import CONF_DIR
from esgexp.errors import UserError, check_command_line, exit_on_user_error, run_command

log = logging.getLogger("esgexp")


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="ingest")
def job(cfg: DictConfig) -> None:
    from hydra.utils import instantiate

    from esgexp.data.corpus import ingest
    from esgexp.data.text_files import existing_folder

    with exit_on_user_error(log):
        check_command_line(cfg, log)
        out_dir = Path(cfg.corpus.dir).resolve()
        if not isinstance(cfg.tables, bool):
            raise UserError(f"tables must be true or false, got {cfg.tables!r}")
        tables = instantiate(cfg.table_extractor) if cfg.tables else None
        pdf_dir = existing_folder(cfg.corpus.pdf_dir, "corpus.pdf_dir", "of .pdf, .md or .txt files")
        report = ingest(pdf_dir, out_dir, instantiate(cfg.chunker), progress=cfg.progress, tables=tables)
    with_tables = f" ({report['n_tables']} tables)" if cfg.tables else ""
    print(
        f"{report['n_docs']} documents, {report['n_pages']} pages, {report['n_chunks']} passages{with_tables} "
        f"({report['n_parsed']} read, {report['n_reused']} unchanged, {len(report['skipped'])} skipped) "
        f"in {report['seconds']:.1f} s"
    )
    print(f"corpus: {out_dir}")


def main() -> None:
    """``esgexp-ingest`` and ``python -m esgexp.ingest``."""
    run_command(job, "ingest")


if __name__ == "__main__":
    main()
