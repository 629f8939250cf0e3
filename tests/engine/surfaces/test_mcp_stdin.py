"""Requests the MCP SDK's stdio reader cannot parse still get an answer (``mcp_stdin``).

Review: ``tandem mcp`` gave no answer at all — the client waits until its own timeout —
to a tool call carrying a lone surrogate escape (what ``JSON.stringify`` writes for a
JavaScript string with a broken pair) or a filter nested 300 deep: the SDK drops a line
its parser refuses.
"""

from __future__ import annotations

import io
import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

from engine import CorpusConfig, Document, SearchEngine
from engine.surfaces import mcp_stdin
from engine.surfaces.mcp_stdin import UNREADABLE_METHOD, repaired_line

ROOT = Path(__file__).resolve().parents[3]
ANSWER_S = 60.0

LONE = (
    rb'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search_knowledge",'
    rb'"arguments":{"corpus":"help","query":"password \ud800"}}}'
)
DEEP = (
    b'{"jsonrpc":"2.0","id":"deep","method":"tools/call","params":{"name":"search_knowledge",'
    b'"arguments":{"corpus":"help","query":"password","filters":' + b"[" * 300 + b"]" * 300 + b"}}}"
)


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def test_a_line_the_sdk_reads_is_passed_on_as_it_came() -> None:
    line = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n'
    assert repaired_line(line) is line


def test_lone_surrogates_become_replacement_characters() -> None:
    repaired = json.loads(repaired_line(LONE + b"\n"))
    assert repaired["id"] == 2
    assert repaired["params"]["arguments"]["query"] == "password \ufffd"
    paired = rb'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"x":"\ud83d\ude00 \udfff"}}'
    assert json.loads(repaired_line(paired))["params"]["x"] == "\U0001f600 \ufffd"


def test_a_request_still_unreadable_becomes_an_unknown_method_of_the_same_id() -> None:
    assert json.loads(repaired_line(DEEP + b"\n")) == {
        "jsonrpc": "2.0",
        "id": "deep",
        "method": UNREADABLE_METHOD,
    }


@pytest.mark.parametrize("depth", [300, 5_000, 200_000])
def test_the_id_of_a_request_nested_past_any_parser_is_still_found(depth: int) -> None:
    """Review: past Python's own recursion limit ``json.loads`` gave up too, and the
    request went unanswered; the id is read by a pass that does not recurse."""
    nested = b"[" * depth + b'{"id": "inner"}' + b"]" * depth
    line = (
        b'{"jsonrpc":"2.0","params":{"name":"x","arguments":{"filters":'
        + nested
        + b'}},"method":"tools/call","id":-7}\n'
    )
    assert json.loads(repaired_line(line)) == {
        "jsonrpc": "2.0",
        "id": -7,
        "method": UNREADABLE_METHOD,
    }


@pytest.mark.parametrize(
    "line",
    [
        b"not json at all\n",
        b'{"jsonrpc":"2.0","method":"notifications/x","params":' + b"[" * 300 + b"]" * 300 + b"}\n",
        b"[" * 100_000 + b"]" * 100_000 + b"\n",
        b'{"jsonrpc":"2.0","method":"x","params":' + b"[" * 5_000 + b"]" * 5_000 + b"}\n",
        b'{"jsonrpc":"2.0","id":1.5,"method":"x","params":' + b"[" * 5_000 + b"]" * 5_000 + b"}\n",
    ],
    ids=[
        "not json",
        "a notification (no id to answer)",
        "too deep even for json",
        "a deep notification",
        "an id that is no id",
    ],
)
def test_what_has_no_id_to_answer_is_left_to_the_sdk(line: bytes) -> None:
    assert repaired_line(line) == line


def _answer(stdout: IO[bytes]) -> dict[str, Any]:
    ready, _, _ = select.select([stdout], [], [], ANSWER_S)
    assert ready, f"no answer within {ANSWER_S:g} s"
    answer: dict[str, Any] = json.loads(stdout.readline())
    return answer


