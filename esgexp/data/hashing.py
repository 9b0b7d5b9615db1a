"""A file's content hashes, read once: sha256 and git's blob id (``sha1("blob <size>\\0" + bytes)``, what a
repository's tree records), and Git LFS pointers recognised as what they are (a ~130-byte stand-in for the file)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

LFS_SPEC = b"version https://git-lfs.github.com/spec/v1"


@dataclass(frozen=True)
class FileHashes:
    sha256: str
    git_blob: str
    size: int


def file_hashes(path: str | Path) -> FileHashes:
    """The hashes of the file at ``path`` (cached while its size and modification time stay the same)."""
    stat = Path(path).stat()
    return _hashes(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=512)
def _hashes(path: str, size: int, _mtime: int) -> FileHashes:
    sha256, blob = hashlib.sha256(), hashlib.sha1(f"blob {size}\0".encode())
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha256.update(block)
            blob.update(block)
    return FileHashes(sha256.hexdigest(), blob.hexdigest(), size)


@dataclass(frozen=True)
class LfsPointer:
    oid: str
    size: int


def lfs_pointer(path: str | Path) -> LfsPointer | None:
    """The Git LFS pointer at ``path`` (its object's sha256 and size), or None for any other file."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size > 1024:
        return None
    text = path.read_bytes()
    if not text.startswith(LFS_SPEC):
        return None
    fields = dict(line.split(" ", 1) for line in text.decode("utf-8", "replace").splitlines() if " " in line)
    oid = fields.get("oid", "").removeprefix("sha256:")
    return LfsPointer(oid, int(fields["size"])) if fields.get("size", "").isdigit() else LfsPointer(oid, 0)
