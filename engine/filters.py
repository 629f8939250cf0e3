"""Typed filter expressions over a corpus's declared fields, and their dict/JSON form.

Python form — small frozen values, combined with ``&`` (AND)::

    Eq("author", "Walter") & In("tag", ["war", "home"]) & Range("year", gte=1940, lt=1946)

Dict/JSON form (what the CLI and MCP pass) — field name to condition, several keys AND-ed;
a list of such dicts is AND-ed too::

    {"author": "Walter", "tag": ["war", "home"], "year": {"gte": 1940, "lt": 1946}}
    {"sent": {"gte": "1942-01-01", "lte": "1942-12-31"}}        # a date field

A scalar means equality, a list means "any of", a dict holds operators ``eq``, ``in``,
``gt``, ``gte``, ``lt``, ``lte``. A multi-valued field matches when any value does.

Validation happens against the corpus's declared fields (``compile_filter``): an unknown
field, a value of the wrong type or a range on a keyword field is an ``InvalidArgument``
naming the field. Dates are ``datetime.date`` or ISO ``YYYY-MM-DD`` strings.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from engine.config import FieldType
from engine.errors import InvalidArgument
from engine.fields import INT64_MAX, INT64_MIN, described, encode_value, is_int64, parse_day
from sparse import FieldFilter, RangeFilter, TermsFilter
from sparse.contracts import MAX_FIELD_NAME_LENGTH

FilterValue: TypeAlias = str | int | dt.date
"""A value in a filter: keyword string, integer, or date (``date`` or ISO string)."""

MAX_FILTER_CONDITIONS = 32
"""A filter holds at most this many conditions."""

MAX_FILTER_VALUES = 1_024
"""A filter holds at most this many values in all (``In`` lists included)."""

MAX_FILTER_JSON_CHARS = 65_536

_RANGE_OPS = ("gt", "gte", "lt", "lte")
_OPS = ("eq", "in", *_RANGE_OPS)
_SHOWN_OPS, _SHOWN_CHARS = 5, 40  # an error quotes this much of a caller's unknown operators


class FilterBase:
    """The base of ``Eq``, ``In``, ``Range`` and ``And``: ``a & b`` is ``And(a, b)``.

    Only those four are filters (anything else is refused at run time); this class
    exists so that a type checker has a name for a list mixing them — mypy infers
    ``[Eq(...), Range(...)]`` as ``list[FilterBase]`` — and every parameter that takes
    a filter takes it. Annotate your own code with ``Filter``; do not subclass this."""

    __slots__ = ()

    def __and__(self, other: FilterBase) -> And:
        return And(self, other)


@dataclass(frozen=True, slots=True)
class Eq(FilterBase):
    """``field`` equals ``value``."""

    field: str
    value: FilterValue


@dataclass(frozen=True, slots=True, init=False)
class In(FilterBase):
    """``field`` equals one of ``values`` (empty: matches nothing)."""

    field: str
    values: tuple[FilterValue, ...]

    def __init__(self, field: str, values: Iterable[FilterValue]) -> None:
        if isinstance(values, str | bytes):
            shown = repr(field)[:_SHOWN_CHARS]  # not yet checked against any length
            raise InvalidArgument(f"filter on {shown}: In takes a list of values, not a string")
        object.__setattr__(self, "field", field)
        object.__setattr__(self, "values", tuple(values))


@dataclass(frozen=True, slots=True)
class Range(FilterBase):
    """``field`` lies within the given bounds (integer and date fields)."""

    field: str
    gte: FilterValue | None = None
    gt: FilterValue | None = None
    lte: FilterValue | None = None
    lt: FilterValue | None = None


@dataclass(frozen=True, slots=True, init=False)
class And(FilterBase):
    """Every clause holds."""

    clauses: tuple[Eq | In | Range, ...]

    def __init__(self, *clauses: FilterBase) -> None:
        flat: list[Eq | In | Range] = []
        for clause in clauses:
            if isinstance(clause, And):
                flat.extend(clause.clauses)
            elif isinstance(clause, Eq | In | Range):
                flat.append(clause)
            else:
                raise InvalidArgument(f"And takes filters, got {type(clause).__name__}")
        object.__setattr__(self, "clauses", tuple(flat))


Filter: TypeAlias = Eq | In | Range | And
"""A filter expression."""

FilterInput: TypeAlias = FilterBase | Mapping[str, object] | str | list[Any] | tuple[Any, ...]
"""Every form a search's ``filters`` takes (``parse_filter``): a filter expression, a dict
of field conditions, their JSON text, or a list or tuple of any of these (AND-ed). A
list's items are checked when the search runs, as a dict's conditions are: a list is
invariant, so ``list[Filter]`` would refuse a ``list[Eq]`` or a list of dicts."""

CompiledFilter: TypeAlias = tuple[FieldFilter, ...]
"""A validated filter as the search arms receive it (AND-ed, hashable, cacheable)."""


# -- parsing the dict / JSON form --------------------------------------------------------


MAX_FILTER_DEPTH = 32
"""Lists of filters nest at most this deep (a list in a list is an AND of ANDs: depth
adds nothing a flat list cannot say, and unbounded depth would exhaust the stack)."""


def parse_filter(value: object, _depth: int = 0) -> Filter | None:
    """A filter from its Python, dict or JSON-text form (``None``: no filter)."""
    if _depth > MAX_FILTER_DEPTH:
        raise InvalidArgument(f"filter lists nest deeper than {MAX_FILTER_DEPTH}")
    if value is None or isinstance(value, Eq | In | Range | And):
        return value
    if isinstance(value, str):
        if len(value) > MAX_FILTER_JSON_CHARS:
            raise InvalidArgument(f"filter JSON is longer than {MAX_FILTER_JSON_CHARS} characters")
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as exc:
            # ValueError: JSONDecodeError, and an integer of more digits than Python
            # converts (4,300), which json.loads refuses with a plain ValueError.
            raise InvalidArgument(f"filter is not valid JSON: {exc}") from None
        if value is None:
            return None
    if isinstance(value, Mapping):
        clauses = [c for name, spec in value.items() for c in _field_conditions(name, spec)]
    elif isinstance(value, list | tuple):
        clauses = []
        for item in value:
            parsed = parse_filter(item, _depth + 1)
            if parsed is None:
                raise InvalidArgument("a filter list holds filters, not null")
            clauses.append(parsed)
    else:
        raise InvalidArgument(
            f"filters must be a dict of field conditions (or a list of them), "
            f"got {type(value).__name__}"
        )
    if len(clauses) == 1 and not isinstance(clauses[0], And):
        return clauses[0]
    return And(*clauses)


def _checked_name(name: object) -> str:
    """``name``, once it could be a field's: a name no declared field can have is refused
    before any message quotes it (a caller's two-megabyte key would come back whole)."""
    if not isinstance(name, str):
        raise InvalidArgument(f"filter field names must be strings, got {type(name).__name__}")
    if len(name) > MAX_FIELD_NAME_LENGTH:
        raise InvalidArgument(
            f"filter field name of {len(name):,} characters; a field name has at most "
            f"{MAX_FIELD_NAME_LENGTH}"
        )
    return name


def _field_conditions(given: object, spec: object) -> list[Filter]:
    name = _checked_name(given)
    if isinstance(spec, Mapping):
        unknown = sorted(repr(k)[:_SHOWN_CHARS] for k in spec if k not in _OPS)
        if not spec:
            raise InvalidArgument(f"filter on {name!r}: an empty condition; give {list(_OPS)}")
        if unknown:
            raise InvalidArgument(
                f"filter on {name!r}: unknown operator(s) {', '.join(unknown[:_SHOWN_OPS])}"
                f"{' …' if len(unknown) > _SHOWN_OPS else ''}; valid: {list(_OPS)}"
            )
        out: list[Filter] = []
        if "eq" in spec:
            out.append(Eq(name, _scalar(name, spec["eq"])))
        if "in" in spec:
            out.append(_in(name, spec["in"]))
        bounds = {op: _scalar(name, spec[op]) for op in _RANGE_OPS if op in spec}
        if bounds:
            out.append(Range(name, **bounds))
        return out
    if isinstance(spec, list | tuple):
        return [_in(name, spec)]
    return [Eq(name, _scalar(name, spec))]


def _in(name: str, values: object) -> In:
    if not isinstance(values, list | tuple):
        raise InvalidArgument(f"filter on {name!r}: 'in' takes a list of values")
    return In(name, [_scalar(name, v) for v in values])


def _scalar(name: str, value: object) -> FilterValue:
    if isinstance(value, bool) or not isinstance(value, str | int | dt.date):
        raise InvalidArgument(
            f"filter on {name!r}: values must be strings, integers or dates, got {described(value)}"
        )
    return value


# -- validation against the declared fields -------------------------------------------------


def compile_filter(expr: object, declared: Mapping[str, FieldType]) -> CompiledFilter:
    """Validate ``expr`` (any accepted form) against ``declared``; ``()``: no filter."""
    parsed = parse_filter(expr)
    if parsed is None:
        return ()
    clauses = parsed.clauses if isinstance(parsed, And) else (parsed,)
    if len(clauses) > MAX_FILTER_CONDITIONS:
        raise InvalidArgument(
            f"{len(clauses)} filter conditions; the cap is {MAX_FILTER_CONDITIONS}"
        )
    total = sum(len(c.values) if isinstance(c, In) else 1 for c in clauses)
    if total > MAX_FILTER_VALUES:
        raise InvalidArgument(f"{total} filter values; the cap is {MAX_FILTER_VALUES}")
    return tuple(_compile_one(c, declared) for c in clauses)


def _kind_of(field: object, declared: Mapping[str, FieldType]) -> FieldType:
    kind = declared.get(_checked_name(field))
    if kind is None:
        raise InvalidArgument(
            f"unknown filter field {field!r}; declared fields: {sorted(declared) or 'none'}"
        )
    return kind


def _value(field: str, kind: FieldType, value: object) -> str | int:
    if kind is FieldType.DATE and isinstance(value, str):
        try:
            value = parse_day(value)
        except ValueError:
            raise InvalidArgument(
                f"filter on {field!r}: a date field takes dates as YYYY-MM-DD"
            ) from None
    try:
        return encode_value(field, kind, value)
    except InvalidArgument as exc:
        raise InvalidArgument(f"filter {exc}") from None


def _compile_one(clause: Eq | In | Range, declared: Mapping[str, FieldType]) -> FieldFilter:
    kind = _kind_of(clause.field, declared)
    field = clause.field
    if isinstance(clause, Eq):
        return TermsFilter(field, (_value(field, kind, clause.value),))
    if isinstance(clause, In):
        values = tuple(dict.fromkeys(_value(field, kind, v) for v in clause.values))
        return TermsFilter(field, values)
    if kind is FieldType.KEYWORD:
        raise InvalidArgument(
            f"filter on {field!r}: a keyword field has no ranges; give a value or a list "
            "of values (eq / in; Eq / In in Python)"
        )
    if clause.gt is not None and clause.gte is not None:
        raise InvalidArgument(f"filter on {field!r}: give gt or gte, not both")
    if clause.lt is not None and clause.lte is not None:
        raise InvalidArgument(f"filter on {field!r}: give lt or lte, not both")
    low = high = None
    if clause.gte is not None:
        low = _value(field, kind, clause.gte)
    if clause.gt is not None:
        low = _bump(_value(field, kind, clause.gt), +1)
    if clause.lte is not None:
        high = _value(field, kind, clause.lte)
    if clause.lt is not None:
        high = _bump(_value(field, kind, clause.lt), -1)
    if low is None and high is None:
        raise InvalidArgument(f"filter on {field!r}: a range needs at least one bound")
    assert not isinstance(low, str) and not isinstance(high, str)
    if (low is not None and not is_int64(low)) or (high is not None and not is_int64(high)):
        return RangeFilter(field, 1, 0)  # gt INT64_MAX / lt INT64_MIN: nothing matches
    return RangeFilter(field, low, high)


def _bump(value: str | int, step: int) -> int:
    assert isinstance(value, int)
    return min(max(value + step, INT64_MIN - 1), INT64_MAX + 1)


# -- the dict form of a filter (for interpretations, the CLI and MCP) ------------------------


def filter_to_json(expr: Filter | None) -> list[dict[str, Any]]:
    """The JSON-able list form of ``expr`` (``parse_filter`` reads it back)."""
    if expr is None:
        return []
    clauses: Sequence[Eq | In | Range] = expr.clauses if isinstance(expr, And) else (expr,)
    out: list[dict[str, Any]] = []
    for clause in clauses:
        if isinstance(clause, Eq):
            out.append({clause.field: _jsonable(clause.value)})
        elif isinstance(clause, In):
            out.append({clause.field: {"in": [_jsonable(v) for v in clause.values]}})
        else:
            bounds = {
                op: _jsonable(getattr(clause, op))
                for op in _RANGE_OPS
                if getattr(clause, op) is not None
            }
            out.append({clause.field: bounds})
    return out


def _jsonable(value: FilterValue) -> str | int:
    return value.isoformat() if isinstance(value, dt.date) else value
