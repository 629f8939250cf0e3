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
    MAX_FETCH_CHARS,
    MAX_GREP_MATCHES,
    MAX_GREP_PATTERN,
    SOURCE_ID_RULE,
    clamp_int,
    is_valid_source_id,
)
from engine.storage import DocumentStore

_LINE_CONTEXT = 120
_MAX_LINE = 1_000  # characters of a match's line returned at most (``start``/``end`` are exact)
_SCAN_BATCH = 200


def fetch_source(store: DocumentStore, source_id: object) -> SourceText:
    if not is_valid_source_id(source_id):
        raise InvalidArgument(f"source id must be {SOURCE_ID_RULE}")
    assert isinstance(source_id, str)
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
    if not fixed and (call := subroutine_call(pattern)) is not None:
        raise InvalidArgument(
            f"grep pattern recurses or calls a group as a subroutine (at {call!r}); "
            "that is not supported: it can need memory without bound"
        )
    if not fixed and (copies := counted_copies(pattern)) > MAX_GREP_COPIES:
        raise InvalidArgument(
            f"grep pattern's counted repetitions ({{m,n}}) expand to {copies:,} copies of "
            f"their parts; the cap is {MAX_GREP_COPIES:,}"
        )
    try:
        return regex.compile(regex.escape(pattern) if fixed else pattern, regex.MULTILINE)
    except (regex.error, OverflowError, RecursionError, ValueError, MemoryError) as exc:
        raise InvalidArgument(f"invalid regular expression: {exc}") from exc


_SUBROUTINE = regex.compile(r"\(\?(?:R|[+-]?[0-9]|&|P>)")
_COMMENT_GROUP = regex.compile(r"\(\?#[^)]*\)")
_VERBOSE_FLAG = regex.compile(r"\(\?[a-wyzA-Z0-9]*x")
_VERBOSE_NOISE = regex.compile(r"#[^\n]*|\s+")


def subroutine_call(pattern: str) -> str | None:
    """The first recursion or subroutine call in ``pattern`` — ``(?R)``, ``(?1)``,
    ``(?-1)``, ``(?&name)``, ``(?P>name)`` — or ``None``. The regex module grows its
    stack for these without bound, before any time budget bites: ``(?R)`` (4 characters)
    took 0.6 GB and ended in ``MemoryError``.

    Read on a skeleton of the pattern: escapes blanked, ``(?#...)`` comments removed and,
    when an inline flag may turn verbose mode on, ``#`` comments and whitespace removed
    too (verbose mode accepts ``(?R )`` and ``(?P#note\n>name)``). It errs towards
    refusing: a call spelled inside a character class is refused as well."""
    skeleton = regex.sub(r"\\.", "__", pattern, flags=regex.DOTALL)
    skeleton = _COMMENT_GROUP.sub("", skeleton)
    if _VERBOSE_FLAG.search(skeleton):
        skeleton = _VERBOSE_NOISE.sub("", skeleton)
    call = _SUBROUTINE.search(skeleton)
    return None if call is None else call.group()


MAX_GREP_COPIES = 10_000
"""The regex module compiles a counted repetition by copying what it repeats, before any
time budget runs: ``(?:a{1500}){1500}`` (17 characters) took 3.6 s and 654 MB. 10,000
copies compile in about 0.2 s."""

_COUNTED = regex.compile(r"\{(\d*)(?:(,)(\d*))?\}")


def counted_copies(pattern: str) -> int:
    """How many copies of single atoms compiling ``pattern`` makes, counting nested
    counted repetitions multiplied (``(?:a{10}b){20}`` -> 220) and alternatives summed:
    an upper bound, read without compiling. ``*``, ``+`` and ``?`` loop, they copy
    nothing."""
    totals = [0]  # per open group: the copies inside it so far
    last = [0]  # per open group: the copies of its last element (what a quantifier repeats)
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "(":
            totals.append(0)
            last.append(0)
            i = _group_body(pattern, i)
            continue
        if ch == ")" and len(totals) > 1:
            inner = max(1, totals.pop())
            last.pop()
            totals[-1] += inner
            last[-1] = inner
            i += 1
            continue
        counted = _COUNTED.match(pattern, i) if ch == "{" else None
        if counted is not None and (counted.group(1) or counted.group(3)):
            low = int(counted.group(1) or 0)
            high = int(counted.group(3)) if counted.group(3) else low
            times = max(low, high, 1)
            totals[-1] += last[-1] * (times - 1)
            last[-1] *= times
            i = counted.end()
            continue
        i = _atom_end(pattern, i)
        totals[-1] += 1
        last[-1] = 1
    return sum(totals)


def _group_body(pattern: str, i: int) -> int:
    """Where the body of the group opened at ``i`` starts: past ``(?:``, ``(?<=``,
    ``(?P<name>``, inline flags and the like, which copy nothing."""
    j = i + 1
    if not pattern.startswith("?", j):
        return j
    j += 1
    if pattern[j : j + 1] in (":", "=", "!", ">", "|"):
        return j + 1
    if pattern[j : j + 2] in ("<=", "<!"):
        return j + 2
    if pattern[j : j + 1] in ("P", "<"):
        close = pattern.find(">", j)
        return len(pattern) if close < 0 else close + 1
    while j < len(pattern) and (pattern[j].isalpha() or pattern[j] == "-"):
        j += 1  # inline flags: (?i) or (?i:...)
    return j + 1 if pattern.startswith(":", j) else j


def _atom_end(pattern: str, i: int) -> int:
    """Where the atom starting at ``i`` ends: an escape (with ``\\p{..}``-style braces)
    or a character class counts as one atom."""
    if pattern[i] == "\\":
        end = i + 2
        if end < len(pattern) and pattern[end] == "{" and pattern[i + 1] in "pPNxuUg":
            close = pattern.find("}", end)
            end = len(pattern) if close < 0 else close + 1
        return end
    if pattern[i] == "[":
        j = i + 1
        if j < len(pattern) and pattern[j] == "^":
            j += 1
        if j < len(pattern) and pattern[j] == "]":
            j += 1
        while j < len(pattern) and pattern[j] != "]":
            j += 2 if pattern[j] == "\\" else 1
        return j + 1
    return i + 1


def grep(
    store: DocumentStore,
    pattern: object,
    limit: object,
    *,
    fixed: bool = False,
    timeout_s: float = GREP_TIMEOUT_S,
) -> list[GrepMatch]:
    compiled = compile_pattern(pattern, fixed=fixed)
    cap = clamp_int(limit, 1, MAX_GREP_MATCHES, 20)
    deadline = time.monotonic() + timeout_s
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
