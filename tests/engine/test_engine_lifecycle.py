"""SearchEngine: create, list, reopen, drop, directory lock, name grammar."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from engine import (
    CorpusConfig,
    CorpusExists,
    CorpusNotFound,
    Document,
    InvalidArgument,
    OllamaEmbedding,
    SearchEngine,
    SentenceTransformerEmbedding,
    StorageError,
)
from engine.config import EmbedderSpec
from engine.storage import DocumentStore
from tests.support.fakes import HashEmbedder, SlowHealthEmbedder


def test_create_list_reopen_drop(tmp_path: Path) -> None:
    with SearchEngine(tmp_path) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="kw", embedder=None))
        corpus.add([Document(id="d1", title="Tandem bicycles", text="Two riders, one frame.")])
        assert eng.corpus("kw") is corpus
        with pytest.raises(CorpusExists):
            eng.create_corpus(CorpusConfig(name="kw", embedder=None))
    with SearchEngine(tmp_path) as eng:
        assert eng.list_corpora() == ["kw"]
        assert eng.corpus("kw").config.embedder is None
        assert eng.corpus("kw").search("bicycles")[0].source_id == "d1"
        eng.drop_corpus("kw")
        assert eng.list_corpora() == []
        with pytest.raises(CorpusNotFound):
            eng.corpus("kw")
        with pytest.raises(CorpusNotFound):
            eng.drop_corpus("kw")


def test_a_corpus_closed_by_its_caller_is_opened_anew_by_the_engine(tmp_path: Path) -> None:
    """Regression: ``engine.corpus(name)`` kept handing out the closed object, so once a
    caller closed a corpus no call through that engine could use it again."""
    with SearchEngine(tmp_path) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="kw", embedder=None))
        corpus.add([Document(id="d1", title="Tandem bicycles", text="Two riders, one frame.")])
        corpus.close()
        with pytest.raises(StorageError, match="is closed"):
            corpus.search("bicycles")  # the closed object stays closed
        reopened = eng.corpus("kw")
        assert reopened is not corpus and eng.corpus("kw") is reopened
        assert reopened.search("bicycles")[0].source_id == "d1"
        reopened.add([Document(id="d2", text="A third rider.")])
    with SearchEngine(tmp_path) as eng:
        assert len(eng.corpus("kw")) == 2  # the reopened object's write was kept


@pytest.mark.parametrize("name", ["../evil", "a/b", "..", ".hidden", "UPPER", "", "x" * 65, "a b"])
def test_corpus_names_cannot_escape_the_root(tmp_path: Path, name: str) -> None:
    with SearchEngine(tmp_path / "root") as eng:
        with pytest.raises((InvalidArgument, CorpusNotFound)):
            eng.corpus(name)
        with pytest.raises(ValidationError):
            CorpusConfig(name=name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]


def test_a_second_process_and_a_second_engine_share_the_directory(tmp_path: Path) -> None:
    with SearchEngine(tmp_path) as first:
        first.create_corpus(CorpusConfig(name="kw", embedder=None)).add(
            [Document(id="d1", title="Tandem bicycles", text="Two riders, one frame.")]
        )
        code = (
            "import sys\n"
            "from engine import Document, SearchEngine\n"
            f"with SearchEngine({str(tmp_path)!r}) as engine:\n"
            "    corpus = engine.corpus('kw')\n"
            "    assert corpus.search('bicycles')[0].source_id == 'd1'\n"
            "    corpus.add([Document(id='d2', text='Written by another process.')])\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=Path(__file__).parents[2], timeout=120, check=False
        )
        assert done.returncode == 0
        assert first.corpus("kw").search("another process")[0].source_id == "d2"
        with SearchEngine(tmp_path) as second:  # a second engine in this process too
            assert len(second.corpus("kw")) == 2


def test_config_is_frozen_and_strict() -> None:
    config = CorpusConfig(name="docs", embedder="all-MiniLM-L6-v2")
    assert config.embedder == SentenceTransformerEmbedding(model="all-MiniLM-L6-v2")
    assert CorpusConfig(name="docs").embedder == SentenceTransformerEmbedding()
    with pytest.raises(ValidationError):
        config.rrf_k = 1  # type: ignore[misc]
    with pytest.raises(ValidationError):
        CorpusConfig(name="docs", mode="hybrid")  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        CorpusConfig(name="docs", rrf_k=0)
    with pytest.raises(ValidationError):
        CorpusConfig(name="docs", weights={"sparse": -1})
    with pytest.raises(ValidationError, match="unknown analyzer"):
        CorpusConfig(name="docs", languages={1: "klingon"})
    ollama = CorpusConfig(name="docs", embedder=OllamaEmbedding(model="nomic-embed-text"))
    again = CorpusConfig.model_validate_json(ollama.model_dump_json())
    assert again == ollama


def test_closed_engine_refuses_work(tmp_path: Path) -> None:
    eng = SearchEngine(tmp_path)
    eng.close()
    eng.close()  # idempotent
    with pytest.raises(InvalidArgument):
        eng.list_corpora()


def test_a_drop_that_never_finished_deleting_does_not_come_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drop's deletion fails (or the process dies) after the directory was renamed
    out of the way: a corpus created under the same name starts empty and works."""
    with SearchEngine(tmp_path) as engine:
        engine.create_corpus(CorpusConfig(name="c", embedder=None)).add(
            [Document(id="old", text="the old corpus")]
        )
        with monkeypatch.context() as patch:
            patch.setattr("engine.engine.shutil.rmtree", lambda *args, **kwargs: None)
            engine.drop_corpus("c")
        assert engine.list_corpora() == []
        leftovers = [p.name for p in (tmp_path / "corpora").iterdir()]
        assert len(leftovers) == 1 and leftovers[0].startswith(".dropped-c-")
        fresh = engine.create_corpus(CorpusConfig(name="c", embedder=None))
        assert [p.name for p in (tmp_path / "corpora").iterdir()] == ["c"]  # swept
        assert len(fresh) == 0
        fresh.add([Document(id="new", text="the new corpus")])
        assert [hit.source_id for hit in fresh.search("corpus")] == ["new"]


