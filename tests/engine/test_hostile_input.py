"""Hostile input through every public entry point: a result or a documented error, never
an unhandled exception, a hang, unbounded memory, or a change to stored data.

``ENTRY_POINTS`` is the one table driving the generated inputs: each row names a call, a
strategy for its arguments, the documented errors it may raise, and what it may touch.
Add ``Corpus.ask`` and filtered ``search`` (filter parsing, deeply nested expressions)
there when they exist. Generated-input counts are printed (``-s``) and the total is
asserted ≥ 10,000.
"""

from __future__ import annotations

import collections
import contextlib
import resource
import shutil
import sqlite3
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import (
    CorpusConfig,
    CorpusExists,
    CorpusNotFound,
    Document,
    GrepTimeout,
    InvalidArgument,
    SearchEngine,
    SentenceTransformerEmbedding,
    SourceNotFound,
)
from engine.limits import MAX_GREP_MATCHES, MAX_TOP_K, is_valid_corpus_name
from sparse import MAX_EXCERPT_LENGTH
from tests.support.fakes import WordHashEmbedder, factory_for
from tests.support.hostile_strategies import (
    BROKEN_REGEXES,
    CATASTROPHIC_REGEXES,
    PATHS,
    SQL_FRAGMENTS,
    VOCAB,
    config_fields,
    config_json,
    hostile_document,
    hostile_id,
    hostile_name,
    hostile_number,
    hostile_text,
)
from tests.support.reliability_support import (
    StoreSnapshot,
    faiss_threads,
    store_snapshot,
    stored_rows,
)

COUNTS: collections.Counter[str] = collections.Counter()
CORPORA = ("kw", "hy", "fallback")


@dataclass
class World:
    engine: SearchEngine
    root: Path
    known_ids: frozenset[str]
    public: dict[str, frozenset[str]]
    _watch: dict[str, sqlite3.Connection]

    def dir(self, corpus: str) -> Path:
        return self.root / "corpora" / corpus

    def tree(self) -> frozenset[str]:
        """Every path under the engine's parent directory, corpus directories' insides aside."""
        base, corpora = self.root.parent, self.root / "corpora"
        return frozenset(
            str(p.relative_to(base))
            for p in base.rglob("*")
            if not (p.is_relative_to(corpora) and len(p.relative_to(corpora).parts) > 1)
        )

    def writes(self) -> tuple[int, ...]:
        """Cheap per-call witness: ``PRAGMA data_version`` moves on any other connection's
        commit. The full digest (``snapshot``) is compared around each whole test."""
        return tuple(
            int(conn.execute("PRAGMA data_version").fetchone()[0]) for conn in self._watch.values()
        )

    def snapshot(self) -> dict[str, StoreSnapshot]:
        return {name: store_snapshot(self.dir(name)) for name in CORPORA}


