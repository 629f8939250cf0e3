"""``SearchEngine(path, read_only=True)``: answers searches, refuses every write with
``EngineReadOnly``, follows another process's writes, creates no file, and works on a
directory this process can read but not write."""

from __future__ import annotations

import ctypes
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from engine import (
    CorpusConfig,
    Document,
    EngineReadOnly,
    SearchEngine,
    SentenceTransformerEmbedding,
)
from tests.support.fakes import WordHashEmbedder, factory_for

ROOT = Path(__file__).resolve().parents[3]

DOCS = [
    Document(id="p1", title="Reset your password", text="Use the reset link to sign in."),
    Document(id="p2", title="Delivery times", text="Orders arrive within five days."),
    Document(
        id="p3", title="Staff runbook", text="Staff only.", access_groups=frozenset({"staff"})
    ),
]


def _engine(root: Path, **kwargs: object) -> SearchEngine:
    return SearchEngine(root, embedder_factory=factory_for(WordHashEmbedder()), **kwargs)  # type: ignore[arg-type]


def _build(root: Path) -> None:
    with _engine(root) as engine:
        engine.create_corpus(
            CorpusConfig(name="hybrid", embedder=SentenceTransformerEmbedding(model="fake"))
        ).add(DOCS)
        engine.create_corpus(CorpusConfig(name="keyword", embedder=None)).add(DOCS)


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
    }


def test_read_only_engine_refuses_writes_and_follows_a_writer(tmp_path: Path) -> None:
    root = tmp_path / "engine"
    _build(root)
    with _engine(root, read_only=True) as reader, _engine(root) as writer:
        hybrid = reader.corpus("hybrid")
        assert [h.source_id for h in hybrid.search("reset password")][:1] == ["p1"]
        assert all(h.source_id != "p3" for h in hybrid.search("staff runbook"))
        for write in (
            lambda: hybrid.add([Document(id="x", text="nope")]),
            lambda: hybrid.delete(["p1"]),
            lambda: hybrid.repair(),
            lambda: reader.create_corpus(CorpusConfig(name="new", embedder=None)),
            lambda: reader.drop_corpus("keyword"),
            lambda: reader.switch_embedder("hybrid", SentenceTransformerEmbedding(model="b")),
            lambda: reader.start_repairer(),
        ):
            with pytest.raises(EngineReadOnly):
                write()
        # Another engine (another process would do the same) writes; the reader sees it.
        writer.corpus("hybrid").add([Document(id="p4", text="Parcel lockers open at six")])
        writer.corpus("hybrid").delete(["p2"])
        hits = hybrid.search("parcel lockers", top_k=3)
        assert hits[0].source_id == "p4" and hits[0].ranks.dense is not None
        assert all(h.source_id != "p2" for h in hybrid.search("delivery orders", top_k=10))
        assert reader.list_corpora() == ["hybrid", "keyword"]


def test_read_only_on_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EngineReadOnly, match="does not exist"):
        SearchEngine(tmp_path / "nothing-here", read_only=True)
    assert not (tmp_path / "nothing-here").exists()


_READ_ONLY_CHILD = """
import json, sys
from engine import Document, EngineReadOnly, SearchEngine
from tests.support.fakes import WordHashEmbedder, factory_for

out = {}
with SearchEngine(sys.argv[1], read_only=True,
                  embedder_factory=factory_for(WordHashEmbedder())) as engine:
    for name in ("hybrid", "keyword"):
        corpus = engine.corpus(name)
        hits = corpus.search("reset password", top_k=3)
        out[name] = [(h.source_id, h.ranks.sparse, h.ranks.dense) for h in hits]
        try:
            corpus.add([Document(id="x", text="refused")])
            out[name + "-write"] = "written"
        except EngineReadOnly as exc:
            out[name + "-write"] = "refused"
    out["fetch"] = engine.corpus("keyword").fetch_source("p2").text
print(json.dumps(out))
"""


def _drop_dac_override() -> None:
    """As root, give up overriding file permissions (so a read-only directory is one)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP: gone after exec
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


@pytest.mark.timeout(120)
def test_read_only_works_on_a_directory_it_cannot_write(tmp_path: Path) -> None:
    root = tmp_path / "engine"
    _build(root)
    before = _listing(root)
    modes = {p: p.stat().st_mode for p in [root, *root.rglob("*")]}
    for path in modes:
        path.chmod(stat.S_IMODE(modes[path]) & ~0o222)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _READ_ONLY_CHILD, str(root)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            preexec_fn=_drop_dac_override if os.geteuid() == 0 else None,
            timeout=100,
            check=False,
        )
    finally:
        for path, mode in modes.items():
            path.chmod(stat.S_IMODE(mode))
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["hybrid"][0][:2] == ["p1", 1] and out["hybrid"][0][2] is not None
    assert out["keyword"][0][:2] == ["p1", 1]
    assert out["hybrid-write"] == out["keyword-write"] == "refused"
    assert out["fetch"] == "Orders arrive within five days."
    assert _listing(root) == before  # not a file created, changed or removed


def test_a_store_from_before_filter_fields_reads_read_only(tmp_path: Path) -> None:
    """Regression (upgrades): a store written before filterable fields has no
    ``document_fields`` table until a writable open creates it; a read-only open failed
    every fetch (and opening a hybrid corpus) with "no such table: document_fields"."""
    _build(tmp_path)
    for name in ("hybrid", "keyword"):
        with sqlite3.connect(tmp_path / "corpora" / name / "store.sqlite3") as db:
            db.execute("DROP TABLE document_fields")  # as an older version left it
    with _engine(tmp_path, read_only=True) as engine:
        for name in ("hybrid", "keyword"):
            corpus = engine.corpus(name)
            assert corpus.fetch_source("p1").text == "Use the reset link to sign in."
            assert corpus.search("reset password")[0].source_id == "p1"
    with _engine(tmp_path) as engine:  # a writable open brings the table back
        assert engine.corpus("keyword").fetch_source("p2").title == "Delivery times"
