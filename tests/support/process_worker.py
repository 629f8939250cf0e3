"""One process of the multi-process test: it opens a shared engine directory and writes,
deletes and searches (``writer``) or only searches (``searcher``) until told to stop.

Usage: ``python tests/support/process_worker.py ROOT ROLE NAME SEED LOGDIR``. The parent
drives it over stdin, one command a line: ``GO`` (start), ``STOP`` (finish the operation
in progress, answer ``STOPPED``), ``REPORT`` (answer ``VIEW <json>``: what this process's
own derived indexes hold, after one search has brought them up to date), ``EXIT``.

Every operation is logged with ``time.monotonic()`` (one clock for every process on
Linux) so the parent can replay the promises afterwards:

- ``LOGDIR/NAME.events`` (writers): ``add|update|delete ID STARTED RETURNED``;
- ``LOGDIR/NAME.searches``: ``ID STARTED ENDED FOUND SPARSE_RANK DENSE_RANK`` for a
  search on document ID's unique token.

A writer's documents are ``NAME-<n>``; it keeps at most ``MAX_ALIVE`` alive, so the whole
corpus stays inside the fusion window and every document with a vector ranks in the dense
arm. Searchers pick their targets among recent events of every writer (they tail the
event logs), so searches land right after adds and deletes.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.fakes import WordHashEmbedder, factory_for

CORPUS = "c"
MAX_ALIVE = 20
_VOCAB = ("printer", "paper", "network", "invoice", "refund", "parcel", "password", "order")


def token(doc_id: str) -> str:
    return "uq" + doc_id.replace("-", "x")


def text_of(doc_id: str, version: int, rng: random.Random) -> str:
    words = " ".join(rng.choice(_VOCAB) for _ in range(12))
    return f"{token(doc_id)} version v{version} {words}"


class Targets:
    """Recent document ids from every writer's event log (tailed)."""

    def __init__(self, logdir: Path) -> None:
        self._logdir = logdir
        self._offsets: dict[Path, int] = {}
        self.recent: list[str] = []

    def refresh(self) -> None:
        for path in sorted(self._logdir.glob("*.events")):
            with open(path, encoding="utf-8") as fh:
                fh.seek(self._offsets.get(path, 0))
                chunk = fh.read()
                complete = chunk[: chunk.rfind("\n") + 1]
                self._offsets[path] = fh.tell() - (len(chunk) - len(complete))
            for line in complete.splitlines():
                self.recent.append(line.split()[1])
        del self.recent[:-60]


def main() -> int:
    root, role, name, seed, logdir = sys.argv[1:6]
    import logging

    logging.basicConfig(
        filename=str(Path(logdir) / f"{name}.log"),
        level=logging.INFO,
        format=f"%(asctime)s {name} %(name)s %(levelname)s %(message)s",
    )
    from engine import SearchEngine

    engine = SearchEngine(
        root, embedder_factory=factory_for(WordHashEmbedder()), busy_timeout=120.0
    )
    corpus = engine.corpus(CORPUS)
    rng = random.Random(int(seed))
    log_dir = Path(logdir)
    events: TextIO | None = (
        open(log_dir / f"{name}.events", "a", encoding="utf-8") if role == "writer" else None  # noqa: SIM115
    )
    searches = open(log_dir / f"{name}.searches", "a", encoding="utf-8")  # noqa: SIM115
    errors: list[str] = []
    stop = threading.Event()
    go = threading.Event()
    targets = Targets(log_dir)
    state: dict[str, Any] = {"alive": [], "next": 0, "searches": 0, "writes": 0}

    def search_once() -> None:
        if state["searches"] % 10 == 0:
            targets.refresh()
        pool = targets.recent or [f"{name}-0"]
        doc_id = rng.choice(pool)
        started = time.monotonic()
        hits = corpus.search(token(doc_id), top_k=5)
        ended = time.monotonic()
        hit = next((h for h in hits if h.source_id == doc_id), None)
        ranks = ("-", "-") if hit is None else (hit.ranks.sparse, hit.ranks.dense)
        searches.write(
            f"{doc_id} {started:.6f} {ended:.6f} {int(hit is not None)} {ranks[0]} {ranks[1]}\n"
        )
        state["searches"] += 1

    def write_once() -> None:
        assert events is not None
        from engine import Document

        alive: list[str] = state["alive"]
        roll = rng.random()
        if (roll < 0.5 and len(alive) < MAX_ALIVE) or len(alive) < 3:
            ids = [f"{name}-{state['next'] + i}" for i in range(rng.randint(1, 3))]
            state["next"] += len(ids)
            kind = "add"
        elif roll < 0.7:
            ids = rng.sample(alive, min(2, len(alive)))
            kind = "update"
        else:
            ids = rng.sample(alive, rng.randint(1, 2))
            kind = "delete"
        started = time.monotonic()
        if kind == "delete":
            corpus.delete(ids)
        else:
            version = state["writes"]
            corpus.add(Document(id=i, title=f"doc {i}", text=text_of(i, version, rng)) for i in ids)
        returned = time.monotonic()
        for doc_id in ids:
            events.write(f"{kind} {doc_id} {started:.6f} {returned:.6f}\n")
            if kind == "add":
                alive.append(doc_id)
            elif kind == "delete":
                alive.remove(doc_id)
        events.flush()
        state["writes"] += 1

    def loop() -> None:
        go.wait()
        while not stop.is_set():
            try:
                if role == "writer" and rng.random() < 0.5:
                    write_once()
                else:
                    search_once()
            except Exception:
                errors.append(traceback.format_exc(limit=4))
                time.sleep(0.01)
        searches.flush()

    worker = threading.Thread(target=loop)
    worker.start()
    print("READY", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "GO":
            go.set()
        elif command == "STOP":
            stop.set()
            go.set()
            worker.join()
            print("STOPPED", flush=True)
        elif command == "REPORT":
            print("VIEW " + json.dumps(_view(corpus, errors, state)), flush=True)
        elif command == "EXIT":
            break
    engine.close()
    return 0


def _view(corpus: Any, errors: list[str], state: dict[str, Any]) -> dict[str, Any]:
    import tantivy

    corpus.search("refresh before looking", top_k=1)  # a search brings the indexes up
    indexes = corpus._indexes
    faiss = indexes.faiss
    view = indexes.tantivy.view()
    searcher = view.searcher
    found = searcher.search(tantivy.Query.all_query(), limit=max(1, searcher.num_docs))
    tantivy_ids = sorted(searcher.doc(addr)["source_id"][0] for _, addr in found.hits)
    return {
        "faiss": sorted(faiss.ids()) if faiss is not None else [],
        "tantivy": tantivy_ids,
        "errors": errors,
        "searches": state["searches"],
        "writes": state["writes"],
    }


if __name__ == "__main__":
    raise SystemExit(main())
