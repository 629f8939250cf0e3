"""The two errors of natural-language questions; both derive from ``EngineError``."""

from __future__ import annotations

from engine.errors import EngineError


class NaturalSearchUnavailable(EngineError):
    """The question could not be understood right now: Ollama is not configured, cannot be
    reached, timed out, answered an error, lacks the model (the message then names
    ``ollama pull <model>``), or answered outside the expected shape. Plain ``search``
    is unaffected; the caller may fall back to it."""


class RateLimited(EngineError):
    """This user asked too many questions; retry after ``retry_after_s`` seconds."""

    def __init__(self, retry_after_s: float) -> None:
        self.retry_after_s = max(0.0, float(retry_after_s))
        super().__init__(f"too many questions; retry after {self.retry_after_s:.1f} s")
