"""``python -m esgexp.paper table=NAME [dry_run=true] [data.KEY=PATH] [rows=[...]] [overrides=[...]]``: a seed
paper's table, reproduced. The table's grid (conf/paper/NAME.yaml, esgexp/papers/grid.py) becomes Hydra
multiruns of ordinary ``python -m esgexp`` jobs (the resume, request cache, launchers and MLflow of any sweep;
each multirun sweeps one key), a job that cannot run here is listed with why, and the results are laid beside
the published cells in ``<out_dir>/NAME.md`` and ``NAME.json`` (shown on the leaderboard page too).
``dry_run=true`` lists the jobs and what they would send (requests, prompt tokens, cost) and runs nothing."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from esgexp.cli.command import run_command
from esgexp.core.outputs import write_atomic
from esgexp.core.sweep import job_status
from esgexp.errors import Interrupted, UserError
from esgexp.papers.grid import Grid, Job, load_grid, quote, sweeps

log = logging.getLogger("esgexp.cli.paper")


def compose_paper(overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir

    from esgexp.core.config import CONF_DIR

    # data.KEY: the keys are the table's (conf/paper/NAME.yaml), not in conf/paper.yaml
    overrides = [f"++{o}" if o.startswith("data.") else o for o in overrides]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("paper", overrides=overrides)
    if OmegaConf.is_missing(cfg, "table"):
        from esgexp.papers import TABLES

        raise UserError(f"Missing mandatory value: table (table=NAME, one of {', '.join(TABLES)})")
    return cfg


def job_line(job: Job, grid: Grid, extra: str = "") -> str:
    """The job's cells, ``extra`` (its estimate), the command that runs it alone (the grid's overrides and the
    command's own ``overrides=``) and whether it can run here."""
    from esgexp.papers.provenance import command_line

    columns = ", ".join(dict.fromkeys(column for _, column in job.cells))
    state = "runnable" if job.runnable else "cannot run: " + "; ".join(job.problems)
    return f"  {job.id}  {job.row} | {columns}{extra}\n      {command_line(job, grid)}\n      {state}"


def dry_run(grid: Grid) -> str:
    """The job list with each job's requests, estimated prompt tokens and cost (nothing is sent); a job whose
    data is missing, or fails the run's input checks, is not estimated (its requests are unknown, not 0)."""
    from esgexp.papers.estimate import CHARS_PER_TOKEN, dollars, estimate

    loaded: dict = {}
    lines, requests, cost, batch_cost, priced, unknown = [], 0, 0.0, 0.0, 0, 0
    live_only: set[str] = set()  # models without a batch price: the batch total holds their live cost
    for job in grid.jobs:
        extra = ""
        if job.missing_data or job.unusable_data:
            unknown += 1
            extra = f"  [not estimated: data {'missing' if job.missing_data else 'unusable'}]"
        elif job.cfg is not None:
            found = estimate(job.cfg, loaded)
            requests += found.requests
            extra = f"  [{found.requests} requests, ~{found.prompt_tokens} prompt tokens"
            if found.requests:  # the budget it is priced at (a reasoning model's own, not scoring.max_new_tokens)
                extra += f", up to {found.completion_budget // found.requests} completion tokens each"
            if found.cost is not None:
                as_of = job.cfg.model.price.get("as_of")
                extra += f", at most {dollars(found.cost)} live (prompt {dollars(found.prompt_cost)}"
                extra += f"; prices as of {as_of})" if as_of else ")"
                if found.batch_cost is not None:
                    extra += f", {dollars(found.batch_cost)} batch"
                else:
                    live_only.add(str(job.cfg.model.name))
                cost += found.cost
                batch_cost += found.cost if found.batch_cost is None else found.batch_cost
                priced += 1
            judge = found.judge
            if judge is not None and judge.cost is not None:  # judge=...: its requests, at the judge's prices
                extra += f"; {judge.note} {judge.requests} requests, at most {dollars(judge.cost)} live"
                cost += judge.cost
                batch_cost += judge.cost if judge.batch_cost is None else judge.batch_cost
            extra += f"{'; ' + found.note if found.note else ''}]"
        lines.append(job_line(job, grid, extra))
    runnable = sum(job.runnable for job in grid.jobs)
    head = f"{grid.title}: {len(grid.jobs)} jobs ({runnable} can run here, {len(grid.jobs) - runnable} cannot)"
    if grid.left_out:
        head += "\n" + left_out_line(grid)
    estimated = len(grid.jobs) - unknown
    tail = "dry run: nothing sent."
    if estimated:
        tail += (
            f" {requests} model requests from {estimated} job(s); {priced} priced jobs at most {dollars(cost)} live, "
            f"{dollars(batch_cost)} with backend.batch=true where the provider has a batch price"
            + (f" (live prices for {', '.join(sorted(live_only))}: no batch price)" if live_only else "")
            + f" (prompt tokens estimated at {CHARS_PER_TOKEN} characters per token, completion at each request's "
            "budget)"
        )
    if unknown:
        why = "missing or unusable" if any(job.unusable_data for job in grid.jobs) else "missing"
        tail += f"{';' if estimated else ''} {unknown} job(s) not estimated: data {why} (requests and cost unknown)"
    return "\n".join([head, *lines, tail])


def left_out_line(grid: Grid) -> str:
    cells = [f"{row} | {column}" for row, column in grid.left_out]
    return (
        f"left out: {len(cells)} cell(s) the paper publishes no value for (e.g. {cells[0]}); "
        "name them in rows= or columns= to run them"
    )