def test_a_create_that_crashed_before_its_config_starts_clean(tmp_path: Path) -> None:
    with SearchEngine(tmp_path) as engine:
        engine.create_corpus(CorpusConfig(name="c", embedder=None)).add(
            [Document(id="old", text="left behind")]
        )
    (tmp_path / "corpora" / "c" / "config.json").unlink()  # as if its create had crashed
    with SearchEngine(tmp_path) as engine:
        assert engine.list_corpora() == []
        fresh = engine.create_corpus(CorpusConfig(name="c", embedder=None))
        assert len(fresh) == 0 and fresh.search("left behind") == []


def test_nothing_starts_while_the_engine_closes(tmp_path: Path) -> None:
    """close() stops the repairer and the metrics servers, then waits: a start in that
    window would outlive the engine."""
    before = set(threading.enumerate())  # an earlier test's leftovers are not this test's
    engine = SearchEngine(tmp_path)
    refused: list[str] = []
    real_close = engine.metrics.close

    def close_metrics() -> None:  # runs inside close(), after it took the threads out
        for start in (engine.start_repairer, lambda: engine.serve_metrics(port=0)):
            try:
                start()
            except InvalidArgument as exc:
                refused.append(str(exc))
        real_close()

    engine.metrics.close = close_metrics  # type: ignore[method-assign]
    engine.close()
    assert refused == ["this SearchEngine is closing"] * 2
    assert not any(
        t.name.startswith(("tandem-repairer", "tandem-metrics"))
        for t in threading.enumerate()
        if t not in before
    )


