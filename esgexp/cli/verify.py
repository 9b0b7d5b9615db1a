"""``esgexp-verify`` / ``python -m esgexp.verify dataset.path=PAIRS corpus=DIR [out=DIR]``: every
ESGBench-style pair checked against its corpus's pages (esgexp/builders/verify.py)."""

import logging
from pathlib import Path

from esgexp.builders import verify

log = logging.getLogger("esgexp.builders.verify")


def cli() -> None:
    """``esgexp-verify`` and ``python -m esgexp.verify``."""
    import hydra
    from omegaconf import DictConfig

    from esgexp.cli.command import check_command_line, exit_on_user_error, run_command
    from esgexp.core.config import CONF_DIR

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="verify")
    def main(cfg: DictConfig) -> None:
        with exit_on_user_error(log):
            check_command_line(cfg, log)
            out_dir = Path(cfg.out).resolve()
            report = verify.main_audit(cfg.dataset.path, cfg.corpus, out_dir)
        rejected = ", ".join(f"{reason} {n}" for reason, n in report["rejected"].items()) or "none"
        print(f"{report['n_kept']} of {report['n_rows']} pairs verified; rejected: {rejected}")
        print(f"report: {out_dir / 'verify_report.json'}")

    run_command(main, "verify")


if __name__ == "__main__":
    cli()
