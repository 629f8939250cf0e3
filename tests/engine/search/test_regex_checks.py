"""The checks run on a grep pattern before it is compiled (engine.search.regex_checks)."""

from __future__ import annotations

import importlib
import inspect
import tracemalloc
from types import ModuleType

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

import engine.search.regex_checks as regex_checks
from engine import InvalidArgument
from engine.limits import MAX_GREP_PATTERN
from engine.search.regex_checks import FOLDED_SET_COPIES, MAX_GREP_COPIES, pattern_cost
from engine.search.sources import compile_pattern

# Every node the regex module's parser builds, by what the copy count does with it. A
# container's parts are read from its ``subpattern``, ``items``, ``branches``,
# ``yes_item`` and ``no_item``; a set's members are one atom.
_CONTAINERS = {
    "Atomic",
    "Branch",
    "Conditional",
    "Fuzzy",
    "GreedyRepeat",
    "Group",
    "LazyRepeat",
    "LookAround",
    "LookAroundConditional",
    "PossessiveRepeat",
    "Sequence",
}
_LEAVES = {
    "Any",
    "AnyAll",
    "AnyU",
    "Boundary",
    "CallGroup",  # refused wherever it is
    "CallRef",  # made when compiling, never by the parser
    "Character",
    "DefaultBoundary",
    "DefaultEndOfWord",
    "DefaultStartOfWord",
    "EndOfLine",
    "EndOfLineU",
    "EndOfString",
    "EndOfStringLine",
    "EndOfStringLineU",
    "EndOfWord",
    "Failure",
    "Grapheme",
    "Keep",
    "Literal",
    "PrecompiledCode",
    "Property",
    "Prune",
    "Range",
    "RefGroup",
    "SearchAnchor",
    "SetBase",
    "SetDiff",
    "SetInter",
    "SetSymDiff",
    "SetUnion",
    "Skip",
    "StartOfLine",
    "StartOfLineU",
    "StartOfString",
    "StartOfWord",
    "String",
    "StringSet",  # a named list: grep passes none, so it fails to compile
    "ZeroWidthBase",
}


def test_every_node_the_parser_builds_is_known() -> None:
    """A tripwire for regex upgrades: a node kind the copy count has not been checked
    against (a new container could hide its parts under another name)."""
    core = importlib.import_module("regex._regex_core")
    nodes = {
        name
        for name, cls in inspect.getmembers(core, inspect.isclass)
        if issubclass(cls, core.RegexBase) and cls is not core.RegexBase
    }
    assert nodes == _CONTAINERS | _LEAVES


@pytest.mark.parametrize(
    ("pattern", "copies"),
    [
        (r"\d{3}-\d{4}", 8),
        (r"(?:\w{1,20}\s){1,50}", 50 * 21),
        (r"[{}]{3}\p{L}{5}x{,5}{", 3 + 5 + 5 + 1),
        (r"(?:a{10}b){20}", 220),
        (r"(?:a{10}|b{5}){2}", 30),
        (r"(?:a{3}){2,}", 6),  # an open maximum copies the minimum
        ("(?x) a {3} # {1000}\n", 3),
        (r"(?#{1000})a{3}", 3),
        (r"[a{1000}]{3}", 3),
        (r"(?(?=a{2})b{3}|c{4})", 2 + 3 + 4),
        # Sets of several members cost more under full case folding (FOLDED_SET_COPIES).
        (r"(?fi)[\p{L}\p{N}]{3}", 3 * FOLDED_SET_COPIES),
        (r"(?fi)[^ab]{3}x{2}", 3 + 2),  # no property: cheap ([a-z0-9]{9999}: 5 MB)
        (r"(?fi)[^\p{L}a]{3}x{2}", 3 * FOLDED_SET_COPIES + 2),
        (r"(?fi)[A-Za-z0-9+/]{3}", 3),
        (r"(?fi)[\w-]{3}", 3 * FOLDED_SET_COPIES),  # \w is a property
        (r"(?i)[\p{L}\p{N}]{3}", 3),
        (r"(?f)[\p{L}\p{N}]{3}", 3),
        (r"(?fi)[a]{3}\p{L}{2}", 5),
        (r"(?fi:[\p{L}\p{N}]{3})[\p{L}\p{N}]{2}", 3 * FOLDED_SET_COPIES + 2),
        # ... and so do alternations of single characters the module compiles into one.
        (r"(?fi)(?:\p{L}|\p{N}){3}", 3 * FOLDED_SET_COPIES),
        (r"(?fi)(?:a|[bc]|\p{N}){3}", 3 * FOLDED_SET_COPIES),
        (r"(?fi)(?:a|[bc]){3}", 3 * 2),
        # Other alternatives beside them do not stop the merge: they count as usual.
        (r"(?fi)(?:\p{L}|\p{N}|){3}", 3 * (FOLDED_SET_COPIES + 1)),  # the empty one: 1
        (r"(?fi)(?:\p{L}|\p{N}|xy){3}", 3 * (FOLDED_SET_COPIES + 2)),
        (r"(?fi)(?:\p{L}|\p{N}|x*){3}", 3 * (FOLDED_SET_COPIES + 1)),
        (r"(?fi)(?:a|b){3}", 3 * 2),
        (r"(?fi)(?:ab|\p{L}){3}", 3 * 3),
        (r"(?i)(?:\p{L}|\p{N}){3}", 3 * 2),
    ],
)
def test_copies_are_counted_from_the_parse(pattern: str, copies: int) -> None:
    assert pattern_cost(pattern).copies == copies


