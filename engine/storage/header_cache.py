"""A small cache of public documents' (title, url, language id), for ``headers``.

Every search ends in ``DocumentStore.headers``; serving the header of a public id from
memory saves an SQLite round trip. Each committed write bumps a generation and empties the
cache, and a read's results are written back only if no write committed since the read
began, so the cache never serves stale visibility.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

Header = tuple[str, str, int]
"""(title, url, language id)."""

_UNCACHED = object()


class HeaderCache:
    """Known headers of public ids, and the ids known not to be public (cached as None)."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._max_entries = max_entries
        self._lock = threading.Lock()
        self._generation = 0  # bumped after every committed write
        self._entries: dict[str, Header | None] = {}

    @property
    def generation(self) -> int:
        """Moves at every ``invalidate``: after each committed write."""
        return self._generation

    def invalidate(self) -> None:
        """Forget everything; call after every committed write."""
        with self._lock:
            self._generation += 1
            self._entries.clear()

    def lookup(
        self, ids: Sequence[str], found: dict[str, tuple[str, str, int, str | None]]
    ) -> tuple[int, list[str]]:
        """Put the cached public headers among ``ids`` into ``found`` (text None); returns
        the generation read and the ids the cache knows nothing about."""
        with self._lock:
            pending = []
            for sid in ids:
                hit = self._entries.get(sid, _UNCACHED)
                if hit is _UNCACHED:
                    pending.append(sid)
                elif hit is not None:
                    found[sid] = (*hit, None)  # type: ignore[misc]
            return self._generation, pending

    def fill(
        self,
        generation: int,
        ids: Sequence[str],
        found: dict[str, tuple[str, str, int, str | None]],
    ) -> None:
        """Remember what a read of ``ids`` found (absent: not public), unless a write
        committed since ``generation`` was read."""
        with self._lock:
            if generation != self._generation:
                return
            if len(self._entries) > self._max_entries:
                self._entries.clear()
            for sid in ids:
                entry = found.get(sid)
                self._entries[sid] = None if entry is None else entry[:3]
