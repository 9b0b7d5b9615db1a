"""The kinds of rule a setting follows (an integer in bounds, one of some choices, a URL, ...): each says
whether a value ``accepts`` and what it ``expected``. esgexp/jobs/settings.py keys them by dotted config key; a
component class (a backend, a retriever) declares its own in ``settings``."""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass

from omegaconf import DictConfig, ListConfig, OmegaConf


@dataclass(frozen=True)
class Integer:
    """A whole number (not a bool, not ``3.0``) in ``[low, high]``; ``optional``: null allowed."""

    low: int | None = None
    high: int | None = None
    optional: bool = False

    def accepts(self, value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and _within(value, self.low, self.high)

    def expected(self) -> str:
        return "an integer" + _bounds(self.low, self.high)


@dataclass(frozen=True)
class Number:
    """An int or float in ``[low, high]`` (``above``: strictly greater than ``low``, ``below``: strictly less
    than ``high``); ``optional``: null allowed."""

    low: float | None = None
    high: float | None = None
    above: bool = False
    below: bool = False
    optional: bool = False

    def accepts(self, value) -> bool:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
            return False
        return (
            _within(value, self.low, self.high)
            and not (self.above and value == self.low)
            and not (self.below and value == self.high)
        )

    def expected(self) -> str:
        if not (self.above or self.below):
            return "a number" + _bounds(self.low, self.high)
        low = f" {'>' if self.above else '>='} {_number(self.low)}" if self.low is not None else ""
        high = f" {'<' if self.below else '<='} {_number(self.high)}" if self.high is not None else ""
        return "a number" + low + (" and" if low and high else "") + high


@dataclass(frozen=True)
class Choice:
    """One of ``values``; ``optional``: null allowed."""

    values: tuple
    optional: bool = False

    def accepts(self, value) -> bool:
        return value in self.values

    def expected(self) -> str:
        return "one of " + ", ".join(map(str, self.values))


@dataclass(frozen=True)
class Flag:
    """true or false."""

    optional: bool = False

    def accepts(self, value) -> bool:
        return isinstance(value, bool)

    def expected(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class Integers:
    """A non-empty list of integers >= ``low``."""

    low: int = 1
    optional: bool = False

    def accepts(self, value) -> bool:
        return (
            isinstance(value, Sequence)
            and not isinstance(value, str)
            and bool(value)
            and all(Integer(self.low).accepts(v) for v in value)
        )

    def expected(self) -> str:
        return f"a non-empty list of integers >= {self.low}"


@dataclass(frozen=True)
class Encoding:
    """The name of a text encoding Python knows (utf-8, cp1252, latin-1, ...)."""

    optional: bool = False

    def accepts(self, value) -> bool:
        try:
            return isinstance(value, str) and codecs.lookup(value) is not None
        except LookupError:
            return False

    def expected(self) -> str:
        return "a text encoding such as utf-8, cp1252 or latin-1"


@dataclass(frozen=True)
class URL:
    """A server URL with a scheme (``http://host:port/v1``)."""

    optional: bool = False

    def accepts(self, value) -> bool:
        return isinstance(value, str) and "://" in value

    def expected(self) -> str:
        return "a server URL such as http://127.0.0.1:8000/v1"


# MLflow's tracking stores: a folder path (no scheme), file:, a database (sqlite:///FILE, postgresql:, mysql:,
# mssql:, each also as DIALECT+DRIVER:), a server (http:, https:), Databricks.
STORE_SCHEMES = ("file", "sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks", "databricks-uc", "uc")


@dataclass(frozen=True)
class StoreURI:
    """An MLflow tracking store: a folder path, or a URI whose scheme MLflow knows (``sqlite:///FILE``, ...)."""

    optional: bool = False

    def accepts(self, value) -> bool:
        if not isinstance(value, str) or not value:
            return False
        scheme, colon, rest = value.partition(":")
        if not colon or len(scheme) == 1 or "/" in scheme:  # a path (C:\... on Windows)
            return True
        scheme = scheme.lower().split("+")[0]
        return scheme in STORE_SCHEMES and (scheme != "sqlite" or rest.startswith("///"))

    def expected(self) -> str:
        return (
            "a tracking store: a folder path, sqlite:///FILE.db, http(s)://HOST:PORT, or a URI with one of the "
            f"schemes {', '.join(s + ':' for s in STORE_SCHEMES)}"
        )


def _within(value, low, high) -> bool:
    return (low is None or value >= low) and (high is None or value <= high)


def _bounds(low, high) -> str:
    if low is not None and high is not None:
        return f" from {_number(low)} to {_number(high)}"
    if low is not None:
        return f" >= {_number(low)}"
    return f" <= {_number(high)}" if high is not None else ""


def _number(value) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


Rule = Integer | Number | Choice | Flag | Integers | Encoding | URL | StoreURI


def declared_rules(node, prefix: str) -> dict[str, Rule]:
    """The rules of a config ``node``'s ``_target_`` class (its ``rules``) keyed ``prefix + key``, and those of
    the nodes nested in it that name a class of their own (a hybrid retriever's ``bm25`` and ``dense``)."""
    from hydra.utils import get_class

    if not isinstance(node, (dict, DictConfig)):
        return {}
    found = {}
    target = node.get("_target_")
    if target:
        try:
            rules = getattr(get_class(str(target)), "rules", {})
        except (ImportError, AttributeError, ValueError):  # a bad _target_ is named where it is instantiated
            rules = {}
        found.update({f"{prefix}{key}": rule for key, rule in rules.items()})
    for key, child in node.items_ex(resolve=False) if isinstance(node, DictConfig) else node.items():
        if isinstance(child, (dict, DictConfig)):
            found.update(declared_rules(child, f"{prefix}{key}."))
    return found


_ABSENT = object()


def broken(cfg: DictConfig, rules: dict) -> list[str]:
    """One ``KEY must be EXPECTED, got VALUE`` line per setting of ``cfg`` that breaks its rule in ``rules`` (a
    dotted key -> a rule, or a function of ``cfg`` giving one or None); a key ``cfg`` lacks is not checked."""
    found = []
    for key, rule in rules.items():
        value = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False)
        if value is _ABSENT:
            continue
        rule = rule(cfg) if callable(rule) else rule
        if rule is None or _copies_another_key(cfg, key) or (value is None and rule.optional):
            continue
        if isinstance(value, ListConfig):
            value = OmegaConf.to_container(value, resolve=True)
        if not rule.accepts(value):
            expected = rule.expected() + (" or null" if rule.optional else "")
            found.append(f"{key} must be {expected}, got {'null' if value is None else repr(value)}")
    return found


def _copies_another_key(cfg: DictConfig, key: str) -> bool:
    """Whether ``key`` is an interpolation (``${trainer.batch_size}``): its source is checked instead."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    return isinstance(node, DictConfig) and OmegaConf.is_interpolation(node, leaf)
