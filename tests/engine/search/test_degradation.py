"""The embedding-degraded lifecycle with a deterministic fake embedder.

Degrade at ingest, answer from keywords, heal on the next add / ``repair()`` / the
background repairer, restart mid-degradation, switch embedders, and never embed a
document twice or a healthy one again. Gauges are read from a real HTTP scrape.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engine import CorpusConfig, Document, InvalidArgument, SearchEngine
from engine.config import EmbedderSpec, SentenceTransformerEmbedding
from engine.health_checks import HEALTH_WAIT_S
from engine.surfaces.metrics_http import MetricsServer
from engine.write.repairer import BackgroundRepairer
from tests.support.fakes import RecordingEmbedder, SlowHealthEmbedder
from tests.support.metrics_support import docs, embed_text, scrape, scrape_text, value

DEGRADED = "tandem_documents_degraded"
GENEROUS_S = 60.0


def _spec(model: str) -> SentenceTransformerEmbedding:
    return SentenceTransformerEmbedding(model=model)


class Rig:
    """An engine over ``path`` whose every spec maps to one RecordingEmbedder per model."""

    def __init__(self, path: Path, embedders: dict[str, RecordingEmbedder]) -> None:
        self.embedders = embedders
        self.engine = SearchEngine(path, embedder_factory=self._factory)
        # A scrape waits 1 s of real time for the embedder checks it starts; a stalled CI
        # machine could miss that and read the value before. Tests wait for the answer.
        self.engine._health_checks._wait_s = GENEROUS_S
        self.server: MetricsServer = self.engine.serve_metrics()

    def _factory(self, spec: EmbedderSpec) -> RecordingEmbedder:
        assert isinstance(spec, SentenceTransformerEmbedding)
        return self.embedders.setdefault(
            spec.model, RecordingEmbedder(dimension=16, name=spec.model)
        )

    def gauge(self, corpus: str = "docs", name: str = DEGRADED) -> float | None:
        return value(scrape(self.server.url), name, corpus=corpus)

    def close(self) -> None:
        self.engine.close()


@pytest.fixture
def embedder() -> RecordingEmbedder:
    return RecordingEmbedder(dimension=16, name="model-a")


@pytest.fixture
def rig(tmp_path: Path, embedder: RecordingEmbedder) -> Iterator[Rig]:
    r = Rig(tmp_path / "engine", {"model-a": embedder})
    r.engine.create_corpus(CorpusConfig(name="docs", embedder=_spec("model-a")))
    yield r
    r.close()


def _assert_embedded_once(embedder: RecordingEmbedder) -> None:
    twice = {text: n for text, n in embedder.embedded.items() if n > 1}
    assert not twice, f"embedded more than once: {twice}"


def test_down_at_ingest_degrades_exactly_and_keyword_answers(
    rig: Rig, embedder: RecordingEmbedder
) -> None:
    corpus = rig.engine.corpus("docs")
    corpus.add(docs(3, "ok"))
    assert rig.gauge() == 0
    embedder.down = True
    result = corpus.add(docs(4, "late"))
    assert result.degraded == 4
    assert rig.gauge() == 4
    assert rig.gauge(name="tandem_documents") == 7
    assert rig.gauge(name="tandem_embedder_up") == 0

    hits = corpus.search("charlie late")
    assert {h.source_id for h in hits} >= {f"late{i}" for i in range(4)}
    assert all(h.ranks.dense is None for h in hits)  # answered from keywords
    samples = scrape(rig.server.url)
    assert value(samples, "tandem_searches_total", corpus="docs", strategy="keyword") == 1
    assert value(samples, "tandem_searches_total", corpus="docs", strategy="hybrid") == 0
    reason = "embedder_down"
    assert value(samples, "tandem_search_fallbacks_total", corpus="docs", reason=reason) == 1


def test_next_add_heals_without_embedding_anything_twice(
    rig: Rig, embedder: RecordingEmbedder
) -> None:
    corpus = rig.engine.corpus("docs")
    healthy = docs(3, "ok")
    corpus.add(healthy)
    embedder.down = True
    late = docs(4, "late")
    corpus.add(late)
    assert rig.gauge() == 4
    embedder.down = False
    corpus.add(docs(1, "new"))
    assert rig.gauge() == 0
    assert value(scrape(rig.server.url), "tandem_repair_documents_total", corpus="docs") == 4
    _assert_embedded_once(embedder)
    assert set(embedder.embedded) == {embed_text(d) for d in [*healthy, *late, *docs(1, "new")]}
    # Hybrid again: the healed documents are in the dense arm.
    hits = corpus.search("charlie late")
    assert {f"late{i}" for i in range(4)} <= {h.source_id for h in hits}
    assert all(h.ranks.dense is not None for h in hits)


def test_a_degraded_document_replaced_by_an_add_is_embedded_once_with_its_new_text(
    rig: Rig, embedder: RecordingEmbedder
) -> None:
    corpus = rig.engine.corpus("docs")
    embedder.down = True
    old = Document(id="x", title="Old", text="old words")
    corpus.add([old, *docs(2)])
    embedder.down = False
    new = Document(id="x", title="New", text="new words")
    corpus.add([new])
    assert rig.gauge() == 0
    assert embed_text(old) not in embedder.embedded
    assert embedder.embedded[embed_text(new)] == 1
    _assert_embedded_once(embedder)


def test_unchanged_re_add_of_healthy_documents_costs_no_model_call(
    rig: Rig, embedder: RecordingEmbedder
) -> None:
    corpus = rig.engine.corpus("docs")
    corpus.add(docs(5))
    calls = embedder.calls
    result = corpus.add(docs(5))
    assert result.unchanged == 5
    assert embedder.calls == calls
    assert corpus.repair() == 0
    assert embedder.calls == calls


def test_repair_heals_in_bounded_batches_and_stops_when_the_provider_fails(
    rig: Rig, embedder: RecordingEmbedder
) -> None:
    corpus = rig.engine.corpus("docs")
    embedder.down = True
    corpus.add(docs(10))
    assert corpus.repair() == 0  # still down: nothing healed, nothing raised
    assert rig.gauge() == 10
    embedder.down = False
    calls = embedder.calls
    assert corpus.repair(batch_size=3, max_documents=5) == 5
    assert embedder.calls - calls == 2  # batches of 3 and 2
    assert rig.gauge() == 5
    embedder.failing = True
    assert corpus.repair(batch_size=2) == 0
    assert rig.gauge() == 5
    embedder.failing = False
    assert corpus.repair(batch_size=2) == 5
    assert rig.gauge() == 0
    _assert_embedded_once(embedder)
    with pytest.raises(InvalidArgument):
        corpus.repair(batch_size=0)
    with pytest.raises(InvalidArgument):
        corpus.repair(max_documents=0)


def test_embed_errors_at_query_time_fall_back_with_their_own_reason(
    rig: Rig, embedder: RecordingEmbedder
) -> None:
    corpus = rig.engine.corpus("docs")
    corpus.add(docs(3))
    embedder.failing = True  # available, but every embed call raises
    hits = corpus.search("alpha bravo")
    assert len(hits) == 3
    samples = scrape(rig.server.url)
    reason = "embedder_error"
    assert value(samples, "tandem_search_fallbacks_total", corpus="docs", reason=reason) == 1
    assert value(samples, "tandem_searches_total", corpus="docs", strategy="keyword") == 1
    # The gauge is the health check's answer, asked at each scrape: this fake says it is
    # up while its embeddings fail (a real provider's breaker opens and says down).
    assert value(samples, "tandem_embedder_up", corpus="docs") == 1


def test_an_embedder_whose_answers_are_refused_reads_down(
    rig: Rig, embedder: RecordingEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (found by review): the scrape's health check set the gauge back to 1
    while every answer was refused (zero vectors here; a model re-pulled under its name
    with another length alike): the provider says it is up. A refused answer now reads
    down until an answer is taken again; a failure of the provider itself does not stick
    (one failed query during a blip kept an idle corpus reading down)."""
    corpus = rig.engine.corpus("docs")
    corpus.add(docs(3))
    real = embedder.embed
    monkeypatch.setattr(embedder, "embed", lambda texts: np.zeros((len(texts), 16), np.float32))
    assert all(h.ranks.dense is None for h in corpus.search("alpha bravo"))
    assert rig.gauge(name="tandem_embedder_up") == 0
    assert corpus.stats()["embedder_up"] is False
    monkeypatch.setattr(embedder, "embed", real)
    assert any(h.ranks.dense is not None for h in corpus.search("alpha bravo"))
    assert rig.gauge(name="tandem_embedder_up") == 1
    embedder.failing = True  # the provider fails, its health check says up
    corpus.search("alpha bravo")
    embedder.failing = False
    assert rig.gauge(name="tandem_embedder_up") == 1  # nothing sticks


