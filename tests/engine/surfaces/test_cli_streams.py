"""``tandem`` and its streams: a reader that goes away early, documents from standard
input, pipes and FIFOs, a JSON array file, an ASCII stdout, and errors that name what they
are about (the option, the address)."""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.surfaces import loaders
from engine.surfaces.cli import app
from engine.surfaces.loaders import DocumentFile, Loaded, Rejected, document_from_json
from tests.engine.surfaces.test_cli import DOCS, TANDEM, ok, one_line_error, tandem, write_jsonl


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An engine dir holding keyword corpus ``kb`` with DOCS and one accented document."""
    home = tmp_path_factory.mktemp("streams") / "engine"
    ok(tandem("create", "kb", "--no-vectors", home=home))
    rows = [*DOCS, {"id": "cafe", "title": "Café", "text": "beacon naïve"}]
    ok(tandem("add", "kb", str(write_jsonl(home.parent / "docs.jsonl", rows)), home=home))
    return home


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "engine"
    ok(tandem("create", "kb", "--no-vectors", home=home))
    return home


def tandem_bytes(
    *args: str, home: Path, env: dict[str, str] | None = None, **kwargs: object
) -> subprocess.CompletedProcess[bytes]:
    assert TANDEM is not None
    full_env = {k: v for k, v in os.environ.items() if k != "TANDEM_HOME"} | (env or {})
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [TANDEM, *args, "--path", str(home)], env=full_env, timeout=120, **kwargs
    )


# -- a reader that goes away ----------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("list",),
        ("stats", "kb"),
        ("search", "kb", "password"),
        ("search", "kb", "password", "--json"),
        ("grep", "kb", "password"),
        ("fetch", "kb", "reset"),
        ("--help",),
        ("add", "--help"),
    ],
)
def test_a_reader_gone_before_the_output_ends_the_command_quietly_with_0(
    built: Path, args: tuple[str, ...]
) -> None:
    """Regression: click turned the broken pipe into a silent exit 1 (rich's table: the
    same), so ``tandem list | head -1`` looked like a failure to ``set -o pipefail``."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # gone before the first write: every write is EPIPE, every run
    try:
        result = tandem_bytes(*args, home=built, stdout=write_end, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (0, b"")


# -- where documents come from --------------------------------------------------------------


def _doc(doc_id: str) -> bytes:
    return json.dumps({"id": doc_id, "text": f"the text of {doc_id}"}).encode() + b"\n"


def test_add_reads_standard_input_and_pipes_plain_or_gzipped(home: Path) -> None:
    """Regression: ``tandem add`` took only regular files ("no such file: /dev/stdin")."""
    dash = tandem_bytes("add", "kb", "-", home=home, input=_doc("dash"), capture_output=True)
    assert dash.returncode == 0 and b"added 1," in dash.stdout, dash.stderr
    zipped = gzip.compress(_doc("stdin") + _doc("stdin2"))
    dev = tandem_bytes("add", "kb", "/dev/stdin", home=home, input=zipped, capture_output=True)
    assert dev.returncode == 0 and b"added 2," in dev.stdout, dev.stderr  # gzip, from a pipe

    read_end, write_end = os.pipe()  # what bash's <(zcat docs.jsonl.gz) hands over
    os.write(write_end, gzip.compress(_doc("fd")))
    os.close(write_end)
    try:
        fd = tandem_bytes(
            "add", "kb", f"/dev/fd/{read_end}", home=home, pass_fds=(read_end,), capture_output=True
        )
    finally:
        os.close(read_end)
    assert fd.returncode == 0 and b"added 1," in fd.stdout, fd.stderr

    fifo = home.parent / "docs.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(_doc("fifo"),), daemon=True)
    writer.start()  # opening a FIFO to write waits for its reader
    named = tandem_bytes("add", "kb", str(fifo), home=home, capture_output=True)
    writer.join(timeout=30)
    assert named.returncode == 0 and b"added 1," in named.stdout, named.stderr
    listed = ok(tandem("grep", "kb", "the text of", "--json", home=home)).stdout
    assert {m["source_id"] for m in json.loads(listed)["matches"]} == {
        "dash",
        "stdin",
        "stdin2",
        "fd",
        "fifo",
    }


def test_a_pipe_has_no_size_so_no_percentage_is_claimed() -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, _doc("a") + _doc("b"))
    os.close(write_end)
    try:
        source = DocumentFile(f"/dev/fd/{read_end}")
        assert source.size == 0 and source.progress() == 0
        verdicts = list(source)
    finally:
        os.close(read_end)
    assert [v.document.id for v in verdicts if isinstance(v, Loaded)] == ["a", "b"]


def test_a_missing_path_is_still_no_such_file_and_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        DocumentFile(tmp_path / "nope.jsonl")
    with pytest.raises(IsADirectoryError):
        DocumentFile(tmp_path)


