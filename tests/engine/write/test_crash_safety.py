"""Crash safety: SIGKILL an ingesting child process at seeded random points, then reopen.

The child (``crash_child.py``) runs a deterministic plan of adds, updates and deletes and
prints ``ACK <batch>`` after each call returns. The parent aims each kill at a phase —
inside ``embed``, the store transaction, the tantivy commit, the FAISS save, right after
an acknowledgement, or a random moment — and then checks, after reopening:

- the store holds exactly the acknowledged writes, plus possibly the one in flight, whole
  (no partial batch, no half-written document);
- every stored document is found by keyword search on its unique token, and the excerpt
  tantivy returns is the stored version's text (the keyword index caught up);
- the tantivy index holds exactly the stored documents; FAISS holds exactly the stored
  vectors (``stats()["vectors"]``); ``documents_degraded`` equals the documents that could
  not be embedded (the poisoned batches), read from the engine's metrics registry.

Figures (kill points by phase, documents lost) are printed; run with ``-s`` to see them.

Two processes: ``test_sigkill_of_a_writer_harms_no_reader`` runs the same rounds while a
second process (``crash_reader.py``) searches throughout. It must see 0 errors; after each
round's reopen, its own indexes must agree with the store (checked inside it).
"""

from __future__ import annotations

import collections
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine import CorpusConfig, SearchEngine, SentenceTransformerEmbedding
from tests.support.crash_child import (
    CORPUS,
    Op,
    is_poisoned,
    plan,
    replay,
    unique_token,
)
from tests.support.fakes import WordHashEmbedder, factory_for
from tests.support.reliability_support import faiss_threads, stored_rows

ROOT = Path(__file__).resolve().parents[3]
CHILD = ROOT / "tests" / "support" / "crash_child.py"
READER = ROOT / "tests" / "support" / "crash_reader.py"
SEED = int(os.environ.get("TANDEM_CRASH_SEED", "20261129"))
BATCHES_PER_ROUND = 10


@dataclass
class CrashLog:
    """What the kills hit, for the report."""

    landed: collections.Counter[str] = field(default_factory=collections.Counter)
    kills: int = 0
    lost: int = 0
    in_flight_applied: int = 0

    def summary(self, kind: str) -> str:
        phases = ", ".join(f"{k}={v}" for k, v in sorted(self.landed.items()))
        return (
            f"[crash-safety {kind}] kills={self.kills} documents_lost={self.lost} "
            f"in_flight_applied={self.in_flight_applied} landed: {phases}"
        )


def _reader(stream: object, lines: queue.Queue[str | None]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.put(line.rstrip("\n"))
    lines.put(None)


def _run_and_kill(
    root: Path, kind: str, start: int, target: tuple[str, int, float]
) -> tuple[list[str], bool]:
    """Run the child from batch ``start``; SIGKILL it at ``target``. Returns (lines, killed).

    ``target`` = (event, occurrence, delay): wait for the ``occurrence``-th stdout line
    starting with ``event`` (``"time"``: the READY line), sleep ``delay`` s, kill.
    """
    event, occurrence, delay = target
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(root), kind, str(start), str(start + BATCHES_PER_ROUND)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    seen: list[str] = []
    wanted = "READY" if event == "time" else event
    hits = 0
    killed = False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=deadline - time.monotonic())
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        if line.startswith(wanted):
            hits += 1
            if hits == occurrence:
                time.sleep(delay)
                proc.send_signal(signal.SIGKILL)
                killed = True
                break
    if not killed and proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        killed = True
    proc.wait(timeout=30)
    # Whatever the child printed before it died still counts (it was flushed).
    while True:
        try:
            line = lines.get(timeout=5)
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
    assert proc.stdout is not None
    proc.stdout.close()
    return seen, killed and "DONE" not in seen


def _landed(lines: list[str]) -> str:
    """Where the kill struck: inside the phase last begun, or between phases."""
    open_phase: str | None = None
    last = "start"
    for line in lines:
        if line.startswith("BEGIN "):
            open_phase = line.split()[1]
        elif line.startswith("END "):
            open_phase = None
            last = f"after-{line.split()[1]}"
        elif line.startswith(("ACK", "FLUSHED", "READY")):
            open_phase = None
            last = f"after-{line.split()[0].lower()}"
    return f"during-{open_phase}" if open_phase else f"between({last})"


