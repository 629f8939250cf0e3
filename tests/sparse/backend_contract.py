"""The contract-test suite every ``SearchBackend`` inherits.

Usage: subclass ``SearchBackendContract`` in a ``test_*.py`` module (the class name must
start with ``Test``) and provide ONE fixture, ``make_backend``::

    class TestMyBackend(SearchBackendContract):
        @pytest.fixture
        def make_backend(self, tmp_path: Path) -> BackendFactory:
            def build(docs: Sequence[SparseDocument]) -> SearchBackend:
                ...  # a fresh, healthy backend holding exactly ``docs``
            return build

``make_backend(docs)`` may be called more than once per test (each call gets its own
documents); it must return a backend that is available and answers for exactly ``docs``
(``public=False`` documents included, so the backend's own access filtering is tested).
Queries in this suite are single plain words or hostile strings, so a substring
(``LIKE``) backend and a BM25 backend both qualify.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from sparse.contracts import (
    MAX_EXCERPT_LENGTH,
    AccessContext,
    EvidenceSource,
    RetrievalQuery,
    SearchBackend,
    SparseDocument,
)

BackendFactory = Callable[[Sequence[SparseDocument]], SearchBackend]

PUBLIC = AccessContext.public_only()

HOSTILE_QUERIES = [
    '"unbalanced quote',
    'title:"photosynthesis"',
    "body:chlorophyll AND (",
    "photosynthesis) OR NOT",
    "NOT AND OR",
    '+- && || ! ( ) { } [ ] ^ " ~ * ? : \\ /',
    "field:value:another:",
    "IN [a TO b]",
    "🌿🔥 emoji only",
    "Ünïcödé ñandú straße",
    "control\x00\x01\x07\x1b\x7f chars",
    "tab\tnew\nline\r",
    "x" * 10_000,
    "chlorophyll " + "y" * 10_000,
    "%_ like wildcards %",
    "'; DROP TABLE documents; --",
    "日本語の文章",
    "a" * 2,
]


def corpus() -> list[SparseDocument]:
    """A small corpus every contract test can reuse."""
    return [
        SparseDocument(
            "p1",
            "Photosynthesis basics",
            "Plants use chlorophyll and light.",
            url="/p1",
            page_uid=11,
        ),
        SparseDocument(
            "p2", "Cellular respiration", "Mitochondria turn glucose into energy.", url="/p2"
        ),
        SparseDocument(
            "p3",
            "Secret photosynthesis notes",
            "Internal chlorophyll memo.",
            url="/p3",
            public=False,
        ),
        SparseDocument(
            "p4",
            "Photosynthese",
            "Pflanzen nutzen Chlorophyll und Licht.",
            url="/p4",
            language_id=1,
        ),
        SparseDocument("p5", "Glaciers", "Ice sheets move slowly.", url=""),
    ]


def query(text: str, limit: int = 10, language_id: int | None = None) -> RetrievalQuery:
    return RetrievalQuery(text=text, limit=limit, language_id=language_id)


def ids(sources: Sequence[EvidenceSource]) -> list[str]:
    return [source.source_id for source in sources]


class SearchBackendContract:
    """Behaviour every backend owes the cascade. Subclasses provide ``make_backend``."""

    @pytest.fixture
    def make_backend(self) -> BackendFactory:  # pragma: no cover - always overridden
        raise NotImplementedError("subclasses provide the make_backend fixture")

    @pytest.fixture
    def backend(self, make_backend: BackendFactory) -> SearchBackend:
        return make_backend(corpus())

    def test_identity(self, backend: SearchBackend) -> None:
        assert isinstance(backend, SearchBackend)
        assert isinstance(backend.name, str) and backend.name
        assert isinstance(backend.priority, int) and backend.priority >= 0

    def test_healthy_backend_is_available(self, backend: SearchBackend) -> None:
        assert backend.is_available() is True

    def test_finds_a_word_in_the_title(self, backend: SearchBackend) -> None:
        assert "p2" in ids(backend.search(query("respiration"), PUBLIC))

    def test_finds_a_word_in_the_body(self, backend: SearchBackend) -> None:
        assert ids(backend.search(query("sheets"), PUBLIC)) == ["p5"]
        assert "p2" in ids(backend.search(query("mitochondria"), PUBLIC))

    def test_no_match_is_empty(self, backend: SearchBackend) -> None:
        assert backend.search(query("zyxwvutsrq"), PUBLIC) == []

    def test_never_returns_non_public_documents(self, backend: SearchBackend) -> None:
        for text in ("photosynthesis", "chlorophyll", "secret", "internal", "memo"):
            assert "p3" not in ids(backend.search(query(text, limit=50), PUBLIC))

    def test_language_filter(self, backend: SearchBackend) -> None:
        english = ids(backend.search(query("chlorophyll", language_id=0), PUBLIC))
        german = ids(backend.search(query("chlorophyll", language_id=1), PUBLIC))
        anything = ids(backend.search(query("chlorophyll"), PUBLIC))
        assert english == ["p1"]
        assert german == ["p4"]
        assert sorted(anything) == ["p1", "p4"]

    def test_unknown_language_is_empty_not_an_error(self, backend: SearchBackend) -> None:
        assert backend.search(query("chlorophyll", language_id=77), PUBLIC) == []

    def test_respects_limit(self, make_backend: BackendFactory) -> None:
        docs = [
            SparseDocument(f"d{i}", f"Volcano {i}", "Lava and ash.", url=f"/d{i}")
            for i in range(12)
        ]
        backend = make_backend(docs)
        for limit in (1, 5, 12):
            found = backend.search(query("volcano", limit=limit), PUBLIC)
            assert len(found) == limit
            assert len(set(ids(found))) == limit

    def test_hit_carries_the_document_fields(self, backend: SearchBackend) -> None:
        (hit,) = [s for s in backend.search(query("chlorophyll", language_id=0), PUBLIC)]
        assert (hit.source_id, hit.title, hit.url) == ("p1", "Photosynthesis basics", "/p1")
        assert hit.language_id == 0
        assert hit.page_uid == 11
        assert "chlorophyll" in hit.excerpt.lower()

    def test_scores_best_first(self, backend: SearchBackend) -> None:
        found = backend.search(query("photosynthesis"), PUBLIC)
        scores = [s.score for s in found if s.score is not None]
        assert scores == sorted(scores, reverse=True)

    def test_excerpt_is_bounded_and_around_the_match(self, make_backend: BackendFactory) -> None:
        text = (
            ("Filler words about nothing in particular. " * 40)
            + "The aurora glows green. "
            + ("More filler text follows here. " * 40)
        )
        backend = make_backend([SparseDocument("long", "Sky", text, url="/long")])
        (hit,) = backend.search(query("aurora"), PUBLIC)
        assert len(hit.excerpt) <= MAX_EXCERPT_LENGTH
        assert "aurora" in hit.excerpt

    @pytest.mark.parametrize("text", HOSTILE_QUERIES)
    def test_hostile_text_is_searched_as_text(self, backend: SearchBackend, text: str) -> None:
        found = backend.search(query(text), PUBLIC)
        assert isinstance(found, list)
        assert "p3" not in ids(found)

    def test_within_restricts_the_hits_and_keeps_their_scores(
        self, make_backend: BackendFactory
    ) -> None:
        docs = [
            SparseDocument(f"d{i}", f"Volcano {i}", "Lava and ash. " * (i + 1), url=f"/d{i}")
            for i in range(8)
        ] + [SparseDocument("hidden", "Volcano secret", "Lava.", public=False)]
        backend = make_backend(docs)
        everything = {s.source_id: s.score for s in backend.search(query("volcano lava"), PUBLIC)}
        wanted = frozenset({"d1", "d4", "d6", "hidden", "nowhere"})
        restricted = RetrievalQuery(text="volcano lava", limit=10, within=wanted)
        found = backend.search(restricted, PUBLIC)
        assert sorted(ids(found)) == ["d1", "d4", "d6"]  # never the private one
        assert {s.source_id: s.score for s in found} == {i: everything[i] for i in ids(found)}

    def test_empty_within_matches_nothing(self, backend: SearchBackend) -> None:
        nothing = RetrievalQuery(text="photosynthesis", limit=10, within=frozenset())
        assert backend.search(nothing, PUBLIC) == []
