"""The pure parts of natural-language questions: rate limiter, schema, output checks,
value resolution."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import Eq, FieldType, In, NaturalSearchUnavailable, Range, RateLimited
from engine.natural import ModelQuery, TokenBucketLimiter, output_schema, parse_output
from engine.natural.resolve import interpret
from engine.natural.schema import (
    MAX_KEYWORD_CHARS,
    MAX_KEYWORDS,
    MAX_VALUE_CHARS,
    MAX_VALUES,
)
from tests.support.clock import FakeClock

DECLARED = {"author": FieldType.KEYWORD, "year": FieldType.INTEGER, "sent": FieldType.DATE}


# -- rate limiter ------------------------------------------------------------------------------


def test_limiter_admits_exactly_the_burst_then_refills_at_the_rate() -> None:
    clock = FakeClock()
    limiter = TokenBucketLimiter(5, 5, clock=clock)
    for _ in range(5):
        limiter.acquire("u")
    with pytest.raises(RateLimited) as caught:
        limiter.acquire("u")
    assert caught.value.retry_after_s == pytest.approx(12.0)  # 5 per minute: one per 12 s
    clock.now += 11.9
    with pytest.raises(RateLimited) as again:
        limiter.acquire("u")
    assert again.value.retry_after_s == pytest.approx(0.1)
    clock.now += 0.1
    limiter.acquire("u")  # exactly one token is back
    with pytest.raises(RateLimited):
        limiter.acquire("u")
    clock.now += 3_600  # an hour idle refills to the burst, not beyond
    for _ in range(5):
        limiter.acquire("u")
    with pytest.raises(RateLimited):
        limiter.acquire("u")


def test_limiter_buckets_are_per_user_and_bounded() -> None:
    clock = FakeClock()
    limiter = TokenBucketLimiter(1, 1, clock=clock, max_users=2)
    limiter.acquire("a")
    limiter.acquire("b")
    with pytest.raises(RateLimited):
        limiter.acquire("a")
    limiter.acquire("c")  # "b" is the least recently used: forgotten
    limiter.acquire("b")
    with pytest.raises(RateLimited):
        limiter.acquire("c")


def test_limiter_arguments_are_checked() -> None:
    for per_minute, burst in ((0, 1), (-1, 1), (1, 0), (1, True)):
        with pytest.raises(ValueError):
            TokenBucketLimiter(per_minute, burst)


@given(
    per_minute=st.floats(0.5, 600),
    burst=st.integers(1, 10),
    steps=st.lists(st.floats(0, 30), max_size=60),
)
def test_limiter_never_admits_more_than_burst_plus_refill(
    per_minute: float, burst: int, steps: list[float]
) -> None:
    clock = FakeClock()
    limiter = TokenBucketLimiter(per_minute, burst, clock=clock)
    start, admitted = clock.now, 0
    for step in steps:
        clock.now += step
        try:
            limiter.acquire("u")
            admitted += 1
        except RateLimited as exc:
            assert 0 < exc.retry_after_s <= 60 / per_minute + 1e-9
    assert admitted <= burst + (clock.now - start) * per_minute / 60 + 1e-9


# -- the schema ----------------------------------------------------------------------------------


def _walk(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found.extend(_walk(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_walk(value))
    return found


def test_schema_bounds_every_string_and_list_and_forbids_extra_keys() -> None:
    schema = output_schema(DECLARED)
    nodes = [n for n in _walk(schema) if "type" in n]
    assert {n["type"] for n in nodes} == {"object", "array", "string", "integer"}
    for node in nodes:
        if node["type"] == "string":
            assert node["maxLength"] <= MAX_VALUE_CHARS
        if node["type"] == "array":
            assert node["maxItems"] <= MAX_KEYWORDS
        if node["type"] == "object":
            assert node["additionalProperties"] is False
    assert set(schema["properties"]["filters"]["properties"]) == set(DECLARED)
    assert schema["required"] == ["keywords", "filters"]
    json.dumps(schema)  # JSON-able, as Ollama's format needs


# -- output checks -------------------------------------------------------------------------------


def test_good_output_is_parsed() -> None:
    text = json.dumps(
        {
            "keywords": [" war ", "war", "city"],
            "filters": {
                "author": ["Walter"],
                "year": {"min": 1940},
                "sent": {"from": "1942-01-01", "to": "1942-12-31"},
            },
        }
    )
    assert parse_output(text, DECLARED) == ModelQuery(
        keywords=("war", "city"),
        values=(("author", ("Walter",)),),
        ranges=(
            ("sent", dt.date(1942, 1, 1), dt.date(1942, 12, 31)),
            ("year", 1940, None),
        ),
    )


def test_an_integer_json_will_not_convert_is_refused() -> None:
    text = '{"keywords": ["war"], "filters": {"year": {"min": ' + "1" * 5_000 + "}}}"
    with pytest.raises(NaturalSearchUnavailable, match="expected shape"):
        parse_output(text, DECLARED)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=200),
    lambda children: (
        st.lists(children, max_size=10)
        | st.dictionaries(
            st.sampled_from(
                ["keywords", "filters", "author", "year", "sent", "min", "max", "from", "to", "x"]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=40,
)


@given(_json)
def test_any_output_is_refused_or_within_bounds(data: Any) -> None:
    try:
        query = parse_output(json.dumps(data), DECLARED)
    except NaturalSearchUnavailable as exc:
        assert "expected shape" in str(exc)
        return
    assert len(query.keywords) <= MAX_KEYWORDS
    assert all(0 < len(k) <= MAX_KEYWORD_CHARS for k in query.keywords)
    for field, values in query.values:
        assert DECLARED[field] is FieldType.KEYWORD
        assert 0 < len(values) <= MAX_VALUES and all(0 < len(v) <= MAX_VALUE_CHARS for v in values)
    for field, low, high in query.ranges:
        assert DECLARED[field] is not FieldType.KEYWORD
        assert low is not None or high is not None


# -- resolution ----------------------------------------------------------------------------------


class FakeLookup:
    def __init__(self, values: dict[str, list[str]]) -> None:
        self.values = values
        self.asked: list[tuple[str, str]] = []

    def keyword_values(self, field: str, value: str, limit: int) -> list[str]:
        self.asked.append((field, value))
        stored = self.values.get(field, [])
        exact = [v for v in stored if v.lower() == value.lower()]
        return (exact or [v for v in stored if value.lower() in v.lower()])[:limit]


def test_interpretation_resolves_applies_and_falls_back() -> None:
    lookup = FakeLookup({"author": ["Walter Benjamin", "walter", "Emma Goldman", "Emma Bovary"]})
    query = ModelQuery(
        keywords=("war",),
        values=(("author", ("WALTER", "Goldman", "Emma", "Nobody")),),
        ranges=(("year", 1945, 1940), ("sent", None, dt.date(1942, 1, 1))),
    )
    got = interpret(query, lookup)
    assert [(v.extracted, v.resolved) for v in got.values] == [
        ("WALTER", ("walter",)),  # an exact (case-insensitive) match wins over containment
        ("Goldman", ("Emma Goldman",)),
        ("Emma", ()),  # two stored values contain it: not guessed
        ("Nobody", ()),
    ]
    assert got.query == "war Emma Nobody"
    assert got.ranges == (Range("year", gte=1940, lte=1945), Range("sent", lte=dt.date(1942, 1, 1)))
    assert got.filters == In("author", ("walter", "Emma Goldman")) & got.ranges[0] & got.ranges[1]


def test_a_single_resolved_value_is_an_equality() -> None:
    got = interpret(
        ModelQuery(("x",), (("author", ("emma",)),), ()), FakeLookup({"author": ["Emma"]})
    )
    assert got.filters == Eq("author", "Emma")
    assert interpret(ModelQuery((), (), ()), FakeLookup({})).filters is None
