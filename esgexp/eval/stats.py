"""Uncertainty of metrics and paired tests between runs (numpy only).

- Proportions (accuracy, EM, rates): Wilson score interval; with clusters, a cluster bootstrap.
- Means of per-item scores and ratios of sums (pooled recall@K = sum of hits / sum of relevant):
  a seeded percentile bootstrap over items, or over clusters when the dataset declares a cluster key.
- One rule for every metric whose items are all hits or all misses (a share of 1 or 0): Wilson's interval
  over the items, or over the clusters; and over fewer than ``FEW_CLUSTERS`` clusters a clustered interval
  is never narrower than the unclustered one (Wilson for a share, the item bootstrap for a mean).
- Standard errors: the CLT standard error of the mean; with clusters the clustered standard error of
  "Adding Error Bars to Evals" (Miller, 2024): SE^2 = SE_CLT^2 + (1/n^2) sum_c sum_{i != j in c}
  (s_i - mean)(s_j - mean); a ratio of sums through its linearisation (delta method).
- Paired comparison: McNemar's exact test (binomial on the discordant pairs) for 0/1 outcomes, a
  paired bootstrap (clustered when declared) for per-item score differences, Holm's correction.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from esgexp.errors import UserError

log = logging.getLogger(__name__)

# Fewer clusters than this make a cluster bootstrap unreliable: a warning, and the interval is floored at the
# unclustered one (few_clusters_floor).
FEW_CLUSTERS = 10
# Bootstrap resamples are drawn this many at a time, so a large set of items never fills memory.
_CHUNK = 100


@dataclass(frozen=True)
class StatsSettings:
    """How intervals are computed: ``bootstrap`` resamples, their ``seed``, the ``confidence`` level
    (checked with every setting, esgexp/jobs/settings.py)."""

    bootstrap: int = 1000
    seed: int = 0
    confidence: float = 0.95

    @classmethod
    def from_node(cls, node) -> StatsSettings:
        """From the ``stats`` config node (any mapping with bootstrap, seed, confidence)."""
        return cls(bootstrap=int(node.bootstrap), seed=int(node.seed), confidence=float(node.confidence))


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval, standard error and how the interval was computed
    (``wilson``, ``bootstrap``, ``cluster_bootstrap``, ``cluster_bootstrap_floored``, ``cluster_wilson``, or
    ``none`` with the reason in ``note``)."""

    estimate: float
    low: float
    high: float
    stderr: float
    method: str
    note: str = ""

    def as_metrics(self, key: str) -> dict:
        """``<key>/ci_low``, ``<key>/ci_high``, ``<key>/stderr`` and ``<key>/ci_method`` (NaN, written as
        null, when there is no interval), and ``<key>/ci_note``: why there is none."""
        out = {
            f"{key}/ci_low": self.low,
            f"{key}/ci_high": self.high,
            f"{key}/stderr": self.stderr,
            f"{key}/ci_method": self.method,
        }
        if self.note:
            out[f"{key}/ci_note"] = self.note
        return out


NAN_INTERVAL = Interval(math.nan, math.nan, math.nan, math.nan, "none")
# Resampling needs at least this many units (items, or clusters when declared): from one there is no interval.
MIN_UNITS = 2


def too_few_units(n: int, clusters: Sequence | None) -> str:
    """Why ``n`` items (in ``clusters``) are too few to resample, e.g. ``one cluster``; "" when they are not."""
    units = len({str(c) for c in clusters}) if clusters is not None else n
    if units >= MIN_UNITS:
        return ""
    kind = "cluster" if clusters is not None else "item"
    return f"one {kind}" if units == 1 else f"no {kind}"


def no_interval(estimate: float, note: str) -> Interval:
    """A point estimate without an interval (nor standard error), and why."""
    return Interval(float(estimate), math.nan, math.nan, math.nan, "none", note)


def normal_quantile(p: float) -> float:
    """The standard normal quantile at ``p``."""
    return NormalDist().inv_cdf(p)


