"""The benchmarks' published files by name: ``conf/data/<benchmark>.yaml`` -> ``Benchmark`` and its
``RegistryFile`` entries (sources pinned to a revision, size, sha256 and/or git blob id, group, what each
serves), and the lookups jobs, paper tables and ``esgexp-data`` share: a registry file by its place in the data
folder, by what it serves, or by its bytes (``identify``: a file is the paper's only when its hash is the
registry's, never by its name or place)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from urllib.parse import quote

from esgexp.core.config import CONF_DIR
from esgexp.data.hashing import FileHashes, file_hashes
from esgexp.errors import UserError

REGISTRY_DIR = CONF_DIR / "data"
SOURCE_KINDS = ("github", "hub", "url")


@dataclass(frozen=True)
class Source:
    """Where a file is published: a GitHub repository at a commit (``lfs``: stored as a Git LFS object), a
    Hugging Face hub dataset at a revision, or a plain URL."""

    kind: str
    repo: str = ""
    revision: str = ""
    path: str = ""
    lfs: bool = False
    url: str = ""

    def location(self, hosts: dict) -> str:
        """The URL of the file at this source, on ``hosts`` (``github``, ``github_lfs``, ``huggingface``)."""
        if self.kind == "url":
            return self.url
        if self.kind == "hub":
            return f"{hosts['huggingface'].rstrip('/')}/datasets/{self.repo}/resolve/{self.revision}/{quote(self.path)}"
        host = hosts["github_lfs" if self.lfs else "github"].rstrip("/")
        return f"{host}/{self.repo}/{self.revision}/{quote(self.path)}"

    @property
    def pinned(self) -> str:
        """The revision in words: ``commit 048255a…``, ``hub revision main``, or ``as published at the URL``."""
        if self.kind == "github":
            return f"commit {self.revision}"
        return f"hub revision {self.revision}" if self.kind == "hub" else "as published at the URL"


@dataclass(frozen=True)
class RegistryFile:
    """One published file: its ``name`` under ``<data_dir>/<benchmark>/`` (``reports/X.pdf`` for a report),
    its ``group`` (data | reports), sources in the order tried, size, hashes and the uses it ``serves``."""

    benchmark: str
    name: str
    group: str
    sources: tuple[Source, ...]
    size: int | None
    sha256: str | None
    git_blob: str | None
    serves: tuple[str, ...]
    checked: str

    def local(self, data_dir: str | Path) -> Path:
        return Path(data_dir) / self.benchmark / self.name

    def matches(self, hashes: FileHashes) -> bool:
        """Whether ``hashes`` are this file's: its sha256, or its git blob id where no sha256 is recorded."""
        if self.sha256:
            return hashes.sha256 == self.sha256
        return hashes.git_blob == self.git_blob

    @property
    def hash_text(self) -> str:
        return f"sha256 {self.sha256}" if self.sha256 else f"git blob {self.git_blob}"

    @property
    def label(self) -> str:
        return f"{self.benchmark}/{self.name}"

    @property
    def described(self) -> str:
        """``esgbench/esgbench_preds.jsonl: github sherinegeorge21/ESGbench data/... at commit 687dd57…, sha256 …``."""
        source = self.sources[0]
        origin = source.url or f"{source.kind} {source.repo} {source.path}"
        return f"{self.label}: {origin} at {source.pinned}, {self.hash_text}"


@dataclass(frozen=True)
class Benchmark:
    name: str
    title: str
    homepage: str
    licence: str
    citation: str
    files: tuple[RegistryFile, ...]

    def group(self, name: str | None) -> list[RegistryFile]:
        """The files of group ``name`` (data | reports | all; None: data)."""
        groups = sorted({f.group for f in self.files})
        if name not in (None, "all", *groups):
            raise UserError(f"{self.name}: no group {name!r} (its groups: {', '.join([*groups, 'all'])})")
        return [f for f in self.files if name == "all" or f.group == (name or "data")]

    def named(self, names: list[str]) -> list[RegistryFile]:
        """The files called ``names`` (their registry name, or the name without its folder)."""
        by_name = {key: f for f in self.files for key in (f.name, Path(f.name).name)}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            shown = ", ".join(f.name for f in self.files if f.group == "data")
            raise UserError(
                f"{self.name}: no file {unknown[0]!r} in conf/data/{self.name}.yaml (its data files: {shown})"
            )
        return list(dict.fromkeys(by_name[n] for n in names))


