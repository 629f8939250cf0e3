"""Which shard owns a document: a stable hash of its id.

``hashlib`` (never the built-in ``hash()``, which is salted per process), then Lamping &
Veach's jump consistent hash ("A Fast, Minimal Memory, Consistent Hash Algorithm", 2014):
every process on every node agrees on the owner, and growing a cluster from ``n`` to
``n + 1`` shards would move only ``1 / (n + 1)`` of the documents (resharding itself is
not implemented: a corpus keeps the shard count it was created with).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

MAX_SHARDS = 1024

_JUMP_MULTIPLIER = 2862933555777941757
_MASK64 = (1 << 64) - 1


def _key(source_id: str) -> int:
    digest = hashlib.blake2b(source_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def jump_hash(key: int, buckets: int) -> int:
    """Lamping & Veach's jump consistent hash of a 64-bit ``key`` into ``0..buckets-1``."""
    if buckets < 1:
        raise ValueError("buckets must be >= 1")
    bucket, candidate = -1, 0
    while candidate < buckets:
        bucket = candidate
        key = (key * _JUMP_MULTIPLIER + 1) & _MASK64
        candidate = int((bucket + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return bucket


def shard_for(source_id: str, shards: int) -> int:
    """The index (``0..shards-1``) of the shard that owns ``source_id``."""
    return jump_hash(_key(source_id), shards)


def group_by_shard(ids: Iterable[str], shards: int) -> dict[int, list[int]]:
    """Positions of ``ids`` grouped by owning shard, in input order within each group."""
    groups: dict[int, list[int]] = {}
    for position, source_id in enumerate(ids):
        groups.setdefault(shard_for(source_id, shards), []).append(position)
    return groups
