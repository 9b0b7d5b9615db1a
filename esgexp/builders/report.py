"""What a build counts: per stage, what went in, what came out, what was repaired and what was
discarded by reason; written as ``build_report.json`` and logged as the run's metrics."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class StageCounts:
    """One stage: ``n_in`` items offered, ``n_out`` passed on, ``n_repaired`` (retried or rewritten)
    among them, ``discarded`` by reason."""

    n_in: int = 0
    n_out: int = 0
    n_repaired: int = 0
    discarded: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict:
        return {
            "n_in": self.n_in,
            "n_out": self.n_out,
            "n_repaired": self.n_repaired,
            "n_discarded": sum(self.discarded.values()),
            "discarded": {reason: n for reason, n in sorted(self.discarded.items()) if n},
        }


@dataclass
class BuildReport:
    """The stages in the order they ran, and the items the dataset holds."""

    stages: dict[str, StageCounts] = field(default_factory=dict)
    n_items: int = 0

    def stage(self, name: str) -> StageCounts:
        return self.stages.setdefault(name, StageCounts())

    def to_dict(self) -> dict:
        return {"n_items": self.n_items, "stages": {name: counts.to_dict() for name, counts in self.stages.items()}}

    def metrics(self) -> dict[str, int]:
        """Flat counts for MLflow: ``<stage>/n_out``, ``<stage>/discarded/<reason>``, ..."""
        flat = {}
        for name, counts in self.stages.items():
            for key, value in counts.to_dict().items():
                if key == "discarded":
                    flat.update({f"{name}/discarded/{reason}": n for reason, n in value.items()})
                else:
                    flat[f"{name}/{key}"] = value
        return flat

    def survival(self) -> dict[str, float]:
        """The share of each stage's input it passed on."""
        return {name: round(c.n_out / c.n_in, 4) if c.n_in else 0.0 for name, c in self.stages.items()}
