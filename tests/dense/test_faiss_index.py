"""FaissIndex with real FAISS: round trips, in-search filters, persistence, threads."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dense import AllowList, FaissIndex, FaissIndexCorrupt, IndexKind
from dense._search import ef_for
from dense._upkeep import GraphUpkeep
from tests.support.unit_vectors import unit_vectors

DIM = 16
FLAT: dict[str, Any] = {"hnsw_threshold": 1_000_000}
# force the graph, even when filtered
HNSW: dict[str, Any] = {"hnsw_threshold": 0, "exact_filter_limit": 0, "build_delay_s": 0}
KINDS = pytest.mark.parametrize("params", [FLAT, HNSW], ids=["flat", "hnsw"])


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    return unit_vectors(rng, n, dim)


def build(params: dict[str, Any], n: int = 500, seed: int = 0) -> tuple[FaissIndex, np.ndarray]:
    vectors = unit(np.random.default_rng(seed), n)
    index = FaissIndex(DIM, **params)
    index.add([f"d{i}" for i in range(n)], vectors)
    assert index.wait_for_graph(timeout=120)
    return index, vectors


def kind_of(index: FaissIndex) -> IndexKind:
    return index.kind  # a call, so the type checker does not narrow across mutations


@KINDS
def test_add_search_finds_each_vector_first(params: dict[str, int]) -> None:
    index, vectors = build(params)
    assert len(index) == 500 and "d7" in index and "nope" not in index
    for i in (0, 7, 499):
        hits = index.search(vectors[i], 5)
        assert hits[0][0] == f"d{i}"
        assert hits[0][1] == pytest.approx(1.0, abs=1e-5)
        scores = [s for _, s in hits]
        assert scores == sorted(scores, reverse=True)


@KINDS
def test_upsert_replaces_and_remove_deletes(params: dict[str, int]) -> None:
    index, vectors = build(params)
    index.add(["d1"], vectors[2] * 3.0)  # upsert: d1 now points where d2 does
    assert len(index) == 500
    top = {doc for doc, _ in index.search(vectors[2], 2)}
    assert top == {"d1", "d2"}
    assert index.search(vectors[1], 1)[0][0] != "d1"

    assert index.remove(["d2", "d2", "missing"]) == 1
    assert "d2" not in index and len(index) == 499
    assert all(doc != "d2" for doc, _ in index.search(vectors[2], 499))
    index.add(["d2"], vectors[2])  # re-adding a removed id works
    assert index.search(vectors[2], 1)[0][1] == pytest.approx(1.0, abs=1e-5)
    assert sorted(index.ids()) == sorted(f"d{i}" for i in range(500))


def test_duplicate_ids_in_one_call_last_wins() -> None:
    rng = np.random.default_rng(1)
    vectors = unit(rng, 2)
    index = FaissIndex(DIM)
    index.add(["a", "a"], vectors)
    assert len(index) == 1
    ((doc, score),) = index.search(vectors[1], 1)
    assert doc == "a" and score == pytest.approx(1.0, abs=1e-5)


@KINDS
def test_filtered_search_returns_k_eligible(params: dict[str, int]) -> None:
    index, vectors = build(params, n=2_000)
    allowed = [f"d{i}" for i in range(0, 2_000, 97)]  # 21 scattered ids
    compiled = index.allow_list(allowed)
    assert isinstance(compiled, AllowList) and len(compiled) == 21
    for allow in (compiled, allowed, iter(allowed)):
        hits = index.search(vectors[5], 10, allow=allow)
        assert len(hits) == 10
        assert {doc for doc, _ in hits} <= set(allowed)
    # k larger than the eligible set returns every eligible vector, best first
    hits = index.search(vectors[5], 50, allow=compiled)
    assert sorted(doc for doc, _ in hits) == sorted(allowed)
    expected = sorted(allowed, key=lambda d: -float(vectors[int(d[1:])] @ vectors[5]))
    assert [doc for doc, _ in hits][:5] == expected[:5]


@KINDS
def test_allow_list_tracks_later_adds_and_removals(params: dict[str, int]) -> None:
    index, vectors = build(params, n=200)
    rng = np.random.default_rng(9)
    allow = index.allow_list(["d1", "d2", "later"])
    assert len(allow) == 2  # "later" is not in the index yet
    index.remove(["d2"])
    assert [doc for doc, _ in index.search(vectors[2], 5, allow=allow)] == ["d1"]
    index.add(["later"], unit(rng, 1))
    assert {doc for doc, _ in index.search(vectors[1], 5, allow=allow)} == {"d1", "later"}
    assert index.search(vectors[1], 5, allow=[]) == []


def test_allow_list_from_another_index_is_rejected() -> None:
    index, vectors = build(FLAT, n=10)
    other, _ = build(FLAT, n=10)
    with pytest.raises(ValueError):
        index.search(vectors[0], 3, allow=other.allow_list(["d1"]))


def test_switches_to_hnsw_at_threshold_and_back_after_removals() -> None:
    rng = np.random.default_rng(3)
    index = FaissIndex(DIM, hnsw_threshold=100)
    index.add([f"a{i}" for i in range(99)], unit(rng, 99))
    assert kind_of(index) is IndexKind.FLAT
    more = unit(rng, 5)
    index.add([f"b{i}" for i in range(5)], more)
    assert index.search(more[0], 1)[0][0] == "b0"  # exact until the graph serves
    assert index.wait_for_graph(timeout=120)
    assert kind_of(index) is IndexKind.HNSW
    assert index.search(more[0], 1)[0][0] == "b0"
    index.remove([f"a{i}" for i in range(50)])
    assert index.search(more[1], 1)[0][0] == "b1"
    assert kind_of(index) is IndexKind.FLAT and len(index) == 54


def _mostly_removed(
    n: int = 10_000, keep: int = 100, before_removal: Any = None
) -> tuple[FaissIndex, np.ndarray, list[int]]:
    """A graph over ``n`` rows of which all but ``keep`` were then removed."""
    rng = np.random.default_rng(9)
    vectors = unit(rng, n)
    index = FaissIndex(DIM, hnsw_threshold=50, build_delay_s=0)
    index.add([f"d{i}" for i in range(n)], vectors)
    assert index.wait_for_graph(timeout=120)
    if before_removal is not None:
        before_removal()
    kept = sorted(int(i) for i in rng.choice(n, keep, replace=False))
    index.remove([f"d{i}" for i in sorted(set(range(n)) - set(kept))])
    return index, vectors, kept


def _exact(vectors: np.ndarray, kept: list[int], q: np.ndarray, k: int) -> list[str]:
    return [f"d{i}" for i in sorted(kept, key=lambda i: -float(vectors[i] @ q))[:k]]


def test_a_mostly_masked_graph_still_answers_k_exact_hits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph is kept (no rebuild, as before the builder gets to it): a graph search
    through 99 % masked rows comes back short, and the index answers exactly instead."""
    index, vectors, kept = _mostly_removed(
        before_removal=lambda: monkeypatch.setattr(GraphUpkeep, "build_due", lambda self: False)
    )
    assert index.kind is IndexKind.HNSW
    found = 0
    queries = unit(np.random.default_rng(10), 20)
    for q in queries:
        hits = index.search(q, 50)
        assert len(hits) == 50
        found += len(set(_exact(vectors, kept, q, 50)) & {doc for doc, _ in hits})
    assert found / (50 * len(queries)) >= 0.95