def run_grid(cfg: DictConfig, grid: Grid) -> tuple[dict[str, dict], dict[str, str], dict[str, dict]]:
    """Run the runnable jobs as multiruns; (metrics by job id, why a job gave none, each job's provenance)."""
    from esgexp.papers.provenance import match_folders, mlflow_run_ids, run_provenance

    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    extra = [str(o) for o in cfg.overrides] + (["resume=true"] if cfg.resume else [])
    results: dict[str, dict] = {}
    status = {job.id: "cannot run here: " + "; ".join(job.problems) for job in grid.jobs if not job.runnable}
    runs = {job.id: run_provenance(job, grid, None, None, None) for job in grid.jobs}
    for index, (jobs, overrides, _) in enumerate(sweeps([job for job in grid.jobs if job.runnable])):
        sweep_dir = Path(jobs[0].cfg.paths.runs_dir) / jobs[0].experiment / f"paper-{grid.name}" / f"{stamp}-{index}"
        command = [sys.executable, "-m", "esgexp", "-m", *overrides, *extra, f"hydra.sweep.dir={quote(str(sweep_dir))}"]
        log.info("sweep %d: %d job(s) in %s", index, len(jobs), sweep_dir)
        print(f"$ python -m esgexp -m {' '.join(overrides + extra)}", flush=True)
        code = wait_passing_on_stops(subprocess.Popen(command, cwd=cfg.paths.root_dir, process_group=0), sweep_dir)
        run_ids = mlflow_run_ids(str(jobs[0].cfg.tracking.uri), sweep_dir) if sweep_dir.is_dir() else {}
        for job, folder in match_folders(jobs, sweep_dir).items():
            state, detail = (
                job_status(folder) if folder else ("not run", f"its multirun ended (exit {code}) before it started")
            )
            metrics = None
            if state == "ok":
                metrics = results[job.id] = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
            else:
                status[job.id] = f"{state}: {detail}" if detail else state
            runs[job.id] = run_provenance(job, grid, folder, metrics, run_ids.get(str(folder)))
    for job in grid.jobs:
        runs[job.id]["status"] = "ok" if job.id in results else status.get(job.id, "not run")
    return results, status, runs


def has_values(path: Path) -> bool:
    """Whether ``path`` is a table JSON an earlier run wrote with at least one value of ours."""
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(table, dict) and any(
        "ours" in cell for cell in table.get("cells") or [] if isinstance(cell, dict)
    )


def wait_passing_on_stops(sweep: subprocess.Popen, sweep_dir: Path) -> int:
    """The exit status of ``sweep`` (a multirun in a process group of its own: a Ctrl-C at the terminal reaches
    it only from here, once per press). A stop signal to this command is passed on and its clean stop awaited
    (a second one: at once); then ``Interrupted`` says where the finished jobs are and how to continue."""
    from esgexp.backends.sigint import stop_signal
    from esgexp.cli.overrides import command_name, shell_word

    stops = 0
    while True:
        try:
            code = sweep.wait()
            break
        except KeyboardInterrupt:
            sweep.send_signal(stop_signal())
            stops += 1
            if stops > 1:
                break
    if not stops:
        return code
    again = [arg for arg in sys.argv[1:] if not arg.startswith("resume=")] + ["resume=true"]
    raise Interrupted(
        f"the jobs' answers so far are kept in {sweep_dir}; {command_name()} {' '.join(map(shell_word, again))} "
        "continues the table"
    )


def main(overrides: list[str]) -> None:
    from esgexp.papers.report import compare, table_json, to_markdown

    cfg = compose_paper(overrides)
    grid = load_grid(cfg)
    if cfg.dry_run:
        print(dry_run(grid))
        return
    for job in grid.jobs:
        if not job.runnable:
            print(job_line(job, grid), file=sys.stderr)
    if grid.left_out:
        print(left_out_line(grid), file=sys.stderr)
    results, status, runs = run_grid(cfg, grid)
    table = table_json(grid, compare(grid, results, status, runs), list(runs.values()))
    out_dir = Path(cfg.out_dir)
    markdown = to_markdown(table)
    print(markdown, end="")
    earlier = out_dir / f"{grid.name}.json"
    if not results and has_values(earlier):  # a run that gave nothing never replaces a table that has values
        print(f"kept: {out_dir / (grid.name + '.md')} and {earlier.name}, an earlier run's values (this run gave none)")
    else:
        write_atomic(earlier, json.dumps(table, indent=1, ensure_ascii=False) + "\n")
        write_atomic(out_dir / f"{grid.name}.md", markdown)
        print(f"written: {out_dir / (grid.name + '.md')}, {earlier}")
    if not any(job.runnable for job in grid.jobs):
        reasons = dict.fromkeys(problem for job in grid.jobs for problem in job.problems)
        raise UserError(f"no job of table {grid.name} can run here: {'; '.join(list(reasons)[:3])}")
    bad = [job for job in grid.jobs if job.runnable and job.id not in results]
    if bad:  # as a sweep does: the table is written, the exit status says a job that could run did not end ok
        print(f"{len(bad)} runnable job(s) did not end ok, e.g. {bad[0].row}: {status[bad[0].id]}", file=sys.stderr)
        sys.exit(1)


def cli() -> None:
    """``esgexp-paper`` and ``python -m esgexp.paper``."""
    run_command(lambda: main(sys.argv[1:]), "paper")


if __name__ == "__main__":
    cli()