def test_deleting_degraded_documents_lowers_the_gauge(
    rig: Rig, embedder: RecordingEmbedder
) -> None:
    corpus = rig.engine.corpus("docs")
    embedder.down = True
    corpus.add(docs(5))
    assert corpus.delete(["d0", "d1", "missing"]) == 2
    assert rig.gauge() == 3
    assert rig.gauge(name="tandem_documents") == 3


def test_gauge_is_exact_after_a_restart_mid_degradation(tmp_path: Path) -> None:
    embedder = RecordingEmbedder(name="model-a")
    first = Rig(tmp_path / "engine", {"model-a": embedder})
    corpus = first.engine.create_corpus(CorpusConfig(name="docs", embedder=_spec("model-a")))
    corpus.add(docs(4, "ok"))
    embedder.down = True
    corpus.add(docs(6, "late"))
    assert first.gauge() == 6
    first.close()

    embedder2 = RecordingEmbedder(name="model-a")
    embedder2.down = True
    second = Rig(tmp_path / "engine", {"model-a": embedder2})
    try:
        assert second.gauge() == 6  # nothing opened yet: the scrape opens it, exact
        assert second.gauge(name="tandem_documents") == 10
        embedder2.down = False
        assert second.engine.corpus("docs").repair() == 6
        assert second.gauge() == 0
        # Healthy documents from before the restart were not re-embedded.
        assert set(embedder2.embedded) == {embed_text(d) for d in docs(6, "late")}
    finally:
        second.close()


