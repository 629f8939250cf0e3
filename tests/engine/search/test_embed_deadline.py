"""The query embedding's deadline (``engine.search.embed_deadline``).

An embedder that never returns must not hold a search: past ``query_embed_timeout`` the
search is answered from keywords (counted as ``embedder_timeout``); while that call is
still stuck no later search calls the embedder again; once it returns, hybrid answers
resume by themselves. The stalling embedder parks on a ``threading.Event`` that every
test's teardown sets, so no thread outlives its test. Time is asserted only as a
generous bound: "answered long before the embedder lets go".
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from dense import EmbedderUnavailable
from engine import Corpus, CorpusConfig, InvalidArgument, Passage, SearchEngine
from engine.config import SentenceTransformerEmbedding
from engine.search.searcher import Searcher
from tests.support.fakes import HashEmbedder
from tests.support.metrics_support import docs

DEADLINE_S = 2.0  # each stall costs it once; a healthy call (~1 ms) never comes near it
SLACK_S = 10.0  # a loaded 2-core machine, not a tight bound: the stall lasts 60 s
STALL_S = 60.0
QUERY = "alpha bravo"


class StallingEmbedder(HashEmbedder):
    """While ``stall`` is set, each call parks until ``release`` (or ``STALL_S``)."""

    def __init__(self) -> None:
        super().__init__()
        self.stall = False
        self.release = threading.Event()
        self.stalled_calls = 0
        self.raise_error: Exception | None = None
        self._count_lock = threading.Lock()

    def park(self) -> None:
        if self.stall:
            with self._count_lock:
                self.stalled_calls += 1
            self.release.wait(STALL_S)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.park()
        if self.raise_error is not None:
            raise self.raise_error
        return super().embed(texts)


class StallsBeforeTheModel(StallingEmbedder):
    """A query embedder that parks *before* calling ``before_model`` (in its tokeniser,
    say), so the hook fires after the search has stopped waiting; ``returned`` is set
    once such a call has run the hook and returned."""

    def __init__(self) -> None:
        super().__init__()
        self.returned = threading.Event()

    def embed_query(
        self, text: str, *, before_model: Callable[[], object] | None = None
    ) -> npt.NDArray[np.float32]:
        stalled = self.stall
        self.park()
        if before_model is not None:
            before_model()
        row: npt.NDArray[np.float32] = HashEmbedder.embed(self, [text])[0]
        if stalled:
            self.returned.set()
        return row


class Rig:
    def __init__(self, path: Path, embedder: StallingEmbedder, timeout: float | None) -> None:
        self.embedder = embedder
        self.engine = SearchEngine(
            path, embedder_factory=lambda spec: embedder, query_embed_timeout=timeout
        )
        spec = SentenceTransformerEmbedding(model="stalling")
        self.corpus: Corpus = self.engine.create_corpus(CorpusConfig(name="docs", embedder=spec))
        self.corpus.add(docs(5))

    def fallbacks(self, reason: str) -> float:
        return self._sample("tandem_search_fallbacks_total", reason=reason)

    def searches(self, strategy: str) -> float:
        return self._sample("tandem_searches_total", strategy=strategy)

    def _sample(self, name: str, **labels: str) -> float:
        found = self.engine.metrics.registry.get_sample_value(name, {"corpus": "docs", **labels})
        assert found is not None, (name, labels)
        return found

    def close(self) -> None:
        self.embedder.release.set()
        self.engine.close()
        for thread in threading.enumerate():
            if thread.name.startswith("tandem-embed-"):
                thread.join(SLACK_S)  # released: each ends once its call returns


def search_within(corpus: Corpus, seconds: float) -> list[Passage]:
    """``corpus.search(QUERY)`` on a thread of its own; fails if it takes longer than
    ``seconds`` (the test then ends, and its teardown releases the embedder)."""
    answer: list[list[Passage]] = []
    thread = threading.Thread(target=lambda: answer.append(corpus.search(QUERY)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert answer, f"the search was not answered within {seconds} s"
    return answer[0]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path / "engine", StallingEmbedder(), DEADLINE_S)
    yield r
    r.close()


def _hybrid(hits: list[Passage]) -> bool:
    return bool(hits) and all(h.ranks.dense is not None for h in hits)


def test_a_stuck_embedder_is_answered_from_keywords_within_the_deadline(rig: Rig) -> None:
    assert _hybrid(search_within(rig.corpus, SLACK_S))
    rig.embedder.stall = True
    hits = search_within(rig.corpus, DEADLINE_S + SLACK_S)
    assert {h.source_id for h in hits} == {f"d{i}" for i in range(5)}
    assert all(h.ranks.dense is None for h in hits)  # answered from keywords
    assert rig.fallbacks("embedder_timeout") == 1
    assert rig.fallbacks("embedder_error") == 0
    assert rig.searches("keyword") == 1 and rig.searches("hybrid") == 1


def test_while_a_call_is_stuck_later_searches_do_not_call_the_embedder(rig: Rig) -> None:
    rig.embedder.stall = True
    search_within(rig.corpus, DEADLINE_S + SLACK_S)
    assert rig.embedder.stalled_calls == 1
    for _ in range(3):
        hits = search_within(rig.corpus, SLACK_S)
        assert hits and all(h.ranks.dense is None for h in hits)
    assert rig.embedder.stalled_calls == 1  # no new call, no new thread held
    assert rig.fallbacks("embedder_timeout") == 4
    stuck = [t for t in threading.enumerate() if t.name.startswith("tandem-embed-docs")]
    assert len(stuck) == 1


def test_hybrid_answers_resume_once_the_stuck_call_returns(rig: Rig) -> None:
    rig.embedder.stall = True
    search_within(rig.corpus, DEADLINE_S + SLACK_S)
    rig.embedder.stall = False
    rig.embedder.release.set()
    answered = threading.Event()
    for _ in range(int(SLACK_S / 0.01)):  # until the late call's return is seen
        if _hybrid(search_within(rig.corpus, SLACK_S)):
            answered.set()
            break
        answered.wait(0.01)
    assert answered.is_set(), "hybrid answers did not resume"
    assert rig.embedder.stalled_calls == 1
    assert rig.searches("hybrid") == 1


def test_a_hook_that_fires_after_the_deadline_starts_no_keyword_arm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keyword arm is started from the embedding's worker (``before_model``): a call
    that reaches it after its search gave up must not run an arm nobody waits for, on
    a corpus that may be closed by then."""
    arms: list[int] = []
    real_arm = Searcher._sparse_arm

    def counted(self: Searcher, *args: object) -> object:
        arms.append(1)
        return real_arm(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Searcher, "_sparse_arm", counted)
    embedder = StallsBeforeTheModel()
    rig = Rig(tmp_path / "engine", embedder, DEADLINE_S)
    try:
        embedder.stall = True
        hits = search_within(rig.corpus, DEADLINE_S + SLACK_S)
        assert hits and all(h.ranks.dense is None for h in hits)
        assert arms == []  # the keyword answer came from the full cascade, not an arm
        embedder.release.set()
        assert embedder.returned.wait(SLACK_S)  # the hook has run by now
    finally:
        rig.close()  # waits for every keyword arm started
    assert arms == []


