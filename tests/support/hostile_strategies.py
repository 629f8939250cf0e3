"""Hypothesis strategies for hostile input: every unicode category, control characters,
SQL fragments, path traversal, catastrophic regexes, absurd numbers and wrong types."""

from __future__ import annotations

import functools
import json
import sys
import unicodedata
from typing import Any

from hypothesis import strategies as st

from engine import Document
from engine.limits import CORPUS_NAME_PATTERN, SOURCE_ID_PATTERN, is_valid_source_id

SQL_FRAGMENTS = (
    "' OR 1=1 --",
    "'; DROP TABLE documents; --",
    '" OR ""="',
    "1; DELETE FROM documents",
    "x' UNION SELECT source_id, text FROM documents --",
    "'); ATTACH DATABASE '/tmp/tandem-pwned.db' AS pwned; --",
    "PRAGMA writable_schema=1;",
    "%",
    "_",
    "%' OR '1'='1",
    "\\",
    "?",
    ":name",
    "$1",
    "@p",
    "/* */",
    "1=1",
    "a--",
)
PATHS = (
    "..",
    ".",
    "../",
    "../../etc/passwd",
    "..\\..\\windows\\win.ini",
    "/etc/passwd",
    "a/../../b",
    "corpora/../..",
    "~",
    "~root",
    "C:\\x",
    "%2e%2e%2f",
    "\\\\server\\share",
    ".lock",
    "store.sqlite3",
    "a\x00b",
    "con",
    "a/b",
    "x" * 300,
)
CATASTROPHIC_REGEXES = (
    "(a+)+$",
    "(a|aa)+$",
    "(.*a){12}",
    "([a-zA-Z]+)*$",
    "(x+x+)+y",
    "^(([a-z])+.)+[A-Z]([a-z])+$",
    "(?:a|a)*b",
    "(\\w+\\s?)+$",
)
BROKEN_REGEXES = ("\\", "(", "[", "(?P<", "a{99999999999}", "(?<=a+)b", "\\p{", "\\N{BAD}", "*")
QUERY_SYNTAX = ("title:x", "AND OR NOT", '"unterminated', "field:[a TO b]", "a^1000", "a~9", "+-")
VOCAB = ("printer", "fuser", "password", "reset", "refund", "parcel", "invoice", "network")


@functools.cache
def _one_char_per_category() -> tuple[str, ...]:
    """One code point of every Unicode general category (surrogates and unassigned too)."""
    seen: dict[str, str] = {}
    for cp in range(sys.maxunicode + 1):
        cat = unicodedata.category(chr(cp))
        if cat not in seen:
            seen[cat] = chr(cp)
    return tuple(seen.values())


ANY_CHAR = st.one_of(
    st.characters(exclude_categories=()),  # every category, surrogates included
    st.sampled_from(_one_char_per_category()),
    st.sampled_from("\x00\x01\x07\x08\x1b\x7f\u200b\u202e\u2028\ufeff\ufffe\U0010ffff"),
)

hostile_text: st.SearchStrategy[str] = st.one_of(
    st.text(ANY_CHAR, max_size=60),
    st.text(st.characters(max_codepoint=0x1F), max_size=40),
    st.sampled_from(SQL_FRAGMENTS + PATHS + CATASTROPHIC_REGEXES + BROKEN_REGEXES + QUERY_SYNTAX),
    st.lists(
        st.one_of(st.sampled_from(VOCAB + SQL_FRAGMENTS + QUERY_SYNTAX), st.text(ANY_CHAR)),
        min_size=1,
        max_size=6,
    ).map(" ".join),
    st.builds(
        lambda unit, n: (unit * n)[: n * 2],
        st.sampled_from(["ab ", "a", "é\n", "\x00 "]),
        st.integers(1_000, 4_000),
    ),  # long, cheap to generate
    st.sampled_from(("", " ", "\n" * 50, "a", "aa", "é" * 2, "\U0001f600" * 3)),
)

hostile_number: st.SearchStrategy[Any] = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**63 - 1, 2**63, -(2**63), 10**100, -(10**100)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.sampled_from(["10", b"5", [1], {"a": 1}, 1 + 2j]),
)

valid_source_id = st.from_regex(SOURCE_ID_PATTERN, fullmatch=True).filter(is_valid_source_id)
valid_corpus_name = st.from_regex(CORPUS_NAME_PATTERN, fullmatch=True)
hostile_id: st.SearchStrategy[Any] = st.one_of(
    hostile_text,
    valid_source_id,
    valid_source_id.map(lambda s: (s + "/../../" + s)[:256]),
    st.sampled_from([None, 0, b"id", ["id"], 1.5]),
)
hostile_name: st.SearchStrategy[Any] = st.one_of(
    hostile_text, valid_corpus_name, st.sampled_from([None, 0, b"kw", ["kw"], ("kw",)])
)

hostile_groups: st.SearchStrategy[Any] = st.one_of(
    st.just(frozenset()),
    st.frozensets(hostile_text, max_size=3),
    st.lists(st.sampled_from(["staff", "", "a" * 200, "\x00"]), max_size=3),
    st.sampled_from(["staff", None, 5]),
)

hostile_document: st.SearchStrategy[Document] = st.builds(
    Document,
    id=st.one_of(valid_source_id, hostile_id),
    title=st.one_of(hostile_text, st.sampled_from(VOCAB)),
    text=st.one_of(hostile_text, st.lists(st.sampled_from(VOCAB)).map(" ".join)),
    url=st.one_of(st.just(""), hostile_text),
    language_id=st.one_of(st.integers(0, 3), hostile_number),
    access_groups=hostile_groups,
    page_uid=st.one_of(st.none(), hostile_number),
)

json_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        hostile_text,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(hostile_text, inner, max_size=4)
    ),
    max_leaves=8,
)

config_fields: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {"name": st.one_of(valid_corpus_name, hostile_name)},
    optional={
        "embedder": st.one_of(
            st.none(),
            hostile_text,
            st.fixed_dictionaries(
                {"kind": st.sampled_from(["ollama", "sentence-transformers", "x"])},
                optional={
                    "model": hostile_text,
                    "host": hostile_text,
                    "timeout_s": hostile_number,
                    "health_timeout_s": hostile_number,
                },
            ),
            json_values,
        ),
        "rrf_k": hostile_number,
        "weights": st.one_of(
            json_values,
            st.fixed_dictionaries({}, optional={"sparse": hostile_number, "dense": hostile_number}),
        ),
        "window": hostile_number,
        "languages": st.one_of(
            json_values,
            st.dictionaries(
                st.one_of(st.integers(), hostile_text),
                st.one_of(st.sampled_from(["en", "de", "simple", "cjk", "EN"]), hostile_text),
                max_size=3,
            ),
        ),
        "mode": json_values,  # an unknown key: extra="forbid"
    },
)


def _safe_dumps(value: Any) -> str:
    try:
        return json.dumps(value, default=repr)
    except (TypeError, ValueError):
        return repr(value)


config_json: st.SearchStrategy[str] = st.one_of(
    config_fields.map(_safe_dumps),
    json_values.map(_safe_dumps),
    hostile_text,
    st.integers(1, 5_000).map(lambda n: "[" * n),
    st.integers(1, 5_000).map(lambda n: '{"name": "a", "weights": ' * n),
)
