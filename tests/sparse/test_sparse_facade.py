"""KeywordSearchFacade: every clamp rule, public-only, never throws (hypothesis)."""

from __future__ import annotations

import itertools
import logging
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparse.clamp import FALLBACK_LIMIT, clamp_language, clamp_limit, clamp_text
from sparse.contracts import (
    MAX_QUERY_LENGTH,
    MAX_SOURCES,
    MIN_QUERY_LENGTH,
    AccessContext,
    EvidenceSource,
    KeywordHit,
    KeywordSearch,
    RetrievalQuery,
    SparseDocument,
    TermsFilter,
)
from sparse.facade import KeywordSearchFacade
from sparse.tantivy_backend import TantivyBackend
from sparse.tantivy_index import TantivyIndex


class Recorder:
    """Records what reaches the backend; answers with ``answer``."""

    name = "recorder"
    priority = 5

    def __init__(self, answer: list[EvidenceSource] | None = None) -> None:
        self.answer = answer or []
        self.calls: list[tuple[RetrievalQuery, AccessContext]] = []

    def is_available(self) -> bool:
        return True

    def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]:
        self.calls.append((query, access))
        return self.answer


ANY_NUMBERISH = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.just(object()),
)

TEXT_WITH_CONTROLS = st.text(
    alphabet=st.characters(codec=None, exclude_categories=()), max_size=1_200
)


# --- the pure clamp rules ---------------------------------------------------------------


@given(TEXT_WITH_CONTROLS)
def test_clamp_text_trims_truncates_and_enforces_the_minimum(text: str) -> None:
    clamped = clamp_text(text)
    expected = text.strip()[:MAX_QUERY_LENGTH].strip()
    expected = expected.encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?"
    if len(expected) < MIN_QUERY_LENGTH:
        assert clamped is None
    else:
        assert clamped == expected
        assert MIN_QUERY_LENGTH <= len(clamped) <= MAX_QUERY_LENGTH
        assert clamped == clamped.strip()


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_clamp_limit_integers(limit: int) -> None:
    assert clamp_limit(limit) == min(max(limit, 1), MAX_SOURCES)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_clamp_limit_finite_floats_truncate(limit: float) -> None:
    assert clamp_limit(limit) == min(max(int(limit), 1), MAX_SOURCES)


def test_clamp_limit_non_numbers() -> None:
    assert clamp_limit(math.inf) == MAX_SOURCES
    assert clamp_limit(-math.inf) == 1
    for junk in (math.nan, None, "10", object(), [3]):
        assert clamp_limit(junk) == FALLBACK_LIMIT


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_clamp_language_integers(language: int) -> None:
    assert clamp_language(language) == max(language, 0)


def test_clamp_language_none_and_junk() -> None:
    assert clamp_language(None) is None
    assert clamp_language(2.9) == 2
    assert clamp_language(-2.5) == 0
    for junk in (math.nan, math.inf, -math.inf, "de", object()):
        assert clamp_language(junk) == 0


@given(ANY_NUMBERISH)
def test_clamp_limit_and_language_never_raise(value: object) -> None:
    assert 1 <= clamp_limit(value) <= MAX_SOURCES
    language = clamp_language(value)
    assert language is None or language >= 0


# --- the facade applies them ------------------------------------------------------------


def test_facade_implements_the_protocol() -> None:
    assert isinstance(KeywordSearchFacade([]), KeywordSearch)


@settings(max_examples=300)
@given(text=TEXT_WITH_CONTROLS, limit=ANY_NUMBERISH, language=ANY_NUMBERISH)
def test_facade_clamps_before_any_backend_sees_the_query(
    text: str, limit: object, language: object
) -> None:
    recorder = Recorder()
    facade = KeywordSearchFacade([recorder])
    assert facade.search(text, limit, language) == []  # type: ignore[arg-type]
    expected_text = clamp_text(text)
    if expected_text is None:
        assert recorder.calls == []
        return
    ((seen, access),) = recorder.calls
    assert seen.text == expected_text
    assert seen.limit == clamp_limit(limit)
    assert seen.language_id == clamp_language(language)
    assert access.is_public_only


@pytest.mark.parametrize("text", ["", " ", "a", "  b  ", "\n\t", "\x00"])
def test_too_short_queries_answer_empty_without_searching(text: str) -> None:
    recorder = Recorder([EvidenceSource("x", "X", "/x", "")])
    assert KeywordSearchFacade([recorder]).search(text, 10) == []
    assert recorder.calls == []


def test_non_string_query_answers_empty() -> None:
    recorder = Recorder([EvidenceSource("x", "X", "/x", "")])
    for junk in (None, 42, b"bytes", ["list"]):
        assert KeywordSearchFacade([recorder]).search(junk, 10) == []  # type: ignore[arg-type]
    assert recorder.calls == []


