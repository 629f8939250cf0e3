"""``OllamaEmbedder``: embeddings from an Ollama server through the ``ollama`` client.

Failure policy. Everything that can go wrong with the remote side ends in
``EmbedderUnavailable`` (described by ``dense.ollama_errors``, the one Ollama mapping):
connection refused or cut, HTTP errors, timeouts, an unknown (not pulled) model, a
malformed body, and output that breaks the contract — the wrong number of vectors, an
empty vector, NaN/inf values, a zero vector, or a dimension that differs from the first
one seen. Every failure is
reported to a ``CircuitBreaker`` — and so is any other exception that ends a call the
breaker let through, which then propagates as it is (a bug is not remote trouble, but
the call may have been the breaker's one trial); while it is open, ``embed()`` raises and
``is_available()`` answers False at once, without touching the network, so a dead server
costs one timeout per back-off window, not one per query. Nothing is retried here.
Only a successful embedding closes the breaker: a passing health check (``/api/show``)
after a failure admits one trial embedding (``CircuitBreaker.admit_trial``) and leaves
the back-off as it was, so a server that answers its health check while ``/api/embed``
keeps failing or stalling is still asked exponentially less often.
Bad input (a text that is no str or not valid UTF-8) is the caller's fault, not the
server's: ``ValueError`` before any request, and the breaker is not told. A text the
server refuses (HTTP 400 or 413 from ``/api/embed``: longer than the model's context)
raises ``EmbedderUnavailable`` too — its document is stored degraded and isolated by the
repair plan — but counts as the server answering: the breaker stays closed for the rest.

Logs carry counts, lengths and latencies only — never the texts.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from functools import cached_property

import numpy as np
import numpy.typing as npt
import ollama

from dense.breaker import BreakerState, CircuitBreaker
from dense.contracts import EmbedderUnavailable, checked_texts
from dense.hosts import shown_host
from dense.ollama_errors import REMOTE_ERRORS, describe_failure
from dense.ollama_transport import MAX_SHOW_BYTES, bounded_client

__all__ = ["DEFAULT_HOST", "OllamaEmbedder"]

logger = logging.getLogger(__name__)

DEFAULT_HOST = "http://127.0.0.1:11434"
_PROBE_TEXT = "dimension probe"
_BYTES_PER_TEXT = 1 << 20


def _unavailable(
    exc: Exception, *, model: str, host: str, call: str, timeout_s: float
) -> EmbedderUnavailable:
    return EmbedderUnavailable(
        f"ollama {call}: {describe_failure(exc, model=model, host=host, timeout_s=timeout_s)}"
    )


_REFUSED_INPUT = frozenset({400, 413})
"""``/api/embed`` statuses that refuse what was sent (a text longer than the model's
context, a body too large), not the server's trouble."""


class _InputRefused(EmbedderUnavailable):
    """The server answered an embedding call by refusing its texts (``_REFUSED_INPUT``):
    provider trouble for those documents (stored degraded, isolated by the repair plan),
    not a reason to back off from the server."""