@cache
def benchmarks() -> dict[str, Benchmark]:
    """Every ``conf/data/*.yaml``, by benchmark name; a malformed entry is a UserError naming file and field."""
    return {path.stem: load_benchmark(path) for path in sorted(REGISTRY_DIR.glob("*.yaml"))}


def benchmark(name: str) -> Benchmark:
    found = benchmarks().get(name)
    if found is None:
        raise UserError(f"no benchmark {name!r} in conf/data/ (known: {', '.join(benchmarks())})")
    return found


def load_benchmark(path: Path) -> Benchmark:
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(OmegaConf.load(path))
    where = f"conf/data/{path.name}"
    for key in ("name", "title", "homepage", "licence", "citation", "files"):
        if not raw.get(key):
            raise UserError(f"{where}: {key} is missing")
    if raw["name"] != path.stem:
        raise UserError(f"{where}: name is {raw['name']!r}; it must be the file's name, {path.stem!r}")
    files = tuple(registry_file(raw["name"], entry, f"{where} files[{i}]") for i, entry in enumerate(raw["files"]))
    return Benchmark(raw["name"], raw["title"], raw["homepage"], raw["licence"], raw["citation"].strip(), files)


def registry_file(bench: str, entry: dict, where: str) -> RegistryFile:
    if not entry.get("name") or not entry.get("sources"):
        raise UserError(f"{where}: each file needs a name and sources")
    where = f"{where} ({entry['name']})"
    if not (entry.get("sha256") or entry.get("git_blob")):
        raise UserError(f"{where}: give sha256 (sha256sum FILE) or git_blob (git hash-object FILE)")
    sources = []
    for spec in entry["sources"]:
        kind = next((k for k in SOURCE_KINDS if k in spec), None)
        if kind is None:
            raise UserError(f"{where}: a source is one of {', '.join(SOURCE_KINDS)}, got {spec}")
        if kind == "url":
            sources.append(Source("url", url=spec["url"]))
            continue
        revision = spec.get("commit" if kind == "github" else "revision")
        if not (revision and spec.get("path")):
            raise UserError(f"{where}: a {kind} source needs path and {'commit' if kind == 'github' else 'revision'}")
        sources.append(Source(kind, spec[kind], str(revision), spec["path"], bool(spec.get("lfs"))))
    return RegistryFile(
        bench,
        entry["name"],
        entry.get("group", "data"),
        tuple(sources),
        entry.get("size"),
        entry.get("sha256"),
        entry.get("git_blob"),
        tuple(entry.get("serves") or ()),
        entry.get("checked", ""),
    )


def all_files() -> list[RegistryFile]:
    return [f for bench in benchmarks().values() for f in bench.files]


def file_at(path: str | Path, data_dir: str | Path) -> RegistryFile | None:
    """The registry file whose place in ``data_dir`` is ``path``; None for any other path."""
    place = Path(path).absolute()
    return next((f for f in all_files() if f.local(Path(data_dir).absolute()) == place), None)


def serving(use: str) -> list[RegistryFile]:
    """The files that serve ``use`` (``esgenius_table2 data.esgenius``, ``dataset=esgenius``)."""
    return [f for f in all_files() if use in f.serves]


def identify(hashes: FileHashes, among: list[RegistryFile] | None = None) -> RegistryFile | None:
    """The registry file (of ``among``, default all) with these bytes; None when the bytes are no published file's."""
    return next((f for f in (all_files() if among is None else among) if f.matches(hashes)), None)


def published_as(path: str | Path) -> str | None:
    """The registry entry (``RegistryFile.described``) of the file at ``path``, by its bytes; None for a file no
    registry entry has, or no file."""
    entry = identify(file_hashes(Path(path))) if Path(path).is_file() else None
    return entry.described if entry else None
