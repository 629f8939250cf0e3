"""A sharded corpus answers like one corpus: equivalence, filters, access groups, clamping."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from engine import (
    CorpusConfig,
    Document,
    Eq,
    InvalidArgument,
    Range,
    SearchableCorpus,
    SearchEngine,
    SourceNotFound,
)
from engine.corpus import Corpus
from tests.support.cluster_fakes import FIELDS, QUERIES, hash_factory, sample_documents

pytest.importorskip("ray")

from engine.cluster import ClusterExists, ClusterOptions, ShardedCorpus, shard_for

DOCS = sample_documents()
PUBLIC = {d.id for d in DOCS if d.is_public}


def config(name: str, **extra: object) -> CorpusConfig:
    return CorpusConfig.model_validate({"name": name, "fields": FIELDS, **extra})


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Corpus]]:
    root = tmp_path_factory.mktemp("single")
    with SearchEngine(root, embedder_factory=hash_factory) as engine:
        corpora = {
            "hybrid": engine.create_corpus(config("hybrid")),
            "keyword": engine.create_corpus(config("keyword", embedder=None)),
            "keyword-zscore": engine.create_corpus(
                config("keyword-zscore", embedder=None, fusion="zscore")
            ),
            "dense": engine.create_corpus(config("dense", weights={"sparse": 0.0})),
            "narrow": engine.create_corpus(config("narrow", window=5)),
            "bare": engine.create_corpus(config("bare", window=5, complete_windows=False)),
        }
        for corpus in corpora.values():
            corpus.add(DOCS)
        yield corpora


def _sharded(root: Path, cfg: CorpusConfig, shards: int) -> ShardedCorpus:
    corpus = ShardedCorpus.create(root, cfg, shards, embedder_factory=hash_factory)
    corpus.add(DOCS)
    return corpus


@pytest.fixture(scope="module")
def sharded(
    ray_cluster: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ShardedCorpus]]:
    root = tmp_path_factory.mktemp("sharded")
    corpora = {
        "hybrid1": _sharded(root / "h1", config("hybrid"), 1),
        "keyword1": _sharded(root / "k1", config("keyword", embedder=None), 1),
        "keyword-zscore1": _sharded(
            root / "kz1", config("keyword-zscore", embedder=None, fusion="zscore"), 1
        ),
        "dense3": _sharded(root / "d3", config("dense", weights={"sparse": 0.0}), 3),
        "narrow1": _sharded(root / "n1", config("narrow", window=5), 1),
        "bare1": _sharded(root / "b1", config("bare", window=5, complete_windows=False), 1),
    }
    yield corpora
    for corpus in corpora.values():
        corpus.close()


def as_tuples(passages: list) -> list[tuple]:
    return [
        (p.source_id, p.title, p.url, p.excerpt, p.language_id, p.score, p.ranks) for p in passages
    ]


SEARCHES = [
    {"top_k": 10},
    {"top_k": 5, "offset": 3},
    {"top_k": 200},
    {"top_k": 7, "language_id": 1},
    {"top_k": 10, "filters": Eq("author", "grace")},
    {"top_k": 10, "filters": {"year": {"gte": 2015}, "author": ["ada", "alan"]}},
    {"top_k": 0, "offset": -4, "language_id": -3},  # clamped, never rejected
    {"top_k": 10**9, "offset": 10**9},
    {"top_k": 3.7},
]


@pytest.mark.parametrize("kind", ["hybrid", "keyword", "keyword-zscore"])
def test_one_shard_answers_exactly_like_one_corpus(
    single: dict[str, Corpus], sharded: dict[str, ShardedCorpus], kind: str
) -> None:
    """Where BM25 statistics cannot differ (one shard): same passages, same order, same
    scores and ranks, same excerpts. With z-score fusion a keyword-only answer is
    standardised over the fusion window, not the page (regression: sharded, a one-hit
    page scored 0 and the next page's scores rose above this one's)."""
    one, many = single[kind], sharded[f"{kind}1"]
    compared = 0
    for query in QUERIES:
        for args in SEARCHES:
            expected = as_tuples(one.search(query, **args))
            assert as_tuples(many.search(query, **args)) == expected, (query, args)
            compared += len(expected)
    assert compared > 200
    assert one.evidence("password reset", top_k=3) == many.evidence("password reset", top_k=3)


@pytest.mark.parametrize("kind", ["narrow", "bare"])
def test_completion_across_shards_answers_like_one_corpus(
    single: dict[str, Corpus], sharded: dict[str, ShardedCorpus], kind: str
) -> None:
    """A window of 5: each arm also ranks the other's extra candidates (ranks past 5),
    scored by their shards, exactly as one corpus completes its windows; with completion
    off ("bare") no rank goes past the window, sharded or not."""
    one, many = single[kind], sharded[f"{kind}1"]
    past_window = 0
    for query in QUERIES:
        for args in ({"top_k": 5}, {"top_k": 3, "offset": 1}, {"top_k": 4, "language_id": 0}):
            expected = one.search(query, **args)
            assert as_tuples(many.search(query, **args)) == as_tuples(expected), (query, args)
            past_window += sum(max(p.ranks.sparse or 0, p.ranks.dense or 0) > 5 for p in expected)
    assert (past_window > 0) is (kind == "narrow")


@pytest.mark.parametrize("kind", ["narrow", "bare"])
def test_pages_past_the_window_page_one_ranking_as_one_corpus_does(
    single: dict[str, Corpus], sharded: dict[str, ShardedCorpus], kind: str
) -> None:
    """Past the fusion window (5 here) every page is cut from one order — the window's
    ranking, then the deep one without those documents — on one node and sharded alike."""
    one, many = single[kind], sharded[f"{kind}1"]
    for query in QUERIES:
        pages = [
            as_tuples(many.search(query, top_k=3, offset=offset)) for offset in range(0, 30, 3)
        ]
        ids = [row[0] for page in pages for row in page]
        assert len(ids) == len(set(ids)), query  # no document twice
        whole = many.search(query, top_k=30)
        assert ids == [p.source_id for p in whole], query  # the pages are the whole, cut
        assert pages == [
            as_tuples(one.search(query, top_k=3, offset=offset)) for offset in range(0, 30, 3)
        ], query


def test_ranks_are_global_ranks_across_shards(
    single: dict[str, Corpus], sharded: dict[str, ShardedCorpus]
) -> None:
    """Vector scores do not depend on sharding, so with the keyword arm weighted 0 the
    three-shard answer is the single corpus's — dense ranks included (global ranks, not a
    shard's own; and not an RRF of per-shard RRFs)."""
    for query in QUERIES:
        for args in ({"top_k": 20}, {"top_k": 5, "offset": 5}):
            expected = single["dense"].search(query, **args)
            got = sharded["dense3"].search(query, **args)
            assert [p.source_id for p in got] == [p.source_id for p in expected]
            assert [p.ranks.dense for p in got] == [p.ranks.dense for p in expected]
            assert [p.score for p in got] == pytest.approx([p.score for p in expected])
    # the keyword ranks are global too: one sparse rank per position, 1..n without gaps
    ranks = sorted(
        p.ranks.sparse
        for p in sharded["dense3"].search("shipping parcel courier", top_k=200)
        if p.ranks.sparse is not None
    )
    assert ranks == list(range(1, len(ranks) + 1))


