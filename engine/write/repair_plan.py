"""Which degraded documents a repair tries next, learnt from how the last tries went.

Embedding is one provider call per batch, so a document the provider always refuses
(longer than an Ollama model's context, say) fails every batch it is in. Repairs that
always took the oldest degraded documents first retried it forever, healed nothing
behind it, and opened the provider's circuit breaker on every pass — sending searches to
keywords meanwhile. So: after a batch the provider was asked for and failed, the next try
takes half as many documents (a refused document is alone after log2(n) tries); a
success doubles the size back. A document that fails alone waits outside the batches and
is tried alone again after a back-off that doubles each time (1 min, 2 min … 1 h). A
provider that is down is never asked, so an outage shrinks nothing. The plan lives in
the process (a restart forgets it and finds a refused document again the same way).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["RepairPlan"]

FIRST_WAIT_S = 60.0
LONGEST_WAIT_S = 3_600.0
MAX_WAITING = 4_096
"""Documents held back at most; past it a document failing alone stays in the batches."""
_NO_CAP = 65_536  # past any repair batch size


@dataclass(frozen=True, slots=True)
class _Waiting:
    due: float
    wait_s: float


class RepairPlan:
    """Picks a repair's next batch of degraded ids; told each attempt's outcome.

    Not thread-safe: its owner calls it under the corpus's write lock.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._size_cap: int | None = None  # after failures; None: the caller's size
        self._waiting: dict[str, _Waiting] = {}

    @property
    def held_back(self) -> int:
        """Documents failing alone, waiting for their next try."""
        return len(self._waiting)

    def next_batch(
        self, limit: int, degraded_ids: Callable[[int], list[str]], *, retry_held: bool = True
    ) -> list[str]:
        """The ids to try now: one held-back document whose wait is over, alone (unless
        ``retry_held`` is False), or up to ``limit`` (fewer after failures) of
        ``degraded_ids``' oldest-first answer, leaving out the ones held back."""
        if retry_held:
            now = self._clock()
            due = next((i for i, waiting in self._waiting.items() if waiting.due <= now), None)
            if due is not None:
                return [due]
        size = limit if self._size_cap is None else min(limit, self._size_cap)
        held = self._waiting
        return [i for i in degraded_ids(size + len(held)) if i not in held][:size]

    def is_held_back(self, source_id: str) -> bool:
        return source_id in self._waiting

    def healed(self, ids: Sequence[str]) -> None:
        """The provider embedded ``ids``: forget them; the next batch may be twice as big."""
        self.forget(ids)
        if self._size_cap is not None:
            doubled = self._size_cap * 2
            self._size_cap = None if doubled >= _NO_CAP else doubled

    def failed(self, ids: Sequence[str]) -> None:
        """The provider was asked to embed ``ids`` and failed."""
        if len(ids) > 1:
            self._size_cap = len(ids) // 2
            return
        if not ids:
            return
        source_id = ids[0]
        before = self._waiting.get(source_id)
        if before is None and len(self._waiting) >= MAX_WAITING:
            return
        wait_s = FIRST_WAIT_S if before is None else min(before.wait_s * 2, LONGEST_WAIT_S)
        self._waiting[source_id] = _Waiting(self._clock() + wait_s, wait_s)
        self._size_cap = None  # found; the rest of its batch is tried at full size again

    def forget(self, ids: Sequence[str]) -> None:
        """``ids`` need no more tries (healed, deleted, or embedded by a later write)."""
        for source_id in ids:
            self._waiting.pop(source_id, None)
