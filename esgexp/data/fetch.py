"""Registry files into the data folder, hash-checked: ``fetch(file, settings)``.

Plain URLs (raw GitHub files, Git LFS objects from the LFS media host, report URLs, an HTTP mirror) go through
pooch (a kept library for cached, hash-checked downloads, with retries) and ``ResumingDownloader`` (a cut-off
transfer resumes with an HTTP Range request from its ``.<name>.part`` file); hub datasets through
huggingface_hub (its cache, ``HF_HUB_OFFLINE`` and ``HF_ENDPOINT``); a mirror folder is copied. Every file's
bytes are checked against the registry's sha256 or git blob id before they are moved into place: a mismatch
is refused with both hashes and nothing is left behind. A file none of its origins gave is ``NotGot``: each
origin's line says what mends it (a 404: not at that address; other bytes: not the pinned file; a host not
reached), and ``again`` says whether running the same command may get it (a cut-off transfer, a timeout, a
server error). With ``progress`` off nothing but the result is printed (pooch's own lines included). ``check_inputs`` is what a job does first: a missing
input that is a registry file's place is downloaded (``data.download=true``) or named with the command that
gets it; a Git LFS pointer given as data is refused."""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from esgexp.data.hashing import FileHashes, file_hashes, lfs_pointer
from esgexp.data.registry import RegistryFile, Source, file_at, identify
from esgexp.errors import UserError


class NotServed(OSError):
    """A source that answers it has no such file (HTTP 4xx): not retried (pooch retries its RequestExceptions)."""


class HashMismatch(Exception):
    """Bytes that are not the registry's file (not a ValueError: pooch retries those; a mismatch is final)."""


class HubOffline(FileNotFoundError):
    """A hub file not in the Hugging Face cache while the hub is offline (``HF_HUB_OFFLINE=1``)."""


class NotGot(UserError):
    """A registry file none of its origins gave; ``again``: whether the same command may get it next time (one
    origin failed in a way that can pass: a transfer cut off, a timeout, a server error)."""

    def __init__(self, message: str, again: bool):
        super().__init__(message)
        self.again = again


# The keys of the ``data`` settings (conf/downloads/default.yaml), beside a paper table's ``data.<key>`` files
SETTINGS = ("download", "mirror", "hosts", "retries")


@dataclass(frozen=True)
class FetchSettings:
    """The ``data`` settings (conf/downloads/default.yaml) and the data folder."""

    data_dir: Path
    download: bool = False
    mirror: str | None = None
    hosts: tuple[tuple[str, str], ...] = ()
    retries: int = 3
    progress: bool = True
    named_dir: Path | None = None  # data_dir as commands must name it (None: the default, left out)

    @classmethod
    def of(cls, cfg, data_dir=None, progress: bool = True) -> FetchSettings:
        """From a composed config with ``paths`` and ``data`` (``data_dir`` instead of ``paths.data_dir``)."""
        data, folder = cfg.data, Path(str(data_dir or cfg.paths.data_dir))
        default = Path(os.environ.get("ESGEXP_DATA_DIR") or Path(str(cfg.paths.cache_dir)) / "data")
        return cls(
            folder,
            bool(data.download),
            str(data.mirror) if data.mirror else None,
            tuple((str(k), str(v)) for k, v in data.hosts.items()),
            int(data.retries),
            progress,
            None if folder.absolute() == default.absolute() else folder,
        )


