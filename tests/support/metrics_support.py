"""Helpers for the metrics and degradation tests: documents, scraping, an Ollama embedder.

``scrape`` reads ``/metrics`` over real HTTP and parses it with prometheus_client's parser.
Their fake embedder is ``tests.support.fakes.RecordingEmbedder``.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from dense.breaker import CircuitBreaker
from dense.ollama import OllamaEmbedder
from engine import Document


def docs(n: int, prefix: str = "d", start: int = 0) -> list[Document]:
    return [
        Document(
            id=f"{prefix}{i}",
            title=f"Title {prefix} {i}",
            text=f"alpha bravo charlie number {i} of {prefix}",
        )
        for i in range(start, start + n)
    ]


def embed_text(doc: Document) -> str:
    """What the engine hands the embedder for ``doc`` (title, newline, text)."""
    return f"{doc.title}\n{doc.text}".strip() if doc.title else doc.text


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def fetch(url: str, timeout: float = 10.0) -> tuple[int, str, str]:
    """(status, content type, body) of a GET; HTTP errors are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


def scrape_text(url: str) -> str:
    status, content_type, body = fetch(url)
    assert status == 200, (status, body)
    assert content_type.startswith("text/plain; version=0.0.4"), content_type
    return body


def parse(text: str) -> list[Sample]:
    return [
        Sample(s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def scrape(url: str) -> list[Sample]:
    return parse(scrape_text(url))


def value(samples: list[Sample], name: str, **labels: str) -> float | None:
    """The value of the one sample named ``name`` whose labels include ``labels``."""
    found = [
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    if not found:
        return None
    assert len(found) == 1, (name, labels, found)
    return found[0]


def ollama_embedder(host: str, model: str = "standin-embed", **kwargs: object) -> OllamaEmbedder:
    """An OllamaEmbedder with test-sized timeouts and a back-off long enough to measure."""
    breaker = kwargs.pop("breaker", None) or CircuitBreaker(base_backoff_s=0.2, max_backoff_s=0.4)
    return OllamaEmbedder(
        model,
        host=host,
        timeout_s=float(kwargs.pop("timeout_s", 2.0)),  # type: ignore[arg-type]
        health_timeout_s=float(kwargs.pop("health_timeout_s", 1.0)),  # type: ignore[arg-type]
        health_ttl_s=float(kwargs.pop("health_ttl_s", 60.0)),  # type: ignore[arg-type]
        breaker=breaker,  # type: ignore[arg-type]
    )
