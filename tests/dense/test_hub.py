"""A model missing from the local cache fails at once when the Hub cannot be reached
(``dense.hub``), instead of after huggingface_hub's minutes of retries."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dense import EmbedderUnavailable, SentenceTransformerEmbedder
from dense.hub import hub_reachable, in_hub_cache

UNREACHABLE = "http://hub.tandem-test.invalid"  # .invalid never resolves (RFC 2606)


@pytest.fixture
def listening() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections (chosen by the OS)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_reachable_only_when_a_connection_opens(
    monkeypatch: pytest.MonkeyPatch, listening: int
) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{listening}")
    assert hub_reachable(timeout_s=30.0) is True
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline mode: no probe at all
    assert hub_reachable(timeout_s=30.0) is False
    monkeypatch.delenv("HF_HUB_OFFLINE")
    for endpoint in (UNREACHABLE, "http://127.0.0.1:99999", "not a url"):
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        assert hub_reachable(timeout_s=30.0) is False, endpoint


def test_a_missing_model_without_a_hub_fails_without_going_online(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sentence_transformers

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", UNREACHABLE)
    real = sentence_transformers.SentenceTransformer
    calls: list[dict[str, Any]] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", spy)
    embedder = SentenceTransformerEmbedder(
        "tandem-test/no-such-model", cache_dir=tmp_path, onnx_queries=False
    )
    with pytest.raises(EmbedderUnavailable, match="cannot be reached"):
        embedder.embed(["anything"])
    assert calls == []  # not in the cache, no Hub: refused before the model library runs
    assert not embedder.is_available()


def test_the_cache_is_read_without_the_model_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    assert not in_hub_cache("tandem-test/cached") and not in_hub_cache("bare")
    for repo in ("models--tandem-test--cached", "models--sentence-transformers--bare"):
        snapshot = tmp_path / repo / "snapshots" / "abc123"
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text("{}")
        (tmp_path / repo / "refs").mkdir()
        (tmp_path / repo / "refs" / "main").write_text("abc123")
    assert in_hub_cache("tandem-test/cached")
    assert in_hub_cache("bare")  # read as sentence-transformers/bare
    assert not in_hub_cache("not a valid repo id!")