def fetch(file: RegistryFile, settings: FetchSettings) -> Path:
    """``file`` in ``settings.data_dir``, verified: kept when already there, else read from the mirror (when
    one is set) or from its sources in order. ``NotGot`` says what each origin gave and what mends it."""
    target = file.local(settings.data_dir)
    if target.is_file() and file.matches(file_hashes(target)):
        return target
    if target.is_file():  # another file in the data folder's place of this one: the cache's copy is replaced
        print(f"{target}: not the registry's bytes ({file.hash_text}); removed, getting it again", flush=True)
        target.unlink()
    tried, again = [], False
    for origin in origins(file, settings):
        try:
            if isinstance(origin, Source) and origin.kind == "hub":
                from_hub(file, origin, target, dict(settings.hosts))
            elif "://" in origin:
                by_pooch(file, origin, target, settings)
            else:
                copy_verified(file, Path(origin), target)
            return target
        except (HashMismatch, OSError, ValueError) as error:  # network errors are OSErrors (requests' too)
            line, passing = failure(error, where(origin, settings), file, settings)
            tried.append(line)
            again = again or passing
    raise NotGot(f"{file.label} could not be got: {'; '.join(tried)}", again)


def failure(error: Exception, place: str, file: RegistryFile, settings: FetchSettings) -> tuple[str, bool]:
    """The line for ``place`` (a URL, a mirror folder's path, a hub file) that failed with ``error``, saying what
    mends it, and whether trying it again may get the file."""
    from_mirror = bool(settings.mirror)
    if isinstance(error, HashMismatch):
        fix = (
            f"data.mirror={settings.mirror} holds another file under {file.benchmark}/{file.name}: replace it with "
            f"the pinned one (`{get_command([file])} --to DIR` on a machine that reaches the source)"
            if from_mirror
            else "the source (or a proxy in data.hosts) serves other bytes at the pinned address: set data.mirror "
            "to a folder or URL that holds the pinned file"
        )
        return (
            f"{error}. The file there is not the pinned one, so getting it from there again cannot mend it: {fix}",
            False,
        )
    if isinstance(error, HubOffline):
        return f"{place}: {error}", False
    host = unreached(error, place)
    if host:
        fix = (
            f"data.mirror's host {host} cannot be reached ({host_cause(error)}): check this machine's network, or "
            "point data.mirror at a folder or URL this machine reaches"
            if from_mirror
            else f"the host {host} cannot be reached ({host_cause(error)}): check this machine's network (or "
            "data.hosts, for a proxy), or set data.mirror to a folder or internal URL that holds the files (docs/data.md)"
        )
        return f"{place}: {fix}", False
    if isinstance(error, (NotServed, FileNotFoundError)):
        fix = (
            f"data.mirror={settings.mirror} has no {file.benchmark}/{file.name}: put it there "
            f"(`{get_command([file])} --to DIR` on a machine that reaches the source), or unset data.mirror"
            if from_mirror
            else f"set data.mirror to a folder or URL that holds {file.benchmark}/{file.name}, or check data.hosts"
        )
        said = f"{error}: the file is not at that address" if isinstance(error, NotServed) else "no such file"
        return f"{place}: {said} ({fix})", False
    return f"{place}: {type(error).__name__}: {first_line(error)}", True


def unreached(error: Exception, url: str) -> str | None:
    """The host of ``url`` when ``error`` is a connection to it that could not be made (a name not found,
    refused, timed out connecting), else None (requests wraps urllib3's reason in "Max retries exceeded")."""
    import requests
    from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

    if not isinstance(error, requests.ConnectionError) or not error.args:
        return None
    if not isinstance(getattr(error.args[0], "reason", None), (ConnectTimeoutError, NewConnectionError)):
        return None
    from urllib.parse import urlsplit

    return urlsplit(url).netloc


def host_cause(error: Exception) -> str:
    """The OS's reason inside a connection error (``[Errno 111] Connection refused``), else that it timed out."""
    found = re.search(r"\[Errno -?\d+\] [^'\")]*", str(error))
    return found.group(0).strip() if found else "no connection in time"


