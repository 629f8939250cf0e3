"""What a new user met on the command line: filter fields end to end, ``tandem add``
progress on a terminal (and none when piped), quiet third-party logs under ``-v``, help
without ``<bool>`` placeholders, ``stats`` and ``ask`` wording."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest

from engine import FieldType
from engine.surfaces.loaders import LineError, document_from_json
from engine.surfaces.progress import AddProgress, wants_progress
from tests.engine.surfaces.test_cli import TANDEM, ok, one_line_error, tandem, write_jsonl

LETTERS = [
    {
        "id": "l1",
        "title": "To Emma",
        "text": "The war news is grim.",
        "author": "Walter",
        "year": 1942,
        "sent": "1942-12-01",
    },
    {
        "id": "l2",
        "title": "To Emma",
        "text": "The war is over.",
        "fields": {"author": "Walter", "year": 1945, "sent": "1945-05-09"},
    },
    {
        "id": "l3",
        "title": "To Walter",
        "text": "Our garden and the war.",
        "author": "Emma",
        "year": 1942,
        "sent": "1942-06-02",
    },
    {"id": "l4", "text": "a bad date", "sent": "June 1942"},
]


@pytest.fixture(scope="module")
def letters(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("fields") / "engine"
    created = ok(
        tandem(
            "create",
            "letters",
            "--no-vectors",
            "--field",
            "author:keyword",
            "--field",
            "year:integer",
            "--field",
            "sent:date",
            home=home,
        )
    )
    assert "fields author:keyword, year:integer, sent:date" in created.stdout
    source = write_jsonl(home.parent / "letters.jsonl", LETTERS)
    result = ok(tandem("add", "letters", str(source), home=home))
    assert result.stdout.startswith("added 3,") and "rejected 1" in result.stdout
    assert "line 4: rejected: field 'sent' is a date field" in result.stderr
    assert "docs/s" not in result.stderr  # piped: no progress line
    return home


def _ids(result: subprocess.CompletedProcess[str]) -> set[str]:
    return {p["source_id"] for p in json.loads(result.stdout)["passages"]}


def test_search_filter_json_on_the_command_line(letters: Path) -> None:
    def search(flt: str) -> set[str]:
        return _ids(ok(tandem("search", "letters", "war", "--filter", flt, "--json", home=letters)))

    assert search('{"year": {"gte": 1943}}') == {"l2"}
    assert search('{"author": "Walter", "year": {"lte": 1943}}') == {"l1"}
    assert search('{"sent": {"gte": "1942-01-01", "lte": "1942-12-31"}}') == {"l1", "l3"}
    assert search('[{"author": ["Walter", "Emma"]}, {"year": 1942}]') == {"l1", "l3"}
    for bad, needle in [
        ('{"yeer": 1}', "'yeer'"),
        ('{"year": "old"}', "'year'"),
        ('{"author": {"gte": "A"}}', "'author'"),
        ("{not json", "not valid JSON"),
    ]:
        message = one_line_error(tandem("search", "letters", "war", "--filter", bad, home=letters))
        assert needle in message


def test_create_refuses_a_malformed_field_declaration(tmp_path: Path) -> None:
    for spec, needle in [
        ("year", "NAME:TYPE"),
        ("year:float", "unknown type"),
        ("Year:integer", "field name"),
        ("title:keyword", "document key"),  # a line's "title" is the document's
        ("metadata:keyword", "doc_metadata"),
    ]:
        result = tandem("create", "c", "--no-vectors", "--field", spec, home=tmp_path / "e")
        assert result.returncode == 2 and needle in result.stderr, result.stderr  # usage error
        assert "Traceback" not in result.stderr


def test_loader_reads_field_values_top_level_or_nested() -> None:
    declared = {"year": FieldType.INTEGER, "sent": FieldType.DATE, "title": FieldType.KEYWORD}
    doc = document_from_json(
        {"id": "a", "year": 1942, "fields": {"sent": ["1942-01-02"]}}, declared
    )
    assert dict(doc.fields) == {"year": 1942, "sent": [__import__("datetime").date(1942, 1, 2)]}
    # A declared field named like a document key is read only from "fields".
    doc = document_from_json({"id": "a", "title": "T", "fields": {"title": "kw"}}, declared)
    assert doc.title == "T" and dict(doc.fields) == {"title": "kw"}
    assert dict(document_from_json({"id": "a", "other": 1}, declared).fields) == {}
    for value, reason in [
        ({"id": "a", "year": 1, "fields": {"year": 2}}, "given twice"),
        ({"id": "a", "fields": [1]}, "fields must be a JSON object"),
        ({"id": "a", "sent": "12/01/1942"}, "YYYY-MM-DD"),
    ]:
        with pytest.raises(LineError, match=reason):
            document_from_json(value, declared)


@pytest.mark.parametrize("groups", [False, 0, "", {}, "staff", True, [1]])
def test_access_groups_that_are_not_a_list_are_refused_not_read_as_public(
    groups: object,
) -> None:
    """Review: ``false``, ``0``, ``""`` and ``{}`` were read as "no groups" (public)."""
    with pytest.raises(LineError, match="access_groups must be a list of strings"):
        document_from_json({"id": "a", "text": "x", "access_groups": groups}, {})


def test_missing_null_or_empty_access_groups_mean_public() -> None:
    for line in ({"id": "a"}, {"id": "a", "access_groups": None}, {"id": "a", "access_groups": []}):
        assert document_from_json({**line, "text": "x"}, {}).access_groups == frozenset()


def test_progress_line_counts_rate_and_eta() -> None:
    now = [100.0]
    out = io.StringIO()
    bar = AddProgress(out, "adding to docs", 1_000, vectors=True, clock=lambda: now[0])
    now[0] += 4.0
    assert bar.line(250, 512, 500) == (
        "adding to docs: 512 stored (500 embedded) · 128 docs/s · 25% · ETA 0:12 · elapsed 0:04"
    )
    bar.update(250, 512, 500)
    bar.update(260, 600, 600)  # within 0.2 s of the last draw: skipped
    bar.finish(1_000, 2_048, 2_048)
    drawn = out.getvalue()
    assert drawn.count("\r") == 2 and drawn.endswith("\n") and "100%" in drawn
    keyword = AddProgress(out, "adding to kw", 0, vectors=False, clock=lambda: now[0])
    assert "embedded" not in keyword.line(0, 10, 10)
    assert not wants_progress(io.StringIO(), quiet=False)  # not a terminal


def _run_on_a_terminal(args: list[str], timeout_s: float = 180.0) -> tuple[int, str]:
    """Run ``tandem`` with stderr on a pseudo-terminal; return (exit code, what it drew)."""
    assert TANDEM is not None
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "TANDEM_HOME"}
    proc = subprocess.Popen([TANDEM, *args], stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    drawn = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            drawn += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    try:
        if proc.poll() is None and time.monotonic() >= deadline:
            proc.kill()  # past the deadline: never wait on (or leave behind) a hung child
            proc.wait(timeout=60)
            raise AssertionError(f"tandem {args} did not finish within {timeout_s:g} s")
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:  # the wait above timed out
            proc.kill()
            proc.wait(timeout=60)
        assert proc.stdout is not None
        proc.stdout.close()
    return code, drawn.decode("utf-8", "replace")


def test_add_draws_progress_on_a_terminal_and_not_when_quiet(tmp_path: Path) -> None:
    home = tmp_path / "engine"
    ok(tandem("create", "kb", "--no-vectors", home=home))
    rows = [{"id": f"d{i}", "text": f"document {i} about things"} for i in range(1_500)]
    source = write_jsonl(tmp_path / "many.jsonl", rows)
    code, drawn = _run_on_a_terminal(["add", "kb", str(source), "--path", str(home)])
    assert code == 0
    assert "adding to kb: 1,500 stored" in drawn and "docs/s" in drawn and "100%" in drawn
    code, drawn = _run_on_a_terminal(["add", "kb", str(source), "--quiet", "--path", str(home)])
    assert code == 0 and "docs/s" not in drawn


def test_verbose_keeps_third_party_loggers_at_warning(letters: Path) -> None:
    result = ok(tandem("-v", "search", "letters", "war", home=letters))
    noisy = [line for line in result.stderr.splitlines() if ": INFO: " in line]
    assert all(
        ": INFO: engine" in line or ": INFO: sparse" in line or ": INFO: dense" in line
        for line in noisy
    ), noisy
    assert "ModuleNotFoundError" not in result.stderr


def test_help_shows_flags_without_value_placeholders() -> None:
    for command in (["search", "--help"], ["add", "--help"], ["stats", "--help"]):
        text = ok(tandem(*command)).stdout
        assert "<bool>" not in text


def test_stats_says_na_for_a_keyword_corpus_and_ask_names_the_cli_flag(letters: Path) -> None:
    text = ok(tandem("stats", "letters", home=letters)).stdout
    line = next(x for x in text.splitlines() if x.startswith("embedder_up"))
    assert line.split(None, 1)[1] == "n/a (keyword only, no embedder)"
    assert (
        json.loads(ok(tandem("stats", "letters", "--json", home=letters)).stdout)["embedder_up"]
        is None
    )
    message = one_line_error(tandem("ask", "letters", "what did Walter write?", home=letters))
    assert "--ask-model" in message and "CorpusConfig" not in message


def test_the_progress_line_counts_a_re_added_document_once(tmp_path: Path) -> None:
    """Regression: a document whose vector was re-used (``unchanged``) is also counted
    ``updated``, and the line showed 20 stored after adding the same 10 twice."""
    from engine import CorpusConfig, Document, SearchEngine
    from engine.surfaces.bulk import add_all
    from engine.surfaces.cli import stored_and_embedded
    from engine.surfaces.loaders import Loaded
    from tests.support.fakes import HashEmbedder

    lines = [Loaded(i + 1, Document(id=f"d{i}", title="", text=f"word{i}")) for i in range(10)]
    with SearchEngine(tmp_path, embedder_factory=lambda spec: HashEmbedder()) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="c"))
        assert stored_and_embedded(add_all(corpus, lines)) == (10, 10)
        again = add_all(corpus, lines)
        assert again.unchanged == 10
        assert stored_and_embedded(again) == (10, 10)
