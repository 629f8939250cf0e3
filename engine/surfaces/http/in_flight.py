"""``WritesInFlight``: the uploads being written, so that shutting down waits for them.

uvicorn gives requests a grace period on SIGTERM, then cancels them and runs the app's
shutdown. A document upload's thread cannot be cancelled and writes in batches; closing
the engine under it made the next batch fail, leaving part of the upload written and
the client a bare 500. The shutdown now waits for the uploads being written first
(bounded), so each finishes whole; its client may still miss the answer (the request
was cancelled), and re-sending it is harmless: writes are upserts.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["WritesInFlight"]


class WritesInFlight:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        with self._cond:
            self._count += 1
        try:
            yield
        finally:
            with self._cond:
                self._count -= 1
                if self._count == 0:
                    self._cond.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until no upload is being written (or ``timeout_s``); True if none is."""
        with self._cond:
            return self._cond.wait_for(lambda: self._count == 0, timeout=timeout_s)
