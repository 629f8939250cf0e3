"""Calling shard actors: fan-outs that tolerate a dead shard, and calls that retry.

Two disciplines, one place:

- ``fan_out`` (searches, passages): send to every shard believed up, wait at most the
  search timeout, use what came back. A shard whose call fails is marked down and left
  out; nothing is raised.
- ``call`` (writes, and reads that need one particular shard): if the shard is dead or
  restarting, wait for it to answer a probe and send the call again, until the deadline;
  then raise ``ShardUnavailable``. A write is acknowledged only by its shard's reply, and
  every write the coordinator sends is idempotent (an upsert by id, a delete by id), so
  sending it again after an ambiguous failure is safe.

Errors raised on purpose inside a shard (``engine.EngineError``: a refused document, a
full disk) come back to the caller as themselves; anything else from a shard is a bug and
propagates as Ray's ``RayTaskError``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from engine.cluster.errors import ShardUnavailable
from engine.cluster.health import ClusterMetrics, Operation, ShardHealth
from engine.errors import EngineError

logger = logging.getLogger(__name__)

Handle = Any  # a Ray actor handle (``ray.actor.ActorHandle``), untyped upstream

OVERDUE_LIMIT_S = 60.0
"""How long a call that missed its deadline keeps its shard out of searches at most
(see ``ShardCalls.probe``)."""


def probe(handles: Sequence[Handle], indexes: Sequence[int], timeout_s: float) -> dict[int, str]:
    """The shards among ``indexes`` that answer a ping within ``timeout_s``, each with
    its incarnation id (a new one after every restart)."""
    refs = {handles[i].ping.remote(): i for i in indexes}
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
    answered: dict[int, str] = {}
    for ref in ready:
        try:
            answered[refs[ref]] = ray.get(ref, timeout=0)
        except (RayActorError, RayTaskError, GetTimeoutError):
            continue
    return answered


def reraise_engine_error(exc: RayTaskError) -> None:
    """Re-raise an ``EngineError`` a shard raised on purpose as itself."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, EngineError):
        raise cause from None


@dataclass(frozen=True, slots=True)
class Pending:
    """Calls sent to shards whose answers are not collected yet."""

    method: str
    indexes: list[int]
    refs: list[Any]


