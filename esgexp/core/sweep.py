"""Sweeps that survive a bad job: a failed job leaves a ``FAILED`` file in its run folder and the
sweep goes on; at the end a table of every job (ok / failed with the reason / not run) and a non-zero
exit status when any failed.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from hydra.experimental.callback import Callback

log = logging.getLogger(__name__)

FAILED_FILE = "FAILED"


def in_multirun() -> bool:
    """Whether this process runs a job of a Hydra sweep (``-m``)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def failed_file() -> Path | None:
    """The current job's ``FAILED`` path (in its run folder); None outside a Hydra job, and for a single
    run without a folder of its own (``hydra.output_subdir: null``: ingestion runs in the launch folder)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    hydra = HydraConfig.get()
    if hydra.output_subdir is None and not in_multirun():
        return None
    return Path(hydra.runtime.output_dir) / FAILED_FILE


def mark_failed(reason: str) -> Path | None:
    """Write ``FAILED`` (the one-line reason) into the current job's run folder; return its path. Where
    it cannot be written (a full disk, whose error the user is shown) nothing is left there, not an
    empty file."""
    from esgexp.core.outputs import NoSpace, write_atomic

    path = failed_file()
    if path is None:
        return None
    lines = reason.strip().splitlines() or ["unknown error"]
    try:
        write_atomic(path, lines[0][:1000] + "\n")
    except (OSError, NoSpace) as error:
        log.debug("could not write %s: %s", path, error)
    return path


def clear_failed() -> None:
    """Remove a ``FAILED`` an earlier try left in the current run folder (the job is being run again)."""
    path = failed_file()
    if path is not None:
        path.unlink(missing_ok=True)


def job_status(folder: Path) -> tuple[str, str]:
    """(status, detail) of one job folder: ok (metrics.json), incomplete (metrics.json counts items never
    answered), failed (FAILED's reason) or not finished."""
    if (folder / FAILED_FILE).is_file():
        return "failed", (folder / FAILED_FILE).read_text(encoding="utf-8").strip()
    if (folder / "metrics.json").is_file():
        import json

        failed = json.loads((folder / "metrics.json").read_text(encoding="utf-8")).get("n_failed")
        if failed:
            return "incomplete", f"{failed} items never answered: rerun the job with resume=true"
        return "ok", ""
    return "not finished", "no metrics.json (killed, or never started)"


def sweep_table(sweep_dir: Path, overrides: dict[str, str]) -> tuple[str, int]:
    """The table of every job under ``sweep_dir`` and how many did not end ok."""
    folders = sorted((p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    rows, bad = [], 0
    for folder in folders:
        status, detail = job_status(folder)
        bad += status != "ok"
        rows.append(
            f"{folder.name:>4}  {status:<12}  {overrides.get(folder.name, '')}" + (f"  ({detail})" if detail else "")
        )
    counts = f"{len(folders) - bad} ok, {bad} failed or not finished, of {len(folders)} jobs"
    return "\n".join([f"sweep {sweep_dir}: {counts}", *rows]), bad


class SweepReport(Callback):
    """Prints the sweep's job table when a multirun ends; exits 1 when a job failed."""

    def on_multirun_end(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.is_dir():
            return
        overrides = {}
        for folder in sweep_dir.iterdir():
            task_file = folder / ".hydra" / "overrides.yaml"
            if task_file.is_file():
                from omegaconf import OmegaConf

                overrides[folder.name] = " ".join(OmegaConf.load(task_file))
        table, bad = sweep_table(sweep_dir, overrides)
        print(table, file=sys.stderr if bad else sys.stdout)
        if bad:
            sys.exit(1)
