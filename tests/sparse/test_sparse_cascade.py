"""RetrievalService with a real tantivy backend and small in-test backends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from sparse.cascade import RetrievalService
from sparse.contracts import (
    AccessContext,
    EvidenceSource,
    RetrievalQuery,
    SearchBackend,
    SparseDocument,
)
from sparse.facade import KeywordSearchFacade
from sparse.tantivy_backend import TantivyBackend
from sparse.tantivy_index import TantivyIndex
from tests.sparse.backend_contract import PUBLIC, ids, query


class Stub:
    """A configurable in-test backend that records its calls."""

    def __init__(
        self,
        name: str,
        priority: int,
        answer: Sequence[EvidenceSource] = (),
        *,
        available: bool = True,
        raises: BaseException | None = None,
        availability_raises: bool = False,
    ) -> None:
        self.name = name
        self.priority = priority
        self._answer = list(answer)
        self._available = available
        self._raises = raises
        self._availability_raises = availability_raises
        self.calls: list[tuple[RetrievalQuery, AccessContext]] = []

    def is_available(self) -> bool:
        if self._availability_raises:
            raise RuntimeError("health check exploded")
        return self._available

    def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]:
        self.calls.append((query, access))
        if self._raises is not None:
            raise self._raises
        return list(self._answer)


def src(source_id: str, url: str = "") -> EvidenceSource:
    return EvidenceSource(source_id, source_id.upper(), url, "")


@pytest.fixture(scope="module")
def tantivy_backend(tmp_path_factory: pytest.TempPathFactory) -> TantivyBackend:
    index = TantivyIndex(tmp_path_factory.mktemp("cascade") / "index")
    index.upsert(
        [
            SparseDocument(f"t{i}", f"Puffin {i}", "Puffins nest on cliffs.", url=f"/t{i}")
            for i in range(8)
        ]
    )
    return TantivyBackend(index)


def test_highest_priority_available_backend_answers(tantivy_backend: TantivyBackend) -> None:
    fallback = Stub("fallback", 0, [src("fb")])
    result = RetrievalService([fallback, tantivy_backend]).retrieve(query("puffin"), PUBLIC)
    assert result.backend == "tantivy"
    assert len(result.sources) == 8
    assert fallback.calls == []


@pytest.mark.parametrize(
    "broken",
    [
        Stub("down", 50, [src("x")], available=False),
        Stub("raising", 50, [src("x")], raises=TimeoutError("slow")),
        Stub("sick", 50, [src("x")], availability_raises=True),
    ],
    ids=["unavailable", "raises", "health-check-raises"],
)
def test_broken_backend_is_skipped(tantivy_backend: TantivyBackend, broken: Stub) -> None:
    result = RetrievalService([broken, tantivy_backend]).retrieve(query("puffin"), PUBLIC)
    assert result.backend == "tantivy"
    assert "x" not in ids(result.sources)


def test_empty_answer_from_an_available_backend_is_the_answer(
    tantivy_backend: TantivyBackend,
) -> None:
    fallback = Stub("fallback", 0, [src("fb")])
    result = RetrievalService([tantivy_backend, fallback]).retrieve(query("zyxwv"), PUBLIC)
    assert result.sources == ()
    assert result.backend == "tantivy"
    assert fallback.calls == []


def test_falls_through_to_the_fallback(tantivy_backend: TantivyBackend) -> None:
    down = Stub("index", 10, available=False)
    fallback = Stub("fallback", 0, [src("fb", "/fb")])
    result = RetrievalService([down, fallback]).retrieve(query("puffin"), PUBLIC)
    assert (ids(result.sources), result.backend) == (["fb"], "fallback")


def test_nobody_answers() -> None:
    result = RetrievalService([Stub("a", 1, available=False)]).retrieve(query("x y"), PUBLIC)
    assert (result.sources, result.backend) == ((), None)
    assert RetrievalService([]).retrieve(query("x y"), PUBLIC).backend is None
    assert RetrievalService([]).is_available() is False


def test_no_cross_engine_merging() -> None:
    first = Stub("first", 5, [src("a", "/a")])
    second = Stub("second", 4, [src("b", "/b")])
    result = RetrievalService([first, second]).retrieve(query("xy"), PUBLIC)
    assert ids(result.sources) == ["a"]
    assert second.calls == []


def test_priority_order_and_stable_ties() -> None:
    backends = [Stub("low", 1), Stub("tie-a", 7), Stub("high", 9), Stub("tie-b", 7)]
    service = RetrievalService(backends)
    assert [b.name for b in service.backends] == ["high", "tie-a", "tie-b", "low"]


def test_url_deduplication_keeps_the_first() -> None:
    dupes = Stub(
        "dupes", 3, [src("a", "/same"), src("b", "/same"), src("c", "/other"), src("a", "/third")]
    )
    result = RetrievalService([dupes]).retrieve(query("xy"), PUBLIC)
    assert ids(result.sources) == ["a", "c"]


def test_empty_url_is_no_dedup_key_but_source_id_is() -> None:
    dupes = Stub("dupes", 3, [src("a"), src("b"), src("a"), src("c", "")])
    assert ids(RetrievalService([dupes]).retrieve(query("xy"), PUBLIC).sources) == ["a", "b", "c"]


def test_result_cap_and_query_limit() -> None:
    many = Stub("many", 3, [src(f"s{i}", f"/{i}") for i in range(20)])
    assert len(RetrievalService([many], max_results=5).retrieve(query("xy"), PUBLIC).sources) == 5
    assert len(RetrievalService([many]).retrieve(query("xy", limit=3), PUBLIC).sources) == 3


def test_dedup_happens_before_the_cap() -> None:
    dupes = Stub("dupes", 3, [src("a", "/u"), src("b", "/u"), src("c", "/v")])
    assert ids(RetrievalService([dupes]).retrieve(query("xy", limit=2), PUBLIC).sources) == [
        "a",
        "c",
    ]


class Ranked(Stub):
    """A backend that honours ``limit``, as a real index does: the best ``limit`` only."""

    def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]:
        return super().search(query, access)[: query.limit]


SHARED_FIRST = [src(f"s{i}", "/same") for i in range(4)] + [src(f"w{i}", f"/{i}") for i in range(6)]


def test_a_page_thinned_by_the_url_rule_is_made_up_from_further_down() -> None:
    backend = Ranked("ranked", 3, SHARED_FIRST)
    result = RetrievalService([backend]).retrieve(query("xy", limit=4), PUBLIC)
    assert ids(result.sources) == ["s0", "w0", "w1", "w2"]
    assert [asked.limit for asked, _ in backend.calls] == [4, 8]


def test_refilling_asks_for_at_most_four_times_the_page() -> None:
    backend = Ranked("ranked", 3, [src(f"s{i}", "/same") for i in range(100)])
    result = RetrievalService([backend]).retrieve(query("xy", limit=5), PUBLIC)
    assert ids(result.sources) == ["s0"]
    assert [asked.limit for asked, _ in backend.calls] == [5, 10, 20]


def test_distinct_urls_off_keeps_every_document() -> None:
    backend = Ranked("ranked", 3, SHARED_FIRST)
    request = replace(query("xy", limit=4), distinct_urls=False)
    result = RetrievalService([backend]).retrieve(request, PUBLIC)
    assert ids(result.sources) == ["s0", "s1", "s2", "s3"]
    assert len(backend.calls) == 1


@pytest.mark.parametrize("bad", [0, -3, True, 2.0, "10"])
def test_max_results_must_be_a_positive_int(bad: object) -> None:
    with pytest.raises(ValueError, match="max_results"):
        RetrievalService([], max_results=bad)  # type: ignore[arg-type]


def test_two_registrations_of_one_facade(tantivy_backend: TantivyBackend) -> None:
    fallback = Stub("fallback", 0, [src("fb", "/fb")])
    backends: list[SearchBackend] = [fallback, tantivy_backend]
    full = KeywordSearchFacade.full_cascade(backends)
    arm = KeywordSearchFacade.index_backed(backends)
    assert full.backend_names == ("tantivy", "fallback")
    assert arm.backend_names == ("tantivy",)
    assert (full.index_backed_only, arm.index_backed_only) == (False, True)
    assert len(arm.search("puffin", 100)) == 8


def test_index_backed_availability_ignores_the_fallback(tmp_path: Path) -> None:
    fallback = Stub("fallback", 0, [src("fb", "/fb")])
    down = Stub("index", 10, available=False)
    assert KeywordSearchFacade.full_cascade([down, fallback]).is_available() is True
    arm = KeywordSearchFacade.index_backed([down, fallback])
    assert arm.is_available() is False
    assert arm.search("anything", 10) == []
    assert fallback.calls == []


def test_cascade_passes_the_query_and_access_through() -> None:
    stub = Stub("s", 2)
    context = AccessContext.public_only()
    RetrievalService([stub]).retrieve(query("hello", limit=7, language_id=3), context)
    ((seen, access),) = stub.calls
    assert (seen.text, seen.limit, seen.language_id) == ("hello", 7, 3)
    assert access.is_public_only
