"""``esgexp-leaderboard`` / ``python -m esgexp.leaderboard [tracking.uri=...] [out_dir=...] [format=all|csv|md|html]
[latest_only=false]``: the leaderboard files of every finished run (esgexp/leaderboard/board.py)."""

import sys
from pathlib import Path

from esgexp.cli.command import run_command


def main(overrides: list[str]) -> None:
    from hydra import compose, initialize_config_dir

    from esgexp.core.config import CONF_DIR
    from esgexp.core.tracking import check_tracking
    from esgexp.leaderboard.board import FILES, FORMATS, export
    from esgexp.papers.report import leaderboard_sections

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("leaderboard", overrides=overrides)
    check_tracking(cfg.tracking)  # a server that does not answer: one error in seconds
    chosen = [cfg.format] if isinstance(cfg.format, str) else list(cfg.format)
    formats = FORMATS if chosen == ["all"] else tuple(chosen)
    out_dir = Path(cfg.out_dir)
    sections = leaderboard_sections(cfg.get("papers_dir")) if "html" in formats else []
    markdown = export(cfg.tracking.uri, out_dir, cfg.latest_only, formats, cfg.alpha, sections)
    if "md" in formats:
        print(markdown, end="")
    print("written: " + ", ".join(str(out_dir / FILES[f]) for f in FORMATS if f in formats))


def cli() -> None:
    """``esgexp-leaderboard`` and ``python -m esgexp.leaderboard``."""
    run_command(lambda: main(sys.argv[1:]), "leaderboard")


if __name__ == "__main__":
    cli()