def test_background_repairer_heals_bounded_batches(rig: Rig, embedder: RecordingEmbedder) -> None:
    corpus = rig.engine.corpus("docs")
    embedder.down = True
    corpus.add(docs(7))
    repairer = BackgroundRepairer(lambda: [corpus], interval_s=3600, batch_size=3)
    assert repairer.run_once() == 0  # provider down: nothing, no exception
    embedder.down = False
    assert repairer.run_once() == 3
    assert rig.gauge() == 4
    assert repairer.run_once() == 3
    assert repairer.run_once() == 1
    assert repairer.run_once() == 0
    assert rig.gauge() == 0
    assert repairer.healed == 7
    _assert_embedded_once(embedder)
    with pytest.raises(ValueError):
        BackgroundRepairer(lambda: [], batch_size=0)


def test_engine_repairer_thread_heals_and_stops(rig: Rig, embedder: RecordingEmbedder) -> None:
    corpus = rig.engine.corpus("docs")
    embedder.down = True
    corpus.add(docs(5))
    embedder.down = False
    repairer = rig.engine.start_repairer(interval_s=0.05, batch_size=2)
    with pytest.raises(InvalidArgument):
        rig.engine.start_repairer()
    deadline = time.monotonic() + 30
    while rig.gauge() != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rig.gauge() == 0
    repairer.stop()
    assert not repairer.running
    _assert_embedded_once(embedder)


