"""SentenceTransformerEmbedder with the real all-MiniLM-L6-v2 (offline, packaged)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dense.local
import dense.onnx_query
from dense import Embedder, EmbedderUnavailable, SentenceTransformerEmbedder
from dense.onnx_query import MANIFEST_NAME, OnnxExportError

HAS_ONNX = all(importlib.util.find_spec(m) for m in ("onnxruntime", "onnx", "tokenizers"))
needs_onnx = pytest.mark.skipif(not HAS_ONNX, reason="onnxruntime/onnx/tokenizers not installed")

CORPUS = {
    "password": "To reset your password, click 'Forgot password' on the sign-in page.",
    "billing": "Invoices are sent by email at the start of every month.",
    "shipping": "Orders ship within two business days; tracking numbers arrive by email.",
    "recipe": "Whisk two eggs with flour and milk, then fry the batter in butter.",
    "tb": "Vitamin D deficiency is associated with a higher risk of tuberculosis.",
}
QUERIES = {
    "I forgot my login credentials": "password",
    "when will my package arrive": "shipping",
    "how to make pancakes": "recipe",
    "does low vitamin D raise TB risk": "tb",
}
LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 80)  # > 256 tokens


def _assert_unit_rows(vectors: np.ndarray, rows: int, dim: int = 384) -> None:
    assert vectors.shape == (rows, dim)
    assert vectors.dtype == np.float32
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_satisfies_the_embedder_protocol(minilm: SentenceTransformerEmbedder) -> None:
    assert isinstance(minilm, Embedder)
    assert minilm.name == "all-MiniLM-L6-v2"
    assert minilm.dimension == 384
    assert minilm.is_available()


def test_batch_is_normalised_float32_in_order(minilm: SentenceTransformerEmbedder) -> None:
    texts = list(CORPUS.values())
    vectors = minilm.embed(texts)
    _assert_unit_rows(vectors, len(texts))
    reversed_vectors = minilm.embed(texts[::-1])
    np.testing.assert_allclose(reversed_vectors[::-1], vectors, atol=1e-5)


def test_single_text_and_empty_input(minilm: SentenceTransformerEmbedder) -> None:
    _assert_unit_rows(minilm.embed(["forgot my login"]), 1)
    _assert_unit_rows(minilm.embed([LONG]), 1)
    _assert_unit_rows(minilm.embed([""]), 1)
    empty = minilm.embed([])
    assert empty.shape == (0, 384)
    assert empty.dtype == np.float32


def test_close_texts_score_higher_than_unrelated(minilm: SentenceTransformerEmbedder) -> None:
    names = list(CORPUS)
    docs = minilm.embed(list(CORPUS.values()))
    for query, expected in QUERIES.items():
        scores = docs @ minilm.embed([query])[0]
        assert names[int(np.argmax(scores))] == expected, (query, scores)
        related = scores[names.index(expected)]
        assert all(related > s + 0.1 for n, s in zip(names, scores, strict=True) if n != expected)


def test_a_bare_string_is_rejected(minilm: SentenceTransformerEmbedder) -> None:
    with pytest.raises(ValueError):
        minilm.embed("not a list")  # type: ignore[arg-type]


@needs_onnx
def test_queries_go_through_onnx(minilm: SentenceTransformerEmbedder) -> None:
    assert minilm.onnx_active


@needs_onnx
def test_onnx_and_torch_vectors_are_the_same_model(minilm: SentenceTransformerEmbedder) -> None:
    texts = [*QUERIES, *CORPUS.values(), LONG, "x", "Ünïcödé naïve café — résumé"]
    torch_vectors = minilm.embed_torch(texts)
    onnx_single = np.vstack([minilm.embed([t]) for t in texts])
    cosines = np.sum(torch_vectors * onnx_single, axis=1)
    assert cosines.min() >= 0.9999, cosines
    # the padded ONNX batch path agrees too (masking survived the export)
    assert minilm._onnx is not None
    onnx_batch = minilm._onnx.embed(texts)
    assert np.sum(torch_vectors * onnx_batch, axis=1).min() >= 0.9999


@needs_onnx
def test_export_is_reused_by_a_new_embedder(
    minilm: SentenceTransformerEmbedder, minilm_cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_export(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the cached export should have been reused")

    def no_torch(self: SentenceTransformerEmbedder) -> Any:
        raise AssertionError("a cached export answers queries without torch")

    monkeypatch.setattr(dense.local, "export_onnx", no_export)
    monkeypatch.setattr(SentenceTransformerEmbedder, "_load_torch", no_torch)
    fresh = SentenceTransformerEmbedder(cache_dir=minilm_cache_dir)
    assert fresh.dimension == 384
    vector = fresh.embed(["forgot my login"])
    np.testing.assert_allclose(vector, minilm.embed(["forgot my login"]), atol=1e-6)
    exports = [p for p in (minilm_cache_dir / "onnx").iterdir()]
    assert len(exports) == 1 and (exports[0] / MANIFEST_NAME).is_file()


def _sharing_torch(minilm: SentenceTransformerEmbedder, mp: pytest.MonkeyPatch) -> None:
    """New embedders reuse the session's loaded torch model (load it once per session)."""
    model = minilm._torch()
    mp.setattr(SentenceTransformerEmbedder, "_load_torch", lambda self: model)


