"""What a builder gets besides the corpus: the structured generator, the report it counts into, the
build folder, the seed, and ``solver(name)``, a backend for another model (``conf/model/<name>.yaml``)
on the build's backend node, behind the request cache."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from esgexp.backends.base import Backend
from esgexp.builders.generate import StructuredGenerator
from esgexp.builders.report import BuildReport


@dataclass
class BuildContext:
    generator: StructuredGenerator
    report: BuildReport
    out_dir: Path
    seed: int
    solver: Callable[[str], Backend]