def test_the_repairer_heals_a_corpus_nobody_opened(tmp_path: Path) -> None:
    """Regression: the repairer walked the corpora opened in its engine only, so
    ``SearchEngine(path).start_repairer()`` — the natural long-running setup — healed
    nothing until something opened each corpus."""
    embedder = RecordingEmbedder(dimension=16, name="model-a")
    first = Rig(tmp_path / "e", {"model-a": embedder})
    first.engine.create_corpus(CorpusConfig(name="docs", embedder=_spec("model-a")))
    embedder.down = True
    first.engine.corpus("docs").add(docs(4))
    first.close()
    embedder.down = False

    def degraded() -> int | bool:  # read through another engine: opening would heal
        with SearchEngine(tmp_path / "e", read_only=True, embedder_factory=lambda s: embedder) as e:
            return e.corpus("docs").stats()["degraded"]

    assert degraded() == 4
    with SearchEngine(tmp_path / "e", embedder_factory=lambda spec: embedder) as engine:
        repairer = engine.start_repairer(interval_s=0.05)
        deadline = time.monotonic() + 30
        while degraded() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert degraded() == 0
        repairer.stop()


def test_a_corpus_that_cannot_open_does_not_stop_the_repairer(tmp_path: Path) -> None:
    """Regression: the repairer lists every corpus of the directory now; one whose config
    did not parse ended the repairer's thread for good."""
    embedder = RecordingEmbedder(dimension=16, name="model-a")
    first = Rig(tmp_path / "e", {"model-a": embedder})
    first.engine.create_corpus(CorpusConfig(name="bad", embedder=None))
    first.engine.create_corpus(CorpusConfig(name="docs", embedder=_spec("model-a")))
    embedder.down = True
    first.engine.corpus("docs").add(docs(3))
    first.close()
    (tmp_path / "e" / "corpora" / "bad" / "config.json").write_text("{x", encoding="utf-8")
    embedder.down = False
    with SearchEngine(tmp_path / "e", embedder_factory=lambda spec: embedder) as engine:
        repairer = engine.start_repairer(interval_s=0.05)
        deadline = time.monotonic() + 30
        while repairer.passes < 3 and repairer.running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert repairer.running and repairer.passes >= 3
        assert engine.corpus("docs").stats()["degraded"] == 0
        repairer.stop()


def test_engine_close_stops_the_repairer(tmp_path: Path) -> None:
    rig = Rig(tmp_path / "e", {})
    repairer = rig.engine.start_repairer(interval_s=0.05)
    assert repairer.running
    rig.close()
    assert not repairer.running
    assert not rig.server.running


def test_switch_embedder_re_embeds_everything_answering_from_keywords_meanwhile(
    tmp_path: Path,
) -> None:
    a = RecordingEmbedder(dimension=16, name="model-a")
    b = RecordingEmbedder(dimension=24, name="model-b")
    rig = Rig(tmp_path / "engine", {"model-a": a, "model-b": b})
    corpus = rig.engine.create_corpus(CorpusConfig(name="docs", embedder=_spec("model-a")))
    originals = docs(7)
    corpus.add(originals)
    progress: list[tuple[int, int]] = []
    answers: list[int] = []

    def on_progress(done: int, total: int) -> None:
        progress.append((done, total))
        if done < total:  # mid-switch: searches still answer, from keywords
            hits = corpus.search("alpha bravo")
            answers.append(len(hits))
            assert all(h.ranks.dense is None for h in hits)
            assert rig.gauge() == total - done

    done = rig.engine.switch_embedder("docs", "model-b", batch_size=3, on_progress=on_progress)
    assert done == 7
    assert progress == [(3, 7), (6, 7), (7, 7)]
    assert answers == [7, 7]
    assert rig.gauge() == 0
    assert set(b.embedded) == {embed_text(d) for d in originals}
    _assert_embedded_once(b)
    hits = corpus.search("charlie number 4")
    assert len(hits) == 7 and all(h.ranks.dense is not None for h in hits)
    assert corpus.stats()["vectors"] == 7
    saved = json.loads((tmp_path / "engine/corpora/docs/config.json").read_text())
    assert saved["embedder"]["model"] == "model-b"
    assert not list((tmp_path / "engine/corpora/docs").glob("*.tmp"))
    rig.close()

    # Reopened, the corpus uses the new model and nothing is re-embedded.
    b2 = RecordingEmbedder(dimension=24, name="model-b")
    again = Rig(tmp_path / "engine", {"model-b": b2})
    try:
        reopened = again.engine.corpus("docs")
        assert reopened.config.embedder == SentenceTransformerEmbedding(model="model-b")
        assert again.gauge() == 0
        assert all(h.ranks.dense is not None for h in reopened.search("charlie number 4"))
        assert b2.embedded.total() == 1  # just the query
    finally:
        again.close()