def test_a_forked_child_does_not_inherit_the_parents_stuck_call(rig: Rig) -> None:
    """The stuck call's thread stays in the parent: the child would wait for ever for it
    to return, answering from keywords for the rest of its life."""
    rig.embedder.stall = True
    search_within(rig.corpus, DEADLINE_S + SLACK_S)
    rig.embedder.stall = False  # the child's own calls answer
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if _hybrid(rig.corpus.search(QUERY)) else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not _hybrid(search_within(rig.corpus, SLACK_S))  # the parent's call is stuck


@pytest.mark.parametrize("timeout", [None, 30.0], ids=["no-deadline", "deadline"])
def test_an_embedder_that_raises_behaves_as_without_a_deadline(
    tmp_path: Path, timeout: float | None
) -> None:
    rig = Rig(tmp_path / "engine", StallingEmbedder(), timeout)
    try:
        rig.embedder.raise_error = EmbedderUnavailable("injected")
        hits = search_within(rig.corpus, SLACK_S)
        assert hits and all(h.ranks.dense is None for h in hits)
        assert rig.fallbacks("embedder_error") == 1
        assert rig.fallbacks("embedder_timeout") == 0
        rig.embedder.raise_error = RuntimeError("a bug in the embedder")
        with pytest.raises(RuntimeError, match="a bug in the embedder"):
            rig.corpus.search(QUERY)
        rig.embedder.raise_error = None
        assert _hybrid(search_within(rig.corpus, SLACK_S))  # a failure holds nothing back
    finally:
        rig.close()


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "5"])
def test_a_deadline_must_be_a_positive_number_of_seconds(tmp_path: Path, bad: object) -> None:
    with pytest.raises(InvalidArgument, match="query_embed_timeout"):
        SearchEngine(tmp_path, query_embed_timeout=bad)  # type: ignore[arg-type]


