"""One run folder per job: Hydra's run folder (single run) or sweep folder (``-m``, every launcher) is
created here, exclusively, before Hydra writes anything into it.

A folder named by ``${run_stamp:...}`` (the default, conf/hydra/default.yaml) that already exists, because
another job drew the same name, gets a fresh name; a folder the user named on the command line
(``hydra.run.dir=...``) is used as it is (``resume=true`` continues a run there). A folder that cannot be
made or written (a read-only file system, a file in the way) is one ``error:`` line and exit 2 here: Hydra
turns a callback's exception into a warning and would fail later with a traceback.
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from esgexp.core.config import RUN_STAMP
from esgexp.core.outputs import make_folder, unwritable
from esgexp.errors import UserError

log = logging.getLogger(__name__)

ATTEMPTS = 20


def claim_folder(cfg: DictConfig, key: str) -> Path | None:
    """Create ``hydra.<key>.dir`` (``key``: run or sweep) when it is a ``${run_stamp:...}`` name, drawing a
    new name while the drawn one exists; return the folder created, None for a folder named by the user
    (made if missing). UserError when it cannot be made or written."""
    raw = OmegaConf.to_container(cfg.hydra[key], resolve=False).get("dir")
    folder = Path(str(OmegaConf.select(cfg, f"hydra.{key}.dir")))
    if f"${{{RUN_STAMP}:" not in str(raw):
        make_folder(folder, f"set hydra.{key}.dir to a folder you can write to")
        return None
    fix = "set paths.root_dir (or paths.runs_dir) to a folder you can write to"
    for _ in range(ATTEMPTS):
        make_folder(folder.parent, fix)
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            log.info("run folder %s is another job's: drawing a new name", folder)
            redraw(cfg)
            folder = Path(str(OmegaConf.select(cfg, f"hydra.{key}.dir")))
        except OSError as error:
            raise unwritable(folder, error, fix) from error
    raise FileExistsError(f"no free run folder name after {ATTEMPTS} tries, last {folder}")


def redraw(cfg: DictConfig) -> None:
    """Forget the config's ``${run_stamp:...}`` values: the next resolution draws new ones."""
    cache = OmegaConf.get_cache(cfg).copy()  # a defaultdict: resolvers not seen yet get an empty entry
    cache.pop(RUN_STAMP, None)
    OmegaConf.set_cache(cfg, cache)


class RunFolder(Callback):
    """Claims the run folder before a single run, the sweep folder before a sweep's launcher starts
    (each job's folder inside is its job number, so the sweep folder's owner owns them all)."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        claim_or_exit(config, "run")

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        claim_or_exit(config, "sweep")


def claim_or_exit(config: DictConfig, key: str) -> None:
    """:func:`claim_folder`; a folder that cannot be made is one ``error:`` line and exit 2 (SystemExit
    passes through Hydra's callback guard, which catches only Exception)."""
    try:
        claim_folder(config, key)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


LOCK_NAME = ".esgexp.lock"


class FolderInUse(UserError):
    """Another job holds the run folder: said without touching the folder (no ``FAILED`` of this try there)."""


@contextmanager
def held_run_folder(folder: Path):
    """Inside, ``folder`` (a job's run folder) is this process's: a second job given the same folder (two
    ``resume=true`` of one run at once) gets a UserError at once instead of asking the same items and opening
    a second tracked run (``flock`` on ``folder/.esgexp.lock``, released when the job ends or dies; removed when it ends)."""
    from filelock import FileLock, Timeout

    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(folder / LOCK_NAME, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise FolderInUse(
            f"run folder {folder} is in use by another esgexp job running now: wait until it ends, then run the "
            "same command again (resume=true continues what it left)"
        ) from None
    try:
        yield
    finally:
        lock.release()
        Path(lock.lock_file).unlink(missing_ok=True)  # the folder as the job left it