def test_three_shards_spread_the_documents(sharded: dict[str, ShardedCorpus]) -> None:
    counts = [s["documents"] for s in sharded["dense3"].stats()["per_shard"]]
    assert len(counts) == 3 and sum(counts) == len(DOCS) and min(counts) > 20
    assert len(sharded["dense3"]) == len(DOCS)


def test_filters_apply_on_every_shard(
    single: dict[str, Corpus], sharded: dict[str, ShardedCorpus]
) -> None:
    many = sharded["dense3"]
    for flt in (
        Eq("author", "alan"),
        Range("year", gte=2010, lte=2012),
        {"day": {"lt": "2020-03-01"}},
    ):
        expected = {
            p.source_id for p in single["dense"].search("collection item", top_k=200, filters=flt)
        }
        got = {p.source_id for p in many.search("collection item", top_k=200, filters=flt)}
        assert got == expected and got
    with pytest.raises(InvalidArgument, match="colour"):
        many.search("anything", filters={"colour": "red"})


def test_non_public_documents_never_appear(sharded: dict[str, ShardedCorpus]) -> None:
    for corpus in sharded.values():
        for query in (*QUERIES, "secret confidential staff only"):
            for passage in corpus.search(query, top_k=200):
                assert passage.source_id in PUBLIC
        assert "secret" not in corpus.evidence("confidential staff", top_k=50)
        with pytest.raises(SourceNotFound):
            corpus.fetch_source("secret-1")
        assert corpus.grep("confidential") == []


