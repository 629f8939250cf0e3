"""Shared pieces of the reliability suite (crash, concurrency, hostile input, leaks, bounds).

- ``WordHashEmbedder``: a cheap, deterministic fake embedder (hashlib, not ``hash()``) that
  tolerates any ``str`` (lone surrogates included), can be switched down
  (``is_available()`` False) or failing (``embed`` raises ``EmbedderUnavailable``), and
  can refuse texts containing a poison marker — the ways a real provider dies.
- ``store_snapshot``: row count + digest of a corpus's SQLite store, read through a
  separate read-only connection, to prove a call changed nothing.
- ``exposed``: every (source id, text) a read surface hands back, so the leak and
  hostile-input harnesses treat ``search``, ``evidence``, ``fetch_source`` and ``grep``
  alike. ``READ_SURFACES`` is the one table to extend when a new read surface (``ask``,
  filtered search) lands.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dense import EmbedderUnavailable
from engine import Corpus, GrepMatch, Passage, SourceText
from engine.config import EmbedderSpec

DIMENSION = 32
POISON = "zzpoisonzz"


class WordHashEmbedder:
    """Bag of hashed words → unit vector. Shares vocabulary ⇒ close vectors."""

    def __init__(self, dimension: int = DIMENSION, name: str = "word-hash") -> None:
        self._dimension = dimension
        self._name = name
        self.down = False  # is_available() answers False
        self.failing = False  # embed() raises EmbedderUnavailable
        self.refuse_poison = False  # embed() raises when any text holds POISON
        self.calls = 0
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return self._dimension

    def is_available(self) -> bool:
        return not self.down

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        with self._lock:
            self.calls += 1
        if self.down or self.failing:
            raise EmbedderUnavailable("injected fault")
        if self.refuse_poison and any(POISON in t for t in texts):
            raise EmbedderUnavailable("injected fault (poison)")
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split()[:256]:
                digest = hashlib.blake2b(
                    word.encode("utf-8", "surrogatepass"), digest_size=8
                ).digest()
                out[i, digest[0] % self._dimension] += 1.0
                out[i, digest[1] % self._dimension] += 0.5
            out[i, self._dimension - 1] += 0.01  # never all-zero
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


def factory_for(embedder: WordHashEmbedder) -> Callable[[EmbedderSpec], WordHashEmbedder]:
    """An ``embedder_factory`` handing every spec the same fake (so tests can switch it)."""

    def build(spec: EmbedderSpec) -> WordHashEmbedder:
        del spec
        return embedder

    return build


# -- the stored data, seen from outside the engine ------------------------------------------


@dataclass(frozen=True)
class StoreSnapshot:
    rows: int
    digest: str
    seq: str


def store_snapshot(corpus_dir: Path) -> StoreSnapshot:
    """Row count and a digest of every stored column, via a read-only connection."""
    uri = f"file:{corpus_dir / 'store.sqlite3'}?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    try:
        h = hashlib.sha256()
        rows = conn.execute(
            "SELECT source_id, title, text, url, language_id, access_groups, is_public, "
            "page_uid, content_hash, embedding_status, embedding FROM documents "
            "ORDER BY source_id"
        ).fetchall()
        for row in rows:
            h.update(repr(row).encode("utf-8", "surrogatepass"))
        for row in conn.execute("SELECT source_id, seq FROM tombstones ORDER BY source_id"):
            h.update(repr(row).encode("utf-8", "surrogatepass"))
        seq = conn.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()
        return StoreSnapshot(rows=len(rows), digest=h.hexdigest(), seq=str(seq[0]))
    finally:
        conn.close()


def stored_rows(corpus_dir: Path) -> dict[str, tuple[str, str, bool, bool]]:
    """source id → (title, text, is public, has a vector), read outside the engine."""
    uri = f"file:{corpus_dir / 'store.sqlite3'}?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    try:
        return {
            str(r[0]): (str(r[1]), str(r[2]), bool(r[3]), r[4] is not None)
            for r in conn.execute(
                "SELECT source_id, title, text, is_public, embedding FROM documents"
            )
        }
    finally:
        conn.close()


# -- read surfaces: one table for the leak and hostile-input harnesses ----------------------


@dataclass(frozen=True)
class Exposure:
    """One item a read surface returned: its source id and every string it shows."""

    source_id: str
    texts: tuple[str, ...]


def _passages(hits: Sequence[Passage]) -> list[Exposure]:
    return [Exposure(p.source_id, (p.title, p.url, p.excerpt)) for p in hits]


def _source(doc: SourceText) -> list[Exposure]:
    return [Exposure(doc.source_id, (doc.title, doc.url, doc.text))]


def _grep(found: Sequence[GrepMatch]) -> list[Exposure]:
    return [Exposure(m.source_id, (m.title, m.url, m.line)) for m in found]


@dataclass(frozen=True)
class ReadCall:
    """Arguments one randomised read uses; each surface takes what it needs."""

    query: str
    top_k: int = 10
    offset: int = 0
    language_id: int | None = None
    source_id: str = ""


EVIDENCE_ID = "\x00evidence"  # evidence is one string: exposed under a sentinel id


READ_SURFACES: dict[str, Callable[[Corpus, ReadCall], list[Exposure]]] = {
    "search": lambda c, r: _passages(c.search(r.query, r.top_k, r.offset, r.language_id)),
    "evidence": lambda c, r: [Exposure(EVIDENCE_ID, (c.evidence(r.query, r.top_k),))],
    "fetch_source": lambda c, r: _source(c.fetch_source(r.source_id)),
    "grep": lambda c, r: _grep(c.grep(r.query, r.top_k, fixed=True)),
}
"""Every public read path. Add ``ask`` (and filtered ``search``) here when they exist."""


@contextlib.contextmanager
def faiss_threads(n: int) -> Iterator[None]:
    """Run FAISS's OpenMP searches on ``n`` threads inside the block, then restore.

    On a 2-core box, FAISS's default OpenMP pool makes a 300-vector flat search ~10 ms
    instead of ~0.1 ms under load; tests that run thousands of hybrid searches use 1.
    """
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)
