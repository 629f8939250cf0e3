"""``Corpus.ask``, step by step: check the question, rate-limit the user, ask the model,
resolve what it extracted, then search with the resulting text and filters.

Logs and metrics carry metadata only: the question's length, counts of keywords and
resolved values, latency and the outcome. The question and the user id never appear.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from engine.documents import Passage, is_utf8_encodable
from engine.errors import InvalidArgument
from engine.filters import Filter
from engine.metrics import EngineMetrics
from engine.metrics import NlOutcome as Outcome
from engine.natural.answer import Answer, Interpretation
from engine.natural.errors import NaturalSearchUnavailable, RateLimited
from engine.natural.parser import QuestionParser
from engine.natural.ratelimit import TokenBucketLimiter
from engine.natural.resolve import ValueLookup, interpret
from sparse import MIN_QUERY_LENGTH

logger = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 500
"""A question may hold at most this many characters; longer is ``InvalidArgument``."""

MAX_USER_CHARS = 256

Run = Callable[[str, Filter | None], Sequence[Passage]]
"""Runs the search for an interpretation: (query text, filters) -> passages."""


def check_question(question: object) -> str:
    if not isinstance(question, str):
        raise InvalidArgument(f"question must be a string, got {type(question).__name__}")
    text = question.strip()
    if not text:
        raise InvalidArgument("question is empty")
    if len(question) > MAX_QUESTION_CHARS:
        raise InvalidArgument(
            f"question has {len(question)} characters; the cap is {MAX_QUESTION_CHARS}"
        )
    if "\x00" in text or not is_utf8_encodable(text):
        raise InvalidArgument("question contains a NUL character or a lone surrogate")
    return text


def check_user(user: object) -> str:
    if not isinstance(user, str) or not 0 < len(user) <= MAX_USER_CHARS:
        raise InvalidArgument(f"user must be a string of 1-{MAX_USER_CHARS} characters")
    return user


class NaturalSearch:
    """Natural-language questions for one corpus."""

    def __init__(
        self,
        corpus: str,
        parser: QuestionParser,
        limiter: TokenBucketLimiter,
        lookup: ValueLookup,
        metrics: EngineMetrics,
    ) -> None:
        self._corpus = corpus
        self._parser = parser
        self._limiter = limiter
        self._lookup = lookup
        self._metrics = metrics

    def close(self) -> None:
        close = getattr(self._parser, "close", None)
        if callable(close):
            close()

    def ask(self, question: object, user: object, run: Run) -> Answer:
        started = time.perf_counter()
        outcome = Outcome.INVALID
        size = len(question) if isinstance(question, str) else 0
        try:
            text = check_question(question)
            who = check_user(user)
            outcome = Outcome.RATE_LIMITED
            self._limiter.acquire(who)
            outcome = Outcome.UNAVAILABLE
            interpretation = interpret(self._parser.parse(text), self._lookup)
            outcome = Outcome.OK
        except (InvalidArgument, RateLimited, NaturalSearchUnavailable) as exc:
            self._finish(outcome, started, size, None, exc)
            raise
        except Exception as exc:  # a bug: still counted and timed, then raised as it is
            self._finish(Outcome.UNAVAILABLE, started, size, None, exc)
            raise
        query = interpretation.query
        if len(query.strip()) < MIN_QUERY_LENGTH and interpretation.filters is None:
            query = text  # the model extracted nothing: search the question as typed
            interpretation = _with_query(interpretation, query)
        passages = tuple(run(query, interpretation.filters))
        self._finish(outcome, started, size, interpretation, None)
        return Answer(passages=passages, interpretation=interpretation)

    def _finish(
        self,
        outcome: Outcome,
        started: float,
        size: int,
        interpretation: Interpretation | None,
        error: Exception | None,
    ) -> None:
        elapsed = time.perf_counter() - started
        self._metrics.nl_requests.labels(self._corpus, outcome.value).inc()
        self._metrics.nl_duration.labels(self._corpus).observe(elapsed)
        if interpretation is None:
            logger.info(
                "question (%d chars) not answered: %s (%s), %.1f ms",
                size,
                outcome.value,
                type(error).__name__,
                elapsed * 1000,
            )
            return
        logger.info(
            "question (%d chars): %d keywords, %d of %d values resolved, %d ranges, %.1f ms",
            size,
            len(interpretation.keywords),
            sum(v.applied for v in interpretation.values),
            len(interpretation.values),
            len(interpretation.ranges),
            elapsed * 1000,
        )


def _with_query(interpretation: Interpretation, query: str) -> Interpretation:
    from dataclasses import replace

    return replace(interpretation, query=query)