def _targets(kind: str, rng: random.Random, n: int) -> list[tuple[str, int, float]]:
    events = ["BEGIN store", "BEGIN tantivy", "END tantivy", "ACK", "time"]
    if kind != "keyword":
        events += ["BEGIN embed", "BEGIN faiss-save", "BEGIN faiss-save"]
    out = []
    for i in range(n):
        event = events[i % len(events)] if i < len(events) else rng.choice(events)
        if event == "time":
            out.append((event, 1, rng.uniform(0.05, 1.2)))
        else:
            out.append((event, rng.randint(1, 3), rng.choice([0.0, rng.uniform(0, 0.006)])))
    return out


def _verify(
    root: Path, kind: str, acked: list[Op], in_flight: Op | None, touched: set[str], seed: int
) -> tuple[list[Op], int]:
    """Reopen and check every invariant; returns (effective ops, documents lost)."""
    poison = kind == "hybrid"
    without = replay(acked, poison)
    with_flight = replay([*acked, in_flight], poison) if in_flight else without
    actual = stored_rows(root / "corpora" / CORPUS)
    actual_docs = {k: (v[0], v[1]) for k, v in actual.items()}
    deleted_in_flight = set(in_flight.ids) if in_flight and in_flight.kind == "delete" else set()
    lost = len(without.keys() - actual_docs.keys() - deleted_in_flight)
    # Exactly the acknowledged state, or that plus the whole in-flight write.
    assert actual_docs in (without, with_flight), "store is not a whole-write prefix"
    effective = (
        [*acked, in_flight] if in_flight and actual_docs == with_flight != without else acked
    )

    fake = WordHashEmbedder()
    fake.refuse_poison = True
    fake.down = kind == "real"  # stored vectors are MiniLM's: search by keyword only
    engine = SearchEngine(root, embedder_factory=factory_for(fake))
    try:
        corpus = engine.corpus(CORPUS)
        # Derived indexes hold exactly the stored documents.
        tantivy = corpus._indexes.tantivy  # the derived keyword index itself
        assert tantivy.doc_count() == len(actual_docs)
        embedded = {k for k, v in actual.items() if v[3]}
        stats = corpus.stats()
        assert stats["documents"] == len(actual_docs)
        if kind != "keyword":
            faiss = corpus._indexes.faiss
            assert stats["vectors"] == len(embedded)
            assert set(faiss.ids() if faiss is not None else []) == embedded
        expected_degraded = sum(1 for k in actual_docs if is_poisoned(k, poison))
        assert stats["degraded"] == expected_degraded
        assert engine.registry.get_sample_value(
            "tandem_documents_degraded", {"corpus": CORPUS}
        ) == float(expected_degraded)
        if kind == "hybrid":
            assert embedded == {k for k in actual_docs if not is_poisoned(k, poison)}
        # Keyword-searchable, current version: what this round touched + a random sample.
        rng = random.Random(seed)
        sample = sorted(touched & actual_docs.keys())
        others = sorted(actual_docs.keys() - touched)
        sample += rng.sample(others, min(15, len(others)))
        for doc_id in sample:
            title, text = actual_docs[doc_id]
            # Hybrid: a dense-only neighbour may tie with the keyword hit at the top; the
            # document must be the keyword arm's first hit either way.
            hits = {h.source_id: h for h in corpus.search(unique_token(doc_id), top_k=3)}
            hit = hits.get(doc_id)
            assert hit is not None, doc_id
            assert hit.ranks.sparse == 1
            assert hit.title == title
            assert hit.excerpt and hit.excerpt in text, "stale keyword index"
        for doc_id in touched - actual_docs.keys():  # deleted / never written: not findable
            assert all(h.source_id != doc_id for h in corpus.search(unique_token(doc_id)))
    finally:
        engine.close()
    return effective, lost


