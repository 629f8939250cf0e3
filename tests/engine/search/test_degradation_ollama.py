"""Fault injection with the real Ollama client against the Ollama stand-in server.

The provider is down at ingest, comes back, flaps, answers with the wrong dimension, or
hangs; the engine is restarted mid-degradation. Gauges are read from a real scrape, and
the stand-in's request counts prove that a dead provider costs at most one probe per
back-off window for the whole engine (one shared embedder and breaker per spec).
Back-off windows run on a manual clock, so nothing here depends on timing.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from dense.breaker import CircuitBreaker
from dense.ollama import OllamaEmbedder
from engine import CorpusConfig, OllamaEmbedding, SearchEngine
from engine.config import EmbedderSpec
from tests.support.metrics_support import docs, embed_text, ollama_embedder, scrape, value
from tests.support.ollama_standin import Behaviour, OllamaStandIn, Reply, Request, ollama_standin

__all__ = ["ollama_standin"]  # the fixture, re-exported so pytest finds it

WINDOW_S = 10.0
# Requests expected to succeed get a generous timeout (a loaded CI box can be slow even on
# loopback); only the hanging-provider test, which waits for its timeout, keeps short ones.
TIMEOUT_S = 10.0
SHORT_TIMEOUT_S = 0.5  # embed
SHORT_HEALTH_TIMEOUT_S = 1.0


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float = WINDOW_S + 0.001) -> None:
        self.now += seconds


class Rig:
    """An engine whose Ollama specs map to embedders on a manual-clock breaker."""

    def __init__(
        self,
        path: Path,
        standin: OllamaStandIn,
        clock: ManualClock,
        timeout_s: float = TIMEOUT_S,
        health_timeout_s: float = TIMEOUT_S,
    ) -> None:
        self.standin = standin
        self.clock = clock
        self.timeout_s = timeout_s
        self.health_timeout_s = health_timeout_s
        self.built: list[OllamaEmbedder] = []
        self.engine = SearchEngine(path, embedder_factory=self._factory)
        self.server = self.engine.serve_metrics()

    def _factory(self, spec: EmbedderSpec) -> OllamaEmbedder:
        assert isinstance(spec, OllamaEmbedding)
        breaker = CircuitBreaker(base_backoff_s=WINDOW_S, max_backoff_s=WINDOW_S, clock=self.clock)
        embedder = ollama_embedder(
            spec.host,
            spec.model,
            breaker=breaker,
            timeout_s=self.timeout_s,
            health_timeout_s=self.health_timeout_s,
        )
        self.built.append(embedder)
        return embedder

    def spec(self) -> OllamaEmbedding:
        return OllamaEmbedding(model="standin-embed", host=self.standin.host)

    def degraded(self, corpus: str = "docs") -> float | None:
        return value(scrape(self.server.url), "tandem_documents_degraded", corpus=corpus)

    def close(self) -> None:
        self.engine.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def _rig(path: Path, standin: OllamaStandIn, clock: ManualClock, *timeouts: float) -> Iterator[Rig]:
    r = Rig(path, standin, clock, *timeouts)
    r.engine.create_corpus(CorpusConfig(name="docs", embedder=r.spec()))
    yield r
    r.close()


@pytest.fixture
def rig(tmp_path: Path, ollama_standin: OllamaStandIn, clock: ManualClock) -> Iterator[Rig]:
    yield from _rig(tmp_path / "engine", ollama_standin, clock)


@pytest.fixture
def short_timeout_rig(
    tmp_path: Path, ollama_standin: OllamaStandIn, clock: ManualClock
) -> Iterator[Rig]:
    """As ``rig``, with short client timeouts: for a test that waits for one to expire."""
    yield from _rig(
        tmp_path / "engine", ollama_standin, clock, SHORT_TIMEOUT_S, SHORT_HEALTH_TIMEOUT_S
    )


def _record_embedded(standin: OllamaStandIn) -> Counter[str]:
    """Count every text the stand-in embedded successfully (healthy answers only)."""
    embedded: Counter[str] = Counter()
    original = standin.routes[("POST", "/api/embed")]

    def recording(request: Request) -> Reply:
        reply = original(request)
        if reply.status == 200 and standin.behaviour is Behaviour.HEALTHY:
            raw = request.body.get("input", [])
            embedded.update([raw] if isinstance(raw, str) else raw)
        return reply

    standin.route("POST", "/api/embed", recording)
    return embedded


def test_down_at_ingest_then_back_heals_to_zero(rig: Rig, ollama_standin: OllamaStandIn) -> None:
    corpus = rig.engine.corpus("docs")
    embedded = _record_embedded(ollama_standin)
    corpus.add(docs(3, "ok"))
    ollama_standin.stop()
    assert corpus.add(docs(5, "late")).degraded == 5
    assert rig.degraded() == 5
    samples = scrape(rig.server.url)
    assert value(samples, "tandem_embedder_up", corpus="docs") == 0
    hits = corpus.search("charlie late")
    assert {f"late{i}" for i in range(5)} <= {h.source_id for h in hits}

    ollama_standin.start()
    assert corpus.repair() == 0  # breaker still open: no probe yet, nothing healed
    assert rig.degraded() == 5
    rig.clock.advance()
    corpus.add(docs(1, "new"))  # the next add heals
    assert rig.degraded() == 0
    assert value(scrape(rig.server.url), "tandem_embedder_up", corpus="docs") == 1
    assert all(n == 1 for n in embedded.values()), embedded
    late_texts = {embed_text(d) for d in docs(5, "late")}
    assert late_texts <= set(embedded)
    hits = corpus.search("charlie late")
    assert all(h.ranks.dense is not None for h in hits)


def test_flapping_provider_keeps_the_gauge_exact_and_embeds_each_document_once(
    rig: Rig, ollama_standin: OllamaStandIn
) -> None:
    corpus = rig.engine.corpus("docs")
    embedded = _record_embedded(ollama_standin)
    expected_degraded = 0
    for round_no in range(6):
        up = round_no % 2 == 0
        if up:
            ollama_standin.behaviour = Behaviour.HEALTHY
            rig.clock.advance()  # let the breaker probe again
        else:
            ollama_standin.behaviour = Behaviour.ERROR_500
        batch = docs(3, f"r{round_no}-")
        result = corpus.add(batch)
        expected_degraded = 0 if up else expected_degraded + 3
        assert result.degraded == (0 if up else 3)
        assert rig.degraded() == expected_degraded == corpus.stats()["degraded"]
    ollama_standin.behaviour = Behaviour.HEALTHY
    rig.clock.advance()
    corpus.repair()
    assert rig.degraded() == 0
    assert len(embedded) == 18
    assert all(n == 1 for n in embedded.values()), embedded


def test_wrong_dimensions_degrade_and_fall_back_without_errors(
    rig: Rig, ollama_standin: OllamaStandIn
) -> None:
    corpus = rig.engine.corpus("docs")
    corpus.add(docs(3, "ok"))
    ollama_standin.behaviour = Behaviour.WRONG_DIMENSION
    assert corpus.add(docs(2, "bad")).degraded == 2
    assert rig.degraded() == 2
    rig.clock.advance()
    hits = corpus.search("alpha bravo")  # wrong-dimension query vector: keyword answer
    assert len(hits) == 5
    samples = scrape(rig.server.url)
    assert (
        value(samples, "tandem_search_fallbacks_total", corpus="docs", reason="embedder_error") == 1
    )
    ollama_standin.behaviour = Behaviour.HEALTHY
    rig.clock.advance()
    assert corpus.repair() == 2
    assert rig.degraded() == 0
    assert corpus.stats()["vectors"] == 5


def test_a_hanging_provider_costs_one_timeout_per_window(
    short_timeout_rig: Rig, ollama_standin: OllamaStandIn
) -> None:
    rig = short_timeout_rig
    corpus = rig.engine.corpus("docs")
    corpus.add(docs(3, "ok"))
    ollama_standin.delay_s = 30.0  # far beyond the short (0.5 s) timeouts
    ollama_standin.behaviour = Behaviour.SLOW
    ollama_standin.reset_counts()
    assert corpus.add(docs(2, "slow")).degraded == 2
    for _ in range(10):
        assert corpus.search("alpha bravo")
    corpus.add(docs(2, "slower"))
    assert corpus.repair() == 0
    assert ollama_standin.count() == 1  # the one call that timed out opened the breaker
    assert rig.degraded() == 4
    ollama_standin.behaviour = Behaviour.HEALTHY
    rig.clock.advance()
    assert corpus.repair() == 4
    assert rig.degraded() == 0


def test_no_retry_storm_one_probe_per_window_for_the_whole_engine(
    rig: Rig, ollama_standin: OllamaStandIn
) -> None:
    # Two corpora with the same spec share one embedder, hence one breaker.
    other = rig.engine.create_corpus(CorpusConfig(name="other", embedder=rig.spec()))
    corpus = rig.engine.corpus("docs")
    corpus.add(docs(2))
    other.add(docs(2))
    assert len(rig.built) == 1
    ollama_standin.behaviour = Behaviour.ERROR_500
    rig.clock.advance(60.0)  # past the health TTL: the next call must probe
    ollama_standin.reset_counts()
    for i in range(20):
        (corpus if i % 2 else other).search("alpha bravo")
    corpus.add(docs(2, "x"))
    other.add(docs(2, "y"))
    corpus.repair()
    other.repair()
    assert ollama_standin.count() == 1
    for window in range(1, 4):
        rig.clock.advance()
        for i in range(10):
            (corpus if i % 2 else other).search("alpha bravo")
        other.repair()
        assert ollama_standin.count() == 1 + window
    assert rig.degraded("docs") == 2 and rig.degraded("other") == 2
    samples = scrape(rig.server.url)
    fallbacks = sum(
        value(samples, "tandem_search_fallbacks_total", corpus=c, reason=r) or 0
        for c in ("docs", "other")
        for r in ("embedder_down", "embedder_error")
    )
    assert fallbacks == 50  # every search answered, from keywords


def test_restart_mid_degradation_with_the_provider_still_down(
    tmp_path: Path, ollama_standin: OllamaStandIn, clock: ManualClock
) -> None:
    first = Rig(tmp_path / "engine", ollama_standin, clock)
    corpus = first.engine.create_corpus(CorpusConfig(name="docs", embedder=first.spec()))
    corpus.add(docs(4, "ok"))
    ollama_standin.stop()
    corpus.add(docs(3, "late"))
    assert first.degraded() == 3
    first.close()

    second = Rig(tmp_path / "engine", ollama_standin, clock)
    try:
        reopened = second.engine.corpus("docs")
        assert second.degraded() == 3
        assert len(reopened.search("alpha bravo")) == 7
        ollama_standin.start()
        clock.advance()
        embedded = _record_embedded(ollama_standin)
        assert reopened.repair() == 3
        assert second.degraded() == 0
        assert set(embedded) == {embed_text(d) for d in docs(3, "late")}
    finally:
        second.close()


def test_default_factory_with_a_real_ollama_spec(
    tmp_path: Path, ollama_standin: OllamaStandIn
) -> None:
    """No injected factory: the engine builds its own OllamaEmbedder from the spec."""
    spec = OllamaEmbedding(
        model="standin-embed",
        host=ollama_standin.host,
        timeout_s=TIMEOUT_S,
        health_timeout_s=TIMEOUT_S,
    )
    with SearchEngine(tmp_path / "engine") as engine:
        server = engine.serve_metrics()
        corpus = engine.create_corpus(CorpusConfig(name="docs", embedder=spec))
        corpus.add(docs(3))
        ollama_standin.behaviour = Behaviour.ERROR_500
        corpus.add(docs(2, "late"))
        assert value(scrape(server.url), "tandem_documents_degraded", corpus="docs") == 2
        ollama_standin.behaviour = Behaviour.HEALTHY
        healed = 0
        for _ in range(200):  # the default breaker's first window is 1 s
            healed += corpus.repair()
            if healed == 2:
                break
            time.sleep(0.05)
        assert healed == 2
        assert value(scrape(server.url), "tandem_documents_degraded", corpus="docs") == 0


def test_a_switch_to_a_provider_that_is_down_leaves_the_documents_degraded(
    rig: Rig, clock: ManualClock
) -> None:
    # The switch's argument check was an isinstance against the Embedder protocol, which
    # on Python 3.11 reads its properties: the new embedder's ``dimension`` asked the
    # server, and a server that was down made the switch raise EmbedderUnavailable (no
    # EngineError) with nothing switched.
    corpus = rig.engine.corpus("docs")
    corpus.add(docs(4, "ok"))
    with OllamaStandIn(dimension=16) as other:
        target = OllamaEmbedding(model="standin-embed", host=other.host)
        other.stop()
        assert rig.engine.switch_embedder("docs", target, progress=False) == 0
        assert rig.engine.corpus("docs").config.embedder == target
        assert rig.degraded() == 4
        assert len(rig.engine.corpus("docs").search("alpha bravo")) == 4  # keywords
        other.start()
        clock.advance()
        assert rig.engine.corpus("docs").repair() == 4
        assert rig.degraded() == 0
