"""Filter expressions: Python and dict/JSON forms, validation against declared fields."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import CorpusConfig, Document, InvalidArgument
from engine.config import FieldType
from engine.documents import validate_document
from engine.fields import date_to_days, encode_fields
from engine.filters import (
    MAX_FILTER_CONDITIONS,
    MAX_FILTER_VALUES,
    And,
    Eq,
    In,
    Range,
    compile_filter,
    filter_to_json,
    parse_filter,
)
from sparse import RangeFilter, TermsFilter

DECLARED = {
    "author": FieldType.KEYWORD,
    "year": FieldType.INTEGER,
    "sent": FieldType.DATE,
    "tag": FieldType.KEYWORD,
}


def test_python_form_combines_with_and() -> None:
    expr = Eq("author", "Walter") & In("tag", ["war", "home"]) & Range("year", gte=1940, lt=1946)
    assert isinstance(expr, And)
    assert [type(c) for c in expr.clauses] == [Eq, In, Range]
    assert compile_filter(expr, DECLARED) == (
        TermsFilter("author", ("Walter",)),
        TermsFilter("tag", ("war", "home")),
        RangeFilter("year", 1940, 1945),
    )


def test_dict_form_equals_python_form() -> None:
    as_dict = {"author": "Walter", "tag": ["war", "home"], "year": {"gte": 1940, "lt": 1946}}
    python = Eq("author", "Walter") & In("tag", ("war", "home")) & Range("year", gte=1940, lt=1946)
    assert parse_filter(as_dict) == python
    assert parse_filter(json.dumps(as_dict)) == python
    assert compile_filter(as_dict, DECLARED) == compile_filter(python, DECLARED)


def test_operators_in_the_dict_form() -> None:
    expr = parse_filter(
        {"author": {"eq": "Emma"}, "tag": {"in": ["war"]}, "year": {"gt": 1, "lte": 9}}
    )
    assert compile_filter(expr, DECLARED) == (
        TermsFilter("author", ("Emma",)),
        TermsFilter("tag", ("war",)),
        RangeFilter("year", 2, 9),
    )
    assert parse_filter([{"year": {"gte": 1}}, {"year": {"lte": 5}}]) == And(
        Range("year", gte=1), Range("year", lte=5)
    )
    assert parse_filter(None) is None and parse_filter("null") is None
    assert compile_filter(None, DECLARED) == ()


def test_dates_as_date_or_iso_string() -> None:
    d = dt.date(1942, 5, 1)
    want = (RangeFilter("sent", date_to_days(d) + 1, date_to_days(dt.date(1942, 12, 31))),)
    assert compile_filter(Range("sent", gt=d, lte="1942-12-31"), DECLARED) == want
    assert compile_filter({"sent": {"gt": "1942-05-01", "lte": "1942-12-31"}}, DECLARED) == want
    assert compile_filter(Eq("sent", d), DECLARED) == (TermsFilter("sent", (date_to_days(d),)),)


def test_round_trip_through_json() -> None:
    expr = (
        Eq("author", "W")
        & In("tag", ["a"])
        & Range("sent", gte=dt.date(1942, 1, 1), lt=dt.date(1943, 1, 1))
    )
    text = json.dumps(filter_to_json(expr))
    assert compile_filter(text, DECLARED) == compile_filter(expr, DECLARED)
    assert filter_to_json(None) == []


@pytest.mark.parametrize(
    ("expr", "field"),
    [
        (Eq("colour", "red"), "colour"),
        ({"colour": "red"}, "colour"),
        (Eq("year", "1942"), "year"),
        (Eq("year", True), "year"),
        ({"year": 1.5}, "year"),
        ({"year": None}, "year"),
        (Eq("author", 7), "author"),
        (Eq("author", ""), "author"),
        (Eq("author", "x" * 257), "author"),
        (Range("author", gte="a"), "author"),
        (Range("year"), "year"),
        (Range("year", gt=1, gte=2), "year"),
        (Range("year", lt=1, lte=2), "year"),
        (Eq("sent", "1942-13-01"), "sent"),
        (Eq("sent", dt.datetime(1942, 1, 1)), "sent"),
        (Eq("sent", 1942), "sent"),
        ({"year": {"between": [1, 2]}}, "year"),
        ({"year": {}}, "year"),
        ({"tag": {"in": "war"}}, "tag"),
    ],
)
def test_validation_errors_name_the_field(expr: object, field: str) -> None:
    with pytest.raises(InvalidArgument, match=repr(field)):
        compile_filter(expr, DECLARED)


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ({"sent": 19430201}, "got an integer"),
        ({"sent": 19430201}, "YYYY-MM-DD"),
        ({"year": 2**70}, "got an integer outside the 64-bit range"),
        ({"year": "1943"}, "got a string"),
        ({"year": 1.5}, "got a number with a fraction"),
        ({"author": {"gte": "A"}}, "give a value or a list of values (eq / in"),
        ({"year": {}}, "an empty condition"),
    ],
)
def test_refusals_speak_json_as_well_as_python(expr: object, says: str) -> None:
    """The messages reach HTTP and CLI callers: no Python type or class names."""
    with pytest.raises(InvalidArgument, match=re.escape(says)) as refused:
        compile_filter(expr, DECLARED)
    assert not re.search(r"got (int|str|float|date|datetime)\b|\bEq or In\b", str(refused.value))


@pytest.mark.parametrize("bad", ["[", "42", 42, {1: "x"}, [None], object()])
def test_malformed_expressions_are_invalid(bad: object) -> None:
    with pytest.raises(InvalidArgument):
        compile_filter(bad, DECLARED)
    assert issubclass(InvalidArgument, ValueError)


def test_caps_on_conditions_and_values() -> None:
    many = And(*[Eq("year", i) for i in range(MAX_FILTER_CONDITIONS + 1)])
    with pytest.raises(InvalidArgument, match="conditions"):
        compile_filter(many, DECLARED)
    with pytest.raises(InvalidArgument, match="values"):
        compile_filter(In("year", range(MAX_FILTER_VALUES + 1)), DECLARED)
    with pytest.raises(InvalidArgument):
        In("tag", "war")  # a bare string is not a list of values


@pytest.mark.parametrize(
    "expr",
    [
        {"f" * 2_000_000: "x"},
        Eq("g" * 2_000_000, "x"),
        {"author": {"x" * 2_000_000: 1}},
        {"author": {f"op{i:07}": 1 for i in range(20_000)}},
        lambda: In("f" * 2_000_000, "abc"),  # refused as it is built
    ],
)
def test_errors_quote_a_bounded_part_of_what_the_caller_sent(expr: object) -> None:
    """Regression: an unknown field name or operator came back whole in the message
    (two megabytes from the Python API and MCP, whose filters have no body cap)."""
    with pytest.raises(InvalidArgument) as refused:
        compile_filter(expr() if callable(expr) else expr, DECLARED)
    assert len(str(refused.value)) < 400


def test_extreme_bounds_match_nothing_instead_of_overflowing() -> None:
    (cond,) = compile_filter(Range("year", gt=2**63 - 1), DECLARED)
    assert isinstance(cond, RangeFilter) and cond.low is not None and cond.high is not None
    assert cond.low > cond.high
    with pytest.raises(InvalidArgument, match="year"):
        compile_filter(Eq("year", 2**63), DECLARED)


@given(
    low=st.integers(-(2**63), 2**63 - 1),
    high=st.integers(-(2**63), 2**63 - 1),
)
def test_exclusive_bounds_are_the_inclusive_neighbours(low: int, high: int) -> None:
    (cond,) = compile_filter(Range("year", gt=low, lt=high), DECLARED)
    assert isinstance(cond, RangeFilter)
    if low < 2**63 - 1 and high > -(2**63):
        assert (cond.low, cond.high) == (low + 1, high - 1)


# -- document values ------------------------------------------------------------------------


def test_document_fields_are_encoded_sorted_and_deduplicated() -> None:
    doc = Document(
        id="a",
        fields={"tag": ["war", "home", "war"], "year": 1942, "sent": dt.date(1970, 1, 2)},
    )
    assert encode_fields(doc.id, doc.fields, DECLARED) == (
        ("sent", 1),
        ("tag", "home"),
        ("tag", "war"),
        ("year", 1942),
    )


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"colour": "red"}, "colour"),
        ({"year": "1942"}, "year"),
        ({"year": [1, "2"]}, "year"),
        ({"sent": "1942-01-01"}, "sent"),
        ({"tag": []}, "tag"),
        ({"tag": ["x"] * 65}, "tag"),
        ({"author": "a\x00b"}, "author"),
        ({"author": {"nested": 1}}, "author"),
    ],
)
def test_wrong_document_values_name_document_and_field(
    fields: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidArgument, match=rf"document a: .*{field!r}"):
        encode_fields("a", fields, DECLARED)


def test_validate_document_copies_the_callers_mapping() -> None:
    mine = {"year": 1942}
    doc = validate_document(Document(id="a", fields=mine))
    mine["year"] = 1999
    assert doc.fields["year"] == 1942
    with pytest.raises(TypeError):
        doc.fields["year"] = 1  # type: ignore[index]
    assert hash(doc) == hash(Document(id="a"))  # fields never make a document unhashable
    with pytest.raises(InvalidArgument, match="mapping"):
        validate_document(Document(id="a", fields=[("year", 1)]))  # type: ignore[arg-type]


def test_config_declares_fields_with_a_name_grammar() -> None:
    raw: Any = {"author": "keyword", "sent": "date"}  # strings, as from JSON
    config = CorpusConfig(name="c", fields=raw)
    assert config.fields == {"author": FieldType.KEYWORD, "sent": FieldType.DATE}
    bad: Any
    for bad in ({"Author": "keyword"}, {"a-b": "keyword"}, {"a": "float"}):
        with pytest.raises(ValueError):
            CorpusConfig(name="c", fields=bad)
    with pytest.raises(ValueError, match="cap"):
        CorpusConfig(name="c", fields={f"f{i}": FieldType.KEYWORD for i in range(33)})


def test_filter_lists_nested_past_the_cap_are_an_argument_error() -> None:
    shallow = "[" * 3 + '{"a": 1}' + "]" * 3
    assert parse_filter(shallow) == Eq("a", 1)
    deep = "[" * 200 + '{"a": 1}' + "]" * 200  # within the JSON length cap
    with pytest.raises(InvalidArgument, match="nest deeper"):
        parse_filter(deep)


def test_an_integer_json_will_not_convert_is_an_argument_error() -> None:
    # json.loads refuses more than 4,300 digits with a plain ValueError, not a decode error.
    huge = "1" * 5_000
    for text in (f'{{"year": {huge}}}', f'{{"year": {{"gte": -{huge}}}}}'):
        with pytest.raises(InvalidArgument, match="not valid JSON"):
            parse_filter(text)