class ReaderProcess:
    """The second process: searches throughout; checks its own view on request."""

    def __init__(self, root: Path) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, str(READER), str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert self._ask(None) == "READY"

    def _ask(self, command: str | None) -> str:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        if command is not None:
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()
        return self._proc.stdout.readline().strip()

    def check(self, root: Path, gone: set[str]) -> None:
        rows = stored_rows(root / "corpora" / CORPUS)
        path = root.parent / "expected.json"
        docs = {k: [v[0], v[1], v[3]] for k, v in rows.items()}
        path.write_text(json.dumps({"docs": docs, "gone": sorted(gone - rows.keys())}))
        answer = self._ask(f"CHECK {path}")
        assert answer == "OK", f"reader process: {answer}"

    def stop(self) -> tuple[int, int, str]:
        _, searches, errors, first = self._ask("STOP").split(" ", 3)
        self._proc.wait(timeout=60)
        return int(searches), int(errors), first

    def kill(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=30)


def _crash_rounds(
    root: Path, kind: str, kills: int, seed: int, reader: ReaderProcess | None = None
) -> CrashLog:
    rng = random.Random(seed)
    log = CrashLog()
    done: list[Op] = []
    start = 0
    for i, target in enumerate(_targets(kind, rng, kills)):
        lines, killed = _run_and_kill(root, kind, start, target)
        assert "READY" in lines, f"child failed to start: {lines[-5:]}"
        acked_batches = [int(x.split()[1]) for x in lines if x.startswith("ACK ")]
        assert acked_batches == list(range(start, start + len(acked_batches)))
        nxt = start + len(acked_batches)
        in_flight = plan(nxt) if killed and nxt < start + BATCHES_PER_ROUND else None
        acked = [*done, *(plan(b) for b in acked_batches)]
        touched = {d for b in range(start, nxt + 1) for d in plan(b).ids}
        done, lost = _verify(root, kind, acked, in_flight, touched, seed + i)
        if reader is not None:
            reader.check(root, touched)
        if killed:
            log.kills += 1
            log.landed[_landed(lines)] += 1
        log.lost += lost
        if in_flight is not None and done and done[-1] is in_flight:
            log.in_flight_applied += 1
            nxt += 1
        start = nxt
    return log


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("kind", "kills"), [("keyword", 10), ("hybrid", 14)])
def test_sigkill_during_ingest_loses_no_acknowledged_document(
    tmp_path: Path, kind: str, kills: int
) -> None:
    with faiss_threads(1):
        log = _crash_rounds(tmp_path / "engine", kind, kills, SEED + len(kind))
    print(log.summary(kind))
    assert log.kills >= kills - 2, "too few kills landed (the child finished first)"
    assert log.lost == 0
    if kind == "hybrid":
        assert any(k.startswith("during-") for k in log.landed), log.landed


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigkill_during_ingest_with_the_real_model(tmp_path: Path) -> None:
    """A few kills with all-MiniLM-L6-v2 loaded in the child (slow: the model loads each time)."""
    pytest.importorskip("sentence_transformers")
    log = _crash_rounds(tmp_path / "engine", "real", 3, SEED + 7)
    print(log.summary("real"))
    assert log.kills >= 2
    assert log.lost == 0


@pytest.mark.timeout(240)
def test_sigkill_of_a_writer_harms_no_reader(tmp_path: Path) -> None:
    """Two processes: a writer killed at 10+ points, a reader searching all along."""
    root = tmp_path / "engine"
    fake = WordHashEmbedder()
    with SearchEngine(root, embedder_factory=factory_for(fake)) as engine:
        engine.create_corpus(CorpusConfig(name=CORPUS, embedder=SentenceTransformerEmbedding()))
    reader = ReaderProcess(root)
    try:
        with faiss_threads(1):
            log = _crash_rounds(root, "hybrid", 12, SEED + 11, reader)
        searches, errors, first = reader.stop()
    finally:
        reader.kill()
    print(log.summary("two-process hybrid") + f" reader: searches={searches} errors={errors}")
    assert log.kills >= 10, "too few kills landed (the child finished first)"
    assert log.lost == 0
    assert errors == 0, first
    assert searches > 0