def test_a_mostly_masked_graph_is_rebuilt() -> None:
    index, vectors, kept = _mostly_removed()
    assert index.wait_for_graph(timeout=120) and not index.graph_pending
    assert index.kind is IndexKind.HNSW and len(index) == len(kept)
    found = 0
    queries = unit(np.random.default_rng(11), 20)
    for q in queries:
        found += len(set(_exact(vectors, kept, q, 50)) & {d for d, _ in index.search(q, 50)})
    assert found / (50 * len(queries)) >= 0.95


@pytest.mark.parametrize("size", [2, 3, 5, 6, 7, 9, 13, 17, 31, 64])
def test_identical_vectors_score_alike_wherever_they_sit(size: int) -> None:
    """Two builds, other insertion orders, the same answer: a matrix product rounds a
    row's score by its position, so twins must be scored row by row before ties go by id."""
    rng = np.random.default_rng(size)
    others = unit(rng, size)
    twin = unit(rng, 1)[0]
    query = unit(rng, 1)[0]
    answers = []
    for at in (0, size // 2, size):  # where one twin is inserted; the other goes last
        index = FaissIndex(DIM, **FLAT)
        ids = [f"o{i}" for i in range(size)]
        vectors = list(others)
        ids.insert(at, "twin-b")
        vectors.insert(at, twin)
        index.add([*ids, "twin-a"], np.vstack([*vectors, twin]))
        answers.append(index.search(query, size + 2))
    assert answers[0] == answers[1] == answers[2]
    order = [doc for doc, _ in answers[0] if doc.startswith("twin")]
    assert order == ["twin-a", "twin-b"]


def test_hnsw_recall_at_10_matches_flat() -> None:
    rng = np.random.default_rng(4)
    vectors = unit(rng, 3_000, dim=32)
    ids = [f"d{i}" for i in range(3_000)]
    flat, hnsw = FaissIndex(32, **FLAT), FaissIndex(32, hnsw_threshold=0)
    flat.add(ids, vectors)
    hnsw.add(ids, vectors)
    assert hnsw.wait_for_graph(timeout=120)
    assert hnsw.kind is IndexKind.HNSW and flat.kind is IndexKind.FLAT
    queries = unit(rng, 100, dim=32)
    found = 0
    for q in queries:
        exact = {doc for doc, _ in flat.search(q, 10)}
        found += len(exact & {doc for doc, _ in hnsw.search(q, 10)})
    assert found / (10 * len(queries)) >= 0.95


@KINDS
def test_save_and_load_round_trip(params: dict[str, int], tmp_path: Path) -> None:
    index, vectors = build(params, n=300)
    index.remove(["d3"])
    path = tmp_path / "dense.idx"
    index.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["dense.idx"]  # no temp files left
    loaded = FaissIndex.load(path)
    assert len(loaded) == 299 and "d3" not in loaded and loaded.kind is index.kind
    assert loaded.hnsw_threshold == index.hnsw_threshold
    for i in (0, 150, 299):
        assert loaded.search(vectors[i], 5) == index.search(vectors[i], 5)
    # labels survive the reopen: an allow-list behaves the same, and ids stay addable
    allow_ids = ["d1", "d2", "d3", "d4"]
    assert loaded.search(vectors[1], 4, allow=allow_ids) == index.search(
        vectors[1], 4, allow=allow_ids
    )
    loaded.add(["d3"], vectors[3])
    assert loaded.search(vectors[3], 1)[0][0] == "d3"


def test_save_overwrites_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "dense.idx"
    small, _ = build(FLAT, n=5)
    small.save(path)
    big, _ = build(FLAT, n=50)

    def crash(src: str, dst: str) -> None:
        raise OSError("disk pulled mid-save")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        big.save(path)
    monkeypatch.undo()
    assert len(FaissIndex.load(path)) == 5  # the old file is intact
    assert [p.name for p in tmp_path.iterdir()] == ["dense.idx"]


@KINDS
@pytest.mark.parametrize("damage", ["truncate", "flip", "flip_tail", "empty", "magic", "append"])
def test_corrupt_files_are_detected(params: dict[str, int], damage: str, tmp_path: Path) -> None:
    index, _ = build(params, n=100)
    path = tmp_path / "dense.idx"
    index.save(path)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "flip_tail":  # inside the HNSW structure, when there is one
        data[-20] ^= 0xFF
    elif damage == "empty":
        data = bytearray()
    elif damage == "magic":
        data[:8] = b"NOTFAISS"
    else:
        data += b"\0"
    path.write_bytes(bytes(data))
    with pytest.raises(FaissIndexCorrupt):
        FaissIndex.load(path)


@KINDS
def test_concurrent_searches_while_one_writer_adds(params: dict[str, int]) -> None:
    index, vectors = build(params, n=300)
    rng = np.random.default_rng(5)
    new_vectors = unit(rng, 400)
    allow = index.allow_list([f"d{i}" for i in range(0, 300, 3)])
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader(seed: int) -> None:
        local = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                q = vectors[int(local.integers(300))]
                hits = index.search(q, 10)
                assert len(hits) == 10
                assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
                filtered = index.search(q, 5, allow=allow)
                assert len(filtered) == 5 and all(int(d[1:]) % 3 == 0 for d, _ in filtered)
        except BaseException as exc:  # report any failure to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for start in range(0, 400, 20):
        index.add([f"n{i}" for i in range(start, start + 20)], new_vectors[start : start + 20])
        index.remove([f"n{start}"])  # keeps HNSW rebuilding under the readers' feet
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len(index) == 300 + 400 - 20


def test_bad_arguments_raise_value_error() -> None:
    index, vectors = build(FLAT, n=10)
    with pytest.raises(ValueError):
        FaissIndex(0)
    with pytest.raises(ValueError):
        FaissIndex(DIM, hnsw_m=1)
    with pytest.raises(ValueError):
        index.add(["x"], np.ones((1, DIM + 1), dtype=np.float32))
    with pytest.raises(ValueError):
        index.add(["x", "y"], unit(np.random.default_rng(0), 1))
    with pytest.raises(ValueError):
        index.add(["x"], np.zeros((1, DIM), dtype=np.float32))
    with pytest.raises(ValueError):
        index.add(["x"], np.full((1, DIM), np.nan, dtype=np.float32))
    with pytest.raises(ValueError):
        index.search(vectors[0], 0)
    with pytest.raises(ValueError):
        index.search(vectors[:2], 3)
    for single in ("d1", b"d1"):  # one id where a collection belongs, not "d" and "1"
        with pytest.raises(ValueError, match="single string"):
            index.remove(single)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="single string"):
            index.search(vectors[0], 3, allow=single)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="single string"):
            index.add(single, unit(np.random.default_rng(0), 2))  # type: ignore[arg-type]
    assert len(index) == 10


