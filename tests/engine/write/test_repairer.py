"""The background repairer never sits out another process's write: it leaves that corpus
to its next pass, so stopping it (and closing the engine) does not wait for the write."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from engine import CorpusConfig, EngineBusy, SearchEngine
from engine.write.repairer import LOCK_WAIT_S, BackgroundRepairer
from tests.support.fakes import HashEmbedder, SwitchableEmbedder
from tests.support.metrics_support import docs


class _Busy:
    """A corpus whose write lock another process holds: records how long it was asked to
    wait, then reports the lock taken."""

    name = "busy"

    def __init__(self) -> None:
        self.waits: list[float | None] = []

    def repair(
        self,
        batch_size: int = 256,
        *,
        max_documents: int | None = None,
        lock_wait_s: float | None = None,
    ) -> int:
        self.waits.append(lock_wait_s)
        raise EngineBusy("another write held the lock")


def test_a_pass_waits_briefly_for_a_busy_corpus_and_goes_on_to_the_next(tmp_path: Path) -> None:
    embedder = SwitchableEmbedder(HashEmbedder())
    with SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="docs"))
        embedder.down = True
        corpus.add(docs(4))
        embedder.down = False
        busy = _Busy()
        repairer = BackgroundRepairer(lambda: [busy, corpus], batch_size=10)
        assert repairer.run_once() == 4  # the busy corpus skipped, the next one healed
        assert busy.waits == [LOCK_WAIT_S] and LOCK_WAIT_S <= 1.0


def test_a_corpus_another_engine_is_writing_is_left_for_the_next_pass(tmp_path: Path) -> None:
    embedder = SwitchableEmbedder(HashEmbedder())
    with (
        SearchEngine(tmp_path, embedder_factory=lambda spec: embedder, busy_timeout=60) as mine,
        SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as other,
    ):
        corpus = mine.create_corpus(CorpusConfig(name="docs"))
        embedder.down = True
        corpus.add(docs(3))
        embedder.down = False
        repairer = BackgroundRepairer(lambda: [corpus], batch_size=10)
        with other.corpus("docs")._sync.writing():  # another process's write under way
            assert repairer.run_once() == 0  # not 60 s of waiting, and no error
        assert repairer.run_once() == 3


class _BuggyEmbedder(SwitchableEmbedder):
    """Raises a plain error (not ``EmbedderUnavailable``) while ``buggy``: a custom
    embedder's bug, which ``add`` propagates but the repairer must survive."""

    buggy = False

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self.buggy:
            raise RuntimeError("bug in a custom embedder")
        return super().embed(texts)


def test_an_embedder_bug_fails_a_pass_not_the_repairer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = _BuggyEmbedder(HashEmbedder())
    with SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="docs"))
        embedder.down = True
        corpus.add(docs(3))
        embedder.down = False
        embedder.buggy = True
        repairer = BackgroundRepairer(lambda: [corpus], batch_size=10, interval_s=0.01)
        repairer.start()
        try:
            deadline = time.monotonic() + 60
            while repairer.passes < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert repairer.running and repairer.passes >= 3 and repairer.healed == 0
            assert "RuntimeError" in caplog.text and "bug in a custom" not in caplog.text
            embedder.buggy = False
            while repairer.healed < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert repairer.healed == 3
        finally:
            repairer.stop()
