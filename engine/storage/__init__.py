"""The per-corpus document store (SQLite, WAL): the source of truth."""

from engine.storage.store import DocumentStore, EmbeddingStatus, StoredDocument

__all__ = ["DocumentStore", "EmbeddingStatus", "StoredDocument"]