def wilson(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval of ``successes`` out of ``n``; stderr sqrt(p(1-p)/n)."""
    if n == 0:
        return NAN_INTERVAL
    z = normal_quantile(1 - (1 - confidence) / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), math.sqrt(p * (1 - p) / n), "wilson")


def cluster_ids(clusters: Sequence | None, n: int) -> np.ndarray | None:
    """Integer cluster ids (0..C-1) for ``n`` items; None when there are no clusters."""
    if clusters is None:
        return None
    if len(clusters) != n:
        raise ValueError(f"{len(clusters)} cluster labels for {n} items")
    _, ids = np.unique(np.asarray([str(c) for c in clusters]), return_inverse=True)
    return ids.ravel()


def mean_stderr(values: Sequence[float], clusters: Sequence | None = None) -> float:
    """The standard error of the mean of ``values``: CLT (sample variance / n), or with ``clusters``
    Miller's clustered SE (the CLT term plus the within-cluster cross products)."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 2:
        return math.nan
    resid = x - x.mean()
    clt = float((resid**2).sum() / (n - 1) / n)
    ids = cluster_ids(clusters, n)
    if ids is None:
        return math.sqrt(clt)
    sums = np.bincount(ids, weights=resid)
    cross = float((sums**2).sum() - (resid**2).sum())  # sum over i != j in one cluster
    return math.sqrt(max(clt + cross / (n * n), 0.0))


def ratio_stderr(numerators: Sequence[float], denominators: Sequence[float], clusters: Sequence | None = None) -> float:
    """Standard error of sum(numerators) / sum(denominators) by the delta method: the SE of the
    mean of the linearised values (y_i - R x_i) / mean(x), clustered when ``clusters`` is given."""
    y, x = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    if len(x) < 2 or x.sum() == 0:
        return math.nan
    ratio = y.sum() / x.sum()
    return mean_stderr((y - ratio * x) / x.mean(), clusters)


def _resampled_sums(
    rows: np.ndarray, ids: np.ndarray | None, settings: StatsSettings, rng: np.random.Generator
) -> np.ndarray:
    """``settings.bootstrap`` column sums of ``rows`` (n x d) over resamples of its rows, or of whole
    clusters when ``ids`` is given (a resampled cluster brings all its rows)."""
    units = (
        rows if ids is None else np.stack([np.bincount(ids, weights=rows[:, j]) for j in range(rows.shape[1])], axis=1)
    )
    count = len(units)
    out = np.empty((settings.bootstrap, rows.shape[1]))
    for start in range(0, settings.bootstrap, _CHUNK):
        size = min(_CHUNK, settings.bootstrap - start)
        picks = rng.integers(0, count, size=(size, count))
        out[start : start + size] = units[picks].sum(axis=1)
    return out


def bootstrap_replicates(
    rows: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray], clusters: Sequence | None, settings: StatsSettings
) -> np.ndarray:
    """``statistic`` (column sums, one row per resample -> one value per resample) over seeded resamples."""
    rows = np.asarray(rows, dtype=float).reshape(len(rows), -1)
    rng = np.random.default_rng(settings.seed)
    return np.asarray(statistic(_resampled_sums(rows, cluster_ids(clusters, len(rows)), settings, rng)), dtype=float)


def _percentile(replicates: np.ndarray, settings: StatsSettings) -> tuple[float, float]:
    finite = replicates[np.isfinite(replicates)]
    if not len(finite):
        return math.nan, math.nan
    tail = (1 - settings.confidence) / 2 * 100
    low, high = np.percentile(finite, [tail, 100 - tail])
    return float(low), float(high)


def _method(clusters: Sequence | None) -> str:
    return "bootstrap" if clusters is None else "cluster_bootstrap"


def ratio_interval(
    numerators: Sequence[float], denominators: Sequence[float], clusters: Sequence | None, settings: StatsSettings
) -> Interval:
    """sum(numerators) / sum(denominators) with a percentile bootstrap interval (items or clusters
    resampled) and the delta-method standard error. A mean is the case of denominators all 1.

    Two cases resampling gets wrong take another rule: every item all hits or all misses (a share of 1 or 0,
    ``share_rule``: the bootstrap's [1, 1] would claim certainty), and fewer than ``FEW_CLUSTERS`` clusters
    (``few_clusters_floor``: never narrower than the item bootstrap's interval)."""
    y, x = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    return _ratio_interval(y, x, clusters, settings, lambda: bootstrap_ratio(y, x, None, settings))