def test_fetch_source_and_grep(
    single: dict[str, Corpus], sharded: dict[str, ShardedCorpus]
) -> None:
    one, many = single["dense"], sharded["dense3"]
    for doc_id in ("doc-000", "doc-057", "doc-119"):
        assert many.fetch_source(doc_id) == one.fetch_source(doc_id)
    with pytest.raises(SourceNotFound):
        many.fetch_source("doc-999")
    with pytest.raises(SourceNotFound):
        many.fetch_source("../etc/passwd")  # printable: an id like any other, not stored
    with pytest.raises(InvalidArgument):
        many.fetch_source("two words")
    expected = sorted(one.grep(r"item 1\d\b", limit=200), key=lambda m: (m.source_id, m.start))
    assert many.grep(r"item 1\d\b", limit=200) == expected
    assert (
        many.grep("item", limit=5)
        == sorted(one.grep("item", limit=200), key=lambda m: (m.source_id, m.start))[:5]
    )
    with pytest.raises(InvalidArgument):
        many.grep("(unclosed")


def test_both_satisfy_the_shared_protocol(
    single: dict[str, Corpus], sharded: dict[str, ShardedCorpus]
) -> None:
    assert isinstance(single["hybrid"], SearchableCorpus)
    assert isinstance(sharded["dense3"], SearchableCorpus)


def test_metrics_count_shards_and_are_scrapeable(sharded: dict[str, ShardedCorpus]) -> None:
    corpus = sharded["dense3"]
    registry = corpus.registry
    assert registry.get_sample_value("tandem_shards", {"corpus": "dense"}) == 3
    assert registry.get_sample_value("tandem_shards_up", {"corpus": "dense"}) == 3
    server = corpus.serve_metrics(port=0)
    try:
        body = httpx.get(server.url, timeout=30).text
    finally:
        server.stop()
    assert 'tandem_shards_up{corpus="dense"} 3.0' in body
    assert "collection item" not in body  # no query text in metrics


def test_writes_route_update_and_delete(ray_cluster: None, tmp_path: Path) -> None:
    corpus = ShardedCorpus.create(
        tmp_path / "w", config("writes"), 2, embedder_factory=hash_factory
    )
    try:
        docs = DOCS[:40]
        assert corpus.add(docs).added == 40
        model = corpus._unguarded  # the fake inside the coordinator's DimensionGuard
        embedded = model.texts_embedded  # type: ignore[union-attr]
        again = corpus.add(docs)  # unchanged: stored vectors are kept, nothing re-embedded
        assert (again.added, again.updated) == (0, 40)
        assert model.texts_embedded == embedded  # type: ignore[union-attr]
        changed = Document(id="doc-003", title="Changed", text="entirely new words zebra")
        corpus.add([changed])
        assert corpus.search("zebra", top_k=1)[0].source_id == "doc-003"
        assert corpus.delete(["doc-003", "doc-004", "nope"]) == 2
        assert len(corpus) == 38
        assert all(p.source_id not in {"doc-003", "doc-004"} for p in corpus.search("zebra item"))
        with pytest.raises(InvalidArgument):
            corpus.add([Document(id="ok-1"), Document(id="bad id with spaces")])
        assert len(corpus) == 38  # the batch was refused whole
        vectors = np.ones((1, 64), dtype=np.float32)
        with pytest.raises(InvalidArgument, match="refused"):
            corpus.add([Document(id="v1", text="x")], embeddings=vectors, embedding_model="other")
        corpus.add(
            [Document(id="v1", text="x")], embeddings=vectors, embedding_model="hash-embedder"
        )
        assert len(corpus) == 39
    finally:
        corpus.close()
    with pytest.raises(ClusterExists):
        ShardedCorpus.create(tmp_path / "w", config("writes"), 2)
    reopened = ShardedCorpus.open(tmp_path / "w", embedder_factory=hash_factory)
    try:
        assert len(reopened) == 39 and reopened.fetch_source("v1").text == "x"
    finally:
        reopened.close()


