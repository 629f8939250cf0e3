"""fetch_source, evidence and grep: validation, caps, public-only."""

from __future__ import annotations

import gc
import tracemalloc
import weakref

import pytest
import regex

import engine.search.sources as sources
from engine import (
    ArmRanks,
    Corpus,
    CorpusConfig,
    Document,
    GrepTimeout,
    InvalidArgument,
    Passage,
    SearchEngine,
    SourceNotFound,
)
from engine.limits import GREP_TIMEOUT_S, MAX_FETCH_CHARS, MAX_GREP_PATTERN
from engine.search.regex_checks import pattern_cost
from engine.search.sources import MAX_GREP_COPIES, evidence_text


def counted_copies(pattern: str) -> int:
    """Copies of single atoms compiling ``pattern`` as grep does would make."""
    return pattern_cost(pattern, regex.MULTILINE).copies


def subroutine_call(pattern: str) -> str | None:
    """The first recursion or subroutine call in ``pattern``, as spelled, or None."""
    return pattern_cost(pattern, regex.MULTILINE).call


@pytest.fixture
def corpus(fast_engine: SearchEngine) -> Corpus:
    corpus = fast_engine.create_corpus(CorpusConfig(name="docs", embedder=None))
    corpus.add(
        [
            Document(
                id="guide/1",
                title="Install guide",
                text="Run setup.exe\nThen reboot.",
                url="/guide",
            ),
            Document(id="long", title="Long", text="word " * (MAX_FETCH_CHARS // 4)),
            Document(
                id="hidden",
                title="Hidden",
                text="Run the secret setup",
                access_groups=frozenset({"ops"}),
            ),
            Document(id="aaa", title="Many a", text="a" * 5_000 + "b"),
        ]
    )
    return corpus


def test_fetch_source(corpus: Corpus) -> None:
    source = corpus.fetch_source("guide/1")
    assert (source.title, source.url, source.truncated) == ("Install guide", "/guide", False)
    assert source.text == "Run setup.exe\nThen reboot."
    long = corpus.fetch_source("long")
    assert long.truncated and len(long.text) == MAX_FETCH_CHARS


@pytest.mark.parametrize("bad", ["", "a b", "x" * 300, "\x00", "tab\tid", "\u202eevil"])
def test_fetch_source_rejects_ids_outside_the_grammar(corpus: Corpus, bad: str) -> None:
    with pytest.raises(InvalidArgument):
        corpus.fetch_source(bad)


@pytest.mark.parametrize("odd", ["../../etc/passwd", "id';--", "x'OR'1'='1"])
def test_odd_but_printable_ids_are_just_ids(corpus: Corpus, odd: str) -> None:
    """An id is never a path or SQL: a printable one that is not stored is not found."""
    with pytest.raises(SourceNotFound, match="not found"):
        corpus.fetch_source(odd)


@pytest.mark.parametrize("missing", ["unknown", "hidden"])
def test_unknown_and_non_public_look_the_same(corpus: Corpus, missing: str) -> None:
    with pytest.raises(SourceNotFound, match="not found"):
        corpus.fetch_source(missing)


def test_evidence_package(corpus: Corpus) -> None:
    text = corpus.evidence("install setup", top_k=3)
    assert text.startswith("[1] guide/1 · Install guide · /guide\n")
    assert "Hidden" not in text and "secret" not in text
    assert corpus.evidence("zzqx") == ""  # nothing found: an empty package


def test_grep_regex_and_fixed(corpus: Corpus) -> None:
    matches = corpus.grep(r"setup\.\w+")
    assert [(m.source_id, m.line) for m in matches] == [("guide/1", "Run setup.exe")]
    assert corpus.grep("setup.exe", fixed=True)[0].start == 4
    assert corpus.grep("secret") == []  # non-public text is never grepped
    assert len(corpus.grep("word", limit=5)) == 5


def test_grep_validation(corpus: Corpus) -> None:
    for bad in ("", "(", "x" * (MAX_GREP_PATTERN + 1), "a\x00"):
        with pytest.raises(InvalidArgument):
            corpus.grep(bad)


@pytest.mark.timeout(60)  # compiled, the first pattern takes seconds and 650 MB
@pytest.mark.parametrize(
    "pattern", [r"(?:a{1500}){1500}", r"(?:(?:(?:a{999}){999}){999}){999}", r"a{100000}"]
)
def test_counted_repetitions_that_would_expand_past_the_cap_are_refused(
    corpus: Corpus, pattern: str
) -> None:
    with pytest.raises(InvalidArgument, match="counted repetitions"):
        corpus.grep(pattern)


def test_counted_repetitions_are_counted_nested_and_in_sequence() -> None:
    assert counted_copies(r"\d{3}-\d{4}") == 8
    assert counted_copies(r"(?:\w{1,20}\s){1,50}") == 50 * (20 + 1)
    assert counted_copies(r"(?P<word>\w{4})(?<=a{2})(?i:b{3})") == 4 + 2 + 3
    assert counted_copies(r"[{}]{3}\p{L}{5}x{,5}{") == 3 + 5 + 5 + 1
    assert counted_copies(r"(?:a{100}){100}") <= MAX_GREP_COPIES  # still allowed


@pytest.mark.timeout(60)  # compiled, each grows the regex module's stack to ~1 GB
@pytest.mark.parametrize(
    "pattern",
    [
        r"(?R)",
        r"(?0)",
        r"((?1))",
        r"(?:a|(?R))",
        r"(?P<n>x|(?&n))",
        r"(?P<n>(?P>n))",
        # spelled past a first version of the check: a comment holding "[", and verbose
        # mode's whitespace and comments inside the call
        r"(?#[)\((?:x|(?R))*\)",
        "(?x)#[\n\\((?:x|(?R))*\\)",
        r"(?x)\((?:x|(?R ))*\)",
        "(?x)(?R#note\n)",
        "(?x)(?P<n>\\((?:x|(?P#note\n>n))*\\))",
    ],
)
def test_recursive_patterns_are_refused_before_they_run(corpus: Corpus, pattern: str) -> None:
    with pytest.raises(InvalidArgument, match="subroutine"):
        corpus.grep(pattern)


def test_only_real_subroutine_calls_are_refused() -> None:
    assert subroutine_call(r"(a)b(?-1)") == "(?-1)"
    assert subroutine_call(r"(?+1)(a)") == "(?+1)"
    # an escaped parenthesis, inline flags, verbose comments and back-references are no calls
    for allowed in (
        r"\(?R\)",
        r"(?-i:a)",
        r"(?i)a",
        r"(a)\g<1>",
        r"(?P<n>x)(?P=n)",
        "(?x) setup \\. exe  # the installer",
        # spelled inside a character class or a comment, a call is literal text
        r"[(?R)]",
        r"(?#(?R)x",
        "(?x)x # (?R)",
        r"[(?#]x[)]",
    ):
        assert subroutine_call(allowed) is None, allowed


# Each spelled past the first text-scanning checks: what the scanner read as a comment,
# a character class's end or the group a quantifier repeats was not what the regex
# module read. Compiled, each takes seconds and about 600 MB.
HIDDEN_REPETITIONS = [
    "(?x)(?:a{1500}#)\n){1500}",  # a verbose comment hides a ")"
    "(?x)(?:a{1500}) {1500}",  # verbose whitespace between the group and its quantifier
    "(?x)(?:a{1500})#\n{1500}",
    "(?x)(?:a{1500}b)(?#note){1500}",
    r"(?:a{1500}b)(?#note){1500}",  # a comment stands between group and quantifier
    r"(?:a{1500}b)(?#\)){1500}",
    r"(?:a{1500}b)(?i){1500}",  # so does an inline flag group
    r"(?:a{1500}[[:alpha:])]){1500}",  # a POSIX class's "]" is not the set's end
    r"(?V1)(?:a{1500}[[a]b)]){1500}",  # version 1's nested sets
    r"(?:a{1500}[]()]){1500}",  # a leading "]" is literal
    r"(?:a{1500}[\](]){1500}",
    r"(?:a{1500}(?x: ) ){1500}",  # a scoped verbose group
    r"(?ix)(?:a{1500}) {1500}",
    r"(?V1x)(?:a{1500}) {1500}",
    r"(?x)(?-x:(?:a{1500}b)){1500}",
]

HIDDEN_RECURSION = [
    "(?x)[#]|(?R)",  # "#" inside a character class is no verbose comment
    "(?x)[#](?R)",
    r"[(?#]|(?R)|[)]",  # nor is "(?#" inside a character class a comment
    r"[[:alpha:](?#]|(?R)|[)]",
    r"(?V1)[[(?#]]|(?R)|[)]",
    "(?x)(?#)#)\n(?R)",
    "(?x)(?R)#",
]


@pytest.mark.timeout(60)  # compiled, each takes seconds and 600 MB
@pytest.mark.parametrize("pattern", HIDDEN_REPETITIONS)
def test_counted_repetitions_are_counted_however_they_are_spelled(
    corpus: Corpus, pattern: str
) -> None:
    assert counted_copies(pattern) >= 1500 * 1500
    with pytest.raises(InvalidArgument, match="counted repetitions"):
        corpus.grep(pattern)


@pytest.mark.timeout(60)  # compiled, each grows the regex module's stack to ~1 GB
@pytest.mark.parametrize("pattern", HIDDEN_RECURSION)
def test_recursion_is_found_however_it_is_spelled(corpus: Corpus, pattern: str) -> None:
    assert subroutine_call(pattern) == "(?R)"
    with pytest.raises(InvalidArgument, match="subroutine"):
        corpus.grep(pattern)


def test_a_refusal_quotes_a_bounded_part_of_the_pattern(corpus: Corpus) -> None:
    name = "n" * 120
    with pytest.raises(InvalidArgument, match="subroutine") as caught:
        corpus.grep(f"(?P<{name}>x)(?&{name})")
    assert len(str(caught.value)) < 200


def test_compiled_patterns_are_not_kept_after_the_call(corpus: Corpus) -> None:
    """The regex module's cache kept the last 500 caller-chosen patterns (each up to
    MAX_GREP_COPIES copies) for the life of the process."""
    compiled = sources.compile_pattern(r"(?:kept\d{90}){99}", fixed=False)
    fixed = sources.compile_pattern("kept (literally)", fixed=True)
    refs = [weakref.ref(compiled), weakref.ref(fixed)]
    del compiled, fixed
    gc.collect()
    assert [ref() for ref in refs] == [None, None]


def test_distinct_patterns_leave_no_memory_behind() -> None:
    """Uncached, the regex module still remembered each pattern's text until a purge."""
    filler = "x" * (MAX_GREP_PATTERN - 16)
    for n in range(300):  # warm up: lazily built tables, the first purge
        sources.compile_pattern(f"w{n:06d}{filler}", fixed=n % 2 == 0)
    gc.collect()
    # Only what the regex module and grep allocate: another thread of this process (a test
    # before this one may leave one running) must not count.
    mine = [tracemalloc.Filter(True, "*/regex/*"), tracemalloc.Filter(True, "*/engine/search/*")]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(mine)
        for n in range(3_000):
            sources.compile_pattern(f"d{n:06d}{filler}", fixed=n % 2 == 0)
        gc.collect()
        after = tracemalloc.take_snapshot().filter_traces(mine)
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown < 256 * 1024, grown  # unpurged: ~3,000 x 400 B; cached: megabytes


def test_a_pattern_that_runs_out_of_memory_is_the_callers_error(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection: whatever pattern outgrows memory mid-scan, the answer is a clear
    InvalidArgument, not a MemoryError escaping as a server error."""

    class Exhausting:
        def finditer(self, text: str, timeout: float) -> object:
            raise MemoryError

    monkeypatch.setattr(sources, "compile_pattern", lambda pattern, fixed: Exhausting())
    with pytest.raises(InvalidArgument, match="more memory"):
        corpus.grep("anything")


def test_a_match_line_is_bounded_and_its_offsets_exact(fast_engine: SearchEngine) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="one-line", embedder=None))
    corpus.add([Document(id="blob", text="x" * 50_000)])
    (match,) = corpus.grep(r"x+")
    assert (match.start, match.end) == (0, 50_000)
    assert match.line == "x" * 1_000


def test_evidence_headers_keep_every_character_of_an_id_and_title() -> None:
    passage = Passage(
        source_id="chapter·",
        title="Notes ·",
        url="",
        excerpt="text",
        language_id=0,
        score=1.0,
        ranks=ArmRanks(sparse=1, dense=None),
    )
    assert evidence_text([passage]).splitlines()[0] == "[1] chapter· · Notes ·"


@pytest.mark.timeout(60)  # without the engine's budget this pattern runs for ages
def test_catastrophic_regex_is_an_explicit_timeout_not_an_empty_list(corpus: Corpus) -> None:
    from engine.search.sources import grep

    assert GREP_TIMEOUT_S < 60
    with pytest.raises(GrepTimeout, match="time budget of 2 s") as caught:
        corpus.grep(r"(a+)+$")
    assert caught.value.matches == ()
    # A scan cut short after some matches names them, still as an error.
    with pytest.raises(GrepTimeout) as cut:
        grep(corpus._store, r"reboot|(a+)+$", 200, timeout_s=0.5)
    assert [m.source_id for m in cut.value.matches] == ["guide/1"]
    # A pattern that finishes in time is answered as before.
    assert grep(corpus._store, "reboot", 10, timeout_s=5.0)[0].source_id == "guide/1"
