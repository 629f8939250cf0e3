"""Shared pieces of the reliability suite (crash, concurrency, hostile input, leaks, bounds).

- ``store_snapshot``: row count + digest of a corpus's SQLite store, read through a
  separate read-only connection, to prove a call changed nothing.
- ``exposed``: every (source id, text) a read surface hands back, so the leak and
  hostile-input harnesses treat ``search``, ``evidence``, ``fetch_source`` and ``grep``
  alike. ``READ_SURFACES`` is the one table to extend when a new read surface (``ask``,
  filtered search) lands.

The suite's fake embedder is ``tests.support.fakes.WordHashEmbedder``.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine import Corpus, GrepMatch, Passage, SourceText

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
