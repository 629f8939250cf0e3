"""Sharded corpora on Ray (the optional ``tandem-search[cluster]`` extra).

``ShardedCorpus`` has the face of ``engine.Corpus`` (``engine.SearchableCorpus``); its
shards are Ray actors, each owning an ordinary Tandem directory. ``ingest`` loads JSONL
or Parquet at scale through Ray Data with a pool of embedding actors. Nothing in the
engine's core imports this package.
"""

from engine.cluster.actors import stop_detached
from engine.cluster.errors import ClusterError, ClusterExists, ClusterNotFound, ShardUnavailable
from engine.cluster.health import ClusterMetrics
from engine.cluster.options import ClusterOptions
from engine.cluster.routing import shard_for
from engine.cluster.runtime import connect, start_local_cluster
from engine.cluster.shard import ShardInfo
from engine.cluster.sharded import ShardedCorpus

__all__ = [
    "ClusterError",
    "ClusterExists",
    "ClusterMetrics",
    "ClusterNotFound",
    "ClusterOptions",
    "ShardInfo",
    "ShardUnavailable",
    "ShardedCorpus",
    "connect",
    "shard_for",
    "start_local_cluster",
    "stop_detached",
]
