"""``ClusterOptions``: how a coordinator runs its shards and how long it waits for them."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class ClusterOptions(BaseModel):
    """Frozen; every time is in seconds.

    - ``max_restarts``: Ray restarts a dead shard actor this many times (-1: always).
    - ``max_concurrency``: calls one shard runs at once (searches beside a write).
    - ``shard_num_cpus``: CPUs a shard actor reserves for scheduling (0: shards never
      compete with embedding actors for Ray's CPU slots).
    - ``search_timeout_s``: a search waits this long for its shards in all (not per
      round; the query's embedding not counted), then answers without those that have
      not answered; a shard that missed a round is not asked again in that search.
    - ``write_timeout_s``: a write to a dead shard is retried until this runs out, then
      raises ``ShardUnavailable``. ``read_timeout_s``: the same for reads that need a
      particular shard (``fetch_source``, ``grep``, ``len``).
    - ``probe_interval_s`` / ``probe_timeout_s``: how often a down shard is probed, and
      how long one probe waits.
    - ``write_batch``: documents per write call to one shard.
    - ``detached``: named shard actors that outlive this process (a long-running Ray
      cluster shared by several coordinators or CLI calls); stop them with
      ``engine.cluster.stop_detached``.
    - ``lock_wait_s``: how long a restarting shard waits for its directory lock.
    - ``start_timeout_s``: how long opening waits for every shard to come up.
    - ``global_term_statistics``: score the keyword arm with each query term's document
      frequency summed over the shards, as one index holding every document would
      (Elasticsearch's ``dfs_query_then_fetch``): one more round to the shards per
      search, run beside the query embedding in a hybrid search. Off (the default, as in
      Elasticsearch): each shard's own statistics; see the README for both measured.
    - ``query_embed_timeout_s``: the coordinator waits this long for a search's query
      vector, then answers that search from keywords (``embedder_timeout``), as
      ``SearchEngine(query_embed_timeout=...)`` does for one corpus; ``None`` (the
      default): no deadline.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_restarts: Annotated[int, Field(ge=-1)] = -1
    max_concurrency: Annotated[int, Field(ge=1, le=64)] = 4
    shard_num_cpus: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    search_timeout_s: Annotated[float, Field(gt=0, le=600)] = 5.0
    write_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 120.0
    read_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 30.0
    probe_interval_s: Annotated[float, Field(gt=0, le=60)] = 0.25
    probe_timeout_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    write_batch: Annotated[int, Field(ge=1, le=100_000)] = 1024
    detached: bool = False
    lock_wait_s: Annotated[float, Field(ge=0, le=3600)] = 60.0
    start_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 300.0
    global_term_statistics: bool = False
    query_embed_timeout_s: Annotated[float, Field(gt=0, le=3600)] | None = None
