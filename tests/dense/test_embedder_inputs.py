"""Bad input is the caller's fault: ``ValueError`` before any model or server sees it.

A text that is no str, or a str that cannot be encoded as UTF-8 (a lone surrogate), used
to reach the tokenizer or the HTTP client, whose errors look like provider trouble: the
local embedder turned its ONNX query path off for good, and ``OllamaEmbedder`` opened
its circuit breaker for every caller.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from dense.breaker import BreakerState, CircuitBreaker
from dense.contracts import checked_texts
from dense.local import SentenceTransformerEmbedder
from dense.ollama import OllamaEmbedder
from tests.support.clock import FakeClock
from tests.support.ollama_standin import OllamaStandIn, ollama_standin

__all__ = ["ollama_standin"]  # the fixture, re-exported so pytest finds it

HAS_ONNX = all(importlib.util.find_spec(m) for m in ("onnxruntime", "onnx", "tokenizers"))
needs_onnx = pytest.mark.skipif(not HAS_ONNX, reason="onnxruntime/onnx/tokenizers not installed")

SURROGATE = "bad \ud800 text"
# (batch, position the error must name)
BAD_BATCHES: list[tuple[list[object], int]] = [
    ([SURROGATE], 0),
    (["fine", "also \udfff fine"], 1),
    (["a", None], 1),
    (["a", "b", 5], 2),
    ([b"bytes"], 0),
]


@pytest.mark.parametrize(("batch", "position"), BAD_BATCHES)
def test_checked_texts_names_the_bad_position(batch: list[object], position: int) -> None:
    with pytest.raises(ValueError, match=f"text {position} ") as info:
        checked_texts(batch)  # type: ignore[arg-type]
    assert "\ud800" not in str(info.value) and "fine" not in str(info.value)  # no text quoted


def test_checked_texts_accepts_any_valid_text() -> None:
    texts = ["", "plain", "Ünïcödé", "🙂" * 3, "\x00\x01"]
    assert checked_texts(tuple(texts)) == texts
    with pytest.raises(ValueError, match="single str"):
        checked_texts("one string")


# -- the local embedder -------------------------------------------------------------------


@needs_onnx
def test_a_bad_query_leaves_the_onnx_path_on(minilm: SentenceTransformerEmbedder) -> None:
    assert minilm.onnx_active
    for text in (SURROGATE, "\udfff"):
        with pytest.raises(ValueError, match="text 0 is not valid UTF-8"):
            minilm.embed([text])
        with pytest.raises(ValueError, match="not valid UTF-8"):
            minilm.embed_query(text)
    assert minilm.onnx_active  # one bad query did not switch every later one to torch
    row = minilm.embed_query("forgot my login")
    np.testing.assert_allclose(np.linalg.norm(row), 1.0, atol=1e-5)
    assert minilm.onnx_active


@pytest.mark.parametrize(("batch", "position"), BAD_BATCHES)
def test_a_bad_batch_is_a_value_error_naming_the_position(
    minilm: SentenceTransformerEmbedder, batch: list[object], position: int
) -> None:
    with pytest.raises(ValueError, match=f"text {position} "):
        minilm.embed(batch)  # type: ignore[arg-type]
    assert minilm.is_available()


def test_a_bad_text_is_rejected_before_anything_loads(tmp_path: Path) -> None:
    embedder = SentenceTransformerEmbedder(cache_dir=tmp_path)
    with pytest.raises(ValueError):
        embedder.embed([SURROGATE])
    with pytest.raises(ValueError):
        embedder.embed_query(SURROGATE)
    assert embedder._model is None and embedder._onnx is None  # nothing was loaded for it
    assert embedder.is_available()


# -- Ollama -------------------------------------------------------------------------------


@pytest.mark.parametrize(("batch", "position"), BAD_BATCHES)
def test_ollama_bad_input_never_reaches_the_server_or_the_breaker(
    ollama_standin: OllamaStandIn, batch: list[object], position: int
) -> None:
    breaker = CircuitBreaker(base_backoff_s=5.0, max_backoff_s=40.0, clock=FakeClock())
    embedder = OllamaEmbedder(
        "standin-embed", host=ollama_standin.host, timeout_s=10.0, dimension=8, breaker=breaker
    )
    with pytest.raises(ValueError, match=f"text {position} "):
        embedder.embed(batch)  # type: ignore[arg-type]
    assert ollama_standin.count() == 0
    assert breaker.state is BreakerState.CLOSED and breaker.consecutive_failures == 0
    assert embedder.embed(["good"]).shape == (1, 8)  # the server is still used
