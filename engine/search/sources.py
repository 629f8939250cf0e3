"""Reading sources directly: ``fetch_source``, ``evidence`` text and ``grep``.

All three see public documents only. ``grep`` runs the caller's pattern through the
``regex`` module's per-call timeout so that no pattern can hang it. It stops at a match
cap (returning the matches) or at a wall-clock budget: then it raises ``GrepTimeout``,
because an incomplete scan must not read as "no matches".
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import regex

from engine.documents import GrepMatch, Passage, SourceText
from engine.errors import GrepTimeout, InvalidArgument, SourceNotFound
from engine.limits import (
    GREP_TIMEOUT_S,
    LOOKUP_SOURCE_ID_RULE,
    MAX_FETCH_CHARS,
    MAX_GREP_MATCHES,
    MAX_GREP_PATTERN,
    clamp_int,
    is_lookup_source_id,
)
from engine.search.regex_checks import (
    MAX_GREP_COPIES,
    ParserUnavailable,
    pattern_cost,
)
from engine.storage import DocumentStore

_LINE_CONTEXT = 120
_MAX_LINE = 1_000  # characters of a match's line returned at most (``start``/``end`` are exact)
_SCAN_BATCH = 200


def fetch_source(store: DocumentStore, source_id: object) -> SourceText:
    if not is_lookup_source_id(source_id):
        raise InvalidArgument(f"source id must be {LOOKUP_SOURCE_ID_RULE}")
    doc = store.get_many([source_id], public_only=True).get(source_id)
    if doc is None:
        raise SourceNotFound(f"source {source_id!r} not found")
    return SourceText(
        source_id=doc.source_id,
        title=doc.title,
        url=doc.url,
        text=doc.text[:MAX_FETCH_CHARS],
        language_id=doc.language_id,
        truncated=len(doc.text) > MAX_FETCH_CHARS,
    )


def evidence_text(passages: Sequence[Passage]) -> str:
    """Numbered sources for an LLM prompt: ``[n] source_id · title · url`` then excerpt."""
    blocks = []
    for n, p in enumerate(passages, start=1):
        header = f"[{n}] " + " · ".join(part for part in (p.source_id, p.title, p.url) if part)
        blocks.append(f"{header}\n{p.excerpt}")
    return "\n\n".join(blocks)


def compile_pattern(pattern: object, *, fixed: bool) -> regex.Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise InvalidArgument("grep pattern must be a non-empty string")
    if len(pattern) > MAX_GREP_PATTERN:
        raise InvalidArgument(f"grep pattern is longer than {MAX_GREP_PATTERN} characters")
    if "\x00" in pattern:
        raise InvalidArgument("grep pattern contains a NUL character")
    if not fixed:
        _refuse_costly(pattern)
    try:
        # Never into the regex module's cache: it keeps 500 compiled patterns for the
        # life of the process, each up to MAX_GREP_COPIES copies, callers choosing them.
        compiled = regex.compile(
            regex.escape(pattern) if fixed else pattern, _FLAGS, cache_pattern=False
        )
    except _INVALID as exc:
        raise InvalidArgument(f"invalid regular expression: {exc}") from exc
    # Even uncached, the module remembers each pattern's text (whether it is locale
    # sensitive) until its cache is purged: a slow leak of every distinct pattern. (A
    # grep compiles once; what the purge drops, other code recompiles once.)
    regex.purge()
    return compiled


def _refuse_costly(pattern: str) -> None:
    """Refuse, before it is compiled, a pattern that recurses or whose counted
    repetitions compile into more than ``MAX_GREP_COPIES`` copies (``regex_checks``)."""
    try:
        cost = pattern_cost(pattern, _FLAGS)
    except ParserUnavailable as exc:
        raise InvalidArgument(
            f"regular-expression grep is unavailable: {exc}; fixed-string grep still works"
        ) from exc
    except _INVALID as exc:
        raise InvalidArgument(f"invalid regular expression: {exc}") from exc
    if cost.call is not None:
        raise InvalidArgument(
            f"grep pattern recurses or calls a group as a subroutine (at {cost.call!r}); "
            "that is not supported: it can need memory without bound"
        )
    if cost.copies > MAX_GREP_COPIES:
        raise InvalidArgument(
            f"grep pattern's counted repetitions ({{m,n}}) expand to {cost.copies:,} copies "
            f"of their parts; the cap is {MAX_GREP_COPIES:,}"
        )


_FLAGS = regex.MULTILINE
_INVALID = (regex.error, OverflowError, RecursionError, ValueError, MemoryError)


def grep(
    store: DocumentStore,
    pattern: object,
    limit: object,
    *,
    fixed: bool = False,
    timeout_s: float = GREP_TIMEOUT_S,
) -> list[GrepMatch]:
    deadline = time.monotonic() + timeout_s  # compiling counts against the budget too
    compiled = compile_pattern(pattern, fixed=fixed)
    cap = clamp_int(limit, 1, MAX_GREP_MATCHES, 20)
    matches: list[GrepMatch] = []
    cursor = store.connection().execute(
        "SELECT source_id, title, url, text FROM documents WHERE is_public = 1 ORDER BY rowid"
    )
    try:
        while True:
            rows = cursor.fetchmany(_SCAN_BATCH)
            if not rows:
                return matches
            for source_id, title, url, text in rows:
                remaining = deadline - time.monotonic()
                try:
                    if remaining <= 0:
                        raise TimeoutError
                    for m in compiled.finditer(text, timeout=remaining):
                        matches.append(_match(source_id, title, url, text, m.start(), m.end()))
                        if len(matches) >= cap:
                            return matches
                except TimeoutError:
                    raise _timed_out(timeout_s, matches) from None
                except MemoryError:
                    # the checks above refuse the known ways; any other pattern that
                    # outgrows memory is the caller's to simplify, not a server error
                    raise InvalidArgument(
                        "grep pattern needs more memory than a scan may use; simplify it "
                        "or search fixed text"
                    ) from None
    finally:
        cursor.close()


def _timed_out(timeout_s: float, matches: list[GrepMatch]) -> GrepTimeout:
    return GrepTimeout(
        f"grep pattern exceeded the time budget of {timeout_s:g} s before every source "
        f"was read ({len(matches)} matches so far); simplify it (nested repetition such "
        "as (a+)+ backtracks) or search fixed text",
        tuple(matches),
    )


def _match(source_id: str, title: str, url: str, text: str, start: int, end: int) -> GrepMatch:
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    lo = max(line_start, start - _LINE_CONTEXT)
    hi = min(line_end, end + _LINE_CONTEXT, lo + _MAX_LINE)  # a match may span megabytes
    return GrepMatch(
        source_id=source_id, title=title, url=url, line=text[lo:hi], start=start, end=end
    )
