"""No leaks: ≥ 10,000 randomised reads never expose a non-public (or deleted) document.

A third of the documents are non-public. They share every word with public ones (so both
arms rank them high) and carry a unique marker token (``zqsecret<n>``) in title, text
and URL, so an excerpt, a grep line or an evidence block that shows any of their text is
caught, not only a hit that names their id. Some of them were public first and then
restricted in place (same text, so the stored vector is re-used: stale index entries and
cached allow-lists are exercised), some were deleted, some were stored degraded (no vector).

Reads go through ``READ_SURFACES`` (search, evidence, fetch_source, grep — add ``ask`` and
filtered search there) on keyword, hybrid, degraded-hybrid and LIKE-fallback corpora,
with and without language ids, with the embedder up, down (``is_available()`` False) or
failing (``embed`` raises ``EmbedderUnavailable``). Figures print with ``-s``.
"""

from __future__ import annotations

import collections
import os
import random
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from engine import (
    Corpus,
    CorpusConfig,
    Document,
    SearchEngine,
    SentenceTransformerEmbedding,
    SourceNotFound,
)
from tests.support.fakes import POISON, WordHashEmbedder, factory_for
from tests.support.reliability_support import EVIDENCE_ID, READ_SURFACES, ReadCall, faiss_threads

QUERIES = int(os.environ.get("TANDEM_LEAK_QUERIES", "10200"))
SEED = 8
N_DOCS = 90
VOCAB = (
    *("printer", "fuser", "paper", "tray", "network", "invoice", "refund", "parcel"),
    *("locker", "password", "reset", "account", "delivery", "order", "shipping", "error"),
    *("warranty", "battery", "screen", "cable", "router", "internal", "staff"),
)
MARKER = re.compile(r"zqsecret\d+")
LANGUAGES = {1: "de", 2: "simple"}
CORPORA = ("kw", "hy", "hy-degraded", "fallback")


def doc_id(i: int) -> str:
    return f"doc{i:03d}x"  # no id is a substring of another


def _text(i: int, rng: random.Random) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(25))


def _document(i: int, text: str, restricted: bool, marked: bool) -> Document:
    mark = f" zqsecret{i}" if marked else ""
    return Document(
        id=doc_id(i),
        title=f"{VOCAB[i % len(VOCAB)]} notes{mark}",
        text=f"{text}{mark} {text}",
        url=f"/kb/{i}{mark.strip() and '/zqsecret' + str(i)}",
        language_id=i % 3,
        access_groups=frozenset({"staff"}) if restricted else frozenset(),
    )


@dataclass
class World:
    engine: SearchEngine
    embedder: WordHashEmbedder
    secret_ids: frozenset[str]  # non-public or deleted at the end
    all_ids: tuple[str, ...]