def test_a_corpus_dropped_while_it_opens_is_not_found_not_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's drop may rename the directory away between this engine's check
    for the corpus and its open: that corpus is absent (404 over HTTP), not a failed disk
    (507, with the server's file paths in the message)."""
    with SearchEngine(tmp_path) as first, SearchEngine(tmp_path) as second:
        first.create_corpus(CorpusConfig(name="c", embedder=None))
        real_open = SearchEngine._open

        def open_after_a_drop_elsewhere(self: SearchEngine, config: Any, directory: Path) -> Any:
            first.drop_corpus("c")
            return real_open(self, config, directory)

        monkeypatch.setattr(SearchEngine, "_open", open_after_a_drop_elsewhere)
        with pytest.raises(CorpusNotFound):
            second.corpus("c")


def test_a_storage_error_answer_names_no_server_path() -> None:
    from engine import StorageError
    from engine.surfaces.http.errors import engine_error

    answer = engine_error(StorageError("storage I/O failed: /srv/data/corpora/c/write.lock"))
    assert answer.status_code == 507 and "/srv" not in answer.message


def test_a_drop_waits_for_the_searches_in_flight_then_refuses_new_ones(tmp_path: Path) -> None:
    """Regression: a drop closed the corpus's SQLite connections under searches running in
    other threads (a segfault in a server); later calls failed as storage errors (507)."""
    embedder = SlowHealthEmbedder()
    with SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="c"))
        corpus.add([Document(id=f"d{i}", text=f"alpha beta {i}") for i in range(5)])
        answers: list[object] = []
        embedder.park_health = True
        search = threading.Thread(target=lambda: answers.append(corpus.search("alpha")))
        search.start()
        assert embedder.in_health.wait(60)
        drop = threading.Thread(target=engine.drop_corpus, args=("c",))
        drop.start()
        drop.join(0.2)
        assert drop.is_alive()  # waiting for the search in flight
        embedder.let_go.set()
        search.join(60)
        drop.join(60)
        assert not drop.is_alive()
        assert len(answers) == 1 and isinstance(answers[0], list) and len(answers[0]) == 5
        for call in (lambda: corpus.search("alpha"), lambda: len(corpus), corpus.stats):
            with pytest.raises(CorpusNotFound, match="dropped"):
                call()
        assert engine.list_corpora() == []


def test_a_corpus_object_dropped_and_recreated_elsewhere_touches_nothing_new(
    tmp_path: Path,
) -> None:
    """Regression: a thread that had not used a corpus object yet opened the store by
    path — after a drop and re-create elsewhere, the new corpus's: it answered with its
    documents, acknowledged a write it then lost, and closing the old object saved the
    old vectors over the new corpus's."""
    embedder = HashEmbedder()
    with (
        SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as mine,
        SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as other,
    ):
        old = mine.create_corpus(CorpusConfig(name="c"))
        old.add([Document(id="old", text="zebra in the old corpus")])
        other.drop_corpus("c")
        new = other.create_corpus(CorpusConfig(name="c"))
        new.add([Document(id="new", text="zebra in the new corpus")])
        new.flush()
        marker = tmp_path / "corpora" / "c" / "vectors.seq"
        saved = marker.read_text()
        results: list[object] = []

        def from_a_new_thread() -> None:
            for call in (
                lambda: old.search("zebra"),
                lambda: old.add([Document(id="lost", text="zebra acknowledged")]),
                lambda: len(old),
            ):
                try:
                    results.append(call())
                except CorpusNotFound as exc:
                    results.append(exc)

        thread = threading.Thread(target=from_a_new_thread)
        thread.start()
        thread.join(60)
        assert len(results) == 3 and all(isinstance(r, CorpusNotFound) for r in results)
        closer = threading.Thread(target=old.close)
        closer.start()
        closer.join(60)
        assert marker.read_text() == saved  # the old object saved nothing over the new
        assert [h.source_id for h in new.search("zebra")] == ["new"]
        assert [h.ranks.dense for h in new.search("zebra")] == [1]
    with SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as fresh:
        hits = fresh.corpus("c").search("zebra")
        assert [(h.source_id, h.ranks.dense) for h in hits] == [("new", 1)]


