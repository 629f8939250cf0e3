"""The reading process of the two-process crash test: searches without pause while writer
processes are SIGKILLed beside it, and checks its own view of the corpus on request.

Usage: ``python tests/support/crash_reader.py ROOT``.
A background thread searches the unique tokens of the write plan's documents, counting
searches and errors. Commands on stdin, one a line:

- ``CHECK PATH``: PATH holds JSON ``{"docs": {id: [title, text, has_vector]}, "gone":
  [ids]}``, the store as the parent verified it. In this process: every listed document is
  the keyword arm's first hit for its token, with the stored title and an excerpt of the
  stored text; no id of ``gone`` is returned; this process's FAISS index holds exactly the
  documents with a vector and its view of tantivy exactly the stored count. Answers
  ``OK`` or ``FAIL <reason>``.
- ``STOP``: answers ``STATS <searches> <errors> <first error>`` and exits.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.crash_child import CORPUS, plan, unique_token
from tests.support.fakes import WordHashEmbedder, factory_for

_DEADLINE_S = 30.0  # a check waits this long for the corpus to settle before failing


def _check(corpus: Any, expected: dict[str, Any]) -> str | None:
    docs: dict[str, list[Any]] = expected["docs"]
    deadline = time.monotonic() + _DEADLINE_S
    while True:
        problem = _problem(corpus, docs, expected["gone"])
        if problem is None or time.monotonic() > deadline:
            return problem
        time.sleep(0.05)


def _problem(corpus: Any, docs: dict[str, list[Any]], gone: list[str]) -> str | None:
    corpus.search("settle", top_k=1)  # brings this process's indexes up to date
    indexes = corpus._indexes
    if indexes.tantivy.doc_count() != len(docs):
        return f"tantivy holds {indexes.tantivy.doc_count()} documents, store {len(docs)}"
    faiss = indexes.faiss
    embedded = {k for k, v in docs.items() if v[2]}
    held = set(faiss.ids()) if faiss is not None else set()
    if corpus.config.embedder is not None and held != embedded:
        return f"faiss differs: {len(held - embedded)} extra, {len(embedded - held)} missing"
    for doc_id in sorted(docs)[-40:]:
        title, text, _ = docs[doc_id]
        hits = {h.source_id: h for h in corpus.search(unique_token(doc_id), top_k=3)}
        hit = hits.get(doc_id)
        if hit is None or hit.ranks.sparse != 1:
            return f"{doc_id} not found first"
        if hit.title != title or not hit.excerpt or hit.excerpt not in text:
            return f"{doc_id} stale"
    for doc_id in gone:
        if any(h.source_id == doc_id for h in corpus.search(unique_token(doc_id))):
            return f"deleted {doc_id} returned"
    return None


def main() -> int:
    root = sys.argv[1]
    from engine import SearchEngine

    fake = WordHashEmbedder()
    fake.refuse_poison = True
    engine = SearchEngine(root, embedder_factory=factory_for(fake))
    corpus = engine.corpus(CORPUS)
    stop = threading.Event()
    counts = {"searches": 0, "errors": 0}
    first_error: list[str] = []

    def loop() -> None:
        rng = random.Random(5)
        while not stop.is_set():
            ids = plan(rng.randrange(0, 150)).ids
            try:
                corpus.search(unique_token(rng.choice(ids)), top_k=5)
                counts["searches"] += 1
            except Exception:
                counts["errors"] += 1
                if not first_error:
                    first_error.append(traceback.format_exc(limit=3).replace("\n", " | "))

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    print("READY", flush=True)
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if command == "CHECK":
            expected = json.loads(Path(arg).read_text(encoding="utf-8"))
            try:
                problem = _check(corpus, expected)
            except Exception:
                problem = traceback.format_exc(limit=3).replace("\n", " | ")
            print("OK" if problem is None else f"FAIL {problem}", flush=True)
        elif command == "STOP":
            stop.set()
            thread.join(timeout=60)
            error = first_error[0] if first_error else "-"
            print(f"STATS {counts['searches']} {counts['errors']} {error}", flush=True)
            break
    engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