def _docs(prefix: str, n: int) -> list[Document]:
    return [
        Document(
            id=f"{prefix}-{i}",
            title=f"{VOCAB[i % len(VOCAB)]} guide {i}",
            text=" ".join(VOCAB[(i + k) % len(VOCAB)] for k in range(12)) + f" aaaa{i}",
            url=f"/{prefix}/{i}",
            language_id=i % 3,
            access_groups=frozenset({"staff"}) if i % 3 == 0 else frozenset(),
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("hostile") / "engine"
    engine = SearchEngine(root, embedder_factory=factory_for(WordHashEmbedder()))
    ids: set[str] = set()
    fake = SentenceTransformerEmbedding(model="fake")
    for name, embedder, n in (("kw", None, 60), ("hy", fake, 40), ("fallback", None, 30)):
        corpus = engine.create_corpus(CorpusConfig(name=name, embedder=embedder))
        docs = _docs(name, n)
        corpus.add(docs)
        ids |= {d.id for d in docs}
    engine.create_corpus(CorpusConfig(name="sink", embedder=None))
    # The fallback corpus loses its keyword index: searches go through the SQL LIKE path.
    shutil.rmtree(root / "corpora" / "fallback" / "tantivy")
    assert engine.corpus("fallback").search("printer guide")  # answered by LIKE
    watch = {
        name: sqlite3.connect(f"file:{root / 'corpora' / name / 'store.sqlite3'}?mode=ro", uri=True)
        for name in CORPORA
    }
    public = {
        name: frozenset(k for k, v in stored_rows(root / "corpora" / name).items() if v[2])
        for name in (*CORPORA, "sink")
    }
    with faiss_threads(1):
        yield World(engine, root, frozenset(ids), public, watch)
    for conn in watch.values():
        conn.close()
    engine.close()


# -- result oracles ---------------------------------------------------------------------------


def _check_passages(w: World, corpus: str, hits: object) -> None:
    assert isinstance(hits, list) and len(hits) <= MAX_TOP_K
    for hit in hits:
        assert hit.source_id in w.public[corpus]
        assert len(hit.excerpt) <= MAX_EXCERPT_LENGTH


def _check_grep(w: World, hits: object) -> None:
    assert isinstance(hits, list) and len(hits) <= MAX_GREP_MATCHES
    assert all(m.source_id in w.public["kw"] for m in hits)


def _grep(w: World, a: tuple[Any, ...]) -> object:
    hits = w.engine.corpus("kw").grep(a[0], a[1], fixed=a[2])
    _check_grep(w, hits)
    return hits


def _search(corpus: str) -> Callable[[World, tuple[Any, ...]], object]:
    def call(w: World, a: tuple[Any, ...]) -> object:
        hits = w.engine.corpus(corpus).search(a[0], top_k=a[1], offset=a[2], language_id=a[3])
        _check_passages(w, corpus, hits)
        return hits

    return call


def _delete(w: World, a: tuple[Any, ...]) -> object:
    ids = [x for x in a[0] if not (isinstance(x, str) and x in w.known_ids)]
    assert w.engine.corpus("kw").delete(ids) == 0
    return 0


def _drop(w: World, a: tuple[Any, ...]) -> object:
    if a[0] in CORPORA or a[0] == "sink":
        return None
    w.engine.drop_corpus(a[0])
    raise AssertionError("dropped a corpus that does not exist")


def _create(w: World, a: tuple[Any, ...]) -> object:
    if a[0] in (*CORPORA, "sink"):
        return None
    corpus = w.engine.create_corpus(CorpusConfig(name=a[0], embedder=None))
    directory = (w.root / "corpora" / a[0]).resolve()
    assert directory.parent == (w.root / "corpora").resolve() and directory.is_dir()
    w.engine.drop_corpus(corpus.name)
    assert not directory.exists()
    return corpus


def _add(w: World, a: tuple[Any, ...]) -> object:
    docs: list[Document] = a[0]
    sink = w.engine.corpus("sink")
    before = store_snapshot(w.dir("sink"))
    try:
        result = sink.add(docs)
    except InvalidArgument:
        assert store_snapshot(w.dir("sink")) == before, "a refused add changed the store"
        raise
    stored = stored_rows(w.dir("sink"))
    latest = {d.id: d for d in docs}
    for doc in latest.values():
        assert stored[doc.id][:3] == (doc.title, doc.text, not doc.access_groups)
        if not doc.access_groups:
            assert sink.fetch_source(doc.id).text == doc.text[:100_000]
    sink.delete(list(latest))  # keep the sink small
    return result


@dataclass(frozen=True)
class EntryPoint:
    name: str
    args: st.SearchStrategy[tuple[Any, ...]]
    call: Callable[[World, tuple[Any, ...]], object]
    allowed: tuple[type[BaseException], ...]
    examples: int
    touches: str = "store"  # "store" | "sink" (checks its own effects) | "tree" | "pure"


_search_args = st.tuples(hostile_text, hostile_number, hostile_number, hostile_number)
_VALIDATION = (pydantic.ValidationError,)

ENTRY_POINTS: tuple[EntryPoint, ...] = (
    EntryPoint("search[keyword]", _search_args, _search("kw"), (), 1_900),
    EntryPoint("search[hybrid]", _search_args, _search("hy"), (), 1_000),
    EntryPoint("search[like-fallback]", _search_args, _search("fallback"), (), 800),
    EntryPoint(
        "evidence",
        st.tuples(hostile_text, hostile_number),
        lambda w, a: w.engine.corpus("hy").evidence(a[0], top_k=a[1]),
        (),
        600,
    ),
    EntryPoint(
        "fetch_source",
        st.tuples(hostile_id),
        lambda w, a: w.engine.corpus("kw").fetch_source(a[0]),
        (InvalidArgument, SourceNotFound),
        1_200,
    ),
    EntryPoint(
        "grep",
        st.tuples(
            st.one_of(hostile_text, st.sampled_from(CATASTROPHIC_REGEXES + BROKEN_REGEXES)),
            hostile_number,
            st.booleans(),
        ),
        _grep,
        (InvalidArgument, GrepTimeout),
        1_000,
    ),
    EntryPoint(
        "delete[unknown ids]",
        st.tuples(st.lists(hostile_id, max_size=5)),
        _delete,
        (InvalidArgument,),
        500,
    ),
    EntryPoint(
        "add",
        st.tuples(st.lists(hostile_document, min_size=1, max_size=4)),
        _add,
        (InvalidArgument,),
        500,
        touches="sink",
    ),
    EntryPoint(
        "SearchEngine.corpus",
        st.tuples(hostile_name),
        lambda w, a: w.engine.corpus(a[0]),
        (InvalidArgument, CorpusNotFound),
        700,
        touches="tree",
    ),
    EntryPoint(
        "SearchEngine.drop_corpus",
        st.tuples(hostile_name),
        _drop,
        (InvalidArgument, CorpusNotFound),
        450,
        touches="tree",
    ),
    EntryPoint(
        "SearchEngine.create_corpus",
        st.tuples(hostile_name),
        _create,
        (*_VALIDATION, InvalidArgument, CorpusExists),
        200,
        touches="tree",
    ),
    EntryPoint(
        "CorpusConfig(**fields)",
        st.tuples(config_fields),
        lambda w, a: CorpusConfig(**a[0]),
        _VALIDATION,
        900,
        touches="pure",
    ),
    EntryPoint(
        "CorpusConfig.model_validate_json",
        st.tuples(config_json),
        lambda w, a: CorpusConfig.model_validate_json(a[0]),
        _VALIDATION,
        900,
        touches="pure",
    ),
)
"""Add ``ask`` and filtered ``search`` rows here when they exist."""


@pytest.mark.timeout(600)
@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=lambda e: e.name)
def test_entry_point_survives_hostile_input(world: World, entry: EntryPoint) -> None:
    @settings(
        max_examples=entry.examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(args=entry.args)
    def run(args: tuple[Any, ...]) -> None:
        watched = entry.touches != "pure"
        before = world.writes() if watched else ()
        tree = world.tree() if entry.touches == "tree" else None
        with contextlib.suppress(*entry.allowed):
            entry.call(world, args)
        COUNTS[entry.name] += 1
        if watched:
            assert world.writes() == before, "a call wrote to a corpus it must not touch"
        if tree is not None:
            assert world.tree() == tree, "files changed outside a corpus"

    digest = world.snapshot()
    run()
    assert world.snapshot() == digest, "stored data changed"
    print(f"[hostile] {entry.name}: {COUNTS[entry.name]} inputs, 0 failures")


def test_generated_input_total() -> None:
    """The table's budget is ≥ 10,000 inputs; when every row ran, the count must show it."""
    assert sum(e.examples for e in ENTRY_POINTS) >= 10_000
    if set(COUNTS) != {e.name for e in ENTRY_POINTS}:
        pytest.skip("not every entry point ran in this session")
    total = sum(COUNTS.values())
    print(f"[hostile] total generated inputs: {total}")
    assert total >= 10_000


# -- targeted cases -------------------------------------------------------------------------

_SCHEMA_SQL = "SELECT type, name, sql FROM sqlite_master ORDER BY name"


def _schema(w: World, corpus: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{w.dir(corpus) / 'store.sqlite3'}?mode=ro", uri=True) as conn:
        return conn.execute(_SCHEMA_SQL).fetchall()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("payload", SQL_FRAGMENTS)
def test_sql_injection_through_every_string_that_reaches_sqlite(world: World, payload: str) -> None:
    """Stored verbatim, searched literally, never executed: schema and other rows intact."""
    digest = world.snapshot()
    schemas = {name: _schema(world, name) for name in (*CORPORA, "sink")}
    for name in CORPORA:  # LIKE fallback, tantivy, hybrid: query text and language
        corpus = world.engine.corpus(name)
        _check_passages(world, name, corpus.search(payload, top_k=50))
        _check_passages(world, name, corpus.search(f"printer {payload}", language_id=1))
        corpus.evidence(payload)
    kw = world.engine.corpus("kw")
    for fixed in (True, False):
        with contextlib.suppress(InvalidArgument):
            _check_grep(world, kw.grep(payload, 50, fixed=fixed))
    with pytest.raises((InvalidArgument, SourceNotFound)):
        kw.fetch_source(payload)
    assert kw.delete([payload, f"kw-1{payload}"]) == 0
    with pytest.raises((InvalidArgument, CorpusNotFound)):  # "a--" is a valid name
        world.engine.corpus(payload)
    assert world.snapshot() == digest
    # Through a write: every stored field keeps the payload as data.
    sink = world.engine.corpus("sink")
    doc_id = "sql-" + "".join(ch for ch in payload if ch.isalnum() or ch in "=-/:@") + "-x"
    doc = Document(
        id=doc_id,
        title=payload,
        text=f"injection {payload} text",
        url=f"/q?{payload}",
        access_groups=frozenset({payload}),
    )
    sink.add([doc])
    assert stored_rows(world.dir("sink"))[doc_id][:3] == (payload, doc.text, False)
    public = Document(id=doc_id + "p", title=payload, text=f"injection {payload} text")
    sink.add([public])
    assert sink.fetch_source(public.id).title == payload
    assert public.id in {h.source_id for h in sink.search(f"injection {payload}")}
    assert sink.delete([doc_id, public.id]) == 2
    assert {name: _schema(world, name) for name in schemas} == schemas


@pytest.mark.timeout(120)
def test_path_traversal_through_corpus_names_and_source_ids(world: World) -> None:
    tree = world.tree()
    for name in PATHS:
        for call in (world.engine.corpus, world.engine.drop_corpus):
            with pytest.raises((InvalidArgument, CorpusNotFound)):
                call(name)
        if not is_valid_corpus_name(name):  # "con" is a fine name off Windows
            with pytest.raises(pydantic.ValidationError):
                CorpusConfig(name=name)
    assert world.tree() == tree
    # Source ids may contain '/' and dots (they are keys, never paths): nothing leaves
    # the corpus directory, and the id round-trips exactly. A '.' or '..' segment is
    # refused (a URL client would resolve it), the batch with it whole.
    sink = world.engine.corpus("sink")
    with pytest.raises(InvalidArgument, match="path segment"):
        sink.add([Document(id="a/../../../../../tmp/tandem-pwned", text="traversal")])
    ids = ["tmp/tandem-pwned", "x/.lock", "c:/windows/x", "..a/..b", "a/.../b"]
    sink.add([Document(id=i, title="traversal", text=f"traversal {i}") for i in ids])
    for i in ids:
        assert sink.fetch_source(i).source_id == i
    assert world.tree() == tree, "a source id created a file outside its corpus"
    assert not Path("/tmp/tandem-pwned").exists()
    assert sink.delete(ids) == len(ids)


def _rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def _rss_growth_mb(call: Callable[[], object]) -> float:
    """The call's own peak: Python's allocations exactly (tracemalloc), and the resident
    set sampled every millisecond for native ones (tantivy, SQLite). ``ru_maxrss`` only
    ever grows, so it measured each case against the largest peak before it."""
    before = _rss_mb()
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_mb())
            done.wait(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    tracemalloc.start()
    sampler.start()
    try:
        call()
    finally:
        done.set()
        sampler.join(timeout=30)
        _, python_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return max(python_peak / 2**20, max(peak, _rss_mb()) - before)


HUGE = "é" * 5_000_000 + "a" * 5_000_000  # 10 M characters


def _expect(
    errors: tuple[type[BaseException], ...], fn: Callable[[], object]
) -> Callable[[], object]:
    def run() -> object:
        if not errors:
            return fn()
        with pytest.raises(errors):
            fn()
        return None

    return run


@pytest.mark.timeout(120)
def test_ten_megabyte_strings_are_refused_or_clamped_in_bounded_memory(world: World) -> None:
    kw, hy, sink = (world.engine.corpus(n) for n in ("kw", "hy", "sink"))
    digest, sink_before = world.snapshot(), store_snapshot(world.dir("sink"))
    cases: dict[str, Callable[[], object]] = {
        "search": _expect((), lambda: kw.search(HUGE)),
        "search[hybrid]": _expect((), lambda: hy.search("printer " + HUGE)),
        "evidence": _expect((), lambda: hy.evidence(HUGE)),
        "grep": _expect((InvalidArgument,), lambda: kw.grep(HUGE)),
        "fetch_source": _expect((InvalidArgument,), lambda: kw.fetch_source(HUGE)),
        "delete": _expect((InvalidArgument,), lambda: kw.delete([HUGE])),
        "add[text]": _expect((InvalidArgument,), lambda: sink.add([Document(id="big", text=HUGE)])),
        "add[title]": _expect((InvalidArgument,), lambda: sink.add([Document(id="b", title=HUGE)])),
        "corpus": _expect((InvalidArgument,), lambda: world.engine.corpus(HUGE)),
        "config": _expect((pydantic.ValidationError,), lambda: CorpusConfig(name=HUGE)),
        "config_json": _expect(
            (pydantic.ValidationError,),
            lambda: CorpusConfig.model_validate_json('{"name": "' + HUGE + '"}'),
        ),
    }
    growth = {name: _rss_growth_mb(call) for name, call in cases.items()}
    print(f"[hostile] 10 MB inputs, peak RSS growth (MB): {growth}")
    # 10 M characters are 20 MB of UTF-8: a bounded call copies the input a few times at most.
    assert all(mb < 200 for mb in growth.values()), growth
    assert world.snapshot() == digest
    assert store_snapshot(world.dir("sink")) == sink_before


@pytest.mark.timeout(60)  # GREP_TIMEOUT_S is 2 s per call; a hang would blow this
@pytest.mark.parametrize("pattern", CATASTROPHIC_REGEXES)
def test_catastrophic_regex_is_cut_off_by_the_grep_budget(world: World, pattern: str) -> None:
    sink = world.engine.corpus("sink")
    trap = Document(id="redos", text=("a" * 40 + "!\n") * 50 + "x" * 40 + " " * 30 + "!")
    sink.add([trap])
    try:
        # Either the regex engine copes within the budget, or the budget runs out and
        # says so (an explicit error, never a silently short list).
        try:
            found = sink.grep(pattern, 200)
        except GrepTimeout as exc:
            assert "time budget" in str(exc)
            found = list(exc.matches)
        assert all(m.source_id == "redos" for m in found)
    finally:
        sink.delete(["redos"])