def test_by_default_a_search_embeds_in_its_own_thread(tmp_path: Path) -> None:
    """No deadline unless asked for: the worker thread costs every hybrid search a few
    tenths of a millisecond (see ``DEFAULT_QUERY_EMBED_TIMEOUT_S``)."""
    threads: list[str] = []

    class Recording(StallingEmbedder):
        def park(self) -> None:
            threads.append(threading.current_thread().name)

    embedder = Recording()
    with SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as engine:
        spec = SentenceTransformerEmbedding(model="recording")
        corpus = engine.create_corpus(CorpusConfig(name="docs", embedder=spec))
        corpus.add(docs(3))
        threads.clear()
        hits = corpus.search(QUERY)
    assert hits and all(h.ranks.dense is not None for h in hits)
    assert threads == [threading.current_thread().name]


# -- a process exiting while a call it gave up on still runs ------------------------------

_EXIT_SCRIPT = """
import sys, threading, time
from pathlib import Path
from engine import CorpusConfig, Document, SearchEngine
from engine.search import embed_deadline
from tests.support.fakes import HashEmbedder, factory_for

home, marker, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
embed_deadline.EXIT_WAIT_S = 2.0 if mode == "hung" else 60.0

class LateEmbedder(HashEmbedder):
    late = False
    def embed(self, texts):
        if self.late:
            if mode == "hung":
                threading.Event().wait()  # never returns
            time.sleep(1.0)  # slow, as a model loading at the first query is
            marker.write_text("returned")
        return super().embed(texts)

embedder = LateEmbedder()
with SearchEngine(home, embedder_factory=factory_for(embedder), query_embed_timeout=0.05) as e:
    corpus = e.create_corpus(CorpusConfig(name="c", embedder="fake-model"))
    corpus.add([Document(id="a", text="alpha bravo")])
    embedder.late = True
    assert [p.ranks.dense for p in corpus.search("alpha bravo")] == [None]  # from keywords
print("searched")
"""


@pytest.mark.parametrize("mode", ["slow", "hung"])
def test_an_exit_waits_for_a_late_call_but_not_for_ever(tmp_path: Path, mode: str) -> None:
    """Audit: a process that exited while a query embedding it had given up on was still
    running (a model loading at the first search) crashed at exit (SIGSEGV, or abort from
    ONNX Runtime): the interpreter was torn down under the daemon thread. An exit now
    waits for such a call (a slow one returns: its marker is written), and a call that
    never returns holds the exit only ``EXIT_WAIT_S``."""
    root = Path(__file__).resolve().parents[3]
    marker = tmp_path / "marker"
    result = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, str(tmp_path / "home"), str(marker), mode],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert result.returncode == 0, result.stderr
    assert "searched" in result.stdout
    if mode == "slow":
        assert marker.read_text() == "returned"  # the exit waited for the call
    else:
        assert not marker.exists()
        assert "still running after" in result.stderr


class StallsInItsHealthCheck(StallingEmbedder):
    """``is_available()`` parks while ``stall`` is set (an Ollama probe to a server that
    accepts and never answers; a custom check that hangs); ``down`` says no at once."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def is_available(self) -> bool:
        self.park()
        return not self.down


def test_the_deadline_bounds_the_embedders_health_check(tmp_path: Path) -> None:
    # The router asked is_available() in the searching thread, before the deadline began:
    # a search waited as long as the check did (an Ollama probe up to health_timeout_s).
    embedder = StallsInItsHealthCheck()
    rig = Rig(tmp_path / "engine", embedder, DEADLINE_S)
    try:
        assert _hybrid(search_within(rig.corpus, SLACK_S))
        embedder.stall = True
        hits = search_within(rig.corpus, DEADLINE_S + SLACK_S)
        assert hits and all(h.ranks.dense is None for h in hits)
        assert rig.fallbacks("embedder_timeout") == 1
        embedder.stall = False
        embedder.release.set()
        for _ in range(int(SLACK_S / 0.01)):  # the stuck check returns; hybrid resumes
            if _hybrid(search_within(rig.corpus, SLACK_S)):
                break
            embedder.release.wait(0.01)
        embedder.down = True  # a check that answers no: down, as the router counts it
        hits = search_within(rig.corpus, SLACK_S)
        assert hits and all(h.ranks.dense is None for h in hits)
        assert rig.fallbacks("embedder_down") == 1
        gauge = rig.engine.metrics.registry.get_sample_value(
            "tandem_embedder_up", {"corpus": "docs"}
        )
        assert gauge == 0
    finally:
        rig.close()
