"""How the command line shows results: tables for people, JSON for scripts.

Document text is data, not markup: every string shown to a person goes through ``safe``
(control characters — terminal escape sequences included —, format characters such as
the bidi overrides and zero-width ones, and the line/paragraph separators become U+FFFD)
and into ``rich.text.Text`` (so ``[bold]`` in a title stays literal). JSON output is the
stored text unchanged.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import regex
from rich.console import Console
from rich.table import Table
from rich.text import Text

from engine import GrepMatch, Passage, SourceText
from engine.surfaces.bulk import BulkReport

_UNSAFE = regex.compile(
    r"[[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]--[\u00AD\u061C\u200C-\u200F\U000E0020-\U000E007F]]",
    regex.V1,
)
"""What must not reach a terminal as is: control characters (Cc: escape sequences), format
characters (Cf: U+202E RIGHT-TO-LEFT OVERRIDE and the other bidi overrides and isolates,
zero-width spaces, the BOM) and the line and paragraph separators (Zl, Zp). Kept, because
text needs them and they reorder nothing: the zero-width joiner and non-joiner (emoji
sequences, Persian, Indic scripts), the left-to-right, right-to-left and Arabic letter
marks, the soft hyphen and the tag characters of subdivision flags."""
_KEPT = {"\t": "\t", "\n": "\n"}
_ONE_LINE = {"\t": " ", "\n": " "}


def safe(value: str, *, one_line: bool = False) -> str:
    """``value`` with the characters of ``_UNSAFE`` replaced by U+FFFD, except tab and
    newline, which are kept (or, if ``one_line``, become spaces)."""
    kept = _ONE_LINE if one_line else _KEPT
    return _UNSAFE.sub(lambda m: kept.get(m.group(), "\ufffd"), value)


def to_json(value: object) -> str:
    """Indented JSON; characters outside ASCII as themselves when stdout speaks UTF, else
    as ``\\u`` escapes — never the ``?`` an encoding that cannot hold them would print
    (ids and titles a script reads back must survive)."""
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    return json.dumps(value, ensure_ascii=not encoding.startswith("utf"), indent=2)


def passage_dict(rank: int, passage: Passage) -> dict[str, Any]:
    return {"rank": rank, **asdict(passage)}


def passages_json(passages: Sequence[Passage]) -> str:
    return to_json({"passages": [passage_dict(i, p) for i, p in enumerate(passages, 1)]})


def passages_table(passages: Sequence[Passage]) -> Table:
    table = Table(show_lines=True, expand=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("source", overflow="fold")
    table.add_column("title / url", overflow="fold", ratio=1)
    table.add_column("excerpt", overflow="fold", ratio=2)
    for rank, p in enumerate(passages, 1):
        heading = Text(safe(p.title, one_line=True) or "(untitled)", style="bold")
        if p.url:
            heading.append("\n" + safe(p.url, one_line=True), style="dim")
        table.add_row(
            str(rank),
            Text(safe(p.source_id, one_line=True)),
            heading,
            Text(safe(p.excerpt, one_line=True)),
        )
    return table


def print_passages(console: Console, passages: Sequence[Passage]) -> None:
    if not passages:
        console.print("no results", highlight=False)
        return
    console.print(passages_table(passages))


def source_json(source: SourceText) -> str:
    return to_json(asdict(source))


def source_text(source: SourceText) -> str:
    header = safe(source.title, one_line=True) or "(untitled)"
    lines = [header]
    if source.url:
        lines.append(safe(source.url, one_line=True))
    return "\n".join([*lines, "", safe(source.text)])


def grep_json(matches: Sequence[GrepMatch]) -> str:
    return to_json({"matches": [asdict(m) for m in matches]})


def grep_lines(matches: Sequence[GrepMatch]) -> str:
    return "\n".join(
        f"{safe(m.source_id, one_line=True)}:{m.start}: {safe(m.line, one_line=True)}"
        for m in matches
    )


def stats_view(stats: Mapping[str, object]) -> dict[str, object]:
    """``stats`` as shown: a keyword-only corpus has no embedder, so ``embedder_up`` is
    ``None`` (JSON ``null``, "n/a" in text) rather than a ``False`` that reads like a fault."""
    view = dict(stats)
    if view.get("vectors_enabled") is False and "embedder_up" in view:
        view["embedder_up"] = None
    return view


def stats_lines(name: str, stats: Mapping[str, object]) -> str:
    width = max((len(k) for k in stats), default=0)
    rows = [f"{'corpus':<{width}}  {name}"]
    rows.extend(f"{key:<{width}}  {_human(key, value)}" for key, value in stats.items())
    return "\n".join(rows)


def _human(key: str, value: object) -> str:
    if value is None and key == "embedder_up":
        return "n/a (keyword only, no embedder)"
    if value is None and key == "questions":
        return "off (no question model)"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key.endswith("_bytes") and isinstance(value, int):
        return _size(value)
    return str(value)


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover - loop always returns


def bulk_summary(report: BulkReport, *, show_rejections: int = 20) -> tuple[str, str]:
    """(summary for stdout, rejection reasons for stderr)."""
    summary = (
        f"added {report.added}, updated {report.updated}, degraded {report.degraded}, "
        f"rejected {report.rejected_total}"
    )
    reasons = [
        f"line {r.line}: rejected: {safe(r.reason, one_line=True)}"
        for r in report.rejected[:show_rejections]
    ]
    hidden = report.rejected_total - min(show_rejections, len(report.rejected))
    if hidden > 0:
        reasons.append(f"... and {hidden} more rejected lines")
    return summary, "\n".join(reasons)
