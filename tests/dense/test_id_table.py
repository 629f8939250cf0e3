"""``dense._id_table.IdTable`` against the list + dict it replaces (hypothesis), with
forced hash collisions, and its footprint."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dense import _id_table
from dense._id_table import IdTable

ids_lists = st.lists(st.text(min_size=0, max_size=12), max_size=300)


def _check_against_model(table: IdTable, added: list[str], probes: list[str]) -> None:
    model = {doc_id: label for label, doc_id in enumerate(dict.fromkeys(added))}
    assert len(table) == len(model)
    assert table.tolist() == list(model)
    for doc_id in [*added, *probes]:
        assert table.get(doc_id) == model.get(doc_id)
        assert (doc_id in table) == (doc_id in model)


@settings(max_examples=150, deadline=None)
@given(added=ids_lists, probes=st.lists(st.text(max_size=12), max_size=30))
def test_add_and_get_agree_with_a_dict_across_merges(added: list[str], probes: list[str]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_id_table, "_MERGE_MIN", 3)  # merge every few adds
        table = IdTable()
        for doc_id in added:
            label = table.add(doc_id)
            assert table[label] == doc_id
        _check_against_model(table, added, probes)
        rebuilt = IdTable(table.tolist())  # how a saved index is reopened
        _check_against_model(rebuilt, added, probes)
        for doc_id in probes:  # and it keeps growing after a reopen
            rebuilt.add(doc_id)
        _check_against_model(rebuilt, [*added, *probes], [])


@settings(max_examples=60, deadline=None)
@given(added=ids_lists)
def test_colliding_hashes_are_told_apart_by_the_ids(added: list[str]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_id_table, "hash", lambda text: len(text) % 3, raising=False)
        patch.setattr(_id_table, "_MERGE_MIN", 2)
        table = IdTable()
        for doc_id in added:
            table.add(doc_id)
        _check_against_model(table, added, ["zz", "", "new-id"])
        _check_against_model(IdTable(table.tolist()), added, ["zz"])


batches = st.lists(st.lists(st.text(min_size=0, max_size=6), max_size=40), max_size=12)


@settings(max_examples=150, deadline=None)
@given(batches=batches, collide=st.booleans())
def test_add_all_gives_the_labels_add_would(batches: list[list[str]], collide: bool) -> None:
    """Batches (repeats inside a batch and across batches included) through ``add_all``
    and, on a twin table, id by id through ``add``: same labels, same table."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_id_table, "_MERGE_MIN", 3)
        if collide:
            patch.setattr(_id_table, "hash", lambda text: len(text) % 3, raising=False)
        bulk, single = IdTable(), IdTable()
        for batch in batches:
            labels = bulk.add_all(batch)
            assert labels.tolist() == [single.add(doc_id) for doc_id in batch]
        added = [doc_id for batch in batches for doc_id in batch]
        _check_against_model(bulk, added, ["zz", "new-id"])


def test_a_duplicate_id_in_a_saved_table_is_refused() -> None:
    with pytest.raises(ValueError, match="duplicate id"):
        IdTable(["a", "b", "a"])
    with pytest.MonkeyPatch.context() as patch:  # also when the hashes collide anyway
        patch.setattr(_id_table, "hash", lambda text: 7, raising=False)
        with pytest.raises(ValueError, match="duplicate id"):
            IdTable(["x", "y", "y"])


def test_labels_out_of_range_raise_index_error() -> None:
    table = IdTable(["only"])
    with pytest.raises(IndexError):
        table[1]
    with pytest.raises(IndexError):
        table[-1]


def test_a_reopened_table_holds_about_thirty_bytes_per_short_id() -> None:
    n = 200_000
    table = IdTable(f"s{i}" for i in range(n))
    held = (
        len(table._blob)
        + table._ends.nbytes
        + table._sorted_hashes.nbytes
        + table._sorted_labels.nbytes
    )
    # the list + dict it replaces: ~130 bytes per id (str and int objects, dict slots)
    assert held / n < 40 and not table._recent
    assert table.get("s123456") == 123_456 and table.get("s200000") is None


@settings(max_examples=100, deadline=None)
@given(added=ids_lists, data=st.data(), collide=st.booleans())
def test_a_subset_is_the_table_of_the_chosen_ids_in_their_order(
    added: list[str], data: st.DataObject, collide: bool
) -> None:
    """``subset`` (how a compaction relabels) against building the table afresh, merged
    and recent ids alike; ``copy`` is unchanged by later adds to the original."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_id_table, "_MERGE_MIN", 3)
        patch.setattr(_id_table, "_GATHER_IDS", 4)  # several gathers per subset
        if collide:
            patch.setattr(_id_table, "hash", lambda text: len(text) % 3, raising=False)
        table = IdTable()
        for doc_id in added:
            table.add(doc_id)
        twin = table.copy()
        table.add("added-after-the-copy")
        _check_against_model(twin, added, ["added-after-the-copy"])
        distinct = twin.tolist()
        chosen = data.draw(st.permutations(range(len(distinct))))
        chosen = chosen[: data.draw(st.integers(0, len(chosen)))]
        subset = twin.subset(np.asarray(chosen, dtype=np.int64))
        kept = [distinct[label] for label in chosen]
        _check_against_model(subset, kept, [d for d in distinct if d not in kept])
        subset.add("grows-on")  # and it keeps growing as a store's table does
        _check_against_model(subset, [*kept, "grows-on"], [])