def _ratio_interval(
    y: np.ndarray, x: np.ndarray, clusters: Sequence | None, settings: StatsSettings, plain: Callable[[], Interval]
) -> Interval:
    """``ratio_interval`` with ``plain`` giving the unclustered interval that floors one over few clusters."""
    if not len(x) or x.sum() == 0:
        return NAN_INTERVAL
    few = too_few_units(len(x), clusters)
    if few:
        return no_interval(y.sum() / x.sum(), few)
    weighted = x > 0
    share = constant_share(y[weighted], x[weighted])
    if share is not None:
        kept = None if clusters is None else [c for c, w in zip(clusters, weighted) if w]
        return share_rule(share, int(weighted.sum()), kept, settings)
    found = bootstrap_ratio(y, x, clusters, settings)
    return few_clusters_floor(found, plain()) if few_clusters(clusters) else found


def bootstrap_ratio(y: np.ndarray, x: np.ndarray, clusters: Sequence | None, settings: StatsSettings) -> Interval:
    """The percentile bootstrap interval of sum(y) / sum(x), items or clusters resampled."""
    with np.errstate(invalid="ignore", divide="ignore"):
        replicates = bootstrap_replicates(np.column_stack([y, x]), lambda s: s[:, 0] / s[:, 1], clusters, settings)
    low, high = _percentile(replicates, settings)
    return Interval(float(y.sum() / x.sum()), low, high, ratio_stderr(y, x, clusters), _method(clusters))


def constant_share(y: np.ndarray, x: np.ndarray) -> float | None:
    """1.0 when every item is all hits (y = x), 0.0 when all misses (y = 0): a share resampling cannot vary;
    else None."""
    if len(x) and np.array_equal(y, x):
        return 1.0
    if len(x) and not y.any():
        return 0.0
    return None


def share_rule(share: float, n: int, clusters: Sequence | None, settings: StatsSettings) -> Interval:
    """The one interval of a share of 1 or 0 over ``n`` items, whatever the metric (accuracy, a mean of 0/1 values,
    pooled recall@K, MRR, nDCG): Wilson's for ``n`` of ``n`` (or none of ``n``), or with clusters Wilson's over the
    clusters, each counted once (``cluster_wilson``: as if only the clusters were independent, the cautious
    reading). At least as wide as the plain Wilson interval, since there are never more clusters than items."""
    if clusters is None:
        return wilson(round(share * n), n, settings.confidence)
    units = len({str(c) for c in clusters})
    found = wilson(round(share * units), units, settings.confidence)
    return Interval(found.estimate, found.low, found.high, found.stderr, "cluster_wilson")


def few_clusters(clusters: Sequence | None) -> bool:
    """Whether ``clusters`` are declared and fewer than ``FEW_CLUSTERS``."""
    return clusters is not None and len({str(c) for c in clusters}) < FEW_CLUSTERS


def few_clusters_floor(clustered: Interval, plain: Interval) -> Interval:
    """A clustered interval over fewer than ``FEW_CLUSTERS`` clusters, never narrower than the ``plain`` one (items
    independent: Wilson for a share, the item bootstrap for a mean): each end the wider of the two, method
    ``cluster_bootstrap_floored`` when the plain interval moved an end. With few clusters the percentile cluster
    bootstrap resamples few distinct sets and comes out too narrow (11 answers of 7 reports, 10 right: [0.81, 1]
    against Wilson's [0.62, 0.98]); clustering can only add uncertainty to independent items, so the plain
    interval is a floor."""
    low, high = min(clustered.low, plain.low), max(clustered.high, plain.high)
    if (low, high) == (clustered.low, clustered.high):
        return clustered
    stderr = max(clustered.stderr, plain.stderr)
    return Interval(clustered.estimate, low, high, stderr, "cluster_bootstrap_floored")


def mean_interval(values: Sequence[float], clusters: Sequence | None, settings: StatsSettings) -> Interval:
    """Mean of per-item ``values``: ``ratio_interval`` with denominators all 1 (its standard error is then the
    CLT or clustered standard error of the mean)."""
    return ratio_interval(values, np.ones(len(values)), clusters, settings)


def proportion_interval(hits: Sequence[float], clusters: Sequence | None, settings: StatsSettings) -> Interval:
    """Share of 0/1 ``hits``: Wilson without clusters; with them the cluster bootstrap (clustered SE), over fewer
    than ``FEW_CLUSTERS`` clusters never narrower than Wilson; a share of 0 or 1 gets ``share_rule``."""
    x = np.asarray(hits, dtype=float)
    if clusters is None:
        return wilson(int(x.sum()), len(x), settings.confidence)
    return _ratio_interval(
        x, np.ones(len(x)), clusters, settings, lambda: wilson(int(x.sum()), len(x), settings.confidence)
    )