def test_a_finite_vector_too_long_for_float32_arithmetic_keeps_its_direction() -> None:
    index = FaissIndex(4, **FLAT)
    index.add(["big", "y"], np.array([[3e19, 1, 0, 0], [0, 1, 0, 0]], dtype=np.float32))
    hits = index.search(np.array([1e30, 0, 0, 0], dtype=np.float32), 2)
    assert hits[0][0] == "big" and hits[0][1] == pytest.approx(1.0)
    assert hits[1] == ("y", pytest.approx(0.0, abs=1e-6))


def test_scores_no_unit_vectors_can_have_never_lead_an_answer() -> None:
    index = FaissIndex(4, **FLAT)
    index.add(["a", "b"], np.eye(4, dtype=np.float32)[:2])
    index._store.tail[0] = np.float32(1e20)  # "a", as a damaged mapped file would read
    assert [doc for doc, _ in index.search(np.ones(4, dtype=np.float32), 2)] == ["b"]


def test_empty_index_searches_to_nothing(tmp_path: Path) -> None:
    index = FaissIndex(DIM)
    index.add([], [])
    index.add([], np.zeros((0, DIM), dtype=np.float32))
    q = unit(np.random.default_rng(0), 1)[0]
    assert index.search(q, 5) == [] and index.search(q, 5, allow=["a"]) == []
    index.save(tmp_path / "empty.idx")
    assert len(FaissIndex.load(tmp_path / "empty.idx")) == 0