def test_facade_caps_a_backend_that_ignores_the_limit() -> None:
    recorder = Recorder([EvidenceSource(f"s{i}", "T", f"/{i}", "") for i in range(30)])
    hits = KeywordSearchFacade([recorder]).search("query", 4)
    assert [hit.source_id for hit in hits] == ["s0", "s1", "s2", "s3"]
    assert all(isinstance(hit, KeywordHit) for hit in hits)


def test_any_failure_is_empty_and_the_log_has_no_query(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(Recorder):
        def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]:
            raise RuntimeError(f"boom on {query.text}")

    secret = "my-secret-query-text"
    with caplog.at_level(logging.DEBUG):
        assert KeywordSearchFacade([Broken()]).search(secret, 10) == []
    assert "RuntimeError" in caplog.text
    assert secret not in caplog.text


def test_a_broken_answer_is_contained() -> None:
    class Garbage(Recorder):
        def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]:
            return [None]  # type: ignore[list-item]

    assert KeywordSearchFacade([Garbage()]).search("query", 10) == []


def test_is_available_never_raises() -> None:
    class Sick(Recorder):
        def is_available(self) -> bool:
            raise OSError("disk gone")

    assert KeywordSearchFacade([Sick()]).is_available() is False
    assert KeywordSearchFacade([]).is_available() is False
    assert KeywordSearchFacade([Recorder()]).is_available() is True


# --- over a real tantivy index ----------------------------------------------------------


@pytest.fixture(scope="module")
def facade(tmp_path_factory: pytest.TempPathFactory) -> KeywordSearchFacade:
    index = TantivyIndex(tmp_path_factory.mktemp("facade") / "index")
    docs = [
        SparseDocument(f"pub{i}", f"Lichen {i}", "Lichens grow on rocks and bark.", url=f"/pub{i}")
        for i in range(20)
    ]
    docs += [
        SparseDocument(
            f"priv{i}",
            f"Private lichen {i}",
            "Lichens rocks bark secrets.",
            url=f"/priv{i}",
            public=False,
        )
        for i in range(20)
    ]
    index.upsert(docs)
    return KeywordSearchFacade.full_cascade([TantivyBackend(index)])


@pytest.mark.parametrize("limit", [-5, 0, 1, 7, 20, 10_000, 2**64])
def test_limit_clamp_over_tantivy(facade: KeywordSearchFacade, limit: int) -> None:
    hits = facade.search("lichen rocks", limit)
    assert len(hits) == min(max(limit, 1), 20)


def test_negative_language_means_language_zero(facade: KeywordSearchFacade) -> None:
    assert len(facade.search("lichen", 50, -3)) == 20
    assert facade.search("lichen", 50, 4) == []


def test_long_query_is_truncated_not_rejected(facade: KeywordSearchFacade) -> None:
    assert len(facade.search("lichen " + "z" * 5_000, 50)) == 20
    assert facade.search("z" * 5_000 + " lichen", 50) == []  # lichen was cut off


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=TEXT_WITH_CONTROLS, limit=ANY_NUMBERISH, language=ANY_NUMBERISH)
def test_never_throws_and_never_returns_non_public(
    facade: KeywordSearchFacade, text: str, limit: object, language: object
) -> None:
    hits = facade.search(text, limit, language)  # type: ignore[arg-type]
    assert isinstance(hits, list)
    assert len(hits) <= clamp_limit(limit)
    assert not any(hit.source_id.startswith("priv") for hit in hits)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    words=st.lists(
        st.sampled_from(["lichen", "private", "secrets", "rocks", "bark", "0"]),
        min_size=1,
        max_size=5,
    )
)
def test_public_only_whatever_the_query(facade: KeywordSearchFacade, words: list[str]) -> None:
    hits = facade.search(" ".join(words), MAX_SOURCES)
    assert not any(hit.source_id.startswith("priv") for hit in hits)


def test_a_missing_directory_becomes_an_empty_index(tmp_path: Path) -> None:
    missing = TantivyIndex(tmp_path / "a" / "b")
    facade = KeywordSearchFacade.index_backed([TantivyBackend(missing)])
    assert facade.search("anything", 10) == []
    assert facade.is_available() is True
    assert missing.doc_count() == 0


def test_lone_surrogates_are_replaced_not_fatal() -> None:
    from sparse.clamp import clamp_text

    assert clamp_text("ab\udcffcd") == "ab?cd"
    assert clamp_text("\ud800\ud800") == "??"


