"""Which vectors the dense arm may return: public documents, optionally of one language
and satisfying a filter on the declared fields.

The allow-list is compiled once per (store ``commits``, language, filter) and reused,
because turning thousands of ids into a FAISS selector on every query would cost more
than the search. Between commits at most ``MAX_CACHED`` lists are kept, holding at most
``MAX_CACHED_IDS`` ids together (oldest dropped first; the newest is always kept): a
count alone let anyone who may search hold 128 lists of a whole corpus each — 8 bytes
an id, 1 GB for a million documents — by sending a new filter each time. When every
document is public and neither a language nor a filter is asked for, no allow-list is
needed.
"""

from __future__ import annotations

import threading

from dense import AllowList, FaissIndex
from engine.storage import DocumentStore
from sparse import FieldFilter

MAX_CACHED = 128
MAX_CACHED_IDS = 4_000_000
"""Ids all cached lists hold together (32 MB of labels), unless one list alone holds more."""


class DenseVisibility:
    """The allow-lists of one corpus. They are forgotten whenever the store's
    ``commits`` moves — after every write this process commits, and when it follows
    another process's — so a list made while a write was under way (an add embeds, then
    stores) is never used after that write commits."""

    def __init__(self, store: DocumentStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._cache: dict[tuple[int | None, int, tuple[FieldFilter, ...]], AllowList] = {}
        self._non_public: int | None = None  # documents, counted once per ``commits``
        self._commits = store.commits

    def allow_list(
        self,
        index: FaissIndex,
        language_id: int | None,
        filters: tuple[FieldFilter, ...] = (),
    ) -> AllowList | None:
        with self._lock:
            commits = self._store.commits
            if commits != self._commits:
                self._commits, self._non_public = commits, None
                self._cache.clear()
            if self._non_public is None:
                self._non_public = self._store.count_non_public()
            if self._non_public == 0 and language_id is None and not filters:
                return None
            key = (language_id, id(index.identity), filters)
            if key not in self._cache:
                ids = self._store.public_vector_ids(language_id, filters)
                allow = index.allow_list(ids)
                held = sum(len(cached) for cached in self._cache.values())
                while self._cache and (
                    len(self._cache) >= MAX_CACHED or held + len(allow) > MAX_CACHED_IDS
                ):
                    dropped = self._cache.pop(next(iter(self._cache)))
                    held -= len(dropped)
                self._cache[key] = allow
            return self._cache[key]