class ShardCalls:
    """The coordinator's calls to its shard actors (see the module docstring)."""

    def __init__(
        self,
        corpus: str,
        handles: Sequence[Handle],
        health: ShardHealth,
        metrics: ClusterMetrics,
    ) -> None:
        self._corpus = corpus
        self._handles = list(handles)
        self._health = health
        self._metrics = metrics
        # Per shard: calls that missed their deadline and may still be running, with when
        # they were given up on (see ``probe``).
        self._overdue: dict[int, list[tuple[float, Any]]] = {}
        self._overdue_lock = threading.Lock()

    @property
    def handles(self) -> list[Handle]:
        return self._handles

    def submit(
        self, indexes: Sequence[int], method: str, args: Callable[[int], tuple[Any, ...]]
    ) -> Pending:
        """Send ``method`` to each shard of ``indexes`` now; ``collect`` the answers later."""
        return Pending(
            method,
            list(indexes),
            [getattr(self._handles[i], method).remote(*args(i)) for i in indexes],
        )

    def collect(
        self, pending: Pending, timeout_s: float, operation: Operation = Operation.SEARCH
    ) -> dict[int, Any]:
        """The answers of the shards that replied within ``timeout_s``. Failed shards, and
        those that did not answer in time, are marked down; nothing is raised for them."""
        indexes, refs = pending.indexes, pending.refs
        if not refs:
            return {}
        deadline = time.monotonic() + timeout_s
        try:  # the common case: one blocking call for every answer
            return dict(zip(indexes, ray.get(refs, timeout=timeout_s), strict=True))
        except (RayActorError, RayTaskError, GetTimeoutError):
            pass
        # One failed (ray.get raises at the first error): wait for the others' answers
        # within what is left of the budget, then take what came.
        remaining = max(0.0, deadline - time.monotonic())
        ray.wait(refs, num_returns=len(refs), timeout=remaining)
        answers: dict[int, Any] = {}
        for index, ref in zip(indexes, refs, strict=True):
            try:
                answers[index] = ray.get(ref, timeout=0)
            except RayActorError:
                self._health.mark_down(index, operation)
            except GetTimeoutError:
                # Hung or very slow: skipped from now on, until this call has returned and
                # the shard answers a probe (see ``probe``). Left up, it cost every later
                # search the whole timeout until a scrape or ``health()`` probed it.
                logger.warning("shard %d of %s did not answer in time", index, self._corpus)
                with self._overdue_lock:
                    self._overdue.setdefault(index, []).append((time.monotonic(), ref))
                self._health.mark_down(index, operation)
            except RayTaskError as exc:
                self._metrics.failures.labels(self._corpus, operation.value).inc()
                logger.error(
                    "shard %d of %s failed a %s call (%s)",
                    index,
                    self._corpus,
                    pending.method,
                    type(getattr(exc, "cause", exc)).__name__,
                )
        return answers

    def probe(self, indexes: Sequence[int], timeout_s: float) -> dict[int, str]:
        """``probe`` (the module's) of the shards among ``indexes`` whose calls that
        missed a deadline have all returned. A shard answers pings beside a call stuck in
        its search (an actor runs a few calls at once), so a ping alone brought a hung
        shard straight back, and every search paid the timeout again. A call given up on
        more than ``OVERDUE_LIMIT_S`` ago no longer counts: a shard with one query that
        never ends is asked again once a minute, not dropped for good."""
        return probe(self._handles, [i for i in indexes if self._settled(i)], timeout_s)

    def _settled(self, index: int) -> bool:
        with self._overdue_lock:
            calls = self._overdue.get(index)
            if not calls:
                return True
            now = time.monotonic()
            left = [(t, ref) for t, ref in calls if now - t < OVERDUE_LIMIT_S]
            if left:
                done, _ = ray.wait([ref for _, ref in left], num_returns=len(left), timeout=0)
                finished = set(done)
                left = [(t, ref) for t, ref in left if ref not in finished]
            if left:
                self._overdue[index] = left
                return False
            del self._overdue[index]
            return True

    def fan_out(
        self,
        indexes: Sequence[int],
        method: str,
        args: Callable[[int], tuple[Any, ...]],
        timeout_s: float,
        operation: Operation = Operation.SEARCH,
    ) -> dict[int, Any]:
        """``submit`` then ``collect``."""
        return self.collect(self.submit(indexes, method, args), timeout_s, operation)

    def call(
        self,
        index: int,
        method: str,
        *args: Any,
        timeout_s: float,
        operation: Operation,
    ) -> Any:
        """Call ``method`` on shard ``index`` until it answers or ``timeout_s`` runs out.

        Raises ``ShardUnavailable`` when the shard did not answer in time (for a write:
        it was not acknowledged), and an ``EngineError`` the shard raised as itself.
        """
        deadline = time.monotonic() + timeout_s
        attempts = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ShardUnavailable(
                    f"shard {index} of corpus {self._corpus!r} did not answer within "
                    f"{timeout_s:g} s ({attempts} attempts); the {method} was not done there",
                    (index,),
                )
            if attempts:
                if operation is Operation.WRITE:
                    self._metrics.write_retries.labels(self._corpus).inc()
                logger.warning("shard %d of %s: sending %s again", index, self._corpus, method)
            attempts += 1
            try:
                ref = getattr(self._handles[index], method).remote(*args)
                result = ray.get(ref, timeout=remaining)
            except RayTaskError as exc:
                reraise_engine_error(exc)
                raise
            except GetTimeoutError as exc:
                raise ShardUnavailable(
                    _timed_out(self._corpus, index, method, timeout_s, operation), (index,)
                ) from exc
            except RayActorError:
                self._health.mark_down(index, operation)
                if (
                    not self._health.wait_until_up(index, max(0.0, deadline - time.monotonic()))
                    and self._health.closed
                ):
                    # The corpus is closing: nothing will bring the shard back; waiting
                    # out the deadline re-sent the call to a dead actor thousands of times.
                    raise ShardUnavailable(
                        f"shard {index} of corpus {self._corpus!r} is gone: the corpus was "
                        f"closed; the {method} was not done there",
                        (index,),
                    ) from None
                continue
            if self._settled(index):
                # Not while a call it missed is still running there: a write or fetch
                # answered beside a stuck search brought the shard back, and every later
                # search paid the timeout again (and left one more call stuck on it).
                self._health.mark_up(index)
            return result


def _timed_out(corpus: str, index: int, method: str, timeout_s: float, operation: Operation) -> str:
    """Why a call that reached its shard but got no answer in time failed: a write may
    still apply (it is idempotent: send it again); a read simply has no answer."""
    if operation is Operation.WRITE:
        return (
            f"shard {index} of corpus {corpus!r} did not finish a {method} within "
            f"{timeout_s:g} s; it was not acknowledged (it may still apply: writes are "
            "idempotent, send it again)"
        )
    return (
        f"shard {index} of corpus {corpus!r} did not answer a {method} within {timeout_s:g} s "
        "(it is busy or hung); a read changes nothing: try it again later"
    )
