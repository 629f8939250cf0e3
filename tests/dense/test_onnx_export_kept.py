"""The shared ONNX export (``<cache>/onnx/<key>``, reused by every process) is deleted and
made again only when its own files are bad - never for a bad ``onnx_threads`` value, a
missing ONNX Runtime, or a session that will not start in this process.

Every test works on a copy of the session's export under ``tmp_path`` (the cache dir is
passed in, or ``XDG_CACHE_HOME`` points into ``tmp_path``): never ``~/.cache/tandem``.
"""

from __future__ import annotations

import errno
import importlib.util
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dense.local
from dense.local import SentenceTransformerEmbedder
from dense.onnx_query import MANIFEST_NAME, OnnxQueryEncoder

HAS_ONNX = all(importlib.util.find_spec(m) for m in ("onnxruntime", "onnx", "tokenizers"))
needs_onnx = pytest.mark.skipif(not HAS_ONNX, reason="onnxruntime/onnx/tokenizers not installed")

BAD_THREADS = [0, -1, True, False, "2", 1.5, 100_000]
QUERY = "forgot my login"


def _shared_export(minilm: SentenceTransformerEmbedder, cache: Path) -> Path:
    """A copy of the session's export where an embedder with ``cache_dir=cache`` finds it."""
    source = minilm._onnx_dir()
    assert (source / MANIFEST_NAME).is_file()
    target = cache / "onnx" / source.name
    shutil.copytree(source, target)
    return target


def _snapshot(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in directory.iterdir()}


def _sharing_torch(minilm: SentenceTransformerEmbedder, mp: pytest.MonkeyPatch) -> None:
    model = minilm._torch()
    mp.setattr(SentenceTransformerEmbedder, "_load_torch", lambda self: model)


@pytest.mark.parametrize("threads", BAD_THREADS, ids=repr)
def test_a_bad_onnx_threads_value_is_rejected_at_construction(
    threads: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(ValueError, match="onnx_threads"):
        SentenceTransformerEmbedder(onnx_threads=threads)
    with pytest.raises(ValueError, match="onnx_threads"):
        OnnxQueryEncoder(tmp_path, threads=threads)


@pytest.mark.parametrize("threads", [None, 1, 2, 256])
def test_good_onnx_threads_values_are_accepted(threads: int | None, tmp_path: Path) -> None:
    SentenceTransformerEmbedder(cache_dir=tmp_path, onnx_threads=threads)


@needs_onnx
@pytest.mark.parametrize("threads", BAD_THREADS, ids=repr)
def test_a_bad_onnx_threads_value_leaves_the_shared_export_alone(
    minilm: SentenceTransformerEmbedder,
    threads: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    export = _shared_export(minilm, tmp_path / "tandem")
    before = _snapshot(export)
    try:
        embedder = SentenceTransformerEmbedder(onnx_threads=threads)
    except ValueError:
        pass
    else:  # what used to happen: the bad value failed the session open, as a bad export
        assert embedder._onnx_dir() == export
        embedder._onnx_encoder(allow_export=False)
    assert export.is_dir() and _snapshot(export) == before


@needs_onnx
def test_without_onnxruntime_the_export_is_kept_and_torch_answers(
    minilm: SentenceTransformerEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = _shared_export(minilm, tmp_path)
    before = _snapshot(export)
    _sharing_torch(minilm, monkeypatch)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # ``import onnxruntime`` fails
    embedder = SentenceTransformerEmbedder(cache_dir=tmp_path)
    vector = embedder.embed([QUERY])
    assert not embedder.onnx_active
    np.testing.assert_allclose(vector, minilm.embed_torch([QUERY]), atol=1e-6)
    assert export.is_dir() and _snapshot(export) == before
    assert [p.name for p in (tmp_path / "onnx").iterdir()] == [export.name]  # nothing new


def _torch_answers_and_the_export_is_kept(
    minilm: SentenceTransformerEmbedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    breaks: Callable[[], None],
) -> None:
    """With ``breaks()`` applied, a new embedder answers from torch and leaves the shared
    export exactly as it was."""
    export = _shared_export(minilm, tmp_path)
    before = _snapshot(export)
    _sharing_torch(minilm, monkeypatch)
    breaks()
    embedder = SentenceTransformerEmbedder(cache_dir=tmp_path)
    assert embedder.dimension == 384
    vector = embedder.embed([QUERY])
    assert not embedder.onnx_active
    np.testing.assert_allclose(vector, minilm.embed_torch([QUERY]), atol=1e-6)
    assert export.is_dir() and _snapshot(export) == before


@needs_onnx
@pytest.mark.parametrize("error", ["Fail", "RuntimeException", "EPFail"])
def test_a_session_that_will_not_start_keeps_the_export(
    minilm: SentenceTransformerEmbedder,
    error: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import onnxruntime
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise getattr(state, error)("cannot create the thread pool")

    _torch_answers_and_the_export_is_kept(
        minilm,
        tmp_path,
        monkeypatch,
        lambda: monkeypatch.setattr(onnxruntime, "InferenceSession", refuse),
    )


@needs_onnx
@pytest.mark.parametrize("stage", ["session", "tokenizer"])
def test_a_process_out_of_descriptors_or_memory_keeps_the_export(
    minilm: SentenceTransformerEmbedder,
    stage: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """This process's limits say nothing against files other processes share."""
    import onnxruntime
    import tokenizers

    def out_of_descriptors(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")

    class OutOfMemory:
        @staticmethod
        def from_file(path: str) -> Any:
            raise MemoryError

    def breaks() -> None:
        if stage == "session":
            monkeypatch.setattr(onnxruntime, "InferenceSession", out_of_descriptors)
        else:
            monkeypatch.setattr(tokenizers, "Tokenizer", OutOfMemory)

    _torch_answers_and_the_export_is_kept(minilm, tmp_path, monkeypatch, breaks)


def _no_model(export: Path) -> None:
    (export / "model.onnx").unlink()


def _bad_tokenizer(export: Path) -> None:
    (export / "tokenizer.json").write_text("{ not json", encoding="utf-8")


def _bad_manifest(export: Path) -> None:
    (export / MANIFEST_NAME).write_text("{ not json", encoding="utf-8")


@needs_onnx
@pytest.mark.parametrize(
    "damage", [_no_model, _bad_tokenizer, _bad_manifest], ids=lambda f: f.__name__
)
def test_an_export_with_bad_files_is_made_again(
    minilm: SentenceTransformerEmbedder,
    damage: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    export = _shared_export(minilm, tmp_path)
    damage(export)
    _sharing_torch(minilm, monkeypatch)
    exported: list[Path] = []
    real_export = dense.local.export_onnx

    def counting_export(model: Any, directory: Path, **kwargs: Any) -> None:
        exported.append(directory)
        real_export(model, directory, **kwargs)

    monkeypatch.setattr(dense.local, "export_onnx", counting_export)
    embedder = SentenceTransformerEmbedder(cache_dir=tmp_path)
    vector = embedder.embed([QUERY])
    assert exported == [export]
    assert embedder.onnx_active
    assert float(vector[0] @ minilm.embed_torch([QUERY])[0]) >= 0.9999
    assert OnnxQueryEncoder(export).dimension == 384  # the replacement is whole
