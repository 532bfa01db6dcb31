"""Units of an answer, read and converted with pint.

    unit = parse_unit("km/h")            # 'kilometer / hour', or None when it is not a unit
    plans = conversion("minute", "hour") # ((1/60, 0, False),): gold value = pred value * 1/60 + 0
    conversion("centimeter", "centimeter ** 2")   # (): different dimensions, never equal

pint knows far more than answers use, and many of its names are English words or
single letters that an answer means otherwise (`in`, `at`, `a`, `e`, `pi`, `k`):
such a name is a unit here only when written out (`inch`, `year`), and only the units of
CURATED count at all (`points`, `cats`, `units` are words). Currencies are
units of their own dimension each (no exchange rates); Chinese unit names are read
through a table. The registry loads once per process (under a second), and only
when an answer has something that could be a unit.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from typing import Any

Plan = tuple["Fraction | int", "Fraction | int", bool]
"""(mul, add, inexact): the gold-unit value is pred * mul + add; inexact when pint's factor is a
rounded float (1/3 of a yard per foot), so the comparison takes the decimal tolerance."""

_DEFINITIONS = [
    "dollar = [currency_usd] = USD = usd = buck",
    "cent = 0.01 dollar = cents",
    "yuan = [currency_cny] = CNY = RMB = rmb",
    "jiao = 0.1 yuan",
    "euro = [currency_eur] = EUR = eur",
    "pound_sterling = [currency_gbp] = GBP = gbp",
    "jin = 0.5 kilogram",
    "mu = 10000 / 15 meter ** 2",
]
# names pint has that answers mean otherwise: `6 in total`, `12 at once`, `2 pi`, `5 pcs` (pieces)
_DENY = {
    "in",
    "at",
    "a",
    "e",
    "E",
    "k",
    "pi",
    "pcs",
    "pm",
    "am",
    "M",
    "G",
    "c",
    "b",
    "B",
    "u",
    "P",
    "cd",
    "kat",
    "point",
    "mil",
    "dozen",
    "gross",
    "pct",
    "ppm",
    "ppb",
}
# a one-letter unit must be one of these; glued to its number (`5m`), one of the second set
_ONE_LETTER = {"m", "g", "s", "h", "L", "l", "t", "K", "N", "J", "W", "V", "A"}
_ONE_LETTER_GLUED = {"m", "g", "s", "h", "L"}
_CJK_UNITS = {  # longest first when read
    "平方千米": "km^2",
    "平方公里": "km^2",
    "平方厘米": "cm^2",
    "平方分米": "dm^2",
    "平方毫米": "mm^2",
    "平方米": "m^2",
    "立方厘米": "cm^3",
    "立方分米": "dm^3",
    "立方米": "m^3",
    "千米每小时": "km/h",
    "千米/时": "km/h",
    "米每秒": "m/s",
    "米/秒": "m/s",
    "千米": "km",
    "公里": "km",
    "分米": "dm",
    "厘米": "cm",
    "毫米": "mm",
    "米": "m",
    "千克": "kg",
    "公斤": "kg",
    "毫克": "mg",
    "克": "g",
    "吨": "t",
    "斤": "jin",
    "公顷": "hectare",
    "亩": "mu",
    "毫升": "mL",
    "升": "L",
    "秒": "s",
    "分钟": "min",
    "小时": "h",
    "天": "day",
    "周": "week",
    "星期": "week",
    "年": "year",
    "元": "yuan",
    "块钱": "yuan",
    "角": "jiao",
    "度": "degree",
    "摄氏度": "degC",
}
_CJK_UNIT_RE = re.compile("|".join(sorted(map(re.escape, _CJK_UNITS), key=len, reverse=True)))
_SYMBOLS = {  # written as pint's canonical names, so a percent needs no registry
    "$": "dollar",
    "\\$": "dollar",
    "US$": "dollar",
    "¥": "yuan",
    "￥": "yuan",
    "€": "euro",
    "£": "pound_sterling",
    "%": "percent",
    "\\%": "percent",
    "percent": "percent",
    "per cent": "percent",
    "pct": "percent",
    "percentage": "percent",
    "‰": "permille",
    "°": "degree",
    "°C": "degree_Celsius",
    "°F": "degree_Fahrenheit",
    "℃": "degree_Celsius",
    "℉": "degree_Fahrenheit",
}
_UNIT_TEXT_RE = re.compile(r"[A-Za-zµμΩ°][A-Za-z0-9µμΩ°_ ^/*·.()\-]{0,47}")
_ATOM_RE = re.compile(r"[A-Za-zµμΩ°_]+")
_PREFIXED = {
    f"{prefix}{base}"
    for prefix in ("", "kilo", "centi", "milli", "micro", "nano", "deci", "mega", "giga")
    for base in (
        "meter",
        "gram",
        "second",
        "liter",
        "joule",
        "watt",
        "volt",
        "ampere",
        "pascal",
        "hertz",
        "newton",
        "mole",
        "calorie",
        "byte",
        "watt_hour",
    )
}
CURATED = frozenset(
    _PREFIXED
    | {
        "minute",
        "hour",
        "day",
        "week",
        "month",
        "year",
        "decade",
        "century",
        "metric_ton",
        "tonne",
        "inch",
        "foot",
        "yard",
        "mile",
        "nautical_mile",
        "light_year",
        "astronomical_unit",
        "pound",
        "ounce",
        "ton",
        "short_ton",
        "long_ton",
        "stone",
        "gallon",
        "quart",
        "pint",
        "cup",
        "teaspoon",
        "tablespoon",
        "fluid_ounce",
        "acre",
        "hectare",
        "are",
        "degree",
        "radian",
        "revolution",
        "turn",
        "kelvin",
        "degree_Celsius",
        "degree_Fahrenheit",
        "mile_per_hour",
        "kilometer_per_hour",
        "knot",
        "horsepower",
        "atmosphere",
        "bar",
        "bit",
        "percent",
        "permille",
        "dollar",
        "cent",
        "yuan",
        "jiao",
        "euro",
        "pound_sterling",
        "jin",
        "mu",
    }
)
"""The units an answer may carry: physical quantities a problem measures, currencies and percent, by
pint's canonical names (a prefixed name counts as one). Any other name pint would read (`point`,
`centitechnical_atmosphere` for `cats`, `micronit` for `units`, `tonne_of_oil_equivalent` for `toes`)
is a word, left to the word rule (rlvr.rewards.answers)."""
IDENTITY: Plan = (1, 0, False)
"""The plan of two values in the same unit (plain ints: the common case compares fast)."""
PERCENT_LIKE = {"percent", "permille"}
"""Units that are plain numbers scaled (20% is 0.2): a bare number against them has two readings."""


@functools.lru_cache(maxsize=1)
def registry() -> Any:
    import pint

    ureg = pint.UnitRegistry(cache_folder=None)
    for line in _DEFINITIONS:
        ureg.define(line)
    return ureg


def cjk_unit(text: str) -> str | None:
    """The pint spelling of a Chinese unit name written alone (`千克` -> `kg`), else None."""
    m = _CJK_UNIT_RE.fullmatch(text)
    return _CJK_UNITS[m.group()] if m else None


@functools.lru_cache(maxsize=4096)
def parse_unit(text: str, spaced: bool = True) -> str | None:
    """The canonical unit `text` names (`km/h` -> 'kilometer / hour'), or None when it is
    not a unit here. `spaced`: the unit stood apart from its number (or inside \\text{});
    glued to a number only m, g, s, h and L are one-letter units (`5t` is 5t)."""
    text = text.strip()
    if text in _SYMBOLS:
        return _SYMBOLS[text]
    text = text.replace("·", "*").replace("²", "^2").replace("³", "^3")
    if not _UNIT_TEXT_RE.fullmatch(text):
        return None
    atoms = _ATOM_RE.findall(text)
    if not atoms or any(a in _DENY for a in atoms):
        return None
    if any(len(a) == 1 and a not in (_ONE_LETTER if spaced else _ONE_LETTER_GLUED) for a in atoms):
        return None
    try:
        unit = registry().parse_units(text)
    except Exception:  # pint raises many kinds for text that is not a unit
        return None
    if not all(name in CURATED for name in unit._units):
        return None  # `points`, `cats` (centi-technical-atmospheres), `units`: words, not units
    return str(unit)


@functools.lru_cache(maxsize=4096)
def names_a_unit(text: str) -> bool:
    """Whether pint's whole registry reads `text` as a unit (curated or not): such words are never a
    mere label (`5 \\text{ leagues}` says more than 5)."""
    try:
        registry().parse_units(text.strip())
    except Exception:  # pint raises many kinds for text that is not a unit
        return False
    return True


def _exact(x: float) -> tuple[Fraction, bool]:
    """A pint factor as a Fraction, and whether it is inexact (more digits than a defined factor has)."""
    r = repr(float(x))
    digits = len(r.split("e")[0].replace("-", "").replace(".", "").strip("0"))
    return Fraction(r), digits > 12


_KNOWN: dict[tuple[str, str], tuple[Plan, ...]] = {}
# kelvin = (value + offset) * scale, exactly as the SI defines them (pint's floats round 5/9)
_TEMPERATURE = {
    "kelvin": (Fraction(1), Fraction(0)),
    "degree_Celsius": (Fraction(1), Fraction(27315, 100)),
    "degree_Fahrenheit": (Fraction(5, 9), Fraction(45967, 100)),
    "degree_Rankine": (Fraction(5, 9), Fraction(0)),
}


def preload(table: dict[tuple[str, str], tuple[Plan, ...]]) -> None:
    """Conversions computed elsewhere (the verification workers get them with the task, so
    they never load the registry)."""
    _KNOWN.update(table)


def _base_factor(ureg: Any, unit: Any) -> tuple[Fraction, bool]:
    """The factor to SI base units, exact: each unit's own factor is a short decimal in pint's
    definitions (foot 0.3048 m, hour 3600 s), so their product is exact where a float ratio is not
    (a foot is exactly 1/3 yard)."""
    total, inexact = Fraction(1), False
    for name, exp in unit._units.items():
        factor, _ = ureg.get_base_units(name)
        value, rounded = _exact(factor)
        if float(exp) != int(exp):
            return _exact(float(value) ** float(exp))[0], True
        total *= value ** int(exp)
        inexact = inexact or rounded
    return total, inexact


@functools.lru_cache(maxsize=4096)
def conversion(pred: str, gold: str) -> tuple[Plan, ...]:
    """How a value in unit `pred` reads in unit `gold`: one Plan, or () across dimensions."""
    if pred == gold:
        return (IDENTITY,)
    if (pred, gold) in _KNOWN:
        return _KNOWN[pred, gold]
    if pred in _TEMPERATURE or gold in _TEMPERATURE:
        if pred not in _TEMPERATURE or gold not in _TEMPERATURE:
            return ()
        (sp, op), (sg, og) = _TEMPERATURE[pred], _TEMPERATURE[gold]
        return ((sp / sg, op * sp / sg - og, False),)
    ureg = registry()
    try:
        pu, gu = ureg.Unit(pred), ureg.Unit(gold)
        if ureg.get_dimensionality(pu) != ureg.get_dimensionality(gu):
            return ()
        (fp, ip), (fg, ig) = _base_factor(ureg, pu), _base_factor(ureg, gu)
    except Exception:  # pint raises many kinds for units it cannot relate
        return ()
    return ((fp / fg, Fraction(0), ip or ig),)


def plans(gold: str | None, pred: str | None) -> tuple[Plan, ...]:
    """The readings under which a pred value compares with a gold value, by their units.

    - same unit, or neither has one: as written;
    - both have units: pred converted into the gold's unit; none across dimensions;
    - a bare pred against a gold with a unit: the pred is in the gold's unit (the question
      named it); against a percentage also as a plain number (`0.2` for `20%`);
    - a pred with a unit against a bare gold: the number as written; a percentage also as its
      value (`25%` for a gold `25`, the MATH convention, or `0.25`).
    """
    one = IDENTITY
    if gold == pred:
        return (one,)
    if gold is not None and pred is not None:
        return conversion(pred, gold)
    if gold is not None:  # bare pred
        return (
            (one, (Fraction(100) if gold == "percent" else Fraction(1000), Fraction(0), False))
            if gold in PERCENT_LIKE
            else (one,)
        )
    assert pred is not None
    if pred in PERCENT_LIKE:
        value = (Fraction(1, 100) if pred == "percent" else Fraction(1, 1000), Fraction(0), False)
        return (one, value) if pred == "percent" else (value,)  # as written: MATH's percent only
    return (one,)