class OllamaEmbedder:
    """An ``Embedder`` backed by an Ollama server's ``/api/embed`` endpoint.

    Constructing it costs nothing: the HTTP clients are created on first use and the
    dimension is learnt from the first successful embedding (or given up front).

    Args:
        model: the Ollama model name, e.g. ``"nomic-embed-text"``.
        host: the server's base URL.
        health_timeout_s: timeout of the health check (``POST /api/show``, which also
            detects a model that is not pulled).
        timeout_s: how long one embedding batch may take, its answer included (see
            ``dense.ollama_transport``: a whole call ends within about twice this).
        batch_size: texts per ``/api/embed`` request.
        dimension: the expected dimension, if known; otherwise the first one seen.
        health_ttl_s: how long a passed health check (or a successful embedding) keeps
            ``is_available()`` answering True without another request.
        breaker: the circuit breaker to report to; a fresh one (1 s .. 60 s) by default.
    """

    def __init__(
        self,
        model: str,
        *,
        host: str = DEFAULT_HOST,
        health_timeout_s: float = 2.0,
        timeout_s: float = 30.0,
        batch_size: int = 32,
        dimension: int | None = None,
        health_ttl_s: float = 10.0,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        if not model.strip():
            raise ValueError("model must be a non-empty Ollama model name")
        for label, value in (("health_timeout_s", health_timeout_s), ("timeout_s", timeout_s)):
            if not value > 0:
                raise ValueError(f"{label} must be > 0, got {value!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if dimension is not None and dimension < 1:
            raise ValueError(f"dimension must be >= 1 or None, got {dimension}")
        if not health_ttl_s >= 0:
            raise ValueError(f"health_ttl_s must be >= 0, got {health_ttl_s!r}")
        self._model = model
        self._host = host
        self._shown_host = shown_host(host)  # what logs and messages name
        self._health_timeout_s = float(health_timeout_s)
        self._timeout_s = float(timeout_s)
        self._batch_size = batch_size
        self._dimension = dimension
        self._health_ttl_s = float(health_ttl_s)
        self._breaker = breaker if breaker is not None else CircuitBreaker()
        self._clock = self._breaker.clock
        self._state_lock = threading.Lock()  # guards _dimension and _healthy_until
        self._probe_lock = threading.Lock()  # one health probe at a time
        self._healthy_until = -math.inf

    # -- identity -----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"ollama:{self._model}"

    @property
    def model(self) -> str:
        return self._model

    @property
    def host(self) -> str:
        return self._host

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker

    @property
    def dimension(self) -> int:
        """The vector dimension; learnt by embedding a fixed probe text once if unknown.

        Raises ``EmbedderUnavailable`` when it is unknown and the server cannot be asked.
        """
        with self._state_lock:
            known = self._dimension
        if known is not None:
            return known
        return int(self.embed([_PROBE_TEXT]).shape[1])

    # -- clients (lazy) ---------------------------------------------------------------

    @cached_property
    def _client(self) -> ollama.Client:
        # A batch's vectors in JSON: ~20 bytes a number; a megabyte a text allows ~50,000
        # dimensions, past any embedding model's.
        limit = (self._batch_size + 1) * _BYTES_PER_TEXT
        return bounded_client(self._host, timeout_s=self._timeout_s, max_bytes=limit)

    @cached_property
    def _health_client(self) -> ollama.Client:
        return bounded_client(
            self._host, timeout_s=self._health_timeout_s, max_bytes=MAX_SHOW_BYTES
        )

    def close(self) -> None:
        """Close the HTTP connection pools (the embedder reopens them if used again)."""
        for attr in ("_client", "_health_client"):
            client = self.__dict__.pop(attr, None)
            if client is not None:
                client.close()

    # -- the Embedder contract ----------------------------------------------------------

    def is_available(self) -> bool:
        """Cheap, never raises for remote trouble.

        Open breaker → False, no I/O. Closed and recently healthy → True, no I/O.
        A trial embedding admitted by a passed health check and not yet made → True, no
        I/O (the trial decides). Otherwise one ``POST /api/show`` with the short health
        timeout (concurrent callers do not pile on: they get the breaker's view while one
        probe runs). A passed check after a failure does not close the breaker; it admits
        one trial embedding.
        """
        if self._breaker.trial_pending:
            return True
        if not self._breaker.allow():
            return False
        with self._state_lock:
            fresh = self._clock() < self._healthy_until
        if fresh and self._breaker.state is BreakerState.CLOSED:
            return True
        if not self._probe_lock.acquire(blocking=False):
            return self._breaker.retry_after_s() == 0.0
        try:
            return self._health_probe()
        finally:
            self._probe_lock.release()

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` in order; see the module docstring for what counts as failure."""
        # Checked before anything is sent: the client's own errors for a bad text (a lone
        # surrogate, a None) are among REMOTE_ERRORS and would open the breaker for all.
        items = checked_texts(texts)
        if not items:
            return np.empty((0, self.dimension), dtype=np.float32)
        if not self._breaker.allow():
            raise EmbedderUnavailable(
                f"ollama embed at {self._shown_host}: circuit open, next probe in "
                f"{self._breaker.retry_after_s():.2f} s"
            )
        started = time.perf_counter()
        try:
            parts = [
                self._embed_batch(items[i : i + self._batch_size])
                for i in range(0, len(items), self._batch_size)
            ]
        except _InputRefused:
            # It answered, refusing these texts (one past the model's context): up for
            # every other text. Counted a failure, one such document kept the breaker —
            # shared by every corpus on this model — opening at each retry of it.
            self._mark_healthy()
            raise
        except EmbedderUnavailable:
            self._mark_failed()
            raise
        except BaseException as exc:
            # Not remote trouble as we know it (a bug, an interrupt), but ``allow()`` let
            # this call through, perhaps as the half-open trial: unreported, the trial
            # would be spent and the back-off would never grow.
            self._mark_failed()
            logger.warning(
                "ollama embed at %s: failed with %s", self._shown_host, type(exc).__name__
            )
            raise
        self._mark_healthy()
        logger.debug(
            "ollama embed: %d texts, %d chars, %d batches, %.1f ms",
            len(items),
            sum(len(t) for t in items),
            len(parts),
            (time.perf_counter() - started) * 1000,
        )
        return np.concatenate(parts, axis=0)

    # -- internals --------------------------------------------------------------------

    def _health_probe(self) -> bool:
        started = time.perf_counter()
        try:
            shown = self._health_client.show(self._model)
        except REMOTE_ERRORS as exc:
            error = _unavailable(
                exc,
                model=self._model,
                host=self._host,
                call="health check",
                timeout_s=self._health_timeout_s,
            )
            self._mark_failed()
            logger.warning("%s (%.1f ms)", error, (time.perf_counter() - started) * 1000)
            return False
        except BaseException as exc:
            # Not remote trouble (every error the server can cause is a REMOTE_ERROR), so
            # it propagates; but this probe was granted by ``allow()`` and must report.
            self._mark_failed()
            logger.warning(
                "ollama health check at %s: failed with %s", self._shown_host, type(exc).__name__
            )
            raise
        if shown.capabilities is not None and "embedding" not in shown.capabilities:
            self._mark_failed()
            logger.warning("ollama model %r cannot embed (capabilities)", self._model)
            return False
        # Not record_success: /api/show answering says nothing of /api/embed. Half-open,
        # the next embedding is the trial that closes the breaker (or backs off further).
        self._breaker.admit_trial()
        self._mark_fresh()
        return True

    def _mark_healthy(self) -> None:
        """An embedding succeeded: close the breaker and reset the back-off."""
        self._breaker.record_success()
        self._mark_fresh()

    def _mark_failed(self) -> None:
        """A call ``allow()`` let through failed: back off, and trust no earlier check."""
        self._breaker.record_failure()
        with self._state_lock:
            self._healthy_until = -math.inf

    def _mark_fresh(self) -> None:
        # Read only while the breaker is closed (``is_available``).
        with self._state_lock:
            self._healthy_until = self._clock() + self._health_ttl_s

    def _embed_batch(self, batch: list[str]) -> npt.NDArray[np.float32]:
        try:
            response = self._client.embed(model=self._model, input=batch)
        except REMOTE_ERRORS as exc:
            error = _unavailable(
                exc, model=self._model, host=self._host, call="embed", timeout_s=self._timeout_s
            )
            logger.warning("%s (batch of %d)", error, len(batch))
            if isinstance(exc, ollama.ResponseError) and exc.status_code in _REFUSED_INPUT:
                raise _InputRefused(str(error)) from exc
            raise error from exc
        return self._validated(response.embeddings, expected=len(batch))

    def _validated(
        self, embeddings: Sequence[Sequence[float]], *, expected: int
    ) -> npt.NDArray[np.float32]:
        """Check the server's vectors against the contract and L2-normalise them."""
        if len(embeddings) != expected:
            raise self._bad_output(f"{len(embeddings)} vectors for {expected} texts")
        lengths = {len(vector) for vector in embeddings}
        if 0 in lengths:
            raise self._bad_output("an empty vector")
        if len(lengths) != 1:
            raise self._bad_output(f"vectors of mixed dimensions {sorted(lengths)}")
        matrix = np.asarray(embeddings, dtype=np.float64)
        if not np.isfinite(matrix).all():
            raise self._bad_output("NaN or infinite values")
        # Scaled by each row's largest value first: 1e200 squared overflows even float64.
        largest = np.abs(matrix).max(axis=1, keepdims=True)
        if (largest == 0).any():
            raise self._bad_output("a zero vector")
        matrix = matrix / largest
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        dimension = matrix.shape[1]
        with self._state_lock:
            if self._dimension is None:
                self._dimension = dimension
            elif dimension != self._dimension:
                raise self._bad_output(f"dimension {dimension}, expected {self._dimension}")
        normalised: npt.NDArray[np.float32] = (matrix / norms).astype(np.float32)
        return normalised

    def _bad_output(self, what: str) -> EmbedderUnavailable:
        logger.warning("ollama embed at %s returned %s", self._shown_host, what)
        return EmbedderUnavailable(f"ollama embed at {self._shown_host}: returned {what}")
