"""A writer killed between its ``COMMIT`` and the change counter's move after it.

Other processes learn of a commit from the shared change counter (``change_counter``).
A writer bumped it only after ``COMMIT``, so one killed in between left every process
that had looked at the counter since the writer took the lock serving the rows the
commit changed — a document made private kept its title and URL in anonymous answers —
until the next write anywhere. The counter is now odd while a commit is in flight, and
a reader that finds it odd looks at the store on every search."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from engine import CorpusConfig, Document, Passage, SearchEngine
from tests.support.fakes import WordHashEmbedder, factory_for

ROOT = Path(__file__).resolve().parents[3]

# The child takes the write lock, signals ``ready`` from inside the embedding (after its
# take-over, before its commit), waits for ``go``, and dies right after COMMIT returns.
CHILD = """
import os, sys, time
from pathlib import Path
from engine import Document, SearchEngine
from tests.support.fakes import WordHashEmbedder, factory_for

root, ready, go = (Path(arg) for arg in sys.argv[1:4])
inner = WordHashEmbedder()

class Gated:
    name, dimension = inner.name, inner.dimension
    def is_available(self):
        return True
    def embed(self, texts):
        ready.touch()
        deadline = time.monotonic() + 120
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return inner.embed(texts)

class DieAfterCommit:
    def __init__(self, conn):
        self._conn = conn
    def execute(self, sql, *args):
        result = self._conn.execute(sql, *args)
        if sql == "COMMIT":
            os._exit(9)
        return result
    def __getattr__(self, name):
        return getattr(self._conn, name)

engine = SearchEngine(root, embedder_factory=lambda spec: Gated())
corpus = engine.corpus("c")
store = corpus._store
store._connections._writer = DieAfterCommit(store._connections._writer)
corpus.add([Document(id="x", title="Layoff plan", text="layoff plan, revised",
                     access_groups=frozenset({"hr"}))])
"""


def _ids(hits: list[Passage]) -> list[str]:
    return [hit.source_id for hit in hits]


def _wait_for(path: Path, child: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the child never reached its embedding"
        time.sleep(0.01)


def test_a_document_made_private_by_a_writer_killed_after_commit_is_not_served(
    tmp_path: Path,
) -> None:
    root, ready, go = tmp_path / "engine", tmp_path / "ready", tmp_path / "go"
    with SearchEngine(root, embedder_factory=factory_for(WordHashEmbedder())) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c"))
        corpus.add(
            [
                Document(id="x", title="Layoff plan", text="layoff plan"),
                Document(id="y", title="Holiday plan", text="holiday plan"),
            ]
        )
        assert "x" in _ids(corpus.search("layoff"))
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(root), str(ready), str(go)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            _wait_for(ready, child)
            # After the child's take-over and before its commit: this search remembers
            # the counter as the child left it when it took the lock.
            assert "x" in _ids(corpus.search("layoff"))
            go.touch()
            child.wait(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert child.returncode == 9, child.communicate()
        assert _ids(corpus.search("layoff plan")) == ["y"]
