"""The command line at its edges, each found by a review: what `tandem add` says when it
stops part-way, a file named ``-``, repeated ids, dates in one form only, and `tandem ask`
output that survives an ASCII terminal and shows stored values inert."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from engine import (
    AddResult,
    Corpus,
    CorpusConfig,
    Document,
    FieldType,
    InvalidArgument,
    NaturalLanguage,
    SearchEngine,
)
from engine.filters import compile_filter, parse_filter
from engine.surfaces.bulk import add_all
from engine.surfaces.cli import app
from engine.surfaces.loaders import LineError, Loaded, document_from_json
from tests.engine.surfaces.test_cli import ok, tandem, write_jsonl
from tests.engine.surfaces.test_cli_streams import tandem_bytes
from tests.support.natural_standin import CHAT_MODEL, ChatStandIn


def test_an_interrupted_add_says_what_it_stored_and_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "engine"
    with SearchEngine(home) as engine:
        engine.create_corpus(CorpusConfig(name="kb", embedder=None))
    source = write_jsonl(
        tmp_path / "docs.jsonl", [{"id": f"d{n}", "text": "w"} for n in range(600)]
    )
    real, calls = Corpus.add, []

    def add(self: Corpus, documents: Iterable[Document], **kwargs: Any) -> AddResult:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C while the second batch is written
        return real(self, documents, **kwargs)

    monkeypatch.setattr(Corpus, "add", add)
    result = CliRunner().invoke(app, ["add", "kb", str(source), "--quiet", "--path", str(home)])
    assert result.exit_code == 130, result.output
    assert "added 512, updated 0" in result.stdout
    assert "interrupted" in result.stderr and "safe" in result.stderr
    monkeypatch.undo()
    with SearchEngine(home) as engine:
        assert len(engine.corpus("kb")) == 512


def test_a_file_named_dash_is_read_as_a_file(tmp_path: Path) -> None:
    home = tmp_path / "engine"
    ok(tandem("create", "kb", "--no-vectors", home=home))
    write_jsonl(tmp_path / "-", [{"id": "from-file", "text": "in a file named dash"}])
    stdin = json.dumps({"id": "from-stdin", "text": "piped"}).encode() + b"\n"
    result = tandem_bytes(
        "add", "kb", "./-", home=home, cwd=tmp_path, input=stdin, capture_output=True
    )
    assert result.returncode == 0, result.stderr
    assert ok(tandem("fetch", "kb", "from-file", home=home)).stdout
    assert tandem("fetch", "kb", "from-stdin", home=home).returncode == 1


def test_an_id_repeated_within_a_batch_counts_as_an_update(tmp_path: Path) -> None:
    lines = [
        Loaded(1, Document(id="a", text="first")),
        Loaded(2, Document(id="a", text="second")),
        Loaded(3, Document(id="b", text="other")),
    ]
    with SearchEngine(tmp_path) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="c", embedder=None))
        report = add_all(corpus, lines)
        assert (report.added, report.updated) == (2, 1)  # as if the lines were apart
        assert corpus.fetch_source("a").text == "second"
        apart = add_all(corpus, lines, batch_size=1)
        assert (apart.added, apart.updated) == (0, 3)


@pytest.mark.parametrize("value", ["1942-W01-1", "19420315", "1942-075", "1942-03-15T00:00"])
def test_dates_are_read_in_one_form_only(value: str) -> None:
    """Regression: ``date.fromisoformat`` also reads week and basic dates, so
    ``1942-W01-1`` was stored (and filtered) as 1941-12-29."""
    declared = {"sent": FieldType.DATE}
    with pytest.raises(LineError, match="YYYY-MM-DD"):
        document_from_json({"id": "w", "text": "x", "sent": value}, declared)
    with pytest.raises(InvalidArgument, match="YYYY-MM-DD"):
        compile_filter(parse_filter({"sent": value}), declared)
    assert document_from_json({"id": "w", "text": "x", "sent": "1942-03-15"}, declared).fields


SPOOF = "\u202eWalter\u202c \x9b31m"


def test_ask_output_survives_an_ascii_terminal_and_shows_stored_values_inert(
    tmp_path: Path, chat_standin: ChatStandIn
) -> None:
    home = tmp_path / "engine"
    chat = chat_standin
    natural = NaturalLanguage(model=CHAT_MODEL, host=chat.host, timeout_s=30, health_timeout_s=30)
    with SearchEngine(home) as engine:
        corpus = engine.create_corpus(
            CorpusConfig(
                name="mail",
                embedder=None,
                fields={"author": FieldType.KEYWORD},
                natural=natural,
            )
        )
        corpus.add(
            [
                Document(id="j", text="Brief über den Krieg", fields={"author": "Jürgen"}),
                Document(id="w", text="a letter about the war", fields={"author": SPOOF}),
            ]
        )
    chat.content = json.dumps({"keywords": ["Krieg"], "filters": {"author": ["Jürgen"]}})
    answer = tandem(
        "ask", "mail", "Briefe von Jürgen", "--json", home=home, env={"PYTHONIOENCODING": "ascii"}
    )
    assert answer.returncode == 0, answer.stderr
    body = json.loads(answer.stdout)
    assert body["interpretation"]["filters"] == [{"author": "Jürgen"}]  # not "J?rgen"
    assert body["passages"][0]["source_id"] == "j"

    chat.content = json.dumps({"keywords": ["war"], "filters": {"author": ["Walter"]}})
    shown = tandem("ask", "mail", "letters from Walter", home=home)
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("understood as:"))
    assert "\u202e" not in line and "\x9b" not in line
    assert "Walter" in line and "\ufffd" in line  # resolved to the stored value, inert