def statistic_interval(
    rows: Sequence[Sequence[float]],
    statistic: Callable[[np.ndarray], float],
    clusters: Sequence | None,
    settings: StatsSettings,
) -> Interval:
    """A corpus-level ``statistic`` of summed per-item ``rows`` (e.g. corpus BLEU of n-gram counts):
    percentile bootstrap interval, standard error = the standard deviation of the replicates."""
    rows = np.asarray(rows, dtype=float)
    if not len(rows):
        return NAN_INTERVAL
    few = too_few_units(len(rows), clusters)
    if few:
        return no_interval(statistic(rows.sum(axis=0)), few)
    replicates = bootstrap_replicates(rows, lambda sums: [statistic(row) for row in sums], clusters, settings)
    low, high = _percentile(replicates, settings)
    found = Interval(
        float(statistic(rows.sum(axis=0))), low, high, float(np.std(replicates, ddof=1)), _method(clusters)
    )
    return (
        few_clusters_floor(found, statistic_interval(rows, statistic, None, settings))
        if few_clusters(clusters)
        else found
    )


# --- paired comparison ---


def binomial_two_sided(k: int, n: int) -> float:
    """Exact two-sided p-value of ``k`` successes in ``n`` fair coin flips: 2 P(X <= min(k, n-k)), at most 1."""
    if n == 0:
        return 1.0
    low = min(k, n - k)
    tail = sum(
        math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2))
        for i in range(low + 1)
    )
    return min(1.0, 2 * tail)


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """McNemar's exact p-value from the discordant pairs: items right in run A only, and in run B only."""
    return binomial_two_sided(only_a, only_a + only_b)


@dataclass(frozen=True)
class PairedResult:
    """``difference`` = statistic of B minus that of A, its interval, and the two-sided p-value
    (NaN, with the reason in ``note``, when the items are too few to resample)."""

    difference: float
    low: float
    high: float
    p_value: float
    method: str
    note: str = ""


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    clusters: Sequence | None,
    settings: StatsSettings,
    weights_a: Sequence[float] | None = None,
    weights_b: Sequence[float] | None = None,
) -> PairedResult:
    """Paired bootstrap of sum(b) / sum(weights_b) - sum(a) / sum(weights_a) over the same items (weights
    1: the mean difference; relevant passages per query: a pooled recall difference), resampling items
    or whole clusters together for both runs.

    The p-value is that of the null-centred bootstrap: the share of replicates whose distance from the
    observed difference is at least the observed difference's distance from 0, (1 + count) / (1 + B)."""
    n = len(a)
    ones = np.ones(n)
    rows = (
        np.column_stack(
            [
                np.asarray(a, dtype=float),
                ones if weights_a is None else np.asarray(weights_a, dtype=float),
                np.asarray(b, dtype=float),
                ones if weights_b is None else np.asarray(weights_b, dtype=float),
            ]
        )
        if n
        else np.empty((0, 4))
    )
    if not n or rows[:, 1].sum() == 0 or rows[:, 3].sum() == 0:
        return PairedResult(math.nan, math.nan, math.nan, math.nan, "none")
    sums = rows.sum(axis=0)
    observed = float(sums[2] / sums[3] - sums[0] / sums[1])
    few = too_few_units(n, clusters)
    if few:
        return PairedResult(observed, math.nan, math.nan, math.nan, "none", few)
    with np.errstate(invalid="ignore", divide="ignore"):
        replicates = bootstrap_replicates(rows, lambda s: s[:, 2] / s[:, 3] - s[:, 0] / s[:, 1], clusters, settings)
    low, high = _percentile(replicates, settings)
    finite = replicates[np.isfinite(replicates)]
    extreme = int((np.abs(finite - observed) >= abs(observed) - 1e-12).sum())
    return PairedResult(observed, low, high, min(1.0, (1 + extreme) / (1 + len(finite))), "paired_" + _method(clusters))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order (NaN stays NaN)."""
    order = sorted((p, i) for i, p in enumerate(p_values) if p == p)
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p))
        adjusted[i] = running
    return adjusted


# --- per-item scores behind a metric, and the interval keys of metrics.json ---

KINDS = ("proportion", "mean", "ratio")


@dataclass(frozen=True)
class ItemScores:
    """The per-item values behind one metric: 0/1 ``values`` (``proportion``), scores (``mean``), or
    numerators over ``weights`` (``ratio``: sum(values) / sum(weights)); ``clusters`` one label per item
    or None."""

    ids: list[str]
    values: list[float]
    kind: str
    weights: list[float] | None = None
    clusters: list[str] | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")

    def interval(self, settings: StatsSettings) -> Interval:
        if self.kind == "proportion":
            return proportion_interval(self.values, self.clusters, settings)
        if self.kind == "mean":
            return mean_interval(self.values, self.clusters, settings)
        return ratio_interval(self.values, self.weights, self.clusters, settings)


def interval_metrics(scores: dict[str, ItemScores | None], settings: StatsSettings) -> dict:
    """``<key>/ci_low``, ``/ci_high``, ``/stderr``, ``/ci_method`` for every metric key with scores."""
    out: dict = {}
    for key, found in scores.items():
        if found is not None and found.ids:
            out.update(found.interval(settings).as_metrics(key))
    return out


def record_clusters(records: Sequence[dict]) -> list[str] | None:
    """The ``cluster`` label of every record, or None when any record has none."""
    labels = [r.get("cluster") for r in records]
    return None if not labels or any(label is None for label in labels) else [str(label) for label in labels]


PASSAGE = "passage"


def item_cluster(item, key: str) -> str:
    """The cluster of ``item`` under the dataset's ``cluster_key``: ``passage`` is its source passage
    (items with the same context text), any other key a field of the item or of its ``meta``."""
    if key == PASSAGE:
        if not item.context:
            raise UserError(f"dataset.cluster_key=passage but item {item.id!r} has no passage (context)")
        import hashlib

        return hashlib.sha256("\n".join(item.context).encode()).hexdigest()[:16]
    value = getattr(item, key, None)
    if value is None:
        value = getattr(item, "meta", {}).get(key)
    if value is None:
        raise UserError(f"dataset.cluster_key={key!r}: item {item.id!r} has no field or meta value {key!r}")
    return str(value)


def cluster_records(records: list[dict], items: Sequence, key: str | None) -> list[dict]:
    """``records`` (aligned with ``items``) with each item's ``cluster`` label when ``key`` is set."""
    if not key:
        return records
    return [{**record, "cluster": item_cluster(item, key)} for record, item in zip(records, items, strict=True)]


