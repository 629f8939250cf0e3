"""``embed_query(..., before_model=hook)``: the hook runs exactly once, after tokenising
and before the model call, on every path (ONNX, torch fallback, embedders without the
hook), and the vector is the one ``embed`` returns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from dense import (
    Embedder,
    EmbedderUnavailable,
    QueryEmbedder,
    SentenceTransformerEmbedder,
    embed_query,
)
from dense.onnx_query import OnnxQueryEncoder

TEXT = "how do I reset my password"


class EventLog:
    def __init__(self) -> None:
        self.events: list[str] = []

    def hook(self) -> None:
        self.events.append("hook")


def test_onnx_path_calls_the_hook_once_right_before_the_model(
    shared_minilm: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(shared_minilm, QueryEmbedder)
    assert shared_minilm.onnx_active
    log = EventLog()
    encoder = shared_minilm._onnx
    assert isinstance(encoder, OnnxQueryEncoder)
    real_encode = encoder._tokenizer.encode
    real_run = encoder._session.run

    class Tokenizer:
        def __getattr__(self, name: str) -> Any:
            return getattr(encoder_tokenizer, name)

        def encode(self, text: str) -> Any:
            log.events.append("tokenise")
            return real_encode(text)

    class Session:
        def __getattr__(self, name: str) -> Any:
            return getattr(encoder_session, name)

        def run(self, *args: Any, **kwargs: Any) -> Any:
            log.events.append("model")
            return real_run(*args, **kwargs)

    encoder_tokenizer, encoder_session = encoder._tokenizer, encoder._session
    monkeypatch.setattr(encoder, "_tokenizer", Tokenizer())
    monkeypatch.setattr(encoder, "_session", Session())
    vector = embed_query(shared_minilm, TEXT, before_model=log.hook)
    assert log.events == ["tokenise", "hook", "model"]
    monkeypatch.undo()
    expected = shared_minilm.embed([TEXT])[0]
    assert vector.shape == (384,) and vector.dtype == np.float32
    assert float(vector @ expected) > 0.9999


def test_a_failing_onnx_run_falls_back_to_torch_and_still_calls_the_hook_once(
    shared_minilm: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoder = shared_minilm._onnx
    assert encoder is not None
    expected = shared_minilm.embed_torch([TEXT])[0]

    def broken_run(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("onnxruntime exploded")

    class Session:
        run = staticmethod(broken_run)

    log = EventLog()
    monkeypatch.setattr(encoder, "_session", Session())
    try:
        vector = shared_minilm.embed_query(TEXT, before_model=log.hook)
    finally:
        monkeypatch.undo()
        shared_minilm._onnx = encoder  # restore the shared fixture's ONNX path
    assert log.events == ["hook"]
    assert float(vector @ expected) > 0.9999


class PlainEmbedder:
    """An ``Embedder`` without the hook (like the Ollama one)."""

    name = "plain"
    dimension = 3

    def __init__(self, log: EventLog) -> None:
        self._log = log

    def is_available(self) -> bool:
        return True

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self._log.events.append("model")
        return np.tile(np.array([0.6, 0.8, 0.0], dtype=np.float32), (len(texts), 1))


def test_embedders_without_the_hook_run_it_first() -> None:
    log = EventLog()
    plain = PlainEmbedder(log)
    assert isinstance(plain, Embedder) and not isinstance(plain, QueryEmbedder)
    vector = embed_query(plain, TEXT, before_model=log.hook)
    assert log.events == ["hook", "model"]
    assert vector.tolist() == pytest.approx([0.6, 0.8, 0.0])
    log.events.clear()
    embed_query(plain, TEXT)
    assert log.events == ["model"]


class _Answering:
    """An embedder without ``embed_query`` that answers ``rows`` to any batch."""

    name = "answering"
    dimension = 4

    def __init__(self, rows: object) -> None:
        self.rows = rows

    def embed(self, texts: Sequence[str]) -> Any:
        return self.rows

    def is_available(self) -> bool:
        return True


@pytest.mark.parametrize(
    "rows",
    [np.zeros((0, 4), np.float32), np.ones(4, np.float32), np.ones((2, 4)), [[1.0], [2.0, 3.0]]],
    ids=["empty", "one-d", "two-rows", "ragged"],
)
def test_a_query_answer_of_the_wrong_shape_is_provider_trouble(rows: object) -> None:
    # An empty answer raised IndexError from inside the search instead of the one
    # exception that sends a search to keywords.
    with pytest.raises(EmbedderUnavailable):
        embed_query(_Answering(rows), "query")
    assert embed_query(_Answering([[1.0, 0.0, 0.0, 0.0]]), "query").shape == (4,)