def test_switch_with_the_new_provider_down_leaves_documents_degraded_until_repair(
    tmp_path: Path,
) -> None:
    a = RecordingEmbedder(dimension=16, name="model-a")
    b = RecordingEmbedder(dimension=24, name="model-b")
    b.down = True
    rig = Rig(tmp_path / "engine", {"model-a": a, "model-b": b})
    try:
        corpus = rig.engine.create_corpus(CorpusConfig(name="docs", embedder=_spec("model-a")))
        corpus.add(docs(5))
        assert rig.engine.switch_embedder("docs", "model-b") == 0
        assert rig.gauge() == 5
        assert len(corpus.search("alpha bravo")) == 5
        b.down = False
        assert corpus.repair() == 5
        assert rig.gauge() == 0
        with pytest.raises(InvalidArgument):
            rig.engine.switch_embedder("docs", None)  # type: ignore[arg-type]
        rig.engine.create_corpus(CorpusConfig(name="kw", embedder=None))
        with pytest.raises(InvalidArgument):
            rig.engine.switch_embedder("kw", "model-b")
    finally:
        rig.close()


def test_a_provider_that_changed_dimension_across_a_restart_degrades_instead_of_failing(
    tmp_path: Path,
) -> None:
    first = Rig(tmp_path / "engine", {"model-a": RecordingEmbedder(dimension=16, name="model-a")})
    first.engine.create_corpus(CorpusConfig(name="docs", embedder=_spec("model-a"))).add(docs(3))
    first.close()
    wider = RecordingEmbedder(dimension=20, name="model-a")  # same name, new dimension
    second = Rig(tmp_path / "engine", {"model-a": wider})
    try:
        corpus = second.engine.corpus("docs")
        assert corpus.add(docs(2, "new")).degraded == 2
        assert second.gauge() == 2
        assert len(corpus.search("alpha bravo")) == 5  # keyword answer, no exception
        samples = scrape(second.server.url)
        reason = "embedder_error"
        assert value(samples, "tandem_search_fallbacks_total", corpus="docs", reason=reason) == 1
        assert corpus.stats()["vectors"] == 3
    finally:
        second.close()


