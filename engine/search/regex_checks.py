"""What compiling a caller's grep pattern would cost, found before it is compiled.

Two things are refused: recursion and subroutine calls (``(?R)``, ``(?1)``, ``(?-1)``,
``(?&name)``, ``(?P>name)``: the regex module grows its stack for them without bound,
before any time budget bites: ``(?R)`` took 0.6 GB and ended in ``MemoryError``), and
counted repetitions that compile into more than ``MAX_GREP_COPIES`` copies of what they
repeat (``(?:a{1500}){1500}``, 17 characters, took seconds and 600 MB).

Both are read from the regex module's own parse of the pattern, the tree it goes on to
compile, never from the pattern's text: a textual scan has to re-implement the module's
syntax (verbose mode's whitespace and ``#`` comments, ``(?#...)`` comments, escapes,
character classes with POSIX classes and version 1's nested sets, flag groups and
comments standing between a group and its quantifier), and each place where it read a
pattern differently from the module let a pattern through. Parsing is cheap (the copies
are made by compiling); the parser is the module's internal ``regex._regex_core``, so if
an upgrade changes it the checks refuse every regular expression (``ParserUnavailable``)
rather than let one through unchecked.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

import regex

MAX_GREP_COPIES = 10_000
"""The regex module compiles a counted repetition by copying what it repeats, before any
time budget runs: ``(?:a{1500}){1500}`` (17 characters) took 3.6 s and 654 MB. 10,000
copies compile in about 0.2 s."""

FOLDED_SET_COPIES = 32
r"""What one copy of a character set of two or more members, one of them a Unicode
property, costs under full case folding (``(?fi)``), in copies of an atom: the module
expands such a set's case variants for each copy, ~27 KB and ~40 µs apiece
(``(?fi)[\p{L}\p{N}\p{M}]{9999}`` took 0.4 s and 265 MB; a review ran four at once to
466 MB; ``(?fi)[a-z0-9]{9999}``, no property, 5 MB). At this weight the cap allows ~310
copies of one: ~8 MB."""

_QUOTE = 40  # characters of the pattern an error message quotes at most
_CHILDREN = ("subpattern", "items", "branches", "yes_item", "no_item")
_MAX_REPARSES = 16  # the module re-parses once per global flag a pattern turns on
_FULL_FOLDING = int(regex.FULLCASE | regex.IGNORECASE)


class ParserUnavailable(Exception):
    """The installed regex module's parser is not the one these checks read."""


@dataclass(frozen=True)
class PatternCost:
    copies: int
    """Copies of single atoms compiling the pattern makes: nested counted repetitions
    multiply (``(?:a{10}b){20}`` -> 220), alternatives add up. ``*``, ``+`` and ``?``
    loop, they copy nothing. A fully case-folded set of several members with a property
    among them counts ``FOLDED_SET_COPIES``, and so do an alternation's single
    characters that the module merges into one."""
    call: str | None
    """The first recursion or subroutine call, as spelled (quoted at most 40 characters),
    or ``None``."""


def pattern_cost(pattern: str, flags: int = 0) -> PatternCost:
    """The cost of compiling ``pattern`` with ``flags``. An invalid pattern raises what
    ``regex.compile`` would (``regex.error`` mostly)."""
    core = _parser()
    tree = _parse(core, pattern, flags)
    copies = 0
    calls: list[int] = []
    stack: list[tuple[Any, int]] = [(tree, 1)]
    while stack:  # iterative: a deeply nested pattern must not exhaust Python's stack
        node, times = stack.pop()
        if isinstance(node, core.CallGroup):
            calls.append(int(node.position))
            continue
        if isinstance(node, core.GreedyRepeat):  # also Lazy- and PossessiveRepeat
            times *= max(int(node.min_count), int(node.max_count or 0), 1)
        merged = _merged_alternatives(core, node)
        if merged is not None:
            copies += times * FOLDED_SET_COPIES  # its single characters: one folded set
            stack.extend((child, times) for child in merged)  # the other alternatives
            continue
        children = _children(core, node)
        if children:
            stack.extend((child, times) for child in children)
        else:
            copies += times * _atom_weight(core, node)
    return PatternCost(copies, _spelling(pattern, min(calls)) if calls else None)


