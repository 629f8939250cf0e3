"""Many processes, one engine directory: writes serialised, every commit seen everywhere.

Three real processes (two writing and searching, one searching) share one hybrid corpus
for a few seconds (``TANDEM_PROCESSES_S``, default 6). Afterwards:

- in every process, the store, that process's view of the tantivy index and its own
  in-memory FAISS index hold exactly the same documents (FAISS: those with a vector);
- replaying every search against the writers' logs: a document whose ``add`` returned
  before the search started, and whose delete had not started before it ended, was found
  — by the keyword arm at rank 1 and by the dense arm — and a document whose ``delete``
  returned before the search started (not re-added meanwhile) was never returned;
- no process saw an error.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine import (
    Corpus,
    CorpusConfig,
    CorpusNotFound,
    Document,
    InvalidArgument,
    SearchEngine,
    SentenceTransformerEmbedding,
    StorageError,
)
from engine.write.indexes import DerivedIndexes
from tests.support.fakes import SwitchableEmbedder, WordHashEmbedder, factory_for
from tests.support.reliability_support import stored_rows

ROOT = Path(__file__).resolve().parents[3]
WORKER = ROOT / "tests" / "support" / "process_worker.py"
DURATION_S = float(os.environ.get("TANDEM_PROCESSES_S", "6"))
MAX_DURATION_S = 120.0
MIN_EVENTS = 40


@dataclass(frozen=True)
class Event:
    kind: str
    started: float
    returned: float


def _spawn(root: Path, role: str, name: str, seed: int, logdir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(root), role, name, str(seed), str(logdir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def _ask(proc: subprocess.Popen[str], command: str, answer: str) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    assert line.startswith(answer), f"{command}: {line!r}"
    return line[len(answer) :].strip()


def _end(procs: list[subprocess.Popen[str]]) -> None:
    """Ask every worker to exit; kill any that has not within 60 s (or cannot be asked)."""
    for proc in procs:
        if proc.poll() is None and proc.stdin is not None:
            try:
                proc.stdin.write("EXIT\n")
                proc.stdin.flush()
            except OSError:  # BrokenPipeError: it died already (reaped below)
                pass
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _events(logdir: Path) -> dict[str, list[Event]]:
    by_id: dict[str, list[Event]] = defaultdict(list)
    for path in logdir.glob("*.events"):
        for line in path.read_text(encoding="utf-8").splitlines():
            fields = line.split()
            if len(fields) != 4:  # a line being written while the test polls
                continue
            kind, doc_id, started, returned = fields
            by_id[doc_id].append(Event(kind, float(started), float(returned)))
    return by_id


def _promise(history: list[Event], start: float, end: float) -> bool | None:
    """True: the search had to find the document; False: it must not have; None: either
    is allowed (a write of it overlapped the search)."""
    if any(e.started <= end and e.returned >= start for e in history):
        return None
    before = [e for e in history if e.returned < start]
    if not before:
        return False
    return max(before, key=lambda e: e.returned).kind != "delete"


@pytest.mark.timeout(400)
def test_processes_sharing_a_directory_agree_and_keep_every_promise(tmp_path: Path) -> None:
    root = tmp_path / "engine"
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with SearchEngine(root, embedder_factory=factory_for(WordHashEmbedder())) as engine:
        engine.create_corpus(
            CorpusConfig(name="c", embedder=SentenceTransformerEmbedding(model="fake"))
        )
    roles = [("writer", "p0"), ("writer", "p1"), ("searcher", "s0")]
    procs = [_spawn(root, role, name, i + 1, logdir) for i, (role, name) in enumerate(roles)]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "READY"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("GO\n")
            proc.stdin.flush()
        # At least DURATION_S, and until the writers wrote enough (a loaded box is slow).
        started = time.monotonic()
        while time.monotonic() - started < DURATION_S or (
            sum(len(v) for v in _events(logdir).values()) < MIN_EVENTS
            and time.monotonic() - started < MAX_DURATION_S
        ):
            time.sleep(0.5)
        for proc in procs:
            _ask(proc, "STOP", "STOPPED")
        views = {
            name: json.loads(_ask(proc, "REPORT", "VIEW"))
            for (_, name), proc in zip(roles, procs, strict=True)
        }
    finally:
        _end(procs)

    stored = stored_rows(root / "corpora" / "c")
    with_vectors = sorted(k for k, v in stored.items() if v[3])
    events = _events(logdir)
    assert sum(len(v) for v in events.values()) >= MIN_EVENTS, "the writers hardly wrote"
    for name, view in views.items():
        assert view["errors"] == [], f"{name}: {view['errors'][:2]}"
        assert view["tantivy"] == sorted(stored), f"{name}: keyword index differs from store"
        assert view["faiss"] == with_vectors, f"{name}: vector index differs from store"

    checked = {"found": 0, "absent": 0, "either": 0}
    broken: list[str] = []
    for path in logdir.glob("*.searches"):
        for line in path.read_text(encoding="utf-8").splitlines():
            doc_id, began, ended, found, sparse, dense = line.split()
            must = _promise(events.get(doc_id, []), float(began), float(ended))
            if must is None:
                checked["either"] += 1
            elif must:
                checked["found"] += 1
                if found != "1" or sparse != "1" or dense == "None":
                    broken.append(f"{path.stem}: missed {doc_id} ({found} {sparse} {dense})")
            else:
                checked["absent"] += 1
                if found == "1":
                    broken.append(f"{path.stem}: deleted {doc_id} returned")
    sizes = [len(v["faiss"]) for v in views.values()]
    print(f"[processes] searches checked {checked}, vectors per process {sizes}")
    assert not broken, broken[:10]
    assert checked["found"] > 20 and checked["absent"] > 5


_GAUGE_WRITER = """
import sys
from engine import Document, SearchEngine
from tests.support.fakes import POISON, WordHashEmbedder, factory_for