def _ids_on(shard: int, count: int, prefix: str) -> list[str]:
    """The first ``count`` ids ``prefix0, prefix1, ...`` that shard ``shard`` of two owns."""
    found = (f"{prefix}{i}" for i in range(10_000) if shard_for(f"{prefix}{i}", 2) == shard)
    return [next(found) for _ in range(count)]


def _skewed_documents() -> list[Document]:
    """Equal-length documents (so only idf can differ between shards): "amber" is rare in
    the corpus (2 of 12) but both its documents sit on shard 0 beside four "basil" ones;
    shard 1 holds the one other "basil" document among five fillers. Per-shard idf makes
    basil look rarer than amber on shard 1; over the corpus amber is the rarer word."""
    on_0, on_1 = _ids_on(0, 6, "s"), _ids_on(1, 6, "s")
    bodies_0 = ["amber fjord fjord fjord fjord fjord", "amber grove grove grove grove grove"]
    bodies_0 += ["basil basil basil basil basil basil"] * 4
    bodies_1 = ["basil heron heron heron heron heron"] + ["cedar cedar cedar cedar cedar cedar"] * 5
    return [
        Document(id=i, text=body) for i, body in zip(on_0 + on_1, bodies_0 + bodies_1, strict=True)
    ]


def test_global_term_statistics_rank_shards_as_one_corpus(
    ray_cluster: None, tmp_path: Path
) -> None:
    """With the shards' document frequencies summed (``global_term_statistics``), a
    two-shard keyword search ranks as one corpus does; with each shard's own statistics
    (the default) it does not."""
    docs = _skewed_documents()
    amber_doc, basil_doc = docs[0].id, docs[6].id
    cfg = config("skewed", embedder=None)
    with SearchEngine(tmp_path / "one") as engine:
        one = engine.create_corpus(cfg)
        one.add(docs)
        expected = [p.source_id for p in one.search("amber basil", top_k=12)]
    assert expected.index(amber_doc) < expected.index(basil_doc)
    order: dict[bool, list[str]] = {}
    assert ClusterOptions().global_term_statistics is False
    for global_statistics in (True, False):
        options = ClusterOptions(global_term_statistics=global_statistics)
        root = tmp_path / f"sharded-{global_statistics}"
        corpus = ShardedCorpus.create(root, cfg, 2, options=options)
        try:
            corpus.add(docs)
            order[global_statistics] = [p.source_id for p in corpus.search("amber basil", top_k=12)]
        finally:
            corpus.close()
    assert order[True] == expected
    shard_local = order[False]
    assert shard_local.index(basil_doc) < shard_local.index(amber_doc)


def test_detached_corpora_of_one_name_keep_their_own_shards(
    ray_cluster: None, tmp_path: Path
) -> None:
    """Detached shard actors are found again by name: two roots holding a corpus of the
    same name must not be handed each other's shards."""
    from engine.cluster import ClusterOptions, stop_detached

    detached = ClusterOptions(detached=True)
    cfg = CorpusConfig(name="docs", embedder=None)
    roots = (tmp_path / "project-a", tmp_path / "project-b")
    try:
        a = ShardedCorpus.create(roots[0], cfg, 2, options=detached)
        a.add([Document(id="a1", text="alpha plans of project a")])
        b = ShardedCorpus.create(roots[1], cfg, 2, options=detached)
        assert len(b) == 0 and b.search("alpha plans") == []
        b.add([Document(id="b1", text="bravo")])
        assert len(a) == 1 and (roots[1] / "shards").is_dir()
        a.close()
        b.close()
        reopened = ShardedCorpus.open(roots[0], options=detached)  # finds its own again
        assert [hit.source_id for hit in reopened.search("alpha plans")] == ["a1"]
        reopened.close()
    finally:
        for root in roots:
            stop_detached(root)
