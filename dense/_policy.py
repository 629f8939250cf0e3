"""When a ``FaissIndex`` rebuilds its graph, compacts without one, and how deep it searches.

Rebuild. With a graph, rows added since it was built form the tail (searched exactly)
and replaced or removed rows are masked out of it. Once the tail and the masked rows
together exceed a tenth of the graph (at least ``REBUILD_MIN``), or half the graph is
masked however few rows that is, the next graph is built in the background; its install
compacts the rows and the id table (``dense._vector_store``).

Compaction without a graph. Replaced and removed rows are compacted away in place once
they outnumber the live rows and number at least ``COMPACT_MIN``, so a small corpus that
keeps being updated does not grow.

Depth. efSearch grows with the graph past ``EF_BASE_ROWS`` (``effective_ef``).
"""

from __future__ import annotations

import math

from dense._vector_store import VectorStore

REBUILD_MIN = 10_000  # pending rows (tail, retired or not, + masked) before a rebuild ...
REBUILD_DIVISOR = 10  # ... or a tenth of the graph, whichever is larger; and whenever
MASKED_DIVISOR = 2  # half of the graph's rows are retired, however few that is
MAX_DELAYS = 300  # a build waits for a quiet moment at most this many build delays
EF_BASE_ROWS = 100_000  # adaptive efSearch: ef_search up to this many graph rows, then
EF_GROWTH = 0.8  # grows as (rows / base) ** growth (807 at 1M from 128), up to
EF_MAX = 1_024  # this (measured: recall@10 0.979 at 100k/ef 128, 0.962 at 1M/ef 768)
COMPACT_MIN = 1_024  # without a graph: retired rows held before they are compacted,
# once they also outnumber the live ones (see ``compaction_due``)


def build_due(store: VectorStore, graph_rows: int | None, wants_graph: bool) -> bool:
    """Whether a (new) graph should be built; ``graph_rows``: the serving graph's rows,
    ``None`` without one."""
    if not wants_graph:
        return False
    if graph_rows is None:
        return True
    # Every tail row held counts, retired ones too: each is kept and scored until a
    # build's ``install`` compacts it (counting live ones only, a graph whose few
    # documents were updated over and over grew its tail for good).
    pending = store.tail_size + store.retired_base
    if store.retired_base * MASKED_DIVISOR >= graph_rows:
        return True  # mostly masked: a graph search walks dead rows and comes back short
    return pending >= max(REBUILD_MIN, graph_rows // REBUILD_DIVISOR)


def compaction_due(store: VectorStore, wants_graph: bool, builder_closed: bool) -> bool:
    """Without a graph, retired rows are compacted only here (``install`` never runs
    below the threshold). Compact once they number at least ``COMPACT_MIN`` and
    outnumber the live rows: each compaction copies the live rows, which at least as
    many retirements paid for since the last one (amortised O(1) per write), and at
    most ``live + max(live, COMPACT_MIN)`` rows are ever held. Not while a graph is
    wanted and the builder runs: its build's ``install`` compacts, and compacting now
    would void the build (the index's ``_layout``)."""
    retired = store.retired_rows
    if retired < COMPACT_MIN or retired <= store.size:
        return False
    return not wants_graph or builder_closed


def effective_ef(ef_search: int, adaptive: bool, rows: int) -> int:
    """The efSearch for a graph over ``rows`` vectors."""
    if not adaptive or rows <= EF_BASE_ROWS:
        return ef_search
    grown = round(ef_search * math.pow(rows / EF_BASE_ROWS, EF_GROWTH))
    return max(ef_search, min(EF_MAX, grown))