fake = WordHashEmbedder()
fake.refuse_poison = True
with SearchEngine(sys.argv[1], embedder_factory=factory_for(fake)) as engine:
    corpus = engine.corpus("c")
    corpus.add([Document(id=f"ok{i}", text=f"plain text {i}") for i in range(7)])
    corpus.add([Document(id=f"bad{i}", text=f"{POISON} {i}") for i in range(3)])
    corpus.delete(["ok0"])
    for _ in range(4):
        corpus.search("plain text")
    print(engine.registry.get_sample_value(
        "tandem_searches_total", {"corpus": "c", "strategy": "hybrid"}))
"""


@pytest.mark.timeout(120)
def test_state_gauges_are_exact_in_every_process_counters_are_per_process(
    tmp_path: Path,
) -> None:
    root = tmp_path / "engine"
    with SearchEngine(root, embedder_factory=factory_for(WordHashEmbedder())) as engine:
        corpus = engine.create_corpus(
            CorpusConfig(name="c", embedder=SentenceTransformerEmbedding(model="fake"))
        )
        corpus.search("before anything")  # this process's own count: 1
        done = subprocess.run(
            [sys.executable, "-c", _GAUGE_WRITER, str(root)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=100,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert float(done.stdout.strip().splitlines()[-1]) == 4.0  # the writer's own
        sample = engine.registry.get_sample_value
        assert sample("tandem_documents", {"corpus": "c"}) == 9.0  # written elsewhere
        assert sample("tandem_documents_degraded", {"corpus": "c"}) == 3.0
        assert sample("tandem_searches_total", {"corpus": "c", "strategy": "hybrid"}) == 1.0
        assert corpus.stats()["vectors"] == 6  # this process's FAISS followed the writer


def _two_dims(spec: object) -> WordHashEmbedder:
    """Model "a" embeds in 32 dimensions, any other model in 48."""
    model = getattr(spec, "model", "a")
    return WordHashEmbedder(dimension=32 if model == "a" else 48, name=f"word-hash-{model}")


def test_an_embedder_switch_elsewhere_is_followed(tmp_path: Path) -> None:
    """Two engines stand in for two processes (each its own files, locks and indexes)."""
    with (
        SearchEngine(tmp_path, embedder_factory=_two_dims) as first,
        SearchEngine(tmp_path, embedder_factory=_two_dims) as second,
    ):
        first.create_corpus(
            CorpusConfig(name="c", embedder=SentenceTransformerEmbedding(model="a"))
        ).add([Document(id=f"d{i}", text=f"printer paper tray {i}") for i in range(5)])
        other = second.corpus("c")
        assert other.search("printer")[0].ranks.dense is not None
        first.switch_embedder("c", SentenceTransformerEmbedding(model="b"))
        hits = other.search("printer paper")  # follows: new config, new vectors
        assert hits and hits[0].ranks.dense is not None
        assert other.config.embedder == SentenceTransformerEmbedding(model="b")
        other.add([Document(id="new", text="parcel locker")])  # embedded with model b
        assert first.corpus("c").stats()["vectors"] == 6
        assert first.corpus("c").search("parcel locker")[0].source_id == "new"


def test_vectors_named_for_the_model_switched_away_elsewhere_are_refused(
    tmp_path: Path,
) -> None:
    """The model check of an add runs with the config current under the write lock, not
    with what this process last saw (it has not searched since the switch)."""
    with (
        SearchEngine(tmp_path, embedder_factory=_two_dims) as first,
        SearchEngine(tmp_path, embedder_factory=_two_dims) as second,
    ):
        first.create_corpus(
            CorpusConfig(name="c", embedder=SentenceTransformerEmbedding(model="a"))
        ).add([Document(id="d0", text="printer paper")])
        other = second.corpus("c")
        first.switch_embedder("c", SentenceTransformerEmbedding(model="b"))
        old_model = np.ones((1, 32), dtype=np.float32)
        with pytest.raises(InvalidArgument, match="refused"):
            other.add([Document(id="d1", text="toner")], embeddings=old_model, embedding_model="a")
        with pytest.raises(InvalidArgument, match="dimension 32"):
            other.add([Document(id="d1", text="toner")], embeddings=old_model)
        assert len(first.corpus("c")) == 1


def test_a_corpus_dropped_elsewhere_stops_answering_and_can_be_recreated(
    tmp_path: Path,
) -> None:
    with SearchEngine(tmp_path) as first, SearchEngine(tmp_path) as second:
        first.create_corpus(CorpusConfig(name="c", embedder=None)).add(
            [Document(id="old", text="the old corpus")]
        )
        stale = second.corpus("c")
        assert stale.search("old corpus")[0].source_id == "old"
        first.drop_corpus("c")
        with pytest.raises(CorpusNotFound):
            stale.search("old corpus")
        with pytest.raises(CorpusNotFound):
            second.corpus("c")
        # Its series go with it here too, not only in the engine that dropped it.
        assert second.registry.get_sample_value("tandem_documents", {"corpus": "c"}) is None
        first.create_corpus(CorpusConfig(name="c", embedder=None)).add(
            [Document(id="new", text="the new corpus")]
        )
        fresh = second.corpus("c")
        assert fresh is not stale
        assert [h.source_id for h in fresh.search("corpus")] == ["new"]
        with pytest.raises(CorpusNotFound):
            stale.add([Document(id="lost", text="must not land anywhere")])


def test_a_scrape_follows_a_drop_and_re_create_elsewhere(tmp_path: Path) -> None:
    """Regression: the scrape's refresh re-read the dropped store through the stale corpus,
    so ``tandem_documents`` kept the old count after the drop and after a re-create."""
    from prometheus_client import generate_latest

    def documents(engine: SearchEngine) -> float | None:
        generate_latest(engine.registry)  # a scrape: the refresher runs first
        return engine.registry.get_sample_value("tandem_documents", {"corpus": "k"})

    with SearchEngine(tmp_path) as watcher, SearchEngine(tmp_path) as other:
        other.create_corpus(CorpusConfig(name="k", embedder=None)).add(
            [Document(id=f"d{i}", text=f"doc {i}") for i in range(9)]
        )
        watcher.corpus("k")
        assert documents(watcher) == 9.0
        other.drop_corpus("k")
        assert documents(watcher) is None  # its series went with it
        other.create_corpus(CorpusConfig(name="k", embedder=None)).add(
            [Document(id=f"d{i}", text=f"doc {i}") for i in range(9)]
        )
        watcher.corpus("k")
        assert documents(watcher) == 9.0
        other.drop_corpus("k")  # dropped and re-created between two scrapes
        other.create_corpus(CorpusConfig(name="k", embedder=None)).add(
            [Document(id="one", text="the new corpus")]
        )
        assert documents(watcher) == 1.0


def test_a_writer_that_followed_a_switch_mid_way_heals_with_the_new_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A switch commits its new epoch before it saves the new config; a process that
    searched in between must not heal (or add) with the old model once it writes."""
    import engine.corpus

    down = SwitchableEmbedder(WordHashEmbedder(dimension=48, name="word-hash-b"))

    def first_factory(spec: object) -> Any:
        return down if getattr(spec, "model", "a") == "b" else _two_dims(spec)

    with (
        SearchEngine(tmp_path, embedder_factory=first_factory) as first,
        SearchEngine(tmp_path, embedder_factory=_two_dims) as second,
    ):
        first.create_corpus(
            CorpusConfig(name="c", embedder=SentenceTransformerEmbedding(model="a"))
        ).add([Document(id=f"d{i}", text=f"printer paper {i}") for i in range(4)])
        other = second.corpus("c")
        other.search("printer")
        real_save = engine.corpus.save_config

        def save_after_a_search_elsewhere(path: Path, config: CorpusConfig) -> None:
            other.search("printer paper")  # the epoch is committed, the config not yet
            real_save(path, config)

        monkeypatch.setattr(engine.corpus, "save_config", save_after_a_search_elsewhere)
        down.down = True  # the new model fails the whole re-embedding pass
        first.switch_embedder("c", SentenceTransformerEmbedding(model="b"))
        monkeypatch.undo()
        assert other.repair() == 4
        store = tmp_path / "corpora" / "c" / "store.sqlite3"
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            models = {row[0] for row in db.execute("SELECT embedding_model FROM documents")}
        assert models == {"word-hash-b"}


