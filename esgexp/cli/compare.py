"""``esgexp-compare RUN [RUN ...] [k=v ...]`` / ``python -m esgexp.compare``: paired comparison of runs
(esgexp/analysis/compare.py), written as compare.json and compare.md to ``out_dir``."""

import sys
from pathlib import Path

from esgexp.analysis import compare
from esgexp.core.outputs import write_atomic, write_json


def split_arguments(argv: list[str]) -> tuple[list[str], list[str]]:
    """(runs, Hydra overrides): an argument with ``=`` that is not an existing path is an override."""
    runs, overrides = [], []
    for arg in argv:
        (overrides if "=" in arg and not Path(arg).exists() else runs).append(arg)
    return runs, overrides


def main(argv: list[str]) -> None:
    from hydra import compose, initialize_config_dir

    from esgexp.core.config import CONF_DIR
    from esgexp.jobs.settings import check_settings

    if {"-h", "--help"} & set(argv):
        print(compare.__doc__)
        return
    refs, overrides = split_arguments(argv)
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("compare", overrides=overrides)
    check_settings(cfg)
    settings = compare.StatsSettings.from_node(cfg.stats)
    if not all(
        Path(ref).is_dir() for ref in refs
    ):  # a run id is read from the store: one that is down fails in seconds
        from esgexp.core.tracking import check_tracking

        check_tracking(cfg.tracking)
    runs = [compare.load_run(ref, cfg.tracking.uri) for ref in refs]
    report = compare.compare_runs(runs, cfg.against, cfg.metric, settings)
    out_dir = Path(cfg.out_dir)
    markdown = compare.to_markdown(report)
    write_json(out_dir / "compare.json", report)
    write_atomic(out_dir / "compare.md", markdown)
    print(markdown, end="")
    print(f"written: {out_dir / 'compare.json'}, {out_dir / 'compare.md'}")


def cli() -> None:
    """``esgexp-compare`` and ``python -m esgexp.compare``."""
    from esgexp.cli.command import run_command

    run_command(lambda: main(sys.argv[1:]), "compare", split_arguments(sys.argv[1:])[1])


if __name__ == "__main__":
    cli()