@needs_onnx
def test_failed_export_publishes_nothing_and_falls_back_to_torch(
    minilm: SentenceTransformerEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _sharing_torch(minilm, monkeypatch)

    def disagree(model: Any, encoder: Any) -> None:
        raise OnnxExportError("simulated crash after writing model.onnx")

    monkeypatch.setattr(dense.onnx_query, "_verify", disagree)
    embedder = SentenceTransformerEmbedder(cache_dir=tmp_path)
    vector = embedder.embed(["forgot my login"])
    assert not embedder.onnx_active
    np.testing.assert_allclose(vector, minilm.embed_torch(["forgot my login"]), atol=1e-6)
    assert list((tmp_path / "onnx").iterdir()) == []  # no half-written export left behind


@needs_onnx
def test_a_corrupt_export_is_replaced(
    minilm: SentenceTransformerEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _sharing_torch(minilm, monkeypatch)
    first = SentenceTransformerEmbedder(cache_dir=tmp_path)
    first.warm_up()
    (export,) = (tmp_path / "onnx").iterdir()
    onnx_file = export / "model.onnx"
    onnx_file.write_bytes(onnx_file.read_bytes()[:1000])  # truncated by a crash or a disk
    second = SentenceTransformerEmbedder(cache_dir=tmp_path)
    vector = second.embed(["forgot my login"])
    assert second.onnx_active
    assert float(vector[0] @ minilm.embed_torch(["forgot my login"])[0]) >= 0.9999


def test_an_unloadable_model_raises_embedder_unavailable(tmp_path: Path) -> None:
    broken = tmp_path / "not-a-model"
    broken.mkdir()
    (broken / "config.json").write_text("{ not json", encoding="utf-8")
    embedder = SentenceTransformerEmbedder(str(broken), cache_dir=tmp_path, onnx_queries=False)
    assert embedder.is_available()  # nothing loaded yet
    with pytest.raises(EmbedderUnavailable) as info:
        embedder.embed(["anything"])
    assert info.value.__cause__ is not None
    assert not embedder.is_available()
    with pytest.raises(EmbedderUnavailable):
        embedder.embed(["again, without retrying the load"])


def test_the_default_model_resolves_to_the_offline_package() -> None:
    source, local = dense.local.resolve_model("sentence-transformers/all-MiniLM-L6-v2")
    assert local and (Path(source) / "model.safetensors").is_file()
    assert dense.local.resolve_model("intfloat/e5-small-v2") == ("intfloat/e5-small-v2", False)


def test_bad_arguments_are_value_errors() -> None:
    with pytest.raises(ValueError):
        SentenceTransformerEmbedder("")
    with pytest.raises(ValueError):
        SentenceTransformerEmbedder(batch_size=0)
