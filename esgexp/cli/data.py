"""``esgexp-data list | get NAME [GROUP] [files=[...]] [--to DIR] | verify [NAME] [GROUP] [key=value ...]``:
the benchmarks' published files by name (conf/data/<benchmark>.yaml, esgexp/data/registry.py).

``list`` shows every benchmark's files, their sizes and whether each is present and verified in
``paths.data_dir``; ``get`` downloads a benchmark's ``data`` files (or GROUP: ``reports``, ``all``; or the
named ``files``) and checks each hash before it is moved into place (esgexp/data/fetch.py); ``--to DIR`` lays
them out in DIR instead (a mirror: copy it to a cluster and set ``data.mirror=DIR`` there), taking a verified
copy already in ``paths.data_dir`` before the network; ``verify`` hashes what is there. Exit status 1 when a
file is missing or not the registry's."""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig

from esgexp.cli.command import run_command
from esgexp.core.outputs import human
from esgexp.data.fetch import FetchSettings, NotGot, copy_verified, fetch, get_command, hydra_value
from esgexp.data.hashing import file_hashes, lfs_pointer
from esgexp.data.registry import Benchmark, RegistryFile, benchmark, benchmarks
from esgexp.errors import UserError

USAGE = "esgexp-data list | get NAME [GROUP] [files=[...]] [--to DIR] | verify [NAME] [GROUP] (docs/data.md)"
ACTIONS = ("list", "get", "verify")


def split_arguments(argv: list[str]) -> tuple[list[str], list[str]]:
    """(words, overrides): ``--to DIR`` becomes the override ``to=DIR``; ``key=value`` are overrides."""
    words, overrides, rest = [], [], list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--to":
            if not rest:
                raise UserError(f"--to needs a folder: {USAGE}")
            overrides.append(f"to={hydra_value(rest.pop(0))}")
        elif arg.startswith("--to="):
            overrides.append(f"to={hydra_value(arg.removeprefix('--to='))}")
        elif "=" in arg:
            overrides.append(arg)
        else:
            words.append(arg)
    if not words or words[0] not in ACTIONS or len(words) > 3:
        raise UserError(f"usage: {USAGE}; got: {' '.join(argv) or 'nothing'}")
    return words, overrides


def compose(overrides: list[str]) -> DictConfig:
    from esgexp.core.config import compose_config

    return compose_config("data_cli", overrides)


def state(file: RegistryFile, data_dir: Path) -> str:
    """``verified``, ``missing``, ``a Git LFS pointer`` or ``NOT the registry's (sha256 …)`` for the file there."""
    path = file.local(data_dir)
    if not path.is_file():
        return "missing"
    if lfs_pointer(path) is not None:
        return "a Git LFS pointer, not the file"
    got = file_hashes(path)
    if file.matches(got):
        return "verified"
    return f"NOT the registry's ({'sha256 ' + got.sha256 if file.sha256 else 'git blob ' + got.git_blob})"


def chosen_files(bench: Benchmark, group: str | None, files) -> list[RegistryFile]:
    if files is None:
        return bench.group(group)
    return bench.named([str(f) for f in ([files] if isinstance(files, str) else files)])


def list_text(data_dir: Path) -> str:
    """Every benchmark: its data files one a line (size, state), its other groups in one line each."""
    lines = [f"benchmark files in {data_dir} (conf/data/; esgexp-data get NAME)"]
    for bench in benchmarks().values():
        lines += ["", f"{bench.name}: {bench.title}", f"  licence: {bench.licence}"]
        for group in dict.fromkeys(f.group for f in bench.files):
            members = bench.group(group)
            if group == "data":
                for file in members:
                    serves = f"  serves {', '.join(file.serves)}" if file.serves else ""
                    lines.append(f"  {file.name:<40} {human(file.size):>10}  {state(file, data_dir)}{serves}")
                continue
            states = [state(f, data_dir) for f in members]
            present = sum(s != "missing" for s in states)
            bad = sum(s not in ("missing", "verified") for s in states)
            total = human(sum(f.size for f in members if f.size)) if all(f.size for f in members) else "size ?"
            lines.append(
                f"  {group}: {len(members)} files ({total}), {present} present, {present - bad} verified"
                f"{f', {bad} NOT the registry' + chr(39) + 's' if bad else ''}  (esgexp-data get {bench.name} {group})"
            )
    return "\n".join(lines)