# -- a JSON array ---------------------------------------------------------------------------


def test_add_takes_a_json_array_file_as_the_directory_message_says(home: Path) -> None:
    """Regression: the directory error offered ".json" while a JSON array file was refused
    ("expected a JSON object, got an array")."""
    refused = one_line_error(tandem("add", "kb", str(home.parent), home=home))
    assert "JSON array" in refused
    array = home.parent / "docs.json"
    array.write_text(json.dumps(DOCS, indent=2), encoding="utf-8")  # pretty-printed
    added = ok(tandem("add", "kb", str(array), home=home))
    assert f"added {len(DOCS)}, updated 0, degraded 0, rejected 0" in added.stdout


@pytest.mark.parametrize("compressed", [False, True])
def test_a_json_array_gives_one_verdict_per_item_numbered_by_position(
    tmp_path: Path, compressed: bool
) -> None:
    items = [{"id": "a", "text": "one"}, {"id": "two words"}, "text", {"id": "b"}]
    data = b"\xef\xbb\xbf \n" + json.dumps(items, indent=1).encode()
    path = tmp_path / "docs.json"
    path.write_bytes(gzip.compress(data) if compressed else data)
    verdicts = list(DocumentFile(path))
    assert [(type(v), v.line) for v in verdicts] == [
        (Loaded, 1),
        (Rejected, 2),
        (Rejected, 3),
        (Loaded, 4),
    ]
    assert "expected a JSON object" in verdicts[2].reason  # type: ignore[union-attr]


def test_a_broken_or_oversized_json_array_is_one_rejection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "docs.json"
    path.write_text('[\n  {"id": "a"},\n  {"id": "b"\n]\n', encoding="utf-8")
    (broken,) = list(DocumentFile(path))
    assert isinstance(broken, Rejected) and broken.line == 4
    assert broken.reason.startswith("not valid JSON: ")
    monkeypatch.setattr(loaders, "MAX_JSON_ARRAY_BYTES", 16)
    path.write_text(json.dumps([{"id": "a"}, {"id": "b"}]), encoding="utf-8")
    (too_big,) = list(DocumentFile(path))
    assert isinstance(too_big, Rejected) and "JSON Lines" in too_big.reason


# -- what a message names -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--embedder", "m" * 5_000),
        ("--ollama", "127.0.0.1:11434/" + "m" * 5_000),
        ("--ask-model", "m" * 5_000),
    ],
    ids=["embedder", "ollama", "ask-model"],
)
def test_an_over_long_model_name_is_a_usage_error_naming_the_option(
    tmp_path: Path, option: str, value: str
) -> None:
    """Regression: "String should have at most 512 characters", exit 1, no option named."""
    args = ["create", "kb", option, value, "--path", str(tmp_path / "engine")]
    if option == "--ask-model":
        args.append("--no-vectors")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert option in result.output and "at most" in result.output
    assert not (tmp_path / "engine").exists()


def test_serve_metrics_on_a_taken_port_names_the_address(built: Path) -> None:
    """Regression: "[Errno 98] Address already in use", no address (``serve`` names it)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line_error(tandem("serve-metrics", "--port", str(port), home=built))
    assert line == f"tandem: error: cannot listen on 127.0.0.1:{port}: Address already in use"


@pytest.mark.parametrize("args", [("fetch", "kb", "cafe"), ("grep", "kb", "beacon")])
def test_an_ascii_stdout_gets_question_marks_not_utf8_bytes(
    built: Path, args: tuple[str, ...]
) -> None:
    """Regression: click wrote UTF-8 to an ASCII stdout's buffer, past the tolerant one."""
    result = tandem_bytes(*args, home=built, env={"PYTHONIOENCODING": "ascii"}, capture_output=True)
    assert result.returncode == 0, result.stderr
    assert b"na?ve" in result.stdout
    assert all(byte < 0x80 for byte in result.stdout), result.stdout


def test_a_numeric_id_equals_its_text_and_the_integer_limit_speaks_plainly(
    tmp_path: Path,
) -> None:
    assert document_from_json({"id": 12, "_id": "12"}).id == "12"
    assert document_from_json({"id": "7", "_id": 7}).id == "7"
    with pytest.raises(ValueError, match="differ"):
        document_from_json({"id": 12, "_id": "13"})
    path = tmp_path / "docs.jsonl"
    path.write_bytes(b'{"id": "a", "language_id": ' + b"9" * 5_000 + b"}\n")
    (long_integer,) = list(DocumentFile(path))
    assert isinstance(long_integer, Rejected) and "4300 digits" in long_integer.reason
    assert "sys." not in long_integer.reason and "increase" not in long_integer.reason
