"""Connecting to Ray: a local cluster on 127.0.0.1, or an existing cluster by address.

Nothing calls out: Ray's usage statistics are switched off (``RAY_USAGE_STATS_ENABLED=0``)
in this process and every process Ray starts from it, the dashboard is not started, and a
local cluster binds every server to the loopback interface. (Ray resolves a node address
of ``127.0.0.1`` to the machine's outward address unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, its switch for single-machine clusters; with it
the GCS, raylet, object manager and workers listen on 127.0.0.1 only. Ray reads that
switch once, when ``ray`` is first imported, so ``start_local_cluster`` sets both the
environment — for the processes it starts — and the value this process already read.)

Ray runs its worker processes at niceness 15 unless told otherwise; a shard actor is a
search server, so a local cluster starts them at niceness 0 (``RAY_worker_niceness``;
for ``ray start`` on a real cluster, set the same variable).
"""

from __future__ import annotations

import logging
import os

import ray
from ray._private import ray_constants

logger = logging.getLogger(__name__)

NAMESPACE = "tandem"
LOOPBACK = "127.0.0.1"


def no_telemetry() -> None:
    """Ray's usage statistics off, for this process and the processes it starts."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"


def start_local_cluster(
    num_cpus: int | None = None,
    *,
    object_store_memory: int | None = None,
    log_to_driver: bool = False,
) -> None:
    """Start (or join, if this process already did) a one-machine Ray cluster on 127.0.0.1.

    ``num_cpus`` is what Ray may schedule (embedding actors take one each; shard actors
    take none by default). No dashboard, no usage statistics, loopback only.
    """
    no_telemetry()
    if ray.is_initialized():
        return
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback, see the module doc
    # Ray starts its workers at niceness 15 by default; shard actors answer searches and
    # must not queue behind every other process on the machine.
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray_constants.ENABLE_RAY_CLUSTER = False
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        object_store_memory=object_store_memory,
        namespace=NAMESPACE,
        log_to_driver=log_to_driver,
        configure_logging=False,
    )
    address = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    if address != LOOPBACK:  # never leave a cluster listening beyond this machine
        ray.shutdown()
        raise RuntimeError(f"Ray bound to {address}, not {LOOPBACK}; refusing to run")
    logger.info("local Ray cluster started on %s", LOOPBACK)


def connect(address: str, *, log_to_driver: bool = False) -> None:
    """Join an existing Ray cluster (``ray start --head`` printed its address)."""
    no_telemetry()
    if ray.is_initialized():
        return
    ray.init(
        address=address,
        namespace=NAMESPACE,
        log_to_driver=log_to_driver,
        configure_logging=False,
    )


def ensure_ray(address: str | None = None) -> None:
    """Connect to ``address`` or, without one, start a local cluster (unless connected)."""
    if ray.is_initialized():
        return
    if address:
        connect(address)
    else:
        start_local_cluster()
