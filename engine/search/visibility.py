"""Which vectors the dense arm may return: public documents, optionally of one language
and satisfying a filter on the declared fields.

The allow-list is compiled once per (store generation, language, filter) and reused,
because turning thousands of ids into a FAISS selector on every query would cost more
than the search; at most ``MAX_CACHED`` filtered lists are kept per generation (oldest
dropped first). When every document is public and neither a language nor a filter is
asked for, no allow-list is needed.
"""

from __future__ import annotations

import threading

from dense import AllowList, FaissIndex
from engine.storage import DocumentStore
from sparse import FieldFilter

MAX_CACHED = 128


class DenseVisibility:
    def __init__(self, store: DocumentStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._generation = 0
        self._cache: dict[
            tuple[int, int | None, int, tuple[FieldFilter, ...]], AllowList | None
        ] = {}
        self._non_public: tuple[int, int] | None = None  # (generation, count)
        self._commits = store.commits

    def invalidate(self) -> None:
        """Call after every write to the store."""
        with self._lock:
            self._generation += 1
            self._cache.clear()
            self._non_public = None

    def allow_list(
        self,
        index: FaissIndex,
        language_id: int | None,
        filters: tuple[FieldFilter, ...] = (),
    ) -> AllowList | None:
        with self._lock:
            if self._store.commits != self._commits:
                # A write committed since the lists were made: one made while it was
                # under way (an add embeds, then stores) may hold documents it made
                # non-public. The writer's own ``invalidate`` comes only after it.
                self._commits = self._store.commits
                self._generation += 1
                self._cache.clear()
                self._non_public = None
            generation = self._generation
            if self._non_public is None:
                self._non_public = (generation, self._store.count_non_public())
            non_public = self._non_public[1]
            if non_public == 0 and language_id is None and not filters:
                return None
            key = (generation, language_id, id(index.identity), filters)
            if key not in self._cache:
                while len(self._cache) >= MAX_CACHED:
                    del self._cache[next(iter(self._cache))]
                ids = self._store.public_vector_ids(language_id, filters)
                self._cache[key] = index.allow_list(ids)
            return self._cache[key]
