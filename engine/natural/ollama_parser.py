"""The question parser: one Ollama ``/api/chat`` call through the real ``ollama`` client.

The request carries the field schema (as ``format`` and in the system prompt) and the
question — nothing from the store. Before the inference call, a health check
(``POST /api/show``, short timeout) answers fast when the server is down or the model
is not pulled; a passed check is trusted for ``health_ttl_s``. Every remote failure is
described by ``dense.ollama_errors`` (the one Ollama mapping) and raised as
``NaturalSearchUnavailable``. Both calls go through ``dense.ollama_transport``:
``timeout_s`` bounds the whole inference, answer included, and the answer's size is
capped. Nothing is retried. Logs carry lengths, counts and latencies — never the
question or the answer.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from functools import cached_property

import ollama

from dense.ollama_errors import REMOTE_ERRORS, describe_failure
from dense.ollama_transport import MAX_SHOW_BYTES, bounded_client
from engine.config import FieldType, NaturalLanguage
from engine.natural.errors import NaturalSearchUnavailable
from engine.natural.schema import (
    MAX_OUTPUT_TOKENS,
    ModelQuery,
    output_schema,
    parse_output,
    system_prompt,
)

logger = logging.getLogger(__name__)

MAX_ANSWER_BYTES = 1 << 20
"""The most read of a chat answer's body: its message is refused past
``MAX_OUTPUT_CHARS`` (8,192) characters anyway, ~100 KB even with every character
escaped; the cap keeps a server that ignores ``num_predict`` from filling memory first."""


def _unavailable(
    exc: Exception, *, model: str, host: str, timeout_s: float
) -> NaturalSearchUnavailable:
    return NaturalSearchUnavailable(
        describe_failure(exc, model=model, host=host, timeout_s=timeout_s)
    )


class OllamaQuestionParser:
    """``QuestionParser`` over an Ollama chat model; constructing it does no I/O."""

    def __init__(
        self,
        settings: NaturalLanguage,
        declared: Mapping[str, FieldType],
        *,
        health_ttl_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._declared = dict(declared)
        self._schema = output_schema(self._declared)
        self._system = system_prompt(self._declared)
        self._health_ttl_s = health_ttl_s
        self._clock = clock
        self._healthy_until = -math.inf
        self._lock = threading.Lock()

    @property
    def schema(self) -> dict[str, object]:
        return self._schema

    @cached_property
    def _client(self) -> ollama.Client:
        s = self._settings
        return bounded_client(s.host, timeout_s=s.timeout_s, max_bytes=MAX_ANSWER_BYTES)

    @cached_property
    def _health_client(self) -> ollama.Client:
        s = self._settings
        return bounded_client(s.host, timeout_s=s.health_timeout_s, max_bytes=MAX_SHOW_BYTES)

    def close(self) -> None:
        for attr in ("_client", "_health_client"):
            client = self.__dict__.pop(attr, None)
            if client is not None:
                client.close()

    def parse(self, question: str) -> ModelQuery:
        self._check_health()
        s = self._settings
        started = time.perf_counter()
        try:
            response = self._client.chat(
                model=s.model,
                messages=[
                    {"role": "system", "content": self._system},
                    {"role": "user", "content": question},
                ],
                format=self._schema,
                options={"temperature": 0, "num_predict": MAX_OUTPUT_TOKENS},
                stream=False,
            )
            content = response.message.content
        except REMOTE_ERRORS as exc:
            self._mark_unhealthy()
            raise _unavailable(exc, model=s.model, host=s.host, timeout_s=s.timeout_s) from None
        logger.debug(
            "ollama chat: %d answer chars, %.1f ms",
            len(content or ""),
            (time.perf_counter() - started) * 1000,
        )
        return parse_output(content, self._declared)

    def _check_health(self) -> None:
        with self._lock:
            if self._clock() < self._healthy_until:
                return
        s = self._settings
        try:
            shown = self._health_client.show(s.model)
        except REMOTE_ERRORS as exc:
            raise _unavailable(
                exc, model=s.model, host=s.host, timeout_s=s.health_timeout_s
            ) from None
        if shown.capabilities is not None and "completion" not in shown.capabilities:
            raise NaturalSearchUnavailable(
                f"the Ollama model {s.model!r} cannot generate text (an embedding model?); "
                "configure a chat model"
            )
        with self._lock:
            self._healthy_until = self._clock() + self._health_ttl_s

    def _mark_unhealthy(self) -> None:
        with self._lock:
            self._healthy_until = -math.inf