def test_excerpts_off_returns_the_same_ranking_without_excerpts(tmp_path: Path) -> None:
    from sparse import KeywordSearchFacade, SparseDocument, TantivyBackend, TantivyIndex

    index = TantivyIndex(tmp_path / "idx")
    long_text = "filler words " * 40 + "the photosynthesis chapter " + "more filler " * 40
    index.upsert(
        [SparseDocument(source_id=f"d{i}", title=f"Doc {i}", text=long_text) for i in range(5)]
    )
    facade = KeywordSearchFacade.index_backed([TantivyBackend(index)])
    with_excerpts = facade.search("photosynthesis", 10)
    ids_only = facade.search("photosynthesis", 10, excerpts=False)
    assert [h.source_id for h in ids_only] == [h.source_id for h in with_excerpts]
    assert all(h.excerpt == "" for h in ids_only)
    assert all("photosynthesis" in h.excerpt for h in with_excerpts)


def test_within_is_validated_at_the_facade(facade: KeywordSearchFacade) -> None:
    found = facade.search("lichen rocks", 50)
    assert len(found) >= 2
    first, second = found[0].source_id, found[1].source_id
    only = facade.search("lichen rocks", 50, within=[second, "priv3"])
    assert [h.source_id for h in only] == [second]
    assert facade.search("lichen", 50, within=[]) == []
    assert facade.search("lichen", 50, within=[first, 7]) == []  # type: ignore[list-item]
    too_many = [first] + [f"x{i}" for i in range(MAX_SOURCES)]
    assert facade.search("lichen", 50, within=too_many) == []
    assert facade.search("lichen", 50, within=too_many[:MAX_SOURCES])[0].source_id == first


@pytest.mark.timeout(60)
def test_within_and_filters_are_read_only_up_to_their_caps(tmp_path: Path) -> None:
    """Regression: a str ``within`` was read as a set of one-character ids, and an
    endless iterable (of ids or of filters) was consumed whole before any cap check."""
    index = TantivyIndex(tmp_path / "index")
    index.upsert([SparseDocument(i, f"Lichen {i}", "lichen on rocks") for i in "ab"])
    facade = KeywordSearchFacade.index_backed([TantivyBackend(index)])
    assert [h.source_id for h in facade.search("lichen", 10, within=["a"])] == ["a"]
    assert facade.search("lichen", 10, within="ab") == []
    assert facade.search("lichen", 10, within=itertools.repeat("a")) == []
    assert facade.search("lichen", 10, filters=itertools.repeat(TermsFilter("k", ("x",)))) == []


def test_excerpt_terms_cut_exactly_the_hits_excerpts(tmp_path: Path) -> None:
    from sparse.excerpt import make_excerpt

    index = TantivyIndex(tmp_path / "idx")
    common = "Sediment studies of the delta region. " * 6
    docs = [
        SparseDocument(f"d{i}", f"Core {i}", f"{common} peat layers {i}. {common} Happy core {i}.")
        for i in range(8)
    ]
    docs.append(SparseDocument("rare", "Core", f"{common} one peat band. {common}"))
    index.upsert(docs)
    facade = KeywordSearchFacade.index_backed([TantivyBackend(index)])
    query = "the happy PEAT studies"
    # Rarest in the index first (happi: 8 documents; peat, studi: 9, in query order), a
    # stem followed by the word as typed where the stem is not its prefix; lowercase.
    terms = facade.excerpt_terms(query)
    assert terms == ["happi", "happy", "peat", "studi"]
    text_of = {d.source_id: d.text for d in docs}
    hits = facade.search(query, 20)
    assert len(hits) == len(docs)
    for hit in hits:
        assert make_excerpt(text_of[hit.source_id], terms) == hit.excerpt
    assert facade.excerpt_terms("x") == []  # too short: no query at all
    assert facade.excerpt_terms(query, language_id=-1) == facade.excerpt_terms(query, 0)


def test_excerpt_terms_come_from_the_answering_backend_or_nobody(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Sick(Recorder):
        def is_available(self) -> bool:
            return False

    class Failing(Recorder):
        priority = 20

        def excerpt_terms(self, text: str, language_id: int | None) -> list[str]:
            raise RuntimeError(f"boom on {text}")

    index = TantivyIndex(tmp_path / "idx")
    index.upsert([SparseDocument("a", "Alpha", "granite boulders")])
    tantivy = TantivyBackend(index)
    with caplog.at_level(logging.DEBUG):
        assert KeywordSearchFacade([Failing(), tantivy]).excerpt_terms("granite") == ["granit"]
    assert "RuntimeError" in caplog.text and "granite" not in caplog.text

    class First(Recorder):
        priority = 20

    assert KeywordSearchFacade([First(), tantivy]).excerpt_terms("granite") == []  # no opinion
    assert KeywordSearchFacade([Recorder(), tantivy]).excerpt_terms("granite") == ["granit"]
    assert KeywordSearchFacade([Sick()]).excerpt_terms("granite") == []
