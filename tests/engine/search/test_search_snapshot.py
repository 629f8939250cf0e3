"""A search reads one immutable snapshot of its corpus: a switch of embedder, or an index
rebuild, running at the same time never turns a search into an error."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from engine import CorpusConfig, Document, SearchEngine
from engine.config import EmbedderSpec, SentenceTransformerEmbedding
from engine.storage import DocumentStore, field_queries
from tests.support.fakes import (
    RecordingEmbedder,
    SlowHealthEmbedder,
    WordHashEmbedder,
    factory_for,
)

GENEROUS_S = 60.0
_SPEC = SentenceTransformerEmbedding(model="word-hash")


class ParkedEmbedder(RecordingEmbedder):
    """Its document embedding parks until the test lets it go (a re-embedding pass)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.embedding = threading.Event()
        self.let_go = threading.Event()

    def embed(self, texts: object) -> npt.NDArray[np.float32]:
        self.embedding.set()
        self.let_go.wait(GENEROUS_S)
        return super().embed(texts)  # type: ignore[arg-type]


def _docs(n: int) -> list[Document]:
    return [Document(id=f"d{i}", title=f"alpha {i}", text=f"bravo charlie {i}") for i in range(n)]


def test_a_search_in_flight_during_a_switch_answers(tmp_path: Path) -> None:
    """Regression: the switch emptied the shared search parts between the router's read
    and the hybrid arm's, and the search ended in a bare AssertionError."""
    a = SlowHealthEmbedder(dimension=16, name="model-a")
    b = ParkedEmbedder(dimension=16, name="model-b")
    by_model: dict[str, RecordingEmbedder] = {"model-a": a, "model-b": b}

    def factory(spec: EmbedderSpec) -> RecordingEmbedder:
        assert isinstance(spec, SentenceTransformerEmbedding)
        return by_model[spec.model]

    with SearchEngine(tmp_path / "e", embedder_factory=factory) as engine:
        corpus = engine.create_corpus(
            CorpusConfig(name="docs", embedder=SentenceTransformerEmbedding(model="model-a"))
        )
        corpus.add(_docs(6))
        answers: list[object] = []

        def search() -> None:
            try:
                answers.append(corpus.search("alpha bravo", top_k=3))
            except BaseException as exc:  # the defect: anything raised is the failure
                answers.append(exc)

        a.park_health = True
        searcher = threading.Thread(target=search)
        searcher.start()
        assert a.in_health.wait(GENEROUS_S)  # routed: hybrid, with model-a
        switcher = threading.Thread(target=engine.switch_embedder, args=("docs", "model-b"))
        switcher.start()
        assert b.embedding.wait(GENEROUS_S)  # the switch is mid-way: vectors dropped
        a.let_go.set()
        searcher.join(GENEROUS_S)
        b.let_go.set()
        switcher.join(GENEROUS_S)
        assert not searcher.is_alive() and not switcher.is_alive()
        assert len(answers) == 1
        assert isinstance(answers[0], list), answers[0]
        assert len(answers[0]) == 3  # answered (from keywords: the vectors were dropped)
        a.park_health = False
        after = corpus.search("alpha bravo", top_k=6)
        assert len(after) == 6 and all(p.ranks.dense is not None for p in after)


def test_searches_in_a_loop_during_switches_and_rebuilds_all_answer(tmp_path: Path) -> None:
    a = RecordingEmbedder(dimension=16, name="model-a")
    b = RecordingEmbedder(dimension=16, name="model-b")
    by_model = {"model-a": a, "model-b": b}

    def factory(spec: EmbedderSpec) -> RecordingEmbedder:
        assert isinstance(spec, SentenceTransformerEmbedding)
        return by_model[spec.model]

    with SearchEngine(tmp_path / "e", embedder_factory=factory) as engine:
        corpus = engine.create_corpus(
            CorpusConfig(name="docs", embedder=SentenceTransformerEmbedding(model="model-a"))
        )
        corpus.add(_docs(40))
        stop = threading.Event()
        errors: list[BaseException] = []
        counts: list[int] = []

        def loop() -> None:
            while not stop.is_set():
                try:
                    counts.append(len(corpus.search("alpha bravo charlie", top_k=5)))
                except BaseException as exc:
                    errors.append(exc)
                    return

        readers = [threading.Thread(target=loop) for _ in range(3)]
        for reader in readers:
            reader.start()
        try:
            for model in ("model-b", "model-a", "model-b"):
                engine.switch_embedder("docs", model, batch_size=7)
                corpus._indexes.drop_vectors(corpus._store.seq)  # a rebuild from the store
                corpus._indexes.open()
        finally:
            stop.set()
            for reader in readers:
                reader.join(GENEROUS_S)
        assert errors == []
        assert counts and all(n == 5 for n in counts)


def _version_of(title: str, excerpt: str) -> tuple[str, str]:
    return title.split()[-1], next(w for w in excerpt.split() if w.startswith("ver"))[3:]


def test_a_keyword_passage_shows_one_version_when_a_write_lands_mid_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the keyword arm cut the excerpt from one read of the store and the
    passage took its title from a later one, so an update landing in between showed the
    new title over the old excerpt (found by review: 490 of 67,674 searches racing a
    writer in another process). The title now comes with the text it was cut with."""
    with SearchEngine(tmp_path) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="c", embedder=None))
        corpus.add([Document(id="d", title="title 1", text="alpha common ver1 words")])
        original = DocumentStore.headers
        writes = iter([Document(id="d", title="title 2", text="alpha common ver2 words")])

        def headers_after_a_write(store: DocumentStore, *args: Any, **kwargs: Any) -> Any:
            for doc in writes:  # once: the update lands after the arm read the text
                corpus.add([doc])
            return original(store, *args, **kwargs)

        monkeypatch.setattr(DocumentStore, "headers", headers_after_a_write)
        [hit] = corpus.search("alpha common")
        title_version, text_version = _version_of(hit.title, hit.excerpt)
        assert title_version == text_version
        [hit] = corpus.search("alpha common")  # and the next search shows the new one
        assert _version_of(hit.title, hit.excerpt) == ("2", "2")


def test_a_hybrid_passage_shows_one_version_when_a_write_lands_mid_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hybrid page reads its texts after the headers: both come from one read
    snapshot now, so a write between them cannot pair two versions."""
    embedder = WordHashEmbedder()
    with SearchEngine(tmp_path, embedder_factory=factory_for(embedder)) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="c", embedder=_SPEC))
        corpus.add([Document(id="d", title="title 1", text="alpha common ver1 words")])
        original = field_queries.public_headers
        writes = iter([Document(id="d", title="title 2", text="alpha common ver2 words")])

        def headers_then_a_write(*args: Any) -> Any:
            found = original(*args)
            for doc in writes:  # once: between the headers' read and the texts'
                corpus.add([doc])
            return found

        monkeypatch.setattr(field_queries, "public_headers", headers_then_a_write)
        [hit] = corpus.search("alpha common")
        assert hit.ranks.dense is not None  # the hybrid path ran
        title_version, text_version = _version_of(hit.title, hit.excerpt)
        assert title_version == text_version
