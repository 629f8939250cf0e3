"""``DocumentStore.prune_tombstones``: deletions forgotten, and catch-ups from before refused."""

from __future__ import annotations

from pathlib import Path

from engine.storage import DocumentStore
from engine.storage.records import EmbeddingStatus, StoredDocument


def test_the_store_refuses_a_catch_up_from_before_what_it_pruned(tmp_path: Path) -> None:
    store = DocumentStore(tmp_path / "store.sqlite3")
    try:
        docs = [
            StoredDocument(
                source_id=f"s{i}",
                title="t",
                text="x",
                url="",
                language_id=0,
                access_groups=frozenset(),
                page_uid=None,
                content_hash=str(i),
                embedding_status=EmbeddingStatus.DEGRADED,
                embedding=None,
            )
            for i in range(6)
        ]
        store.upsert(docs, None)
        seqs = []
        for i in range(6):
            store.delete([f"s{i}"])
            seqs.append(store.seq)
        assert store.tombstones_since(seqs[0] - 1) == [f"s{i}" for i in range(6)]
        # Through the fourth deletion, but the newest three are kept whatever asked.
        assert store.prune_tombstones(seqs[4], keep=3) == 3
        assert store.tombstones_since(seqs[2]) == ["s3", "s4", "s5"]
        assert store.tombstones_since(seqs[2] - 1) is None  # s2's deletion is forgotten
        assert store.tombstones_since(seqs[0] - 1) is None
        assert store.prune_tombstones(seqs[1], keep=0) == 0  # never moves back
        assert store.tombstones_since(seqs[2] - 1) is None
        assert store.prune_tombstones(seqs[5], keep=3) == 0  # only three left: kept
        store.upsert(docs[3:4], None)  # a re-added id's tombstone goes, as before
        assert store.tombstones_since(seqs[2]) == ["s4", "s5"]
    finally:
        store.close()