def test_no_query_or_document_text_in_logs_or_metrics(
    rig: Rig, embedder: RecordingEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    secret_doc = "zanzibarsecretdoc"
    secret_query = "quetzalsecretquery"
    caplog.set_level(logging.DEBUG)
    corpus = rig.engine.corpus("docs")
    corpus.add([Document(id="s1", title=f"{secret_doc} title", text=f"{secret_doc} body")])
    embedder.down = True
    corpus.add([Document(id="s2", title=secret_doc, text=f"more {secret_doc}")])
    corpus.search(f"{secret_query} {secret_doc}")
    embedder.down = False
    embedder.failing = True
    corpus.search(f"{secret_query} again")
    corpus.add([Document(id="s3", title=secret_doc, text=secret_doc)])
    embedder.failing = False
    corpus.repair()
    corpus.search(secret_query)
    text = scrape_text(rig.server.url)
    assert secret_query not in text and secret_doc not in text
    assert caplog.records, "the scenario should log something (degradation warnings)"
    for record in caplog.records:
        message = record.getMessage()
        assert secret_query not in message and secret_doc not in message, message


def test_concurrent_scrapes_during_writes_never_see_more_than_the_truth(
    rig: Rig, embedder: RecordingEmbedder
) -> None:
    corpus = rig.engine.corpus("docs")
    embedder.down = True
    seen: list[float] = []
    stop = threading.Event()

    def scraper() -> None:
        while not stop.is_set():
            got = rig.gauge()
            if got is not None:
                seen.append(got)

    thread = threading.Thread(target=scraper)
    thread.start()
    try:
        for batch in range(5):
            corpus.add(docs(4, start=batch * 4))
    finally:
        stop.set()
        thread.join()
    assert rig.gauge() == 20
    assert seen == sorted(seen)  # monotone while only degraded documents are added
    assert all(v in {0, 4, 8, 12, 16, 20} for v in seen)


def test_the_embedder_up_gauge_follows_health_checks_without_searches(tmp_path: Path) -> None:
    """Regression: only searches and adds set ``tandem_embedder_up``, so an idle corpus
    kept reading 1 after its embedder went down (``stats`` said down), and a corpus
    reopened while it was down had no series at all for an alert to fire on. Each scrape
    now asks the embedder (as cheaply as a search does)."""
    embedder = RecordingEmbedder(dimension=16, name="model-a")
    rig = Rig(tmp_path / "engine", {"model-a": embedder})
    try:
        corpus = rig.engine.create_corpus(CorpusConfig(name="docs", embedder=_spec("model-a")))
        corpus.add(docs(2, "ok"))
        assert rig.gauge(name="tandem_embedder_up") == 1
        embedder.down = True  # and nothing searches or adds from here on
        assert rig.gauge(name="tandem_embedder_up") == 0
        assert corpus.stats()["embedder_up"] is False
        embedder.down = False
        assert rig.gauge(name="tandem_embedder_up") == 1
        embedder.down = True
    finally:
        rig.close()
    reopened = Rig(tmp_path / "engine", {"model-a": embedder})
    try:
        reopened.engine.corpus("docs")
        assert reopened.gauge(name="tandem_embedder_up") == 0
        assert reopened.gauge(name=DEGRADED) == 0
    finally:
        reopened.close()


def test_a_slow_health_check_does_not_hold_a_scrape(tmp_path: Path) -> None:
    """Each scrape asks every embedder whether it is up; an Ollama check may wait 2 s on
    the network and a custom one on anything. The checks run off the scrape's thread,
    one at a time per corpus: a scrape waits for them a bounded time (found by review:
    four slow models held every scrape 10 s, Prometheus' own timeout)."""
    embedder = SlowHealthEmbedder(dimension=16, name="model-a")
    rig = Rig(tmp_path / "engine", {"model-a": embedder})
    rig.engine._health_checks._wait_s = HEALTH_WAIT_S  # the bound under test
    try:
        corpus = rig.engine.create_corpus(CorpusConfig(name="docs", embedder=_spec("model-a")))
        corpus.add(docs(2, "ok"))
        checks: list[int] = []
        check = embedder.is_available

        def counted_check() -> bool:
            checks.append(1)
            return check()

        embedder.is_available = counted_check  # type: ignore[method-assign]
        embedder.park_health = True
        done: list[float | None] = []
        scraper = threading.Thread(
            target=lambda: done.extend(rig.gauge(name=DEGRADED) for _ in range(3))
        )
        scraper.start()
        scraper.join(GENEROUS_S)
        assert done == [0, 0, 0]  # three scrapes answered while the check is parked
        assert embedder.in_health.is_set()
        assert len(checks) == 1  # one check at a time: the parked one was not asked again
        embedder.park_health = False
        embedder.let_go.set()
    finally:
        rig.close()
