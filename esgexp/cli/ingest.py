"""``python -m esgexp.ingest corpus.pdf_dir=DIR corpus.name=NAME [chunker=window] [tables=true]``: build a corpus folder.

``corpus.name`` is one folder name under ``paths.corpus_dir``. One ingest of a corpus folder runs at a time
(a lock under ``paths.cache_dir``); a corpus ingested from another document folder is replaced only with ``overwrite=true``.
With ``tables=true`` every PDF's tables (``table_extractor``) are passages of kind ``table`` beside the text.
The last line printed is ``corpus: <absolute path>``; a file that cannot be read is a warning naming it.
"""

import hashlib
import logging
import re
from pathlib import Path

import hydra
from omegaconf import DictConfig

from esgexp.cli.command import check_command_line, exit_on_user_error, run_command
from esgexp.core.config import CONF_DIR
from esgexp.errors import UserError

log = logging.getLogger("esgexp")


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="ingest")
def job(cfg: DictConfig) -> None:
    from filelock import FileLock
    from hydra.utils import instantiate

    from esgexp.core.outputs import make_folder
    from esgexp.data.corpus import check_source, ingest
    from esgexp.data.text_files import existing_folder
    from esgexp.jobs.settings import check_settings

    with exit_on_user_error(log):
        check_command_line(cfg, log)
        out_dir = corpus_folder(cfg)
        for key in ("tables", "overwrite"):
            if not isinstance(cfg[key], bool):
                raise UserError(f"{key} must be true or false, got {cfg[key]!r}")
        check_settings(cfg)  # corpus.reader, workers
        reader, workers = cfg.corpus.reader, cpus() if cfg.workers is None else cfg.workers
        tables = instantiate(cfg.table_extractor) if cfg.tables else None
        pdf_dir = existing_folder(cfg.corpus.pdf_dir, "corpus.pdf_dir", "of .pdf, .md or .txt files")
        make_folder(out_dir, "set paths.corpus_dir to a folder you can write to")  # one line, before any work
        with FileLock(lock_file(cfg, out_dir)):
            if not cfg.overwrite:
                check_source(out_dir, pdf_dir)
            chunker = instantiate(cfg.chunker)
            report = ingest(pdf_dir, out_dir, chunker, cfg.progress, tables, reader=reader, workers=workers)
    with_tables = f" ({report['n_tables']} tables)" if cfg.tables else ""
    print(
        f"{report['n_docs']} documents, {report['n_pages']} pages, {report['n_chunks']} passages{with_tables} "
        f"({report['n_parsed']} read, {report['n_reused']} unchanged, {len(report['skipped'])} skipped) "
        f"in {report['seconds']:.1f} s"
    )
    blank = report["pages_without_text"]
    if blank:
        files = ", ".join(f"{name} ({n})" for name, n in blank.items())
        print(f"pages without a text layer (scanned? OCR them first; esgexp does not): {files}")
    print(f"corpus: {out_dir}")


def cpus() -> int:
    """The CPUs this process may use (``workers=null``)."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def corpus_folder(cfg: DictConfig) -> Path:
    """The folder ``corpus.dir`` names, once ``corpus.pdf_dir`` and ``corpus.name`` are set and the name is
    one folder name (nothing written outside ``paths.corpus_dir``); else a UserError saying what to set."""
    from omegaconf import OmegaConf

    for key, example in (("pdf_dir", "DIR (the folder of .pdf, .md or .txt files)"), ("name", "reports")):
        if OmegaConf.is_missing(cfg.corpus, key):
            raise UserError(f"corpus.{key} is not set: give it on the command line, e.g. corpus.{key}={example}")
    name = str(cfg.corpus.name)
    if name in ("", ".", "..") or Path(name).name != name or "\\" in name:
        example = re.sub(r"[/\\]+", "_", name).strip("._") or "reports"
        raise UserError(
            f"corpus.name={name} is not one folder name: a corpus is written to paths.corpus_dir/NAME "
            f"({cfg.paths.corpus_dir}); give a name without / or .., e.g. corpus.name={example}, "
            "or set paths.corpus_dir for another place"
        )
    return Path(cfg.corpus.dir).resolve()


def lock_file(cfg: DictConfig, out_dir: Path) -> Path:
    """The lock one ingest into ``out_dir`` holds at a time (under ``paths.cache_dir``: the corpus folder
    holds only the corpus)."""
    digest = hashlib.sha256(str(out_dir).encode()).hexdigest()[:16]
    return Path(cfg.paths.cache_dir) / "locks" / f"ingest-{digest}.lock"


def main() -> None:
    """``esgexp-ingest`` and ``python -m esgexp.ingest``."""
    run_command(job, "ingest")


if __name__ == "__main__":
    main()