def cluster_info(records: Sequence[dict], key: str | None) -> dict:
    """What metrics.json says about clustering: ``stats/cluster_key`` (null: none) and ``stats/n_clusters``."""
    clusters = record_clusters(records) if key else None
    if clusters and len(set(clusters)) < FEW_CLUSTERS:
        log.warning(
            "only %d clusters of dataset.cluster_key=%s: clustered intervals are rough with so few",
            len(set(clusters)),
            key,
        )
    return {
        "stats/cluster_key": key if clusters else None,
        "stats/n_clusters": len(set(clusters)) if clusters else len(records),
    }


def scored(
    metrics: dict, intervals: dict, records: Sequence[dict], cluster_key: str | None, key: str, higher_is_better=True
) -> dict[str, str]:
    """The scoring tail every task kind shares: ``metrics`` gets the ``intervals``, what clustering there was
    (``cluster_info``) and the headline ``key`` with its direction; returns the headline tags."""
    metrics.update(intervals)
    metrics.update(cluster_info(records, cluster_key), headline_metric=key, higher_is_better=higher_is_better)
    return headline(key, higher_is_better)


def headline(metric: str, higher_is_better: bool = True) -> dict[str, str]:
    """The MLflow tags that name a run's headline metric and its direction."""
    return {"headline_metric": metric, "higher_is_better": "true" if higher_is_better else "false"}


def with_interval(metrics: dict, key: str, digits: int = 3) -> str:
    """``0.521 [0.470, 0.573]`` for the summary table; ``0.350 [interval n/a: one cluster]`` when too few
    units to resample; the bare value when it has no interval for another reason."""
    value = metrics.get(key)
    if not isinstance(value, (int, float)) or value != value:
        return "n/a"
    low, high = metrics.get(f"{key}/ci_low"), metrics.get(f"{key}/ci_high")
    if not isinstance(low, (int, float)) or low != low:
        note = metrics.get(f"{key}/ci_note")
        return f"{value:.{digits}f}" + (f" [{interval_na(note)}]" if note else "")
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def interval_na(note: str) -> str:
    """``interval n/a: one cluster``: how a missing interval is shown (summary, compare, leaderboard)."""
    return f"interval n/a: {note}"