def _fill(corpus: Corpus, degraded_phase: bool) -> set[str]:
    """Build the corpus; returns the ids that must never be exposed."""
    rng = random.Random(SEED)
    texts = {i: _text(i, rng) for i in range(N_DOCS)}
    if degraded_phase:  # the first half can never be embedded: it stays degraded
        texts |= {i: f"{texts[i]} {POISON}" for i in range(N_DOCS // 2)}
    secret: set[str] = set()
    docs = []
    for i in range(N_DOCS):
        marked = i % 3 == 0
        # i % 6 == 0: public first (marker and all), restricted in place below.
        docs.append(_document(i, texts[i], restricted=marked and i % 6 == 3, marked=marked))
    corpus.add(docs[N_DOCS // 2 :])  # embedded
    corpus.add(docs[: N_DOCS // 2])  # poisoned in the degraded corpus: no vectors
    corpus.search("printer")  # warm caches (allow-lists) while everything is public-ish
    corpus.add([_document(i, texts[i], True, True) for i in range(0, N_DOCS, 6)])
    secret |= {doc_id(i) for i in range(0, N_DOCS, 3)}
    gone = [doc_id(i) for i in range(1, N_DOCS, 15)]  # deleted public documents
    corpus.add([_document(int(g[3:6]), "zqsecret" + g, False, True) for g in gone])
    assert corpus.delete(gone) == len(gone)
    secret |= set(gone)
    return secret


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    embedder = WordHashEmbedder()
    embedder.refuse_poison = True
    engine = SearchEngine(tmp_path_factory.mktemp("leaks"), embedder_factory=factory_for(embedder))
    fake = SentenceTransformerEmbedding(model="fake")
    secret: set[str] = set()
    for name in CORPORA:
        hybrid = name.startswith("hy")
        config = CorpusConfig(name=name, embedder=fake if hybrid else None, languages=LANGUAGES)
        secret |= _fill(engine.create_corpus(config), name == "hy-degraded")
    stats = engine.corpus("hy-degraded").stats()
    poisoned_alive = [i for i in range(N_DOCS // 2) if i % 15 != 1]
    assert stats["degraded"] == len(poisoned_alive) and stats["vectors"] > 0, stats
    shutil.rmtree(engine.path / "corpora" / "fallback" / "tantivy")  # LIKE path from here
    with faiss_threads(1):
        yield World(engine, embedder, frozenset(secret), tuple(doc_id(i) for i in range(N_DOCS)))
    engine.close()


def _query(rng: random.Random, all_ids: tuple[str, ...]) -> str:
    kind = rng.random()
    if kind < 0.5:
        return " ".join(rng.sample(VOCAB, rng.randint(1, 4)))
    if kind < 0.75:  # aim straight at a secret
        secret = f"zqsecret{rng.randrange(0, N_DOCS, 3)}"
        return secret if rng.random() < 0.5 else f"{rng.choice(VOCAB)} {secret}"
    if kind < 0.85:
        return rng.choice(all_ids)
    return rng.choice(["staff", "internal notes", "zqsecret", "kb", "notes", "a", "%", "_"])


def test_no_non_public_document_is_ever_exposed(world: World) -> None:
    rng = random.Random(SEED)
    counts: collections.Counter[str] = collections.Counter()
    leaks: list[tuple[str, str, str]] = []
    surfaces = sorted(READ_SURFACES)
    try:
        for _ in range(QUERIES):
            name = rng.choice(CORPORA)
            state = rng.choice(["up", "up", "down", "failing"])
            world.embedder.down = state == "down"
            world.embedder.failing = state == "failing"
            surface = rng.choice(surfaces)
            call = ReadCall(
                query=_query(rng, world.all_ids),
                top_k=rng.choice([1, 5, 10, 50, 200]),
                offset=rng.choice([0, 0, 0, 3, 20]),
                language_id=rng.choice([None, None, 0, 1, 2, 7]),
                source_id=rng.choice(world.all_ids),
            )
            try:
                exposed = READ_SURFACES[surface](world.engine.corpus(name), call)
            except SourceNotFound:
                exposed = []
            counts[f"{surface}/{name}/{state}"] += 1
            for item in exposed:
                text = " ".join(item.texts)
                if item.source_id in world.secret_ids or MARKER.search(text):
                    leaks.append((surface, name, item.source_id))
                if item.source_id == EVIDENCE_ID:
                    named = {s for s in world.secret_ids if s in text}
                    leaks += [(surface, name, s) for s in named]
    finally:
        world.embedder.down = world.embedder.failing = False
    by_surface = collections.Counter(k.split("/")[0] for k in counts.elements())
    print(f"[no-leaks] {sum(counts.values())} reads, {len(leaks)} leaks; by surface {by_surface}")
    assert sum(counts.values()) == QUERIES
    assert not leaks, leaks[:10]


def test_secrets_are_really_there(world: World) -> None:
    """The harness could pass vacuously; show the restricted documents exist and match."""
    kw = world.engine.corpus("kw")
    assert kw.stats()["documents"] == N_DOCS - len(range(1, N_DOCS, 15))
    hits = kw.search("zqsecret0 zqsecret3")
    assert hits == []  # they exist (below) but nobody may see them
    assert kw._store.count_non_public() == len(range(0, N_DOCS, 3))  # stored, restricted
    public_hits = kw.search(" ".join(VOCAB[:4]), top_k=50)
    assert public_hits and all(h.source_id not in world.secret_ids for h in public_hits)