ops = st.lists(
    st.tuples(st.sampled_from(["add", "remove"]), st.lists(st.integers(0, 30), max_size=6)),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(operations=ops, threshold=st.sampled_from([0, 10, 1_000]))
def test_matches_a_dict_model(operations: list[tuple[str, list[int]]], threshold: int) -> None:
    """After any add/remove sequence the index holds exactly the model's ids and vectors."""
    rng = np.random.default_rng(7)
    index = FaissIndex(DIM, hnsw_threshold=threshold)
    model: dict[str, np.ndarray] = {}
    for op, numbers in operations:
        ids = [f"k{n}" for n in numbers]
        if op == "add":
            vectors = unit(rng, len(ids))
            index.add(ids, vectors)
            model.update(zip(ids, vectors, strict=True))
        else:
            assert index.remove(ids) == len({i for i in ids if i in model})
            for i in ids:
                model.pop(i, None)
    assert len(index) == len(model) and sorted(index.ids()) == sorted(model)
    for doc_id, vector in model.items():
        ((doc, score),) = index.search(vector, len(model), allow=[doc_id, "k999"])
        assert doc == doc_id and score == pytest.approx(1.0, abs=1e-5)
    if model:
        everything = index.search(next(iter(model.values())), len(model) + 5, allow=list(model))
        assert sorted(doc for doc, _ in everything) == sorted(model)


def test_save_and_load_stream_rather_than_copy_the_vectors(tmp_path: Path) -> None:
    """Saving writes from the live arrays and loading maps the file: neither holds a second
    copy of the vectors in memory (a million 384-d vectors are 1.5 GB)."""
    import tracemalloc

    rows, dim = 20_000, 384
    vectors = unit(np.random.default_rng(7), rows, dim)
    index = FaissIndex(dim, **FLAT)
    index.add([f"d{i}" for i in range(rows)], vectors)
    path = tmp_path / "big.faiss"
    vector_bytes = vectors.nbytes
    tracemalloc.start()
    try:
        index.save(path)
        _, save_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        before_load, _ = tracemalloc.get_traced_memory()
        loaded = FaissIndex.load(path)
        _, load_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert save_peak < vector_bytes // 4, save_peak
    # the loaded index keeps one copy (its own matrix, plus FAISS's); the file is not read
    # into memory on top of that
    assert load_peak - before_load < 2.5 * vector_bytes, load_peak - before_load
    assert loaded.search(vectors[123], 1)[0][0] == "d123"


def test_ef_search_grows_with_the_graph_and_the_window() -> None:
    index = FaissIndex(DIM, ef_search=128)
    assert index.effective_ef(1_000) == index.effective_ef(100_000) == 128
    grown = [index.effective_ef(n) for n in (200_000, 1_000_000, 10_000_000)]
    assert 128 < grown[0] < grown[1] <= grown[2] == 1_024  # capped
    assert 700 <= grown[1] <= 900  # measured need at a million: ~768 for recall 0.96
    index.adaptive_ef = False
    assert index.effective_ef(1_000_000) == 128
    assert ef_for(128, 100) == 200  # a deep window searches at least 2k deep
    assert ef_for(128, 10) == 128


@pytest.mark.parametrize("older", [1, 2])
def test_a_file_of_an_older_format_says_so(tmp_path: Path, older: int) -> None:
    # Formats 1 and 2 began with the magic and their version; the reason said "not a
    # Tandem FAISS index (bad magic)", as for a file of some other program.
    path = tmp_path / "vectors.faiss"
    path.write_bytes(b"TNDMFAIS" + older.to_bytes(4, "little") + os.urandom(200))
    with pytest.raises(FaissIndexCorrupt, match=f"older version \\(format {older}, not 3\\)"):
        FaissIndex.load(path)
    path.write_bytes(os.urandom(212))
    with pytest.raises(FaissIndexCorrupt, match="bad magic"):
        FaissIndex.load(path)