def get(cfg: DictConfig, name: str, group: str | None) -> int:
    """Download the chosen files of ``name`` into ``to`` or ``paths.data_dir``; the number that failed."""
    bench = benchmark(name)
    files = chosen_files(bench, group, cfg.files)
    home = Path(str(cfg.paths.data_dir))
    settings = FetchSettings.of(cfg, data_dir=cfg.to, progress=bool(cfg.progress))
    print(f"{bench.name}: {len(files)} file(s) to {settings.data_dir}", flush=True)
    failed: list[NotGot] = []
    for file in files:
        target = file.local(settings.data_dir)
        try:
            ready = settings.data_dir != home and state(file, home) == "verified"
            if ready and not (target.is_file() and file.matches(file_hashes(target))):
                copy_verified(file, file.local(home), target)  # a verified copy here: no network
            fetch(file, settings)
        except NotGot as error:
            failed.append(error)
            print(f"  {file.name}: FAILED: {error}", flush=True)
            continue
        print(f"  {file.name}  {human(target.stat().st_size)}  verified ({file.hash_text})", flush=True)
    if failed:
        print(not_got_line(failed, len(files)), flush=True)
    return len(failed)


def not_got_line(failed: list[NotGot], chosen: int) -> str:
    """The last line of a ``get`` that did not get ``failed`` of its ``chosen`` files: running it again is
    offered only for the files it may get then."""
    again = sum(error.again for error in failed)
    line = f"{len(failed)} of {chosen} file(s) not got; "
    if again == len(failed):
        return line + "run the same command again to retry (a cut-off one resumes)"
    stuck = ("it" if len(failed) == 1 else "them") if not again else f"{len(failed) - again} of them"
    line += f"running the same command again cannot get {stuck}: each FAILED line above says what mends it"
    return line + (f"; it retries the other {again} (a cut-off one resumes)" if again else "")


def verify(cfg: DictConfig, name: str | None, group: str | None) -> int:
    """Hash the files there (of ``name``: the chosen group's, each missing one counted; none named: every file
    present); the number missing or not the registry's."""
    data_dir = Path(str(cfg.paths.data_dir))
    if name is None:
        chosen = [f for bench in benchmarks().values() for f in bench.files if f.local(data_dir).exists()]
    else:
        chosen = chosen_files(benchmark(name), group, cfg.files)
    bad = 0
    for file in chosen:
        found = state(file, data_dir)
        bad += found != "verified"
        fix = f"  ({get_command([file], None)})" if found != "verified" else ""
        print(f"{file.label}: {found}{fix}")
    print(f"{len(chosen) - bad} of {len(chosen)} file(s) verified in {data_dir}")
    return bad


def main(argv: list[str]) -> None:
    if {"-h", "--help"} & set(argv):
        print(__doc__)
        return
    words, overrides = split_arguments(argv)
    cfg = compose(overrides)
    action, name, group = [*words, None, None][:3]
    if action == "list":
        print(list_text(Path(str(cfg.paths.data_dir))))
        return
    if action == "get" and name is None:
        raise UserError(f"get needs a benchmark name (one of {', '.join(benchmarks())}): {USAGE}")
    bad = get(cfg, name, group) if action == "get" else verify(cfg, name, group)
    if bad:
        sys.exit(1)


def cli() -> None:
    """``esgexp-data`` and ``python -m esgexp.data_cli``."""
    argv = sys.argv[1:]
    run_command(lambda: main(argv), "data_cli", [a for a in argv if "=" in a and not a.startswith("--")])


if __name__ == "__main__":
    cli()