def _same_width(spec: object) -> WordHashEmbedder:
    """Every model embeds in 32 dimensions, named after its model."""
    return WordHashEmbedder(dimension=32, name=f"word-hash-{getattr(spec, 'model', 'a')}")


def _switched_to_b_elsewhere(first: SearchEngine, second: SearchEngine) -> Corpus:
    """Corpus "c" made with model "a" in ``first``, opened (and searched with both arms)
    in ``second``, then switched to model "b" by ``first``; ``second``'s object."""
    first.create_corpus(
        CorpusConfig(name="c", embedder=SentenceTransformerEmbedding(model="a"))
    ).add([Document(id=f"d{i}", text=f"printer paper tray {i}") for i in range(4)])
    other = second.corpus("c")
    assert other.search("printer")[0].ranks.dense is not None
    first.switch_embedder("c", SentenceTransformerEmbedding(model="b"))
    return other


def test_a_switch_elsewhere_whose_model_fails_to_build_here_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The switched-to model fails to build in this process at first (a transient load
    failure). Before, the first search raised, the config was marked adopted anyway, and
    this process went on embedding with the old model — into a corpus switched to
    another, silently when the two have one dimension. Now searches answer from
    keywords, a write raises, and the config is adopted once the model builds."""
    import engine.write.sync

    monkeypatch.setattr(engine.write.sync, "CONFIG_RETRY_S", 0.0)
    broken = {"b": True}

    def flaky(spec: object) -> WordHashEmbedder:
        if getattr(spec, "model", "a") == "b" and broken["b"]:
            raise RuntimeError("model b cannot load right now")
        return _same_width(spec)

    with (
        SearchEngine(tmp_path, embedder_factory=_same_width) as first,
        SearchEngine(tmp_path, embedder_factory=flaky) as second,
    ):
        other = _switched_to_b_elsewhere(first, second)
        for _ in range(2):
            hits = other.search("printer paper")
            assert hits and all(hit.ranks.dense is None for hit in hits)
        with pytest.raises(RuntimeError, match="cannot load"):
            other.add([Document(id="early", text="parcel locker")])
        broken["b"] = False
        hits = other.search("printer paper")
        assert hits and hits[0].ranks.dense is not None
        assert other.config.embedder == SentenceTransformerEmbedding(model="b")
        other.add([Document(id="late", text="parcel locker")])
    with sqlite3.connect(tmp_path / "corpora" / "c" / "store.sqlite3") as db:
        models = db.execute("SELECT source_id, embedding_model FROM documents").fetchall()
    assert dict(models) == {**{f"d{i}": "word-hash-b" for i in range(4)}, "late": "word-hash-b"}


def test_a_follow_that_failed_is_tried_again_at_the_next_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The change was marked seen before the follow ran: one failed follow (an I/O error
    reloading an index) left this process blind to the commit until the next one."""
    with (
        SearchEngine(tmp_path, embedder_factory=_two_dims) as first,
        SearchEngine(tmp_path, embedder_factory=_two_dims) as second,
    ):
        first.create_corpus(CorpusConfig(name="c")).add([Document(id="d0", text="printer")])
        other = second.corpus("c")
        assert [hit.source_id for hit in other.search("printer")] == ["d0"]
        real_follow, calls = other._indexes.follow, []

        def fails_once(state: Any) -> None:
            calls.append(state)
            if len(calls) == 1:
                raise OSError("injected: the index could not be reloaded")
            real_follow(state)

        monkeypatch.setattr(other._indexes, "follow", fails_once)
        first.corpus("c").add([Document(id="d1", text="parcel locker")])
        with pytest.raises(StorageError, match="injected"):
            other.search("parcel locker")
        assert [hit.source_id for hit in other.search("parcel locker")][:1] == ["d1"]
        assert len(calls) == 2


