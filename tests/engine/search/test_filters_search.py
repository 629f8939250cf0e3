"""Filtered searches end to end: inside both arms before top-k, fallback, caching, restart."""

from __future__ import annotations

import datetime as dt
import itertools
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import CorpusConfig, Document, FieldType, InvalidArgument, SearchEngine
from engine.config import SentenceTransformerEmbedding
from engine.filters import And, Eq, Filter, In, Range
from fusion import rrf
from tests.support.fakes import HashEmbedder, SwitchableEmbedder

FIELDS = {
    "author": FieldType.KEYWORD,
    "year": FieldType.INTEGER,
    "sent": FieldType.DATE,
    "tag": FieldType.KEYWORD,
}
AUTHORS = ("Walter", "Emma", "Otto")
WORDS = ("war", "letter", "home", "rain", "garden")
_names = itertools.count()


def _config(embedder: bool, **extra: Any) -> CorpusConfig:
    spec = SentenceTransformerEmbedding(model="hash") if embedder else None
    return CorpusConfig(name=f"c{next(_names)}", embedder=spec, fields=FIELDS, **extra)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SearchEngine]:
    embedder = SwitchableEmbedder(HashEmbedder())
    root = tmp_path_factory.mktemp("filters")
    with SearchEngine(root, embedder_factory=lambda spec: embedder) as eng:
        yield eng


def _letters(n: int = 30) -> list[Document]:
    """Walter's letters are about war (strong matches); Emma's mention it once."""
    docs = []
    for i in range(n):
        walter = i % 3 != 0
        docs.append(
            Document(
                id=f"d{i:02d}",
                title=f"Letter {i}",
                text=("war war war letter" if walter else "garden rain home war " * 5) + f" u{i}",
                url=f"/d{i:02d}",
                fields={
                    "author": "Walter" if walter else "Emma",
                    "year": 1930 + i,
                    "sent": dt.date(1930 + i, 6, 1),
                    "tag": ["war", "home"] if i % 2 else ["war"],
                },
            )
        )
    return docs


@pytest.mark.parametrize("embedder", [True, False], ids=["hybrid", "keyword"])
def test_filter_applies_before_top_k(engine: SearchEngine, embedder: bool) -> None:
    corpus = engine.create_corpus(_config(embedder))
    corpus.add(_letters())
    unfiltered = [p.source_id for p in corpus.search("war", top_k=5)]
    assert all(int(sid[1:]) % 3 for sid in unfiltered)  # the top 5 are all Walter's
    hits = corpus.search("war", top_k=5, filters=Eq("author", "Emma"))
    assert len(hits) == 5  # ten of Emma's letters match: five come back, not zero
    assert all(int(p.source_id[1:]) % 3 == 0 for p in hits)


@pytest.mark.parametrize("embedder", [True, False], ids=["hybrid", "keyword"])
def test_every_form_of_filter(engine: SearchEngine, embedder: bool) -> None:
    corpus = engine.create_corpus(_config(embedder))
    corpus.add(_letters())

    def ids(filters: object) -> set[str]:
        return {p.source_id for p in corpus.search("war", top_k=50, filters=filters)}  # type: ignore[arg-type]

    assert ids(Range("year", gte=1940, lte=1942)) == {"d10", "d11", "d12"}
    assert ids({"sent": {"gte": "1955-01-01"}}) == {f"d{i}" for i in range(25, 30)}
    assert ids(In("year", [1931, 1933, 1999])) == {"d01", "d03"}
    assert ids({"tag": "home", "author": "Emma"}) == {"d03", "d09", "d15", "d21", "d27"}
    assert ids('{"tag": {"in": ["nothing"]}}') == set()
    assert ids(In("tag", [])) == set()
    assert ids(None) == {f"d{i:02d}" for i in range(30)}


def test_validation_errors_reach_the_caller_and_nothing_else_raises(engine: SearchEngine) -> None:
    corpus = engine.create_corpus(_config(False))
    corpus.add(_letters(3))
    with pytest.raises(InvalidArgument, match="'colour'"):
        corpus.search("war", filters={"colour": "red"})
    with pytest.raises(InvalidArgument, match="'year'"):
        corpus.search("war", filters=Eq("year", "1942"))
    assert corpus.search("", filters=Eq("year", 1930)) == []  # text is still clamped
    with pytest.raises(InvalidArgument, match="'colour'"):
        corpus.add([Document(id="x", fields={"colour": "red"})])
    assert len(corpus) == 3  # a refused batch stores nothing


def test_updates_and_deletes_replace_field_values(engine: SearchEngine) -> None:
    corpus = engine.create_corpus(_config(True))
    corpus.add(_letters(6))
    corpus.add([Document(id="d00", title="Letter 0", text="war", fields={"author": "Otto"})])
    assert [p.source_id for p in corpus.search("war", filters=Eq("author", "Otto"))] == ["d00"]
    assert "d00" not in {p.source_id for p in corpus.search("war", filters=Eq("author", "Emma"))}
    assert corpus.search("war", filters=Eq("year", 1930)) == []  # the old value is gone
    corpus.delete(["d00"])
    assert corpus.search("war", filters=Eq("author", "Otto")) == []


