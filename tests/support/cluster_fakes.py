"""Test doubles and data for sharded corpora.

Shard actors build their own embedder from the factory they are given, so a factory used
with ``ShardedCorpus`` must pickle by reference: a module-level function, like
``hash_factory`` here.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from dense import Embedder, EmbedderUnavailable
from engine import CorpusConfig, Document
from engine.cluster.calls import Pending
from engine.cluster.routing import shard_for
from engine.config import EmbedderSpec
from tests.support.fakes import HashEmbedder

_TOPICS = (
    "password reset login account",
    "delivery shipping parcel courier",
    "invoice payment refund billing",
    "garden roses tomatoes compost",
    "river bridge flood weather",
    "violin concert orchestra music",
)
_AUTHORS = ("ada", "grace", "alan", "edsger")


def hash_factory(spec: EmbedderSpec) -> HashEmbedder:
    """The same deterministic 64-dimension fake for every spec, in every process."""
    del spec
    return HashEmbedder()


class DownEmbedder:
    """A provider that cannot be reached, and does not know its dimension either (as an
    Ollama model never asked)."""

    name = "down"

    def is_available(self) -> bool:
        return False

    @property
    def dimension(self) -> int:
        raise EmbedderUnavailable("the provider cannot be reached")

    def embed(self, texts: object) -> object:
        raise EmbedderUnavailable("the provider cannot be reached")


def down_factory(spec: EmbedderSpec) -> Embedder:
    del spec
    return DownEmbedder()  # type: ignore[return-value]


def broken_factory(spec: EmbedderSpec) -> Embedder:
    """A factory whose every call fails: a shard built with it never starts."""
    raise RuntimeError(f"no embedder for {spec.model!r} here")


def sample_documents(count: int = 120) -> list[Document]:
    """Documents over a few topics with filter fields, two languages, some non-public
    ones (ids ``secret-*``) and a few sharing a URL."""
    docs: list[Document] = []
    for i in range(count):
        topic = _TOPICS[i % len(_TOPICS)].split()
        words = [topic[(i * 7 + j) % len(topic)] for j in range(3 + i % 5)]
        docs.append(
            Document(
                id=f"doc-{i:03d}",
                title=f"{topic[0].title()} note {i}",
                text=f"{' '.join(words)} item {i} of the collection, about {topic[i % 4]}.",
                url=f"/shared/{i % 10}" if i % 23 == 0 else f"/docs/{i}",
                language_id=1 if i % 11 == 0 else 0,
                fields={
                    "author": _AUTHORS[i % len(_AUTHORS)],
                    "year": 2000 + i % 20,
                    "day": dt.date(2020, 1 + i % 12, 1 + i % 28),
                },
            )
        )
    for i in range(6):
        topic = _TOPICS[i % len(_TOPICS)]
        docs.append(
            Document(
                id=f"secret-{i}",
                title=f"Secret {topic}",
                text=f"{topic} {topic} confidential staff only",
                access_groups=frozenset({"staff"}),
                fields={"author": "ada", "year": 2010},
            )
        )
    return docs


FIELDS = {"author": "keyword", "year": "integer", "day": "date"}

QUERIES = (
    "password reset",
    "shipping parcel courier",
    "refund billing invoice item 7",
    "roses compost garden",
    "flood bridge",
    "orchestra",
    "confidential staff",
    "collection item",
)


class GatedHashFactory:
    """``hash_factory`` that waits while ``gate`` exists: a shard actor restarted while the
    gate file is present stays in ``__init__`` (down) until the test removes it."""

    def __init__(self, gate: str, timeout_s: float = 120.0) -> None:
        self.gate = gate
        self.timeout_s = timeout_s

    def __call__(self, spec: EmbedderSpec) -> HashEmbedder:
        deadline = time.monotonic() + self.timeout_s
        while os.path.exists(self.gate) and time.monotonic() < deadline:
            time.sleep(0.05)
        return hash_factory(spec)


class MiniLMFactory:
    """The real default model for every spec, its ONNX export cached in ``cache_dir`` (so
    two processes embedding a query get the same vector)."""

    def __init__(self, cache_dir: str) -> None:
        self.cache_dir = cache_dir

    def __call__(self, spec: EmbedderSpec) -> Embedder:
        from dense.local import SentenceTransformerEmbedder

        del spec
        return SentenceTransformerEmbedder(cache_dir=self.cache_dir)


class InlineCalls:
    """``ShardCalls`` over in-process shard bodies (``ShardActor``): every call answered at
    once on the calling thread (subclass ``submit``/``collect`` to delay or drop answers)."""

    def __init__(self, shards: Sequence[Any]) -> None:
        self.shards = shards

    def submit(
        self, indexes: Sequence[int], method: str, args: Callable[[int], tuple[Any, ...]]
    ) -> Pending:
        answers = [getattr(self.shards[i], method)(*args(i)) for i in indexes]
        return Pending(method, list(indexes), answers)

    def collect(self, pending: Pending, timeout_s: float, operation: object = None) -> dict:
        return dict(zip(pending.indexes, pending.refs, strict=True))

    def fan_out(
        self,
        indexes: Sequence[int],
        method: str,
        args: Callable[[int], tuple[Any, ...]],
        timeout_s: float,
        operation: object = None,
    ) -> dict:
        return self.collect(self.submit(indexes, method, args), timeout_s)


class AllUp:
    """Shard health that reports every one of ``shards`` up."""

    def __init__(self, shards: int) -> None:
        self.shards = shards

    def up(self) -> list[int]:
        return list(range(self.shards))


@contextlib.contextmanager
def in_process_shards(
    root: Path, config: CorpusConfig, docs: Sequence[Document], shards: int
) -> Iterator[list[Any]]:
    """``shards`` shard bodies (``ShardActor`` run in this process, no Ray), each holding
    the documents of ``docs`` routed to it, with ``hash_factory``'s vectors; closed after."""
    from engine.cluster.shard import ShardActor, ShardSpec

    bodies = [
        ShardActor(ShardSpec(i, str(root / f"{i:03d}"), config, hash_factory, create=True))
        for i in range(shards)
    ]
    try:
        for i, body in enumerate(bodies):
            body._corpus.add([d for d in docs if shard_for(d.id, shards) == i], progress=False)
        yield bodies
    finally:
        for body in bodies:
            body.close()