def test_after_a_failed_adoption_commits_do_not_pace_the_retries_and_a_switch_back_heals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that fails to build here is tried again on the timer, not at every commit
    another process makes (each try may load a model); and a switch back to the model
    this process still holds puts its dense arm back (it stayed keyword-only for good)."""
    import engine.write.sync

    monkeypatch.setattr(engine.write.sync, "CONFIG_RETRY_S", 3600.0)
    attempts: list[str] = []

    def never_b(spec: object) -> WordHashEmbedder:
        if getattr(spec, "model", "a") == "b":
            attempts.append("b")
            raise RuntimeError("model b cannot load here")
        return _same_width(spec)

    with (
        SearchEngine(tmp_path, embedder_factory=_same_width) as first,
        SearchEngine(tmp_path, embedder_factory=never_b) as second,
    ):
        other = _switched_to_b_elsewhere(first, second)
        assert other.search("printer paper")[0].ranks.dense is None
        for i in range(3):  # commits elsewhere: followed, but no new attempt
            first.corpus("c").add([Document(id=f"n{i}", text=f"parcel {i}")])
            assert other.search("printer paper")[0].ranks.dense is None
        assert attempts == ["b"]
        first.switch_embedder("c", SentenceTransformerEmbedding(model="a"))
        clock = other._sync._clock
        monkeypatch.setattr(other._sync, "_clock", lambda: clock() + 7200.0)  # timer due
        hits = other.search("printer paper")
        assert hits and hits[0].ranks.dense is not None
        assert attempts == ["b"]
        assert other.config.embedder == SentenceTransformerEmbedding(model="a")


def test_a_child_forked_while_a_drop_waits_does_not_wait_for_it(tmp_path: Path) -> None:
    """The drop's waiting belongs to the parent's thread, which the child does not have:
    the child's writes waited behind it for their whole busy timeout."""
    with SearchEngine(tmp_path, busy_timeout=60) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="c", embedder=None))
        corpus.add([Document(id="d0", text="before the fork")])
        with corpus._drop_waiting():  # as drop_corpus does while it waits for the lock
            pid = os.fork()
            if pid == 0:  # the child: a write, at once, then out
                code = 1
                try:
                    if not corpus._sync._lock._yielding:
                        corpus.add([Document(id="child", text="written in the child")])
                        code = 0
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert [hit.source_id for hit in corpus.search("written in the child")] == ["child"]


