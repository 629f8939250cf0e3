"""The tantivy backend: the shared contract suite plus tantivy-specific behaviour."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparse.analyzers import Analyzer, LanguageAnalyzers
from sparse.contracts import MAX_EXCERPT_LENGTH, RetrievalQuery, SearchBackend, SparseDocument
from sparse.tantivy_backend import TantivyBackend
from sparse.tantivy_index import TantivyIndex
from tests.sparse.backend_contract import (
    PUBLIC,
    BackendFactory,
    SearchBackendContract,
    ids,
    query,
)

MULTILINGUAL = LanguageAnalyzers({0: Analyzer.ENGLISH, 1: Analyzer.GERMAN, 2: Analyzer.CJK})


class TestTantivyBackendContract(SearchBackendContract):
    @pytest.fixture
    def make_backend(self, tmp_path: Path) -> BackendFactory:
        counter = itertools.count()

        def build(docs: Sequence[SparseDocument]) -> SearchBackend:
            index = TantivyIndex(tmp_path / f"index-{next(counter)}", MULTILINGUAL)
            index.upsert(docs)
            return TantivyBackend(index)

        return build


@pytest.fixture(scope="module")
def multilingual(tmp_path_factory: pytest.TempPathFactory) -> TantivyBackend:
    index = TantivyIndex(tmp_path_factory.mktemp("multilingual") / "index", MULTILINGUAL)
    index.upsert(
        [
            SparseDocument(
                "en1", "Running studies", "The runners studied many studies.", url="/en1"
            ),
            SparseDocument("en2", "Happy cats", "A happy cat sleeps all day.", url="/en2"),
            SparseDocument(
                "de1",
                "Häuser in Berlin",
                "Die Häuser der Stadt sind alt.",
                url="/de1",
                language_id=1,
            ),
            SparseDocument("ja1", "東京", "東京は日本の首都です。", url="/ja1", language_id=2),
            SparseDocument("zh1", "北京", "北京是中国的首都。", url="/zh1", language_id=2),
            SparseDocument("ko1", "서울", "서울은 한국의 수도입니다.", url="/ko1", language_id=2),
            SparseDocument("xx1", "Unmapped", "Quokka habitat notes.", url="/xx1", language_id=9),
            SparseDocument(
                "hidden", "Hidden cats", "Happy hidden cats.", url="/hidden", public=False
            ),
        ]
    )
    return TantivyBackend(index)


def test_english_stemming_matches_other_forms(multilingual: TantivyBackend) -> None:
    assert ids(multilingual.search(query("study", language_id=0), PUBLIC)) == ["en1"]
    assert ids(multilingual.search(query("RUN", language_id=0), PUBLIC)) == ["en1"]


def test_english_stop_words_alone_match_nothing(multilingual: TantivyBackend) -> None:
    assert multilingual.search(query("the of and", language_id=0), PUBLIC) == []


def test_german_text_is_stemmed_as_german(multilingual: TantivyBackend) -> None:
    assert ids(multilingual.search(query("Haus", language_id=1), PUBLIC)) == ["de1"]
    assert ids(multilingual.search(query("haus"), PUBLIC)) == ["de1"]


@pytest.mark.parametrize(
    ("text", "expected"), [("日本", "ja1"), ("中国", "zh1"), ("한국", "ko1"), ("首都です", "ja1")]
)
def test_cjk_text_is_findable_without_word_boundaries(
    multilingual: TantivyBackend, text: str, expected: str
) -> None:
    assert ids(multilingual.search(query(text, language_id=2), PUBLIC))[0] == expected
    assert ids(multilingual.search(query(text), PUBLIC))[0] == expected


def test_unmapped_language_falls_back_and_stays_findable(multilingual: TantivyBackend) -> None:
    assert ids(multilingual.search(query("quokka", language_id=9), PUBLIC)) == ["xx1"]
    assert ids(multilingual.search(query("quokka"), PUBLIC)) == ["xx1"]
    assert multilingual.search(query("quokka", language_id=0), PUBLIC) == []


def test_language_filter_is_inside_the_query_not_a_top_k_post_filter(tmp_path: Path) -> None:
    # 30 strong English matches outrank the single German one; with limit 1 a post-filter
    # over the top 1 would find nothing in German.
    docs = [SparseDocument(f"e{i}", "Zebra zebra", "zebra " * 5) for i in range(30)]
    docs.append(SparseDocument("g", "Zebra", "Ein Zebra.", language_id=1))
    index = TantivyIndex(tmp_path / "index", MULTILINGUAL)
    index.upsert(docs)
    found = TantivyBackend(index).search(query("zebra", limit=1, language_id=1), PUBLIC)
    assert ids(found) == ["g"]


def test_public_filter_is_inside_the_query_not_a_top_k_post_filter(tmp_path: Path) -> None:
    docs = [SparseDocument(f"s{i}", "Okapi okapi", "okapi " * 5, public=False) for i in range(30)]
    docs.append(SparseDocument("pub", "Okapi", "An okapi."))
    index = TantivyIndex(tmp_path / "index")
    index.upsert(docs)
    assert ids(TantivyBackend(index).search(query("okapi", limit=1), PUBLIC)) == ["pub"]


@pytest.mark.parametrize("size", [1, 256, 257, 500])
def test_within_restricts_alike_as_term_queries_or_a_term_set(tmp_path: Path, size: int) -> None:
    """Up to 256 ids ``within`` is a disjunction of term queries, past it a term set:
    both must keep exactly the listed public matches, with their unrestricted scores."""
    docs = [
        SparseDocument(f"d{i:03d}", f"Heron {i}", "heron marsh " * (1 + i % 7), public=i % 11 != 0)
        for i in range(600)
    ]
    index = TantivyIndex(tmp_path / "index")
    index.upsert(docs)
    backend = TantivyBackend(index)
    everything = {
        s.source_id: s.score for s in backend.search(query("heron marsh", limit=500), PUBLIC)
    }
    wanted = frozenset(f"d{i:03d}" for i in range(1, 2 * size, 2)) | {"absent"}
    found = backend.search(RetrievalQuery(text="heron marsh", limit=500, within=wanted), PUBLIC)
    expected = {d.source_id for d in docs if d.public and d.source_id in wanted}
    assert set(ids(found)) == expected and expected
    assert all(s.score == everything[s.source_id] for s in found if s.source_id in everything)


def test_query_syntax_is_plain_text(multilingual: TantivyBackend) -> None:
    # "NOT cats" would exclude cat documents if parsed; as text it finds them.
    assert "en2" in ids(multilingual.search(query("NOT cats"), PUBLIC))
    assert "en2" in ids(multilingual.search(query("title:happy"), PUBLIC))
    assert "en2" in ids(multilingual.search(query('"happy'), PUBLIC))


def test_excerpt_prefers_the_rarest_term(tmp_path: Path) -> None:
    filler = "common words appear here. " * 30
    text = "common " + filler + "The rare axolotl lives here. " + filler
    others = [SparseDocument(f"o{i}", "Other", "common things") for i in range(5)]
    index = TantivyIndex(tmp_path / "index")
    index.upsert([SparseDocument("x", "Doc", text), *others])
    (hit,) = [
        h
        for h in TantivyBackend(index).search(query("common axolotl"), PUBLIC)
        if h.source_id == "x"
    ]
    assert "axolotl" in hit.excerpt
    assert len(hit.excerpt) <= MAX_EXCERPT_LENGTH


def test_priority_must_be_positive(tmp_path: Path) -> None:
    index = TantivyIndex(tmp_path / "index")
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="priority"):
            TantivyBackend(index, priority=bad)  # type: ignore[arg-type]
    assert TantivyBackend(index, priority=3).priority == 3


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    text=st.text(min_size=1, max_size=300),
    limit=st.integers(1, 500),
    language=st.one_of(st.none(), st.integers(0, 2**63 - 1), st.integers(2**63, 2**70)),
)
def test_never_raises_and_never_leaks_non_public(
    multilingual: TantivyBackend, text: str, limit: int, language: int | None
) -> None:
    found = multilingual.search(query(text, limit=limit, language_id=language), PUBLIC)
    assert len(found) <= limit
    assert "hidden" not in ids(found)
    assert all(len(hit.excerpt) <= MAX_EXCERPT_LENGTH for hit in found)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    words=st.lists(
        st.sampled_from(["happy", "hidden", "cats", "day", "sleeps", "A"]), min_size=1, max_size=6
    )
)
def test_non_public_document_is_never_returned_whatever_matches(
    multilingual: TantivyBackend, words: list[str]
) -> None:
    assert "hidden" not in ids(multilingual.search(query(" ".join(words), limit=500), PUBLIC))