@pytest.mark.timeout(240)
def test_tandem_mcp_answers_every_request(tmp_path: Path) -> None:
    with SearchEngine(tmp_path) as engine:
        engine.create_corpus(CorpusConfig(name="help", embedder=None)).add(
            [Document(id="reset", title="Reset your password", text="Open Settings.")]
        )
    server = subprocess.Popen(
        [sys.executable, "-c", "from engine.surfaces.cli import main; main()", "mcp"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TANDEM_HOME": str(tmp_path)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
        hello["clientInfo"] = {"name": "test", "version": "1"}
        server.stdin.write(
            _line({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        )
        server.stdin.flush()
        assert _answer(server.stdout)["id"] == 1
        server.stdin.write(_line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        deeper = DEEP.replace(b'"deep"', b'"deeper"').replace(b"[" * 300, b"[" * 5_000)
        carriage = b'{"jsonrpc":"2.0",\r"id":"cr","method":"ping"}'
        for line in (LONE, DEEP, deeper.replace(b"]" * 300, b"]" * 5_000), carriage):
            server.stdin.write(line + b"\n")
            server.stdin.flush()
            answer = _answer(server.stdout)
            if answer["id"] == "cr":
                assert answer["result"] == {}
            elif answer["id"] == 2:
                passages = json.loads(answer["result"]["content"][0]["text"])["passages"]
                assert [p["source_id"] for p in passages] == ["reset"]
            else:
                assert answer["id"] in ("deep", "deeper")
                assert answer["error"]["code"] == -32601
    finally:
        server.stdin.close()
        server.wait(60)


@pytest.mark.parametrize(
    "request_id",
    [b"1" * 5_000, b'"bad \\x escape"', b'"raw\ttab"'],
    ids=["5,000 digits", "a bad escape", "a raw tab"],
)
def test_an_id_json_refuses_leaves_the_line_to_the_sdk(request_id: bytes) -> None:
    """Review: such an id in a line nested past the recursion limit raised out of the
    stdin stand-in and ended the server."""
    line = (  # the nesting first: json.loads gives up on it before it reaches the id
        b'{"jsonrpc":"2.0","method":"x","params":'
        + b"[" * 5_000
        + b"]" * 5_000
        + b',"id":'
        + request_id
        + b"}\n"
    )
    assert repaired_line(line) == line


def test_the_stand_in_reads_long_lines_whole_and_never_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    long_line = _line(
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "y" * 3_000_000}}
    )
    reader = io.TextIOWrapper(
        io.BufferedReader(mcp_stdin._RepairedLines(io.BytesIO(long_line + b"not json\n"))),
        encoding="utf-8",
    )
    assert reader.readline().encode() == long_line
    assert reader.readline() == "not json\n"

    def broken(line: bytes) -> bytes:
        raise RuntimeError("a check that failed")

    monkeypatch.setattr(mcp_stdin, "repaired_line", broken)
    reader = io.TextIOWrapper(
        io.BufferedReader(mcp_stdin._RepairedLines(io.BytesIO(b'{"a": 1}\n'))), encoding="utf-8"
    )
    assert reader.readline() == '{"a": 1}\n'  # passed on as sent


@pytest.mark.parametrize(
    "unreadable",
    [b'"filters":' + b"[" * 300 + b"]" * 300, b'"query":"x \\ud800"'],
    ids=["deep", "lone surrogate"],
)
def test_a_number_json_refuses_does_not_hide_the_request(unreadable: bytes) -> None:
    """Review: a number of more than 4,300 digits anywhere made json.loads raise
    ValueError, taken for "not JSON": a deep or lone-surrogate request carrying one
    went unanswered. The id is read by the scan instead."""
    line = (
        b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"x","arguments":{'
        + unreadable
        + b',"top_k":'
        + b"7" * 5_000
        + b"}}}\n"
    )
    assert json.loads(repaired_line(line)) == {
        "jsonrpc": "2.0",
        "id": 9,
        "method": UNREADABLE_METHOD,
    }


def test_a_bom_or_a_bare_carriage_return_no_longer_hides_a_request() -> None:
    """Review: a line led by a byte order mark, or with a bare CR as whitespace (legal
    JSON; the SDK's text reader takes it for a line end and splits the request), got no
    answer at all."""
    request = b'{"jsonrpc":"2.0","id":7,"method":"ping"}'
    assert repaired_line(b"\xef\xbb\xbf" + request + b"\n") == request + b"\n"
    with_cr = b'{"jsonrpc":"2.0",\r"id":8,\r"method":"ping"}\r\n'
    assert repaired_line(with_cr) == b'{"jsonrpc":"2.0", "id":8, "method":"ping"}\r\n'
    plain = request + b"\r\n"
    assert repaired_line(plain) is plain  # a CRLF ending is the reader's to translate