def _atom_weight(core: ModuleType, node: Any) -> int:
    if isinstance(node, core.SetBase) and len(getattr(node, "items", ())) > 1:
        return FOLDED_SET_COPIES if _costly_when_folded(core, node) else 1
    return 1


def _costly_when_folded(core: ModuleType, atom: Any) -> bool:
    """A property, or a set holding one at any depth, under full case folding: what the
    module expands case by case (``(?fi)[a-z0-9]{9999}`` costs 5 MB, a set with a
    property in it hundreds)."""
    if not _fully_folded(atom):
        return False
    pending = [atom]
    while pending:
        node = pending.pop()
        if isinstance(node, core.Property):
            return True
        if isinstance(node, core.SetBase):
            pending.extend(getattr(node, "items", ()))
    return False


def _fully_folded(node: Any) -> bool:
    return int(getattr(node, "case_flags", 0)) & _FULL_FOLDING == _FULL_FOLDING


def _merged_alternatives(core: ModuleType, node: Any) -> list[Any] | None:
    """For an alternation whose single-character alternatives (two or more, a property
    or a property set among them under full case folding) the module merges into one
    folded set (``(?fi)(?:\\p{L}|\\p{N}){4999}`` took 131 MB counted as 9,998 copies,
    and ``(?fi)(?:\\p{L}|\\p{N}|){3333}`` 94 MB): its other alternatives, to be counted
    as usual. ``None`` for any other node."""
    if not isinstance(node, core.Branch):
        return None
    singles: list[Any] = []
    others: list[Any] = []
    for branch in node.branches:
        atom = _single_atom(core, branch)
        (others if atom is None else singles).append(branch if atom is None else atom)
    if len(singles) < 2 or not any(_costly_when_folded(core, atom) for atom in singles):
        return None
    return others


def _single_atom(core: ModuleType, node: Any) -> Any:
    """``node`` if it matches one character (a character, a property, a set), through
    one-item sequences; else ``None``."""
    while isinstance(node, core.Sequence) and len(node.items) == 1:
        node = node.items[0]
    return node if isinstance(node, core.Character | core.Property | core.SetBase) else None


def _children(core: ModuleType, node: Any) -> list[Any]:
    """The subpatterns of a parsed node. A character set's members are one atom, not
    subpatterns."""
    if isinstance(node, core.SetBase):
        return []
    children: list[Any] = []
    for name in _CHILDREN:
        value = getattr(node, name, None)
        if isinstance(value, list | tuple):
            children.extend(value)
        elif value is not None:
            children.append(value)
    return children


def _spelling(pattern: str, position: int) -> str:
    """The call around ``position`` (where the parser read its group's name), cut to
    ``_QUOTE`` characters."""
    start = pattern.rfind("(", 0, position)
    end = pattern.find(")", position)
    text = pattern[max(start, 0) : len(pattern) if end < 0 else end + 1]
    return text if len(text) <= _QUOTE else text[: _QUOTE - 1] + "…"


def _parse(core: ModuleType, pattern: str, flags: int) -> Any:
    """Parse as ``regex.compile`` does: once more for each global flag (``(?V1)``, ``(?r)``,
    ...) the pattern turns on, with the flags it turned on set from the start."""
    global_flags = flags
    for _ in range(_MAX_REPARSES):
        source = core.Source(pattern)
        info = core.Info(global_flags, source.char_type, {})
        info.guess_encoding = regex.UNICODE
        source.ignore_space = bool(info.flags & regex.VERBOSE)
        try:
            tree = core._parse_pattern(source, info)
        except core._UnscopedFlagSet:
            global_flags = info.global_flags
            continue
        if not source.at_end():
            raise regex.error("unbalanced parenthesis", pattern, source.pos)
        return tree
    raise regex.error("too many global flags", pattern)


@cache
def _parser() -> ModuleType:
    try:
        core = importlib.import_module("regex._regex_core")
        for name in (
            "Source",
            "Info",
            "_parse_pattern",
            "_UnscopedFlagSet",
            "CallGroup",
            "GreedyRepeat",
            "SetBase",
            "Branch",
            "Sequence",
            "Character",
            "Property",
        ):
            getattr(core, name)
    except (ImportError, AttributeError) as exc:
        raise ParserUnavailable(
            f"the installed regex module ({getattr(regex, '__version__', '?')}) has no "
            f"parser these checks know ({exc})"
        ) from exc
    return core
