"""Unit-aware number parsing for ESG answers: ``225.7 ktCO2e`` is 225,700 tCO2e.

Each quantity is normalised to the base unit of its family: ``tCO2e``, ``t`` (mass), ``MWh``
(energy; GJ = 1/3.6 MWh), ``m3`` (volume), ``m2`` (area), ``%`` or a currency code (no exchange
rates). An intensity (``kgCO2e/kWh``, ``GJ per t``) becomes ``<unit>/<unit or word>``.

Reading rules:

* A number is a whole token: digits joined by ``.`` or ``,`` are read as one number or not at all,
  never in part (``1.843,3`` is never 3, ``31.12.2023`` is no number).
* A comma separates thousands only before exactly three digits (``225,700``; Indian ``1,23,456``
  too); a decimal comma only after dots that group thousands (``1.843,3`` is 1843.3; ``1.843.000``
  is 1843000); ``12,5`` is no number.
* Digits glued to a letter are not numbers (``CO2``, ``FY2024``, ``M2 chip``); number words
  (``five``) are not read.
* Units are matched before scale words, as whole tokens, so ``m3``, ``MWh``, ``Mt`` and ``ML`` are
  units while a lone ``m``/``M`` is million, never metres (scale words, any case: ``thousand``,
  ``k``, ``lakh``, ``million``, ``mn``, ``m``, ``crore``, ``billion``, ``bn``, ``trillion``).
* ``Mt`` is a megatonne, ``MT``/``mt`` a metric tonne (EPA's ``MTCO2e``), ``MMT`` a million
  metric tonnes; ``tCO2`` counts as ``tCO2e``; ``¥`` is JPY; a currency may precede the number.
* A time denominator is dropped (``12 MWh per year`` is 12 MWh).
* In a row of figures, a ``%`` written apart after the last one and followed by a capitalised word
  begins the next row's label, not that figure's unit (``headcount 4210 4364 % Women``: 4364 has none).
* :func:`unit_labels` finds the units written on their own, as labels (``in tons``, ``(in %)``).
* A unit-like token after a number that no rule knows (mixed case or a digit: ``MMBtu``,
  ``tCH4``) is kept as ``unknown_unit``; plain words (``employees``) and acronyms (``ESG``) are not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_CO2E = r"(?i:co[2₂](?:-?e(?:q(?:uivalents?)?)?|[ -]eq|[ -]equivalents?)?|carbon dioxide(?: equivalents?)?)"
_MASS_PREFIXES = (
    ("kg", 1e-3), ("t", 1.0), ("MT", 1.0), ("mt", 1.0), ("kt", 1e3), ("Mt", 1e6), ("MMT", 1e6), ("Gt", 1e9),
)  # fmt: skip
_MASS_WORDS = (
    (r"(?i:(?:metric )?(?:tonnes?|tons?))", 1.0),
    (r"(?i:kilo(?:tonnes?|tons?))", 1e3),
    (r"(?i:mega(?:tonnes?|tons?))", 1e6),
    (r"(?i:kilograms?)", 1e-3),
)
_CURRENCIES = (
    (r"USD|US\$|\$|(?i:(?:US )?dollars?)", "USD"),
    (r"EUR|€|(?i:euros?)", "EUR"),
    (r"GBP|£", "GBP"),
    (r"INR|₹|Rs\.?|(?i:rupees?)", "INR"),
    (r"KRW|₩", "KRW"),
    (r"JPY|¥|(?i:yen)", "JPY"),
    (r"NGN|₦|(?i:naira)", "NGN"),
    (r"KES|KSh", "KES"),
    (r"CHF", "CHF"),
)


def _unit_table() -> tuple[tuple[re.Pattern, str, float], ...]:
    """(pattern, base unit, factor to the base unit); each pattern must end at a token boundary."""
    rows: list[tuple[str, str, float]] = [(r"%|％|(?i:per ?cent|pct)", "%", 1.0)]
    for prefix, factor in _MASS_PREFIXES:
        rows += [(prefix + r" ?" + _CO2E, "tCO2e", factor), (prefix, "t", factor)]
    for word, factor in _MASS_WORDS:
        rows += [(word + r" (?i:of )?" + _CO2E, "tCO2e", factor), (word, "t", factor)]
    for symbol, word, factor in (("k", "kilo", 1e-3), ("M", "mega", 1.0), ("G", "giga", 1e3), ("T", "tera", 1e6)):
        rows.append((rf"(?i:{symbol}wh|{word}watt[- ]hours?)", "MWh", factor))
    for symbol, word, factor in (("M", "mega", 1e-3), ("G", "giga", 1.0), ("T", "tera", 1e3), ("P", "peta", 1e6)):
        rows.append((rf"(?i:{symbol}J|{word}joules?)", "MWh", factor / 3.6))
    rows += [
        (r"m3|m³|(?i:cubic met(?:re|er)s?)", "m3", 1.0),
        (r"kL|kl|(?i:kilolit(?:re|er)s?)", "m3", 1.0),
        (r"ML|Ml|(?i:megalit(?:re|er)s?)", "m3", 1e3),
        (r"GL|(?i:gigalit(?:re|er)s?)", "m3", 1e6),
        (r"L|(?i:lit(?:re|er)s?)", "m3", 1e-3),
        (r"m2|m²|(?i:square met(?:re|er)s?)", "m2", 1.0),
        (r"km2|km²", "m2", 1e6),
        (r"ha|(?i:hectares?)", "m2", 1e4),
        (r"(?i:acres?)", "m2", 4046.8564224),
    ]
    rows += [(pattern, code, 1.0) for pattern, code in _CURRENCIES]
    return tuple((re.compile(rf"(?:{pattern})(?![^\W_])"), base, factor) for pattern, base, factor in rows)


_UNITS = _unit_table()
_PREFIX_CURRENCY = re.compile(r"(?<![^\W_])(?:" + "|".join(p for p, _ in _CURRENCIES) + r")[ \t\u00a0]?$")
_PREFIX_WINDOW = 16  # characters before a number searched for a currency (longest: "US dollars ")
_PREFIX_CODES = tuple((re.compile(rf"(?:{p})[ \t\u00a0]?$"), code) for p, code in _CURRENCIES)
_NUMBER = re.compile(
    r"(?<![\w.])(?<![0-9],)(?P<sign>[-+\u2212]?)"
    r"(?:(?P<eu>[0-9]{1,3}(?:\.[0-9]{3})+,[0-9]+|[0-9]{1,3}(?:\.[0-9]{3}){2,})"
    r"|(?P<int>[0-9]{1,2}(?:,[0-9]{2})+,[0-9]{3}|[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?P<frac>\.[0-9]+)?)"
    r"(?![0-9]|[.,][0-9])"  # the token ends here: no digit, nor a separator and a digit, follows
)
# Just before a number: another number of the same row, bare (``4210 `` in ``4210 4364 %``).
_BARE_BEFORE = re.compile(r"(?<![\w.,])[0-9](?:[0-9.,]*[0-9])?[ \t\u00a0]+$")
_LABEL_AFTER = re.compile(r"[ \t\u00a0]+[A-Z]")
_ROW_WINDOW = 40  # characters before a number searched for that bare one
_LABEL_START = re.compile(r"(?<![^\W_])(?=[^\W\d_]|[%％$€£₹₩¥₦])")  # where a word or a unit sign begins
_SCALES = {
    "thousand": 1e3, "k": 1e3, "lakh": 1e5, "lakhs": 1e5, "lac": 1e5, "lacs": 1e5,
    "million": 1e6, "mn": 1e6, "mio": 1e6, "m": 1e6, "crore": 1e7, "crores": 1e7, "cr": 1e7,
    "billion": 1e9, "bn": 1e9, "trillion": 1e12,
}  # fmt: skip
_SCALE = re.compile(r"(?i:" + "|".join(sorted(_SCALES, key=lambda w: (-len(w), w))) + r")(?![^\W_])\.?")
_SPACE = re.compile(r"[ \t\u00a0\u202f]*")
_PER = re.compile(r"[ \t]*/[ \t]*|[ \t]+per[ \t]+")
_WORD = re.compile(r"[^\W\d_][^\W_]*")
_PERIODS = ("year", "years", "yr", "annum", "a")


@dataclass(frozen=True)
class Quantity:
    """A number in its family's base unit: ``unit`` is that base unit (``tCO2e``, ``MWh``, ``%``,
    ``USD``, ``MWh/t``...) or None; ``unknown_unit`` is the unit-like token no rule knows; ``start``:
    where ``raw`` begins in the text read."""

    value: float
    unit: str | None
    raw: str
    unknown_unit: str | None = None
    start: int = field(default=0, compare=False)


def find_quantities(text: str) -> list[Quantity]:
    """Every number in ``text``, in order, with its scale and unit applied."""
    return [_quantity_at(text, match) for match in _NUMBER.finditer(text)]


def parse_quantity(text: str) -> Quantity | None:
    """The first number in ``text`` as a Quantity, or None when there is none."""
    match = _NUMBER.search(text)
    return _quantity_at(text, match) if match else None


def _quantity_at(text: str, match: re.Match) -> Quantity:
    if match["eu"]:
        value = float(match["eu"].replace(".", "").replace(",", "."))
    else:
        value = float(match["int"].replace(",", "") + (match["frac"] or ""))
    if match["sign"] in ("-", "\u2212"):
        value = -value
    start, end = match.start(), match.end()
    unit = _match_unit(text, _skip_space(text, end))
    if unit and _next_cells(text, start, end, unit):
        return Quantity(value, None, text[start:end], start=start)  # the unit labels the next cell
    if unit is None:
        scale = _SCALE.match(text, _skip_space(text, end))
        if scale:
            value *= _SCALES[scale.group().rstrip(".").lower()]
            end = scale.end()
            unit = _match_unit(text, _skip_space(text, end))
    if unit is None:
        prefix = _prefix_currency(text, start)
        if prefix:
            start -= len(prefix[1])
            unit = (prefix[0], 1.0, end)
    if unit is None:
        token = _WORD.match(text, _skip_space(text, end))
        if token and _looks_like_unit(token.group()):
            return Quantity(value, None, text[start : token.end()], token.group(), start)
        return Quantity(value, None, text[start:end], start=start)
    base, factor, end = _per_unit(text, *unit)
    return Quantity(value * factor, base, text[start:end], start=start)


def unit_labels(text: str, quantities: list[Quantity]) -> list[tuple[int, str, float]]:
    """(start, base unit, factor) of each known unit in ``text`` written as a word of its own, outside
    the ``quantities`` found in it (``in tons``, ``MWh`` in ``Energy MWh 280,903``)."""
    taken = [(q.start, q.start + len(q.raw)) for q in quantities]
    labels = []
    for word in _LABEL_START.finditer(text):
        pos = word.start()
        if any(a <= pos < b for a, b in taken):
            continue
        unit = _match_unit(text, pos)
        if unit:
            labels.append((pos, unit[0], unit[1]))
    return labels


def _next_cells(text: str, start: int, end: int, unit: tuple[str, float, int]) -> bool:
    """Whether ``unit`` (``%``), after the number at ``start:end``, begins the next table row's label:
    written apart from the number, followed by a capitalised word, the number after a bare one."""
    return (
        unit[0] == "%"
        and _skip_space(text, end) > end
        and _LABEL_AFTER.match(text, unit[2]) is not None
        and _BARE_BEFORE.search(text, max(0, start - _ROW_WINDOW), start) is not None
    )


def _per_unit(text: str, base: str, factor: float, end: int) -> tuple[str, float, int]:
    """Extend a unit by a ``/x`` or ``per x`` denominator (a unit or a word; a time period is dropped)."""
    per = _PER.match(text, end) if base != "%" else None
    if not per:
        return base, factor, end
    denominator = _match_unit(text, per.end())
    if denominator:
        return f"{base}/{denominator[0]}", factor / denominator[1], denominator[2]
    word = _WORD.match(text, per.end())
    if not word:
        return base, factor, end
    if word.group().lower() in _PERIODS:
        return base, factor, word.end()
    return f"{base}/{word.group().lower()}", factor, word.end()


def _skip_space(text: str, pos: int) -> int:
    return _SPACE.match(text, pos).end()


def _match_unit(text: str, pos: int) -> tuple[str, float, int] | None:
    """The longest known unit starting at ``pos`` (ties: the earlier table row) as (base, factor, end)."""
    best = None
    for pattern, base, factor in _UNITS:
        found = pattern.match(text, pos)
        if found and (best is None or found.end() > best[2]):
            best = (base, factor, found.end())
    return best


def _prefix_currency(text: str, start: int) -> tuple[str, str] | None:
    """(currency code, matched text) for a currency sign or code written just before ``start``."""
    found = _PREFIX_CURRENCY.search(text, max(0, start - _PREFIX_WINDOW), start)
    if not found:
        return None
    for pattern, code in _PREFIX_CODES:
        if pattern.fullmatch(found.group()):
            return code, found.group()
    return None


def _looks_like_unit(token: str) -> bool:
    """A capital after the first letter or a digit marks a unit symbol (``MMBtu``, ``tCH4``); an
    all-capitals word is taken for an acronym (``2024 ESG report``)."""
    return not token.isupper() and any(c.isupper() or c.isdigit() for c in token[1:])
