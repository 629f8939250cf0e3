"""Filters inside the tantivy backend: declared fields, term sets, ranges, AND, top-k."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparse import (
    AccessContext,
    FieldKind,
    KeywordSearchFacade,
    RangeFilter,
    RetrievalQuery,
    SparseDocument,
    SparseError,
    TantivyBackend,
    TantivyIndex,
    TermsFilter,
)
from sparse.contracts import FieldFilter

FIELDS = {"author": FieldKind.KEYWORD, "year": FieldKind.INTEGER, "tag": FieldKind.KEYWORD}
AUTHORS = ("Walter", "Emma", "Otto")
PUBLIC = AccessContext.public_only()


def _doc(i: int, *, public: bool = True) -> SparseDocument:
    author = AUTHORS[i % 3]
    tags = (("tag", "war"),) if i % 4 == 0 else (("tag", "war"), ("tag", "home"))
    return SparseDocument(
        source_id=f"d{i:02d}",
        title=f"Letter {i}",
        text="letter about the war " + "and more words " * (i % 5),
        url=f"/d{i:02d}",
        public=public,
        fields=(("author", author), ("year", 1930 + i), *tags),
    )


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> TantivyBackend:
    index = TantivyIndex(tmp_path_factory.mktemp("filters") / "index", fields=FIELDS)
    index.upsert([_doc(i) for i in range(30)] + [_doc(99, public=False)])
    return TantivyBackend(index)


def _ids(backend: TantivyBackend, filters: tuple[FieldFilter, ...], limit: int = 100) -> list[str]:
    query = RetrievalQuery(text="letter war", limit=limit, filters=filters)
    return [s.source_id for s in backend.search(query, PUBLIC)]


def test_terms_filter_keeps_only_matching_documents(backend: TantivyBackend) -> None:
    got = _ids(backend, (TermsFilter("author", ("Walter",)),))
    assert sorted(got) == [f"d{i:02d}" for i in range(0, 30, 3)]


def test_terms_filter_is_exact_and_case_sensitive(backend: TantivyBackend) -> None:
    assert _ids(backend, (TermsFilter("author", ("walter",)),)) == []
    assert _ids(backend, (TermsFilter("author", ("Walt",)),)) == []


def test_set_membership_and_multi_valued_fields(backend: TantivyBackend) -> None:
    either = _ids(backend, (TermsFilter("author", ("Walter", "Emma")),))
    assert len(either) == 20
    home = _ids(backend, (TermsFilter("tag", ("home",)),))
    assert sorted(home) == [f"d{i:02d}" for i in range(30) if i % 4]
    assert len(_ids(backend, (TermsFilter("tag", ("war",)),))) == 30


def test_integer_terms_and_inclusive_ranges(backend: TantivyBackend) -> None:
    assert _ids(backend, (TermsFilter("year", (1935, 1940)),)) != []
    assert sorted(_ids(backend, (TermsFilter("year", (1935, 1940)),))) == ["d05", "d10"]
    assert sorted(_ids(backend, (RangeFilter("year", 1935, 1937),))) == ["d05", "d06", "d07"]
    assert sorted(_ids(backend, (RangeFilter("year", None, 1931),))) == ["d00", "d01"]
    assert sorted(_ids(backend, (RangeFilter("year", 1958, None),))) == ["d28", "d29"]


def test_conditions_are_and_ed(backend: TantivyBackend) -> None:
    got = _ids(
        backend,
        (
            TermsFilter("author", ("Walter",)),
            RangeFilter("year", 1930, 1940),
            TermsFilter("tag", ("home",)),
        ),
    )
    assert sorted(got) == ["d03", "d06", "d09"]


def test_unsatisfiable_conditions_match_nothing(backend: TantivyBackend) -> None:
    assert _ids(backend, (TermsFilter("author", ()),)) == []
    assert _ids(backend, (RangeFilter("year", 1950, 1940),)) == []


def test_non_public_documents_stay_hidden_under_filters(backend: TantivyBackend) -> None:
    assert _ids(backend, (RangeFilter("year", 2029, 2029),)) == []  # d99 is not public


def test_filter_applies_before_the_top_k(backend: TantivyBackend) -> None:
    everything = _ids(backend, ())
    otto = [sid for sid in everything if int(sid[1:]) % 3 == 2]
    post_filtered = [sid for sid in everything[:3] if sid in otto]
    assert len(post_filtered) < 3  # cutting first and filtering after would come up short
    top3 = _ids(backend, (TermsFilter("author", ("Otto",)),), limit=3)
    assert top3 == otto[:3]


def test_filters_never_change_scores(backend: TantivyBackend) -> None:
    base = RetrievalQuery(text="letter war more", limit=100)
    filtered = RetrievalQuery(
        text="letter war more", limit=100, filters=(TermsFilter("tag", ("home",)),)
    )
    scores = {s.source_id: s.score for s in backend.search(base, PUBLIC)}
    for hit in backend.search(filtered, PUBLIC):
        assert hit.score == scores[hit.source_id]


def test_undeclared_field_raises_in_the_backend_and_empties_the_facade(
    backend: TantivyBackend,
) -> None:
    with pytest.raises(ValueError, match="nope"):
        _ids(backend, (TermsFilter("nope", ("x",)),))
    with pytest.raises(ValueError, match="year"):
        _ids(backend, (TermsFilter("year", ("1940",)),))  # a string for an integer field
    with pytest.raises(ValueError, match="author"):
        _ids(backend, (RangeFilter("author", 1, 2),))
    facade = KeywordSearchFacade.index_backed([backend])
    assert facade.search("letter", 5, filters=[TermsFilter("nope", ("x",))]) == []
    assert facade.search("letter", 5, filters=["not a filter"]) == []  # type: ignore[list-item]
    assert len(facade.search("letter", 5, filters=[TermsFilter("author", ("Emma",))])) == 5


def test_filter_values_are_validated() -> None:
    with pytest.raises(ValueError):
        TermsFilter("Bad-Name", ("x",))
    with pytest.raises(ValueError):
        TermsFilter("mixed", ("x", 1))
    with pytest.raises(ValueError):
        TermsFilter("big", (2**63,))
    with pytest.raises(ValueError):
        RangeFilter("open")
    with pytest.raises(ValueError):
        RangeFilter("flag", True, None)


def test_documents_must_match_the_declared_fields(tmp_path: Path) -> None:
    index = TantivyIndex(tmp_path / "index", fields=FIELDS)
    with pytest.raises(ValueError, match="colour"):
        index.upsert([SparseDocument("a", "t", "x", fields=(("colour", "red"),))])
    with pytest.raises(ValueError, match="year"):
        index.upsert([SparseDocument("a", "t", "x", fields=(("year", "1942"),))])
    with pytest.raises(ValueError):
        TantivyIndex(tmp_path / "other", fields={"Bad": FieldKind.KEYWORD})


def test_an_index_with_other_fields_does_not_open(tmp_path: Path) -> None:
    TantivyIndex(tmp_path / "index", fields=FIELDS).upsert([_doc(1)])
    other = TantivyIndex(tmp_path / "index", fields={"author": FieldKind.KEYWORD})
    assert other.is_available() is False
    with pytest.raises(SparseError):
        other.view()
    other.clear()  # the owner's rebuild path
    assert other.is_available() is True and other.doc_count() == 0


_WORDS = ("alpha", "beta", "gamma", "delta")


@st.composite
def _corpus(draw: st.DrawFn) -> list[SparseDocument]:
    n = draw(st.integers(1, 25))
    docs = []
    for i in range(n):
        words = draw(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6))
        docs.append(
            SparseDocument(
                source_id=f"p{i}",
                title="",
                text=" ".join(words),
                url=f"/p{i}",
                public=draw(st.booleans()),
                fields=(
                    ("author", draw(st.sampled_from(AUTHORS))),
                    ("year", draw(st.integers(1900, 1910))),
                ),
            )
        )
    return docs


@given(
    docs=_corpus(),
    authors=st.sets(st.sampled_from(AUTHORS)),
    low=st.integers(1899, 1911),
    high=st.integers(1899, 1911),
    word=st.sampled_from(_WORDS),
    limit=st.integers(1, 30),
)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_filtered_equals_unfiltered_restricted_to_eligible(
    tmp_path_factory: pytest.TempPathFactory,
    docs: list[SparseDocument],
    authors: set[str],
    low: int,
    high: int,
    word: str,
    limit: int,
) -> None:
    index = TantivyIndex(tmp_path_factory.mktemp("prop") / "index", fields=FIELDS)
    index.upsert(docs)
    backend = TantivyBackend(index)
    filters = (TermsFilter("author", tuple(sorted(authors))), RangeFilter("year", low, high))
    by_id = {d.source_id: dict(d.fields) for d in docs}

    def eligible(sid: str) -> bool:
        values = by_id[sid]
        return values["author"] in authors and low <= int(values["year"]) <= high

    full = backend.search(RetrievalQuery(text=word, limit=500), PUBLIC)
    got = backend.search(RetrievalQuery(text=word, limit=limit, filters=filters), PUBLIC)
    assert all(eligible(h.source_id) for h in got)
    expected = [h for h in full if eligible(h.source_id)][:limit]
    assert [(h.source_id, h.score) for h in got] == [(h.source_id, h.score) for h in expected]
