"""The ``tandem`` command line, run as the installed console script on real engine dirs.

Most corpora here are keyword-only (``--no-vectors``) to keep each subprocess fast; one
test creates a corpus with the real default model. The JSON Lines loader and the per-line
rejection logic are also tested in process, including a property test over arbitrary lines.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from engine import CorpusConfig, Document, SearchEngine
from engine.limits import MAX_TITLE_CHARS
from engine.surfaces import render
from engine.surfaces.bulk import add_all
from engine.surfaces.loaders import DocumentFile, Loaded, Rejected, document_from_json

TANDEM = shutil.which("tandem")

DOCS: list[dict[str, Any]] = [
    {
        "id": "reset",
        "title": "Reset your password",
        "text": "To reset your password open Settings, choose Security and follow the link.",
        "url": "/help/reset",
    },
    {
        "id": "billing",
        "title": "Billing and invoices",
        "text": "Invoices are sent monthly. Update your credit card under Billing.",
        "url": "/help/billing",
    },
    {
        "id": "export",
        "title": "Export your data",
        "text": "Export every project as a zip archive from the Data page.",
        "url": "/help/export",
    },
    {
        "id": "staff-only",
        "title": "Internal password policy",
        "text": "Staff rotate the vault password every quarter.",
        "access_groups": ["staff"],
    },
]


def tandem(
    *args: str, home: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``tandem`` command; ``home`` is passed with ``--path``."""
    if TANDEM is None:
        pytest.fail("the tandem console script is not installed (pip install -e .)")
    full_env = {k: v for k, v in os.environ.items() if k != "TANDEM_HOME"}
    full_env.update(env or {})
    argv = [TANDEM, *args, *(["--path", str(home)] if home is not None else [])]
    return subprocess.run(argv, capture_output=True, text=True, env=full_env, timeout=timeout)


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def one_line_error(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """The command failed with ``code``, one line on stderr, no traceback."""
    assert result.returncode == code, f"exit {result.returncode}: {result.stderr}"
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tandem: error: ")
    return lines[0]


def write_jsonl(path: Path, rows: Sequence[object], *, extra_lines: Sequence[str] = ()) -> Path:
    lines = [json.dumps(r) for r in rows]
    path.write_text("\n".join([*lines, *extra_lines]) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An engine dir holding keyword corpus ``help`` with DOCS (read-only for the tests)."""
    home = tmp_path_factory.mktemp("cli") / "engine"
    ok(tandem("create", "help", "--no-vectors", home=home))
    source = write_jsonl(home.parent / "docs.jsonl", DOCS)
    ok(tandem("add", "help", str(source), home=home))
    return home


# -- create / add ---------------------------------------------------------------------------


def test_add_rejects_bad_lines_one_by_one_and_keeps_the_rest(tmp_path: Path) -> None:
    home = tmp_path / "engine"
    ok(tandem("create", "kb", "--no-vectors", home=home))
    source = write_jsonl(
        tmp_path / "mixed.jsonl",
        [
            DOCS[0],
            {"id": "two words", "text": "x"},  # line 2: id grammar (loader)
            {"id": "long", "title": "t" * (MAX_TITLE_CHARS + 1)},  # line 3: cap (engine)
            DOCS[1],
            {"id": "n", "language_id": "en"},  # line 5: type
        ],
        extra_lines=["{not json", "", "[1, 2]", json.dumps(DOCS[2])],  # 6, (7 blank), 8, 9
    )
    result = ok(tandem("add", "kb", str(source), home=home))
    assert "added 3, updated 0, degraded 0, rejected 5" in result.stdout
    reasons = [line for line in result.stderr.splitlines() if "rejected:" in line]
    by_line = {r.split(":")[0]: r for r in reasons}
    assert list(by_line) == ["line 2", "line 3", "line 5", "line 6", "line 8"]
    assert "id must be" in by_line["line 2"]
    assert "title" in by_line["line 3"] and str(MAX_TITLE_CHARS) in by_line["line 3"]
    assert "language_id" in by_line["line 5"]
    assert "expected a JSON object" in by_line["line 8"]
    assert "not valid JSON" in by_line["line 6"]
    stats = json.loads(ok(tandem("stats", "kb", "--json", home=home)).stdout)
    assert stats["documents"] == 3

    again = ok(tandem("add", "kb", str(write_jsonl(tmp_path / "a.jsonl", DOCS[:2])), home=home))
    assert "added 0, updated 2, degraded 0, rejected 0" in again.stdout


def test_add_reads_a_gzipped_beir_corpus_and_counts_updates(tmp_path: Path) -> None:
    home = tmp_path / "engine"
    ok(tandem("create", "beir", "--no-vectors", home=home))
    rows: list[dict[str, Any]] = [
        {"_id": "d1", "title": "Aspirin", "text": "Aspirin reduces fever.", "metadata": {}},
        {"_id": 17, "title": "", "text": "Numeric ids are read as strings."},
    ]
    corpus_gz = tmp_path / "corpus.jsonl.gz"
    corpus_gz.write_bytes(gzip.compress("\n".join(json.dumps(r) for r in rows).encode()))
    assert "added 2," in ok(tandem("add", "beir", str(corpus_gz), home=home)).stdout

    changed = [{**rows[0], "text": "Aspirin reduces fever and pain."}]
    result = ok(tandem("add", "beir", str(write_jsonl(tmp_path / "u.jsonl", changed)), home=home))
    assert "added 0, updated 1, degraded 0" in result.stdout
    fetched = json.loads(ok(tandem("fetch", "beir", "17", "--json", home=home)).stdout)
    assert fetched["text"] == "Numeric ids are read as strings."


def test_create_reports_usage_and_runtime_errors(tmp_path: Path) -> None:
    home = tmp_path / "engine"
    both = tandem("create", "x", "--no-vectors", "--embedder", "m", home=home)
    assert both.returncode == 2 and "Traceback" not in both.stderr
    assert tandem("create", "Bad/Name", "--no-vectors", home=home).returncode == 2
    ok(tandem("create", "kb", "--no-vectors", home=home))
    assert "already exists" in one_line_error(tandem("create", "kb", "--no-vectors", home=home))
    assert "no such file" in one_line_error(tandem("add", "kb", str(tmp_path / "nope"), home=home))
    assert tandem("frobnicate", home=home).returncode == 2
    for no_model in ("none", "Off", ""):  # not a model name: pointed to --no-vectors
        refused = tandem("create", "y", "--embedder", no_model, home=home)
        assert refused.returncode == 2 and "--no-vectors" in refused.stderr
    assert "y" not in ok(tandem("list", home=home)).stdout.split()


def test_create_chooses_fusion_and_title_weight(tmp_path: Path) -> None:
    home = tmp_path / "engine"
    made = ok(tandem("create", "tuned", "--fusion", "zscore", "--title-weight", "1", home=home))
    assert "fusion zscore" in made.stdout and "title weight 1" in made.stdout
    ok(tandem("create", "plain", "--no-vectors", home=home))
    for bad in (["--fusion", "borda"], ["--title-weight", "0"], ["--title-weight", "9"]):
        assert tandem("create", "bad", "--no-vectors", *bad, home=home).returncode == 2, bad
    with SearchEngine(home) as engine:
        tuned, plain = engine.corpus("tuned").config, engine.corpus("plain").config
        assert (tuned.fusion.kind, tuned.title_weight) == ("zscore", 1)
        assert (plain.fusion.kind, plain.title_weight) == ("rrf", 3)
        assert "bad" not in engine.list_corpora()


def test_create_names_an_analyzer_per_language(tmp_path: Path) -> None:
    home = tmp_path / "engine"
    made = ok(tandem("create", "multi", "--no-vectors", "--analyzer", "1:fr", home=home))
    assert "analyzers 1:fr" in made.stdout
    rows = [{"id": "c", "title": "Les chevaux", "text": "Course.", "language_id": 1}]
    ok(tandem("add", "multi", str(write_jsonl(tmp_path / "fr.jsonl", rows)), home=home))
    found = ok(tandem("search", "multi", "cheval", "--language", "1", "--json", home=home))
    assert [p["source_id"] for p in json.loads(found.stdout)["passages"]] == ["c"]
    for bad in ("1=fr", "x:fr", "1:klingon", "-1:fr", "99999999:fr"):
        refused = tandem("create", "bad", "--no-vectors", "--analyzer", bad, home=home)
        assert refused.returncode == 2 and "--analyzer" in refused.stderr, bad
    twice = ("--analyzer", "1:fr", "--analyzer", "1:de")
    assert tandem("create", "bad", "--no-vectors", *twice, home=home).returncode == 2
    with SearchEngine(home) as engine:
        assert dict(engine.corpus("multi").config.languages) == {1: "fr"}
        assert "bad" not in engine.list_corpora()


def test_fusion_names_agree_across_surfaces() -> None:
    """The CLI's choices and the HTTP schema's literal repeat the config's shorthands
    (typer and pydantic need them spelled out); they must not drift apart."""
    from engine.config import FUSION_NAMES
    from engine.surfaces.cli_args import FusionChoice
    from engine.surfaces.http.schemas import CreateCorpusRequest

    schema = CreateCorpusRequest.model_json_schema()["properties"]["fusion"]
    assert [c.value for c in FusionChoice] == list(FUSION_NAMES) == schema["enum"]


def test_ollama_corpus_with_the_provider_down_stores_documents_degraded(tmp_path: Path) -> None:
    home = tmp_path / "engine"
    # Port 9 (discard) on loopback: connection refused at once, no Ollama involved.
    created = ok(tandem("create", "oll", "--ollama", "127.0.0.1:9/nomic-embed-text", home=home))
    assert "ollama:nomic-embed-text" in created.stdout
    result = ok(tandem("add", "oll", str(write_jsonl(tmp_path / "d.jsonl", DOCS[:2])), home=home))
    assert "added 2, updated 0, degraded 2, rejected 0" in result.stdout
    assert "tandem repair oll" in result.stderr
    stats = json.loads(ok(tandem("stats", "oll", "--json", home=home)).stdout)
    assert stats["degraded"] == 2 and stats["embedder_up"] is False
    hits = json.loads(ok(tandem("search", "oll", "password", "--json", home=home)).stdout)
    assert [h["source_id"] for h in hits["passages"]] == ["reset"]  # keyword answers
    repaired = ok(tandem("repair", "oll", home=home))
    assert "re-embedded 0 documents; 2 still degraded" in repaired.stdout
    assert "the embedder is not answering ('tandem -v' shows why)" in repaired.stderr


def test_a_model_that_cannot_load_says_why_with_verbose(tmp_path: Path) -> None:
    home = tmp_path / "engine"
    ok(tandem("create", "ghost", "--embedder", str(tmp_path / "no-such-model"), home=home))
    docs = str(write_jsonl(tmp_path / "d.jsonl", DOCS[:2]))
    quiet = ok(tandem("add", "ghost", docs, home=home))
    assert "'tandem -v' shows why" in quiet.stderr and "cannot load" not in quiet.stderr
    loud = ok(tandem("-v", "add", "ghost", docs, home=home))
    assert "cannot load model" in loud.stderr and "no-such-model" in loud.stderr


@pytest.mark.parametrize("spec", ["://", "://nomic", "ftp://h:1/m", "http://h:1", "h:1/", "/m"])
def test_a_malformed_ollama_spec_is_a_usage_error_naming_the_option(
    tmp_path: Path, spec: str
) -> None:
    result = tandem("create", "o", "--ollama", spec, home=tmp_path / "engine")
    assert result.returncode == 2, result.stderr
    assert "--ollama" in result.stderr and "HOST/MODEL" in result.stderr


def test_add_refuses_a_directory_and_fails_when_every_line_is_rejected(
    tmp_path: Path,
) -> None:
    home = tmp_path / "engine"
    ok(tandem("create", "kb", "--no-vectors", home=home))
    assert "is a directory" in one_line_error(tandem("add", "kb", str(tmp_path), home=home))
    wrong = tmp_path / "docs.csv"
    wrong.write_text("id,title,text\n", encoding="utf-8")  # another format: one line, refused
    refused = tandem("add", "kb", str(wrong), home=home)
    assert refused.returncode == 1 and "rejected 1" in refused.stdout
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(json.dumps(DOCS[0]) + "\nnot json\n", encoding="utf-8")
    partly = ok(tandem("add", "kb", str(mixed), home=home))  # something stored: success
    assert "added 1" in partly.stdout and "rejected 1" in partly.stdout


# -- reading --------------------------------------------------------------------------------


def test_search_prints_a_table_and_json_without_any_mode(built: Path) -> None:
    table = ok(tandem("search", "help", "password", home=built)).stdout
    assert "Reset your password" in table and "/help/reset" in table and "reset" in table
    assert "Internal password policy" not in table  # public only

    data = json.loads(ok(tandem("search", "help", "password", "--json", home=built)).stdout)
    passages = data["passages"]
    assert [p["source_id"] for p in passages] == ["reset"]
    assert set(passages[0]) == {
        "rank", "source_id", "title", "url", "excerpt", "language_id", "score", "ranks",
    }  # fmt: skip
    assert "mode" not in json.dumps(data) and "fallback" not in json.dumps(data)

    empty = ok(tandem("search", "help", "zebra", home=built))
    assert "no results" in empty.stdout
    bad_k = tandem("search", "help", "password", "--top-k", "0", home=built)
    assert bad_k.returncode == 2


def test_search_top_k_and_language(built: Path) -> None:
    top1 = json.loads(ok(tandem("search", "help", "your", "-k", "1", "--json", home=built)).stdout)
    assert len(top1["passages"]) == 1
    other = tandem("search", "help", "password", "--language", "7", "--json", home=built)
    assert json.loads(ok(other).stdout)["passages"] == []


def test_fetch_prints_the_source_and_refuses_private_or_malformed_ids(built: Path) -> None:
    text = ok(tandem("fetch", "help", "export", home=built)).stdout
    assert text.splitlines()[:2] == ["Export your data", "/help/export"]
    assert "zip archive" in text
    data = json.loads(ok(tandem("fetch", "help", "export", "--json", home=built)).stdout)
    assert data["truncated"] is False and data["source_id"] == "export"

    assert "not found" in one_line_error(tandem("fetch", "help", "staff-only", home=built))
    assert "not found" in one_line_error(tandem("fetch", "help", "missing", home=built))
    malformed = tandem("fetch", "help", "two words", home=built)
    assert malformed.returncode == 2 and "Traceback" not in malformed.stderr
    traversal = tandem("fetch", "help", "../../etc/passwd", home=built)  # just an id
    assert "not found" in one_line_error(traversal)


def test_grep_regex_fixed_and_hostile_patterns(built: Path, tmp_path: Path) -> None:
    lines = ok(tandem("grep", "help", r"pass\w+", home=built)).stdout.splitlines()
    assert lines and all(line.startswith("reset:") for line in lines)  # staff-only is private
    fixed = json.loads(ok(tandem("grep", "help", "a zip", "--fixed", "--json", home=built)).stdout)
    assert [m["source_id"] for m in fixed["matches"]] == ["export"]
    assert "regular expression" in one_line_error(tandem("grep", "help", "(", home=built))
    # A catastrophic pattern is an explicit error naming the budget, not "no matches".
    with SearchEngine(tmp_path / "bait") as engine:
        engine.create_corpus(CorpusConfig(name="bait", embedder=None)).add(
            [Document(id="aaa", text="a" * 5_000 + "!")]
        )
    slow = one_line_error(tandem("grep", "bait", "(a+)+$", home=tmp_path / "bait"))
    assert "time budget" in slow


def test_stats_and_list(built: Path) -> None:
    text = ok(tandem("stats", "help", home=built)).stdout
    assert "documents" in text and "degraded" in text and "index_bytes" in text
    assert "off (no question model)" in text
    data = json.loads(ok(tandem("stats", "help", "--json", home=built)).stdout)
    assert data["documents"] == 4 and data["vectors_enabled"] is False
    assert data["questions"] is None
    assert ok(tandem("list", home=built)).stdout.split() == ["help"]


def test_stats_shows_a_model_that_cannot_load_as_down(tmp_path: Path) -> None:
    """Regression: a local model says it is up until a load has failed in the process,
    so ``tandem stats`` (a new process) said ``embedder_up yes`` for a model that cannot
    load, though the add before it had stored every document degraded."""
    home = tmp_path / "engine"
    offline = {"HF_HUB_OFFLINE": "1"}
    ok(tandem("create", "ghost", "--embedder", "no-such-org/no-such-model-xyz", home=home))
    doc = {"id": "a", "text": "kept words"}
    source = write_jsonl(tmp_path / "a.jsonl", [doc])
    ok(tandem("add", "ghost", str(source), home=home, env=offline))
    data = json.loads(ok(tandem("stats", "ghost", "--json", home=home, env=offline)).stdout)
    assert data["degraded"] == 1 and data["embedder_up"] is False


def test_ask_is_one_clear_error_when_off_or_unreachable(built: Path, tmp_path: Path) -> None:
    result = tandem("ask", "help", "how do I reset my password?", home=built)
    assert result.returncode == 1
    assert "natural-language questions are off" in one_line_error(result)
    home = tmp_path / "nl"
    created = tandem(
        "create", "kb", "--no-vectors", "--ask-model", "127.0.0.1:9/llama3.2", home=home
    )
    assert "questions with llama3.2" in ok(created).stdout
    shown = json.loads(ok(tandem("stats", "kb", "--json", home=home)).stdout)
    assert shown["questions"] == "llama3.2"
    result = tandem("ask", "kb", "how do I reset my password?", home=home)
    assert result.returncode == 1
    assert "ollama" in one_line_error(result).lower()


def test_terminal_escapes_and_markup_in_documents_are_shown_inert(tmp_path: Path) -> None:
    home = tmp_path / "engine"
    ok(tandem("create", "kb", "--no-vectors", home=home))
    doc = {"id": "evil", "title": "[bold red]x[/] \x1b]0;pwned\x07", "text": "beacon \x1b[2J"}
    ok(tandem("add", "kb", str(write_jsonl(tmp_path / "e.jsonl", [doc])), home=home))
    for args in (("search", "kb", "beacon"), ("fetch", "kb", "evil"), ("grep", "kb", "beacon")):
        out = ok(tandem(*args, home=home)).stdout
        assert "\x1b" not in out and "\x07" not in out
        assert "beacon" in out
    assert "[bold red]x[/]" in ok(tandem("search", "kb", "beacon", home=home)).stdout


_INVISIBLE = "\u202e\u2066\u2069\u200b\u202d\ufeff\u2028\u2029"
"""Format characters (bidi overrides and isolates, zero-width ones) and the line and
paragraph separators: they rearrange or hide what a terminal shows."""


def test_format_characters_in_documents_never_reach_the_terminal(tmp_path: Path) -> None:
    """Regression: only control characters were replaced; U+202E RIGHT-TO-LEFT OVERRIDE
    in a title reached the terminal and reversed what followed it."""
    home = tmp_path / "engine"
    ok(tandem("create", "kb", "--no-vectors", home=home))
    doc = {"id": "bidi", "title": f"invoice {_INVISIBLE} fdp.exe", "text": f"beacon {_INVISIBLE}"}
    ok(tandem("add", "kb", str(write_jsonl(tmp_path / "b.jsonl", [doc])), home=home))
    for args in (("search", "kb", "beacon"), ("fetch", "kb", "bidi"), ("grep", "kb", "beacon")):
        out = ok(tandem(*args, home=home)).stdout
        assert "beacon" in out and "\ufffd" in out
        assert not set(_INVISIBLE) & set(out), args
    as_json = json.loads(ok(tandem("search", "kb", "beacon", "--json", home=home)).stdout)
    assert as_json["passages"][0]["title"] == doc["title"]  # JSON is the stored text


def test_safe_replaces_control_and_format_characters_only() -> None:
    assert render.safe(f"a\tb\nc\x1b[2J\x85{_INVISIBLE}") == "a\tb\nc\ufffd[2J" + "\ufffd" * 9
    assert render.safe("a\tb\nc\r", one_line=True) == "a b c\ufffd"
    plain = "Café 中文 naïve — ok ✓ \U0001f600"
    assert render.safe(plain) == plain == render.safe(plain, one_line=True)
    # Joiners, marks and flag tags shape text and reorder nothing: kept.
    shaped = "\U0001f468\u200d\U0001f469 \u0645\u06cc\u200c\u062e \u200e\u200f co\u00adop"
    shaped += " \U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
    assert render.safe(shaped) == shaped


def test_a_stdout_that_cannot_encode_a_title_prints_replacement_characters(
    tmp_path: Path,
) -> None:
    """Regression: the search table went through rich, which raised UnicodeEncodeError (a
    traceback, exit 1) when stdout's encoding could not represent a title's character."""
    home = tmp_path / "engine"
    ok(tandem("create", "kb", "--no-vectors", home=home))
    doc = {"id": "cafe", "title": "Café 中文", "text": "beacon naïve"}
    ok(tandem("add", "kb", str(write_jsonl(tmp_path / "c.jsonl", [doc])), home=home))
    ascii_only = {"PYTHONIOENCODING": "ascii"}
    table = ok(tandem("search", "kb", "beacon", home=home, env=ascii_only))
    assert "Traceback" not in table.stderr and "Caf? ??" in table.stdout
    for args in (
        ("fetch", "kb", "cafe"),
        ("grep", "kb", "beacon"),
        ("search", "kb", "beacon", "--json"),
    ):
        assert "Traceback" not in ok(tandem(*args, home=home, env=ascii_only)).stderr
    assert TANDEM is not None
    latin = subprocess.run(
        [TANDEM, "search", "kb", "beacon", "--json", "--path", str(home)],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "latin-1"},
        timeout=120,
    )
    assert latin.returncode == 0, latin.stderr.decode(errors="replace")
    # JSON loses nothing: what the encoding cannot hold is escaped, never "?".
    assert json.loads(latin.stdout.decode("latin-1"))["passages"][0]["title"] == "Café 中文"
    as_ascii = ok(tandem("search", "kb", "beacon", "--json", home=home, env=ascii_only))
    assert json.loads(as_ascii.stdout)["passages"][0]["title"] == "Café 中文"


# -- where the engine lives -----------------------------------------------------------------


def test_path_option_beats_tandem_home_and_missing_dirs_are_not_created(tmp_path: Path) -> None:
    env_home, flag_home = tmp_path / "env", tmp_path / "flag"
    ok(tandem("create", "envc", "--no-vectors", env={"TANDEM_HOME": str(env_home)}))
    ok(tandem("create", "flagc", "--no-vectors", home=flag_home))
    listed = ok(tandem("list", env={"TANDEM_HOME": str(env_home)})).stdout.split()
    assert listed == ["envc"]
    overridden = tandem("list", home=flag_home, env={"TANDEM_HOME": str(env_home)})
    assert ok(overridden).stdout.split() == ["flagc"]
    on_root = subprocess.run(
        [str(TANDEM), "--path", str(flag_home), "list"], capture_output=True, text=True, timeout=60
    )
    assert ok(on_root).stdout.split() == ["flagc"]

    ghost = tmp_path / "ghost"
    assert "no Tandem engine" in one_line_error(tandem("search", "x", "query", home=ghost))
    assert not ghost.exists()
    assert "no corpus named" in one_line_error(tandem("search", "nope", "query", home=flag_home))
    # a folder that is not an engine (a mistyped --path .) is refused, not written into
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("hi", encoding="utf-8")
    for command in (("list",), ("stats", "x"), ("search", "x", "query")):
        assert "no Tandem engine" in one_line_error(tandem(*command, home=plain))
    assert [p.name for p in plain.iterdir()] == ["notes.txt"]


def test_a_directory_open_in_another_process_is_shared(tmp_path: Path) -> None:
    """Several processes may open one engine directory (like SQLite): the command works
    while this process holds it open, and sees what this process wrote."""
    home = tmp_path / "engine"
    ok(tandem("create", "kb", "--no-vectors", home=home))
    with SearchEngine(home) as engine:
        engine.corpus("kb").add([Document(id="p1", text="password reset")])
        found = json.loads(ok(tandem("search", "kb", "password", "--json", home=home)).stdout)
    assert [p["source_id"] for p in found["passages"]] == ["p1"]


# -- the real model, once -------------------------------------------------------------------


def test_default_model_corpus_end_to_end(tmp_path: Path) -> None:
    home = tmp_path / "engine"
    assert "all-MiniLM-L6-v2" in ok(tandem("create", "sem", home=home)).stdout
    result = ok(tandem("add", "sem", str(write_jsonl(tmp_path / "d.jsonl", DOCS)), home=home))
    assert "added 4, updated 0, degraded 0, rejected 0" in result.stdout
    assert "Loading weights" not in result.stderr  # transformers' bar, on a pipe
    # No shared keyword with the answer ("forgot my login" vs "reset your password").
    found = json.loads(ok(tandem("search", "sem", "forgot my login", "--json", home=home)).stdout)
    assert found["passages"][0]["source_id"] == "reset"
    assert found["passages"][0]["ranks"]["dense"] == 1  # the dense arm found it
    stats = json.loads(ok(tandem("stats", "sem", "--json", home=home)).stdout)
    assert stats["vectors"] == 4 and stats["degraded"] == 0 and stats["embedder_up"] is True


# -- serve-metrics ---------------------------------------------------------------------------


@pytest.fixture
def metrics_process(built: Path) -> Iterator[subprocess.Popen[str]]:
    assert TANDEM is not None
    proc = subprocess.Popen(
        [TANDEM, "serve-metrics", "--port", "0", "--path", str(built)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_serve_metrics_serves_until_sigterm(metrics_process: subprocess.Popen[str]) -> None:
    assert metrics_process.stdout is not None
    line = metrics_process.stdout.readline()
    assert line.startswith("serving metrics at http://127.0.0.1:"), line
    url = line.split(" at ", 1)[1].strip()
    body = httpx.get(url, timeout=10).text
    assert 'documents_degraded{corpus="help"}' in body.replace("tandem_", "")
    metrics_process.send_signal(signal.SIGTERM)
    assert metrics_process.wait(timeout=30) == 0


# -- the loader and per-line rejection, in process ------------------------------------------


def test_document_from_json_maps_fields_and_names_the_problem() -> None:
    doc = document_from_json(
        {"_id": "a1", "title": None, "text": "t", "language_id": 3, "access_groups": ["g"]}
    )
    assert doc == Document(id="a1", text="t", language_id=3, access_groups=frozenset({"g"}))
    for value, reason in [
        ({"title": "no id"}, "missing id"),
        ({"id": "a", "_id": "b"}, "differ"),
        ({"id": True}, "id must be a string"),
        ({"id": "a", "text": ["x"]}, "text must be a string"),
        ({"id": "a", "language_id": 1.5}, "language_id"),
        ({"id": "a", "access_groups": "staff"}, "access_groups"),
        ("just a string", "expected a JSON object"),
        ({"id": "a", "title": "t" * (MAX_TITLE_CHARS + 1)}, "the cap is"),
        ({"id": "a", "text": "nul\x00"}, "NUL"),
        ({"id": "a", "url": "/x\x1b[2J"}, "control"),
        ({"id": "a", "language_id": -1}, "language_id must be in"),
        ({"id": "a", "access_groups": [""]}, "access_groups entries"),
    ]:
        with pytest.raises(ValueError, match=reason):
            document_from_json(value)


def test_bulk_add_bisects_a_refused_batch_down_to_the_bad_documents(tmp_path: Path) -> None:
    lines: list[Loaded | Rejected] = [
        Loaded(i + 1, Document(id=f"d{i}", title="ok", text=f"document number {i}"))
        for i in range(40)
    ]
    too_long = "x" * (MAX_TITLE_CHARS + 1)
    for bad in (3, 17, 18, 39):
        lines[bad] = Loaded(bad + 1, Document(id=f"d{bad}", title=too_long))
    lines.insert(5, Rejected(99, "from the loader"))
    with SearchEngine(tmp_path / "engine") as engine:
        corpus = engine.create_corpus(CorpusConfig(name="kb", embedder=None))
        report = add_all(corpus, lines, batch_size=16)
        assert report.added == 36 and len(corpus) == 36
        assert [r.line for r in report.rejected] == [4, 18, 19, 40, 99]
        assert all("title" in r.reason for r in report.rejected[:4])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=40).filter(lambda s: "\n" not in s and "\r" not in s),
            st.builds(
                lambda i, t: json.dumps({"id": i, "text": t}),
                st.text(max_size=12),
                st.text(max_size=20),
            ),
            st.binary(max_size=20).filter(lambda b: b"\n" not in b).map(lambda b: b.hex()),
        ),
        max_size=25,
    )
)
def test_every_non_blank_line_gets_exactly_one_verdict(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "any.jsonl"
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    assume(not data.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"["))  # a JSON array
    path.write_bytes(data)
    verdicts = list(DocumentFile(path))
    expected = [n for n, line in enumerate(lines, 1) if line.strip()]
    assert [v.line for v in verdicts] == expected
    for verdict in verdicts:
        if isinstance(verdict, Rejected):
            assert verdict.reason