def origins(file: RegistryFile, settings: FetchSettings) -> list:
    """Where ``file`` is read from: the mirror alone when one is set (a folder path or a URL of the same
    layout), else its sources (a hub source as itself, the others as URLs on ``settings.hosts``)."""
    if settings.mirror:
        if "://" in settings.mirror:
            from urllib.parse import quote

            return [f"{settings.mirror.rstrip('/')}/{file.benchmark}/{quote(file.name)}"]
        return [str(Path(settings.mirror) / file.benchmark / file.name)]
    return [s if s.kind == "hub" else s.location(dict(settings.hosts)) for s in file.sources]


def where(origin, settings: FetchSettings) -> str:
    return origin.location(dict(settings.hosts)) if isinstance(origin, Source) else str(origin)


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0][:300]


def part_file(target: Path) -> Path:
    """Where a transfer to ``target`` is kept until verified (hidden: a data folder holds only whole files)."""
    return target.with_name(f".{target.name}.part")


def check_bytes(file: RegistryFile, path: Path, origin: str) -> None:
    """Raise HashMismatch (and remove ``path``) unless ``path`` holds ``file``'s bytes."""
    got = file_hashes(path)
    if file.matches(got):
        return
    pointer = lfs_pointer(path)
    path.unlink()
    if pointer is not None:
        raise HashMismatch(
            f"{origin} gave a Git LFS pointer (oid sha256:{pointer.oid}, size {pointer.size}), not the file: "
            "the LFS object is served from the LFS media host (data.hosts.github_lfs); refused, nothing kept"
        )
    shown = f"sha256 {got.sha256}" if file.sha256 else f"git blob {got.git_blob}"
    raise HashMismatch(
        f"{origin} gave {got.size:,} bytes with {shown}, not the registry's {file.hash_text} "
        f"(conf/data/{file.benchmark}.yaml, {file.name}): refused, nothing kept"
    )


class ResumingDownloader:
    """A pooch downloader: the URL's bytes appended to ``part`` (an HTTP Range request from where an earlier,
    cut-off transfer stopped), checked against ``file``'s hashes, then handed to pooch to move into place."""

    def __init__(self, file: RegistryFile, part: Path, progress: bool):
        self.file, self.part, self.progress = file, part, progress

    def __call__(self, url: str, output_file: str, pooch, check_only: bool = False) -> None:
        import requests
        from tqdm import tqdm

        have = self.part.stat().st_size if self.part.is_file() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        with requests.get(url, headers=headers, stream=True, timeout=(10, 60)) as response:
            if have and response.status_code == 416:  # nothing after ``have``: the part is whole
                response.close()
            else:
                if 400 <= response.status_code < 500 and response.status_code not in (408, 429):
                    raise NotServed(f"HTTP {response.status_code} {response.reason}")
                response.raise_for_status()
                if response.status_code != 206:
                    have = 0
                total = have + int(response.headers.get("content-length") or 0) or self.file.size
                bar = tqdm(
                    total=total, initial=have, unit="B", unit_scale=True, desc=self.file.name, disable=not self.progress
                )
                with self.part.open("ab" if have else "wb") as out, bar:
                    for block in response.iter_content(1 << 16):
                        out.write(block)
                        bar.update(len(block))
        check_bytes(self.file, self.part, url)
        os.replace(self.part, output_file)


def by_pooch(file: RegistryFile, url: str, target: Path, settings: FetchSettings) -> None:
    import pooch

    known = f"sha256:{file.sha256}" if file.sha256 else None
    fetcher = pooch.create(
        path=target.parent, base_url="", registry={target.name: known}, urls={target.name: url},
        retry_if_failed=settings.retries,
    )  # fmt: skip
    target.parent.mkdir(parents=True, exist_ok=True)
    logger = pooch.get_logger()  # its "Downloading file ..." and retry lines: progress, shown only with it
    level = logger.level
    if not settings.progress:
        logger.setLevel(logging.WARNING)
    try:
        fetcher.fetch(target.name, downloader=ResumingDownloader(file, part_file(target), settings.progress))
    finally:
        logger.setLevel(level)


