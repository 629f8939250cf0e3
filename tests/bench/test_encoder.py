"""The shared encoder: the ONNX query path opens an existing export without torch."""

from __future__ import annotations

from pathlib import Path

from bench.encoder import EncoderBackend, SentenceEncoder
from bench.onnx_runtime import load_or_export


def test_an_existing_export_answers_queries_without_loading_torch(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    """A system that only embeds queries must not carry a torch model in its peak RSS
    (every vector peer did, ~470 MiB)."""
    load_or_export(lambda: encoder._model, tmp_path / encoder.model.replace("/", "__"))
    onnx = SentenceEncoder(backend=EncoderBackend.ONNX, onnx_cache=tmp_path).load()
    row = onnx.encode_query("how do I reset my password")
    assert "_model" not in vars(onnx)  # the torch model was never loaded
    assert onnx.dimension == row.shape[1] == 384
    reference = encoder.encode(["how do I reset my password"])
    assert float(row[0] @ reference[0]) > 0.9999
    assert "_model" not in vars(onnx)
