"""Documented caps on everything a caller can send. Part of the public contract."""

from __future__ import annotations

import math
import operator
import re
import threading
from typing import TypeGuard

MAX_TOP_K = 200
"""``top_k`` is clamped to ``1..MAX_TOP_K``."""

MAX_OFFSET = 1_000
"""The deepest page start: ``offset`` past it answers an empty page (see ``page_start``)."""

MAX_DOCUMENT_CHARS = 1_000_000
"""A document's ``text`` may hold at most this many characters; more is refused at ``add``."""

MAX_TITLE_CHARS = 1_000
MAX_URL_CHARS = 2_048
MAX_ACCESS_GROUPS = 64
MAX_BATCH_SIZE = 100_000
"""At most this many documents per ``add`` call."""

MAX_FETCH_CHARS = 100_000
"""``fetch_source`` returns at most this many characters of text (and says it truncated)."""

MAX_GREP_PATTERN = 256
MAX_GREP_MATCHES = 200
GREP_TIMEOUT_S = 2.0
"""``grep`` stops after this long (wall clock) and raises ``GrepTimeout``."""

MAX_SOURCE_ID_CHARS = 256
_ID_CHAR = r"[^\s\x00-\x1f\x7f]"
_ID_NOT_DOT = r"[^\s\x00-\x1f\x7f.]"
SOURCE_ID_PATTERN = re.compile(  # no look-ahead: JSON Schema validators differ on it
    rf"(?:{_ID_CHAR}{{3,256}}|{_ID_NOT_DOT}{_ID_CHAR}?|\.{_ID_NOT_DOT})"
)
r"""The shape of a source id (also the MCP schema's pattern): 1-256 characters, none of
them whitespace or a control character, and not ``.`` or ``..``: an HTTP path names a
document by its id as one segment, and clients resolve those two segments before sending
(``DELETE .../documents/..`` reached ``DELETE /v1/corpora/{name}`` and dropped the whole
corpus), whatever they percent-encode. ``is_valid_source_id`` also refuses an id with
such a segment anywhere (``x/../../../other``, ``./x``, ``a\..``, ``%2e%2e`` as a URL
parser reads it): a client that puts an id into a URL without encoding its slashes
resolves them too (curl and requests sent that delete to ``/v1/corpora/other``). It
also refuses what
``str.isprintable`` does not print — format characters (bidi overrides, zero-width
joiners), surrogates, private-use and unassigned code points — so an id reads as what it
is. Any other character is fine: collections name documents by Wikipedia title
(``Beyoncé``, ``"Heroes"_(David_Bowie_album)``) or by URI (``<dbpedia:Animalia_(book)>``),
as Elasticsearch, LanceDB and txtai accept. Ids never become file names; they reach
SQLite and tantivy as bound values and an HTTP path as one percent-encoded segment."""

LOOKUP_SOURCE_ID_PATTERN = re.compile(rf"{_ID_CHAR}{{1,256}}")
"""``SOURCE_ID_PATTERN`` without its ``.``/``..`` part: what a look-up may name (an
older version stored ids such as ``..``; they are still fetched and deleted by them)."""

SOURCE_ID_RULE = "1-256 printable characters, no whitespace, no . or .. path segment"
"""What a refused source id is told."""

LOOKUP_SOURCE_ID_RULE = "1-256 printable characters, no whitespace"
"""What a refused look-up id is told (``is_lookup_source_id``)."""

CORPUS_NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
"""Grammar of a corpus name; it becomes a directory name, so no separators, no dots."""

MAX_LANGUAGE_ID = 1_000_000


def clamp_int(value: object, low: int, high: int, default: int) -> int:
    """Clamp a caller's number into ``low..high``; non-numbers and NaN become ``default``."""
    if isinstance(value, bool):
        return default
    if isinstance(value, float):
        if value != value:  # NaN
            return default
        if value in (float("inf"), float("-inf")):
            return high if value > 0 else low
        value = int(value)
    try:
        number = operator.index(value)  # type: ignore[arg-type]  # ints, numpy's int64 …
    except TypeError:
        return default
    return min(max(number, low), high)


def page_start(offset: object) -> int | None:
    """Where the page asked for with ``offset`` starts, or ``None``: the page is empty.

    Never a refusal: ``offset`` is clamped as ``clamp_int`` clamps (a negative one, or no
    number, starts at 0). Past ``MAX_OFFSET`` (``+inf`` too) there is no page: ``None``,
    answered ``[]``, so a client paging until an empty page stops — clamping it to
    ``MAX_OFFSET`` repeated the last page forever.
    """
    start = clamp_int(offset, 0, MAX_OFFSET + 1, 0)
    return None if start > MAX_OFFSET else start


_SEGMENT_SEPARATORS = re.compile(r"[/\\]")  # a WHATWG URL parser reads "\" as "/" too
_DOT_SEGMENTS = frozenset({".", ".."})


def _has_dot_segment(value: str) -> bool:
    """True when a URL parser would resolve part of ``value`` as a ``.`` or ``..`` path
    segment (``%2e`` counts as a dot there, in either case)."""
    if "." not in value and "%" not in value:
        return False  # the common case, without splitting
    return any(
        segment.lower().replace("%2e", ".") in _DOT_SEGMENTS
        for segment in _SEGMENT_SEPARATORS.split(value)
    )


def is_valid_source_id(value: object) -> bool:
    """Whether a new document may take ``value`` as its id (``SOURCE_ID_RULE``)."""
    return (
        is_lookup_source_id(value)
        and SOURCE_ID_PATTERN.fullmatch(value) is not None
        and not _has_dot_segment(value)
    )


def is_lookup_source_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` may name a stored document in a look-up (fetch):
    ``LOOKUP_SOURCE_ID_RULE``, the id rule without its dot-segment part, which came
    later — a store may hold ``..`` or ``a/../b`` from before, still read and deleted by
    its id (``..`` itself was refused here too, by the new-id pattern)."""
    return (
        isinstance(value, str)
        and LOOKUP_SOURCE_ID_PATTERN.fullmatch(value) is not None
        and value.isprintable()
    )


def is_valid_corpus_name(value: object) -> bool:
    return isinstance(value, str) and CORPUS_NAME_PATTERN.fullmatch(value) is not None


def is_wait_seconds(value: object) -> bool:
    """A wait a caller may ask for (``busy_timeout``, ``lock_wait_s``): a finite number of
    seconds from 0 up to what a lock's timeout can take (``threading.TIMEOUT_MAX``)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= threading.TIMEOUT_MAX
    )
