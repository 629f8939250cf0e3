"""The cluster's exceptions: leaves of ``engine.EngineError``."""

from __future__ import annotations

from engine.errors import EngineError


class ClusterError(EngineError):
    """Root of the errors ``engine.cluster`` raises on purpose."""


class ShardUnavailable(ClusterError):
    """A shard did not answer in time, so the operation was not done on it.

    Raised by writes (``add``, ``delete``) after retrying until ``write_timeout_s`` ran
    out, and by reads that need one particular shard (``fetch_source``, ``grep``,
    ``len``). For a write, nothing routed to that shard was acknowledged: documents on
    the other shards may be stored (``add`` is idempotent — send the batch again).
    ``shards`` names the shard indexes that did not answer. Searches never raise this:
    they answer from the shards that are up.
    """

    def __init__(self, message: str, shards: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.shards = shards


class ClusterNotFound(ClusterError):
    """No sharded corpus (``cluster.json``) at that path."""


class ClusterExists(ClusterError):
    """``ShardedCorpus.create`` was given a path that already holds a sharded corpus."""