def test_non_public_documents_stay_hidden(engine: SearchEngine) -> None:
    corpus = engine.create_corpus(_config(True))
    secret = Document(
        id="s", text="war secret", access_groups=frozenset({"staff"}), fields={"author": "Otto"}
    )
    corpus.add([*_letters(6), secret])
    assert corpus.search("war secret", filters=Eq("author", "Otto")) == []


def test_keyword_fallback_honours_filters(tmp_path: Path) -> None:
    with SearchEngine(tmp_path) as eng:
        corpus = eng.create_corpus(_config(False))
        corpus.add(_letters())
        shutil.rmtree(tmp_path / "corpora" / corpus.name / "tantivy")  # the index is gone
        hits = corpus.search("war", top_k=4, filters=Eq("author", "Emma") & Range("year", lt=1950))
        assert len(hits) == 4
        assert all(int(p.source_id[1:]) % 3 == 0 and int(p.source_id[1:]) < 20 for p in hits)


def test_rebuilt_index_keeps_the_fields(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    with SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as eng:
        name = eng.create_corpus(_config(True)).name
        eng.corpus(name).add(_letters())
    shutil.rmtree(tmp_path / "corpora" / name / "tantivy")
    with SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as eng:
        corpus = eng.corpus(name)
        hits = corpus.search("war", top_k=50, filters=Eq("tag", "home") & Eq("author", "Emma"))
        assert {p.source_id for p in hits} == {"d03", "d09", "d15", "d21", "d27"}
        assert all(p.ranks.sparse is not None for p in hits)  # answered by the rebuilt index


def test_dense_allow_list_is_cached_per_filter_and_generation(
    engine: SearchEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = engine.create_corpus(_config(True))
    corpus.add(_letters(9))
    store = corpus._store
    calls: list[object] = []
    original = store.public_vector_ids

    def counting(language_id: int | None, filters: Any = ()) -> list[str]:
        calls.append(filters)
        return original(language_id, filters)

    monkeypatch.setattr(store, "public_vector_ids", counting)
    emma = Eq("author", "Emma")
    for _ in range(3):
        corpus.search("war", filters=emma)
    assert len(calls) == 1
    corpus.search("war", filters={"author": "Emma"})  # the same filter, another form
    assert len(calls) == 1
    corpus.search("war", filters=Eq("author", "Walter"))
    assert len(calls) == 2
    corpus.add([Document(id="new", text="war", fields={"author": "Emma"})])
    assert "new" in {p.source_id for p in corpus.search("war", top_k=50, filters=emma)}
    assert len(calls) == 3  # a write starts a new generation


def test_the_allow_list_cache_holds_a_bounded_number_of_ids(
    engine: SearchEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A count alone let every new filter keep a list of the whole corpus until the next
    # write: 128 of them, 8 bytes an id each.
    monkeypatch.setattr("engine.search.visibility.MAX_CACHED_IDS", 25, raising=False)
    corpus = engine.create_corpus(_config(True))
    corpus.add(_letters(9))
    cache = corpus._visibility._cache
    for low in range(1, 8):  # each a new filter admitting all nine documents
        hits = corpus.search("war", filters={"year": {"gte": 1930 - low}})
        assert len(hits) == 9
        assert sum(len(allow) for allow in cache.values()) <= 25
    assert len(cache) == 2  # the two newest lists of nine
    big = engine.create_corpus(_config(True))
    big.add(_letters(30))  # one list past the budget alone is still kept (and reused)
    big.search("war", filters={"year": {"gte": 1900}})
    assert [len(allow) for allow in big._visibility._cache.values()] == [30]


def test_switching_embedder_cannot_change_fields(engine: SearchEngine) -> None:
    config = _config(True)
    corpus = engine.create_corpus(config)
    changed = config.model_copy(update={"fields": {"author": "keyword"}})
    with pytest.raises(InvalidArgument, match="fields"):
        corpus.switch_embedder(changed, HashEmbedder())


def test_a_switch_with_bad_arguments_is_refused_before_anything_is_touched(
    engine: SearchEngine,
) -> None:
    """Regression: a float batch size, a None embedder or a config changing more than the
    embedder (the languages the keyword index was built with, the fusion) got past the
    checks; the vectors were dropped and the new config saved before the pass failed,
    leaving a keyword-only corpus (or an object that failed every later call)."""
    config = _config(True)
    corpus = engine.create_corpus(config)
    corpus.add([Document(id="a", text="war letters", fields={"author": "Emma"})])
    before = corpus.stats()
    other = CorpusConfig.model_validate({**config.model_dump(), "embedder": "other-model"})
    bad_calls: list[tuple[object, object, object]] = [
        (other, HashEmbedder(), 2.5),
        (other, HashEmbedder(), "5"),
        (other, HashEmbedder(), True),
        (other, None, 8),
        (other.model_dump(), HashEmbedder(), 8),
        (other.model_copy(update={"fusion": "zscore"}), HashEmbedder(), 8),
        (other.model_copy(update={"languages": {0: "simple"}}), HashEmbedder(), 8),
    ]
    for changed, embedder, batch_size in bad_calls:
        with pytest.raises(InvalidArgument):
            corpus.switch_embedder(changed, embedder, batch_size=batch_size)  # type: ignore[arg-type]
    assert corpus.config == config and corpus.stats() == before
    assert [p.ranks.dense for p in corpus.search("war letters")] == [1]


# -- properties ------------------------------------------------------------------------------


@st.composite
def _corpus(draw: st.DrawFn) -> list[Document]:
    n = draw(st.integers(1, 24))
    docs = []
    for i in range(n):
        words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=5))
        tags = draw(st.sets(st.sampled_from(("a", "b", "c")), min_size=1))
        docs.append(
            Document(
                id=f"p{i}",
                text=" ".join(words) + f" u{i}",  # unique: no two vectors tie
                access_groups=frozenset({"staff"}) if draw(st.integers(0, 5)) == 0 else frozenset(),
                fields={
                    "author": draw(st.sampled_from(AUTHORS)),
                    "year": draw(st.integers(1900, 1906)),
                    "tag": sorted(tags),
                },
            )
        )
    return docs


_condition = st.one_of(
    st.builds(Eq, st.just("author"), st.sampled_from(AUTHORS)),
    st.builds(In, st.just("tag"), st.lists(st.sampled_from(("a", "b", "c", "z")), max_size=3)),
    st.builds(
        Range,
        st.just("year"),
        gte=st.none() | st.integers(1899, 1907),
        lt=st.none() | st.integers(1899, 1907),
    ).filter(lambda r: r.gte is not None or r.lt is not None),
)
_filter = st.lists(_condition, min_size=1, max_size=3).map(lambda cs: And(*cs))


def _eligible(doc: Document, expr: Filter) -> bool:
    clauses = expr.clauses if isinstance(expr, And) else (expr,)
    fields = doc.fields
    for c in clauses:
        raw = fields[c.field]
        values = list(raw) if isinstance(raw, list) else [raw]
        if isinstance(c, Eq):
            ok = c.value in values
        elif isinstance(c, In):
            ok = any(v in c.values for v in values)
        else:
            ok = any(
                (c.gte is None or v >= c.gte) and (c.lt is None or v < c.lt)  # type: ignore[operator]
                for v in values
            )
        if not ok:
            return False
    return doc.is_public


_SETTINGS = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_SETTINGS
@given(docs=_corpus(), expr=_filter, word=st.sampled_from(WORDS), top_k=st.integers(1, 30))
def test_keyword_filtered_equals_unfiltered_restricted(
    engine: SearchEngine, docs: list[Document], expr: Filter, word: str, top_k: int
) -> None:
    corpus = engine.create_corpus(_config(False))
    try:
        corpus.add(docs)
        by_id = {d.id: d for d in docs}
        everything = corpus.search(word, top_k=200)
        got = corpus.search(word, top_k=top_k, filters=expr)
        assert all(_eligible(by_id[p.source_id], expr) for p in got)
        expected = [p.source_id for p in everything if _eligible(by_id[p.source_id], expr)]
        assert [p.source_id for p in got] == expected[:top_k]
    finally:
        engine.drop_corpus(corpus.name)


@_SETTINGS
@given(docs=_corpus(), expr=_filter, word=st.sampled_from(WORDS), top_k=st.integers(1, 30))
def test_hybrid_filtered_equals_fusion_of_restricted_arms(
    engine: SearchEngine, docs: list[Document], expr: Filter, word: str, top_k: int
) -> None:
    corpus = engine.create_corpus(_config(True, window=200))
    try:
        corpus.add(docs)
        by_id = {d.id: d for d in docs}
        everything = corpus.search(word, top_k=200)  # window and top_k cover the corpus
        sparse = sorted(
            (p for p in everything if p.ranks.sparse), key=lambda p: p.ranks.sparse or 0
        )
        dense = sorted((p for p in everything if p.ranks.dense), key=lambda p: p.ranks.dense or 0)
        assert len(dense) == sum(d.is_public for d in docs)  # every public vector ranked
        keep = [
            [p.source_id for p in arm if _eligible(by_id[p.source_id], expr)]
            for arm in (sparse, dense)
        ]
        expected = rrf(keep, k=corpus.config.rrf_k, limit=top_k)

        got = corpus.search(word, top_k=top_k, filters=expr)
        assert all(_eligible(by_id[p.source_id], expr) for p in got)
        assert len(got) == min(top_k, len(set(keep[0]) | set(keep[1])))
        assert [(p.source_id, p.ranks.sparse, p.ranks.dense) for p in got] == [
            (f.id, f.ranks[0], f.ranks[1]) for f in expected
        ]
    finally:
        engine.drop_corpus(corpus.name)