def copy_verified(file: RegistryFile, source: Path, target: Path) -> None:
    """``source`` (a mirror folder's copy) copied beside ``target``, verified, then moved into place."""
    if not source.is_file():
        raise FileNotFoundError(f"no such file: {source}")
    part = part_file(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, part)
    check_bytes(file, part, str(source))
    os.replace(part, target)


def from_hub(file: RegistryFile, source: Source, target: Path, hosts: dict) -> None:
    """The file from a hub dataset through huggingface_hub (its cache first; with ``HF_HUB_OFFLINE=1``, the
    default here, only the cache), verified, then copied into place."""
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        cached = hf_hub_download(
            source.repo, source.path, repo_type="dataset", revision=source.revision, endpoint=hosts["huggingface"]
        )
    except LocalEntryNotFoundError:
        if not constants.HF_HUB_OFFLINE:
            raise
        raise HubOffline(
            "not in the Hugging Face cache, and the hub is offline (HF_HUB_OFFLINE=1; HF_HUB_OFFLINE=0 lets "
            "huggingface_hub download it)"
        ) from None
    copy_verified(file, Path(cached), target)


def get_command(files: list[RegistryFile], data_dir: Path | None = None) -> str:
    """The ``esgexp-data get`` command for ``files`` (of one benchmark); ``data_dir`` when not the default."""
    bench = files[0].benchmark
    words = ["esgexp-data", "get", bench]
    if len(files) == 1:
        words.append(f"files={hydra_value(files[0].name)}")
    elif {f.group for f in files} == {"reports"}:
        words.append("reports")
    if data_dir is not None:
        words.append(f"paths.data_dir={hydra_value(str(data_dir))}")
    return shlex.join(words)


def hydra_value(text: str) -> str:
    """``text`` as a Hydra override value: quoted when it holds a space or another special character."""
    if all(ch.isalnum() or ch in "_-./:+@~" for ch in text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def missing_message(file: RegistryFile, setting: str, path: Path, settings: FetchSettings) -> str:
    """One line: which benchmark file is missing, the exact command that gets it and where it comes from."""
    source = file.sources[0]
    return (
        f"{setting}={path} is {file.benchmark}'s {file.name}, not downloaded yet (offline by default): "
        f"get it with `{get_command([file], settings.named_dir)}` (from {source.location(dict(settings.hosts))}, "
        f"{source.pinned}), or add data.download=true (ESGEXP_DATA_DOWNLOAD=1) to download and verify it first"
    )


def refuse_pointer(path: Path, setting: str, settings: FetchSettings) -> None:
    """A UserError when the file at ``path`` is a Git LFS pointer, naming the command that gets the data."""
    pointer = lfs_pointer(path)
    if pointer is None:
        return
    known = identify(FileHashes(pointer.oid, "", pointer.size))
    fix = f"`{get_command([known], settings.named_dir)}`" if known else "`git lfs pull` in a clone of its repository"
    raise UserError(
        f"{setting}={path} is a Git LFS pointer (oid sha256:{pointer.oid}, {pointer.size:,} bytes), not the data: "
        f"get the file itself with {fix}"
    )


def check_inputs(inputs: list[tuple[str, Path]], settings: FetchSettings) -> None:
    """Before a job reads ``inputs`` ((setting, path) pairs): a Git LFS pointer is refused; a missing path that
    is a registry file's place in the data folder is downloaded when ``settings.download``, else refused with
    the command that gets it. Other missing paths are left to the loaders' own messages."""
    for setting, path in inputs:
        if path.is_file():
            refuse_pointer(path, setting, settings)
            continue
        file = None if path.exists() else file_at(path, settings.data_dir)
        if file is None:
            continue
        if not (settings.download or settings.mirror):
            raise UserError(missing_message(file, setting, path, settings))
        print(f"{setting}: getting {file.label} ({file.hash_text})", flush=True)
        fetch(file, settings)
