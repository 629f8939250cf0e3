"""The per-corpus document store (SQLite, WAL): the source of truth."""

from engine.storage.records import EmbeddingStatus, StoredDocument
from engine.storage.state import StoreState
from engine.storage.store import DocumentStore

__all__ = ["DocumentStore", "EmbeddingStatus", "StoreState", "StoredDocument"]