def test_a_drop_that_died_after_marking_the_store_is_finished_not_half_alive(
    tmp_path: Path,
) -> None:
    """A drop that died between marking the store and moving the directory away left a
    corpus that was listed and opened but answered 'dropped', and could not be created."""
    from engine.write.sync import mark_dropped

    with SearchEngine(tmp_path) as engine:
        engine.create_corpus(CorpusConfig(name="c", embedder=None)).add(
            [Document(id="old", text="left behind")]
        )
        engine.create_corpus(CorpusConfig(name="d", embedder=None))
    mark_dropped(tmp_path / "corpora" / "c", 10)  # and then the dropping process died
    mark_dropped(tmp_path / "corpora" / "d", 10)
    with SearchEngine(tmp_path) as engine:
        assert engine.list_corpora() == []
        with pytest.raises(CorpusNotFound):
            engine.corpus("c")
        assert not (tmp_path / "corpora" / "c").exists()  # the drop finished
        fresh = engine.create_corpus(CorpusConfig(name="d", embedder=None))
        assert len(fresh) == 0 and fresh.search("left") == []
        assert engine.list_corpora() == ["d"]


def test_a_drop_killed_before_its_change_bump_is_still_seen_by_open_corpora(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: an open corpus learns of a drop only through the store's change
    counter. A drop killed after marking the store and before the bump, finished later by
    another engine, left the open object answering from the deleted store. The counter
    is odd from just before the drop's commit (a sequence lock), so the open corpus sees
    the drop at once even though the drop never moved the counter on."""
    from engine.storage.change_counter import ChangeCounter
    from engine.write.sync import mark_dropped

    with SearchEngine(tmp_path) as reader:
        open_corpus = reader.create_corpus(CorpusConfig(name="c", embedder=None))
        open_corpus.add([Document(id="secret", text="left behind")])
        assert [h.source_id for h in open_corpus.search("left behind")] == ["secret"]
        with monkeypatch.context() as patched:  # killed right after its COMMIT
            patched.setattr(ChangeCounter, "end_commit", lambda self: None)
            patched.setattr(ChangeCounter, "bump", lambda self: None)
            mark_dropped(tmp_path / "corpora" / "c", 10)
        with pytest.raises(CorpusNotFound):
            open_corpus.search("left behind")
        with SearchEngine(tmp_path) as finisher, pytest.raises(CorpusNotFound):
            finisher.corpus("c")  # finishes the drop
        with pytest.raises(CorpusNotFound):
            open_corpus.search("left behind")


def test_finishing_a_dead_drop_never_removes_a_corpus_created_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: ``corpus()`` saw a drop mark, waited for the root's lock while the
    dropping process finished and created the corpus anew, then removed the new one."""
    from engine.write.sync import mark_dropped

    with SearchEngine(tmp_path) as mine, SearchEngine(tmp_path) as other:
        other.create_corpus(CorpusConfig(name="c", embedder=None))
        mark_dropped(tmp_path / "corpora" / "c", 10)  # a drop under way in `other`
        real = SearchEngine._engine_writing

        def other_finishes_and_recreates_first(self: SearchEngine) -> Any:
            if self is mine:
                other.drop_corpus("c")
                other.create_corpus(CorpusConfig(name="c", embedder=None)).add(
                    [Document(id="new", text="created since")]
                )
            return real(self)

        monkeypatch.setattr(SearchEngine, "_engine_writing", other_finishes_and_recreates_first)
        reopened = mine.corpus("c")
        monkeypatch.undo()
        assert [hit.source_id for hit in reopened.search("created since")] == ["new"]
        assert other.list_corpora() == ["c"]


def test_an_unusable_path_is_an_engine_error(tmp_path: Path) -> None:
    """Regression: a file where the directory should be raised NotADirectoryError and a
    path of the wrong type TypeError, past the engine's own error types."""
    afile = tmp_path / "afile"
    afile.write_text("not a directory", "utf-8")
    with pytest.raises(StorageError, match=r"cannot open .*afile as an engine directory"):
        SearchEngine(afile)
    with pytest.raises(StorageError, match="cannot open"):
        SearchEngine(afile / "below")
    with pytest.raises(InvalidArgument, match="path must be"):
        SearchEngine(None)  # type: ignore[arg-type]


def test_a_drop_is_not_starved_by_this_process_writing_back_to_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: the write lock has no queue, so a thread adding back to back took it
    again each time it let go, and a drop from another thread failed with EngineBusy
    after the busy timeout (or, getting the lock, waited that long for the add queued on
    it, which then failed with EngineBusy too). Writes now wait behind a drop."""
    with SearchEngine(tmp_path, busy_timeout=10) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="c", embedder=None))
        writing, ended = threading.Event(), []

        def write_back_to_back() -> None:
            written = 0
            while True:
                try:
                    corpus.add([Document(id=f"d{written % 5}", text=f"alpha {written}")])
                except Exception as exc:
                    ended.append(exc)
                    return
                written += 1
                if written == 20:
                    writing.set()

        writer = threading.Thread(target=write_back_to_back)
        writer.start()
        try:
            assert writing.wait(60)
            with caplog.at_level("WARNING", logger="engine.lifetime"):
                engine.drop_corpus("c")
        finally:
            writer.join(60)
        assert [type(exc) for exc in ended] == [CorpusNotFound]
        assert "still running" not in caplog.text
        assert "c" not in engine.list_corpora()


def _model_builder() -> tuple[list[str], Callable[[EmbedderSpec], HashEmbedder]]:
    """A factory building a fake model per spec, and the list of the models it built."""
    built: list[str] = []

    def factory(spec: EmbedderSpec) -> HashEmbedder:
        assert isinstance(spec, SentenceTransformerEmbedding)
        built.append(spec.model)
        return HashEmbedder(dimension=8, name=spec.model)

    return built, factory


def test_models_of_dropped_or_switched_away_corpora_are_let_go(tmp_path: Path) -> None:
    """Regression: the engine kept every model it had built, for every spec ever used,
    after the corpora using them were dropped (400 create/drop cycles with a model each
    left 200 models held; a loaded MiniLM is ~100 MB). Shared models stay while in use."""
    built, factory = _model_builder()

    with SearchEngine(tmp_path, embedder_factory=factory) as engine:
        models = engine._embedders._models  # what the engine holds
        for i in range(5):
            spec = SentenceTransformerEmbedding(model=f"m{i}")
            engine.create_corpus(CorpusConfig(name=f"c{i}", embedder=spec)).add(
                [Document(id="a", text="alpha words")]
            )
            engine.drop_corpus(f"c{i}")
        assert len(models) == 0
        shared = SentenceTransformerEmbedding(model="shared")
        engine.create_corpus(CorpusConfig(name="one", embedder=shared))
        two = engine.create_corpus(CorpusConfig(name="two", embedder=shared))
        engine.drop_corpus("one")
        assert len(models) == 1  # "two" still uses it
        two.add([Document(id="a", text="alpha words")])
        engine.switch_embedder("two", SentenceTransformerEmbedding(model="next"))
        assert len(models) == 1 and built[-1] == "next"  # "shared" let go, "next" kept
        assert [h.source_id for h in two.search("alpha words")] == ["a"]
        assert two.search("alpha words")[0].ranks.dense is not None  # "next" embeds


def test_a_drop_during_a_switch_keeps_the_model_switched_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by review: the model a switch fetched is named by no corpus's config until
    the switch has dropped the old vectors (seconds on a large corpus); a drop of another
    corpus meanwhile let it go, and the next corpus on that model built a second one."""
    built, factory = _model_builder()

    with SearchEngine(tmp_path, embedder_factory=factory) as engine:
        engine.create_corpus(CorpusConfig(name="a", embedder=None))
        first = SentenceTransformerEmbedding(model="x")
        engine.create_corpus(CorpusConfig(name="b", embedder=first)).add(
            [Document(id="d", text="alpha words")]
        )
        real = DocumentStore.mark_all_degraded
        drops = iter(["a"])

        def drop_meanwhile(store: DocumentStore) -> int:
            for name in drops:
                engine.drop_corpus(name)
            return real(store)

        monkeypatch.setattr(DocumentStore, "mark_all_degraded", drop_meanwhile)
        engine.switch_embedder("b", SentenceTransformerEmbedding(model="y"))
        engine.create_corpus(
            CorpusConfig(name="c", embedder=SentenceTransformerEmbedding(model="y"))
        )
        assert built.count("y") == 1  # one model, shared by b and c