@pytest.mark.parametrize(
    "spelling", ["(?R)", "(?0)", "(?1)", "(?+1)", "(?-1)", "(?&n)", "(?P>n)", "(?P&n)"]
)
def test_every_spelling_of_a_call_is_found(spelling: str) -> None:
    pattern = f"(?P<n>a|{spelling})"
    assert pattern_cost(pattern).call == spelling
    with pytest.raises(InvalidArgument, match="subroutine"):
        compile_pattern(pattern, fixed=False)


def test_the_first_call_is_named() -> None:
    assert pattern_cost(r"(?P<n>a)(?:x|(?1))(?&n)").call == "(?1)"


def test_an_unusable_parser_refuses_every_regex(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed: if a regex upgrade moves the parser, no pattern goes through
    unchecked; fixed-string grep needs no check and still works."""
    changed = ModuleType("regex._regex_core")  # no Source, Info, ...
    monkeypatch.setattr(regex_checks.importlib, "import_module", lambda name: changed)
    regex_checks._parser.cache_clear()
    try:
        with pytest.raises(InvalidArgument, match="regular-expression grep is unavailable"):
            compile_pattern("plain", fixed=False)
        assert compile_pattern("a(b", fixed=True).search("xa(b")
    finally:
        monkeypatch.undo()
        regex_checks._parser.cache_clear()
    assert compile_pattern("plain", fixed=False).search("plain")


_SYNTAX = "()[]{}<>?*+|\\#:-^$.=!&,PRVx019ai \n"


@settings(max_examples=400)
@given(
    st.one_of(
        st.text(max_size=MAX_GREP_PATTERN + 8),
        st.text(alphabet=_SYNTAX, max_size=40),
    )
)
def test_any_text_is_compiled_or_refused_as_the_callers_error(pattern: str) -> None:
    try:
        compiled = compile_pattern(pattern, fixed=False)
    except InvalidArgument:
        return
    assert isinstance(compiled, regex.Pattern)


# Pieces of the spellings that got past earlier, text-scanning versions of the checks.
_TOKENS = [
    "a",
    "b",
    "(",
    "(?:",
    "(?x:",
    "(?-x:",
    "(?>",
    "(?|",
    "(?<=",
    "(?P<n>",
    ")",
    "{40}",
    "{99}",
    "{2,50}",
    "{e<=1}",
    "[",
    "]",
    "^",
    "-",
    "&&",
    "[:alpha:]",
    "\\",
    "\\)",
    "\\]",
    "#",
    "\n",
    " ",
    "|",
    "*",
    "?",
    "(?x)",
    "(?V1)",
    "(?i)",
    "(?#",
    "(?R)",
    "(?1)",
    "(?&n)",
]


@pytest.mark.parametrize(
    "atom",
    [
        r"[\p{L}\p{N}\p{M}]",
        r"[\p{L}\p{N}\p{M}\p{S}\p{P}\p{Z}\p{C}]",
        r"[\p{Lu}a]",
        r"(?:\p{L}|\p{N})",
        r"(?:a|\p{L})",
        r"(?:\p{L}|\p{N}|)",
        r"(?:\p{L}|\p{N}|(?=a))",
    ],
)
def test_a_case_folded_set_repeated_to_the_cap_compiles_in_bounded_memory(atom: str) -> None:
    """Review: ``(?fi)[\\p{L}\\p{N}\\p{M}]{9999}`` passed as 9,999 copies and took 265 MB
    to compile, before grep's time budget started, and the alternation
    ``(?fi)(?:\\p{L}|\\p{N}){4999}``, which compiles into such a set, 131 MB; the most
    copies the weight lets through compile in a few MB, and one more is refused."""
    most = MAX_GREP_COPIES // pattern_cost(f"(?fi){atom}").copies  # 32 or a little more
    assert most <= MAX_GREP_COPIES // FOLDED_SET_COPIES
    with pytest.raises(InvalidArgument, match="copies"):
        compile_pattern(f"(?fi){atom}{{{most + 1}}}", fixed=False)
    pattern = f"(?fi){atom}{{{most}}}"
    compile_pattern(pattern, fixed=False)
    assert _compile_peak(pattern) < 16 * 2**20


@settings(max_examples=300)
@given(st.lists(st.sampled_from(_TOKENS), max_size=24).map("".join))
def test_an_accepted_pattern_compiles_in_bounded_memory(pattern: str) -> None:
    """What the cap is for: 10,000 copies compile into a few MB; the spellings that got
    past earlier checks took about 600 MB."""
    try:
        compile_pattern(pattern, fixed=False)
    except InvalidArgument:
        return
    assert pattern_cost(pattern, regex.MULTILINE).copies <= MAX_GREP_COPIES
    assert _compile_peak(pattern) < 64 * 2**20, pattern


def _compile_peak(pattern: str) -> int:
    """Bytes allocated at the peak of compiling ``pattern`` as grep does (uncached)."""
    tracemalloc.start()
    try:
        regex.compile(pattern, regex.MULTILINE, cache_pattern=False)
        return int(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()
