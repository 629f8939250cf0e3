"""A one-line progress display for long ``tandem add`` runs.

Shown only on a terminal (never when stderr is piped or redirected, never with
``--quiet``): documents stored and embedded so far, the rate, how far through the file,
and an estimate of the time left. The line rewrites itself at most a few times a second
and ends with a newline when the run ends, so the summary that follows starts clean.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["AddProgress", "wants_progress"]

_MIN_INTERVAL_S = 0.2


def wants_progress(stream: TextIO, *, quiet: bool) -> bool:
    """True when ``stream`` is a terminal and the user did not ask for quiet."""
    if quiet:
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real stream
        return False


def _duration(seconds: float) -> str:
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class AddProgress:
    """Renders ``adding to NAME: 1,536 stored (1,536 embedded) · 820 docs/s · 41% · ETA 0:12``.

    ``total`` is the size of the input (bytes), ``done`` how much of it has been read;
    the ETA extrapolates the elapsed time over the fraction read.
    """

    def __init__(
        self,
        stream: TextIO,
        label: str,
        total: int,
        *,
        vectors: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._label = label
        self._total = max(0, total)
        self._vectors = vectors
        self._clock = clock
        self._start = clock()
        self._last_draw = float("-inf")
        self._width = 0

    def line(self, done: int, stored: int, embedded: int) -> str:
        """The status text for this much progress (no carriage return)."""
        elapsed = max(self._clock() - self._start, 1e-9)
        parts = [f"{stored:,} stored" + (f" ({embedded:,} embedded)" if self._vectors else "")]
        if stored:
            parts.append(f"{stored / elapsed:,.0f} docs/s")
        if self._total:
            fraction = min(1.0, done / self._total)
            parts.append(f"{fraction:.0%}")
            if 0 < fraction < 1:
                parts.append(f"ETA {_duration(elapsed * (1 - fraction) / fraction)}")
        parts.append(f"elapsed {_duration(elapsed)}")
        return f"{self._label}: " + " · ".join(parts)

    def update(self, done: int, stored: int, embedded: int, *, force: bool = False) -> None:
        now = self._clock()
        if not force and now - self._last_draw < _MIN_INTERVAL_S:
            return
        self._last_draw = now
        text = self.line(done, stored, embedded)
        pad = max(0, self._width - len(text))
        self._width = len(text)
        self._stream.write("\r" + text + " " * pad)
        self._stream.flush()

    def finish(self, done: int, stored: int, embedded: int) -> None:
        self.update(done, stored, embedded, force=True)
        self._stream.write("\n")
        self._stream.flush()