def test_a_corpus_opened_inside_a_switch_elsewhere_takes_the_new_models_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: a process that opened the corpus between another's switch commit and its
    dropping of the vector file loaded the old model's file, emptied it catching up, and
    kept the empty index with the old length — so it refused every new vector (stored
    degraded) and answered from keywords for its whole life."""
    with (
        SearchEngine(tmp_path, embedder_factory=_two_dims) as first,
        SearchEngine(tmp_path, embedder_factory=_two_dims, busy_timeout=0) as second,
    ):
        first.create_corpus(
            CorpusConfig(name="c", embedder=SentenceTransformerEmbedding(model="a"))
        ).add([Document(id=f"d{i}", text=f"printer paper tray {i}") for i in range(4)])
        first.corpus("c").flush()  # the 32-dimension vector file is on disk
        opened: list[Corpus] = []
        real_drop = DerivedIndexes.drop_vectors

        def drop_after_an_open_elsewhere(self: DerivedIndexes, seq: int) -> None:
            opened.append(second.corpus("c"))  # in the window: committed, file not yet gone
            real_drop(self, seq)

        monkeypatch.setattr(DerivedIndexes, "drop_vectors", drop_after_an_open_elsewhere)
        first.switch_embedder("c", SentenceTransformerEmbedding(model="b"))
        monkeypatch.undo()
        other = opened[0]
        other.add([Document(id="new", text="parcel locker")])  # 48 dimensions, model b
        assert other.stats()["degraded"] == 0
        assert other.search("parcel locker")[0].ranks.dense is not None
        assert first.corpus("c").stats()["vectors"] == 5
